"""Clocks: real UTC time, or a virtual clock that the engine advances to the next timer when idle."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    @property
    def is_virtual(self) -> bool: ...

    def now(self) -> datetime: ...


class RealClock:
    is_virtual = False

    def now(self) -> datetime:
        return datetime.now(UTC)


class VirtualClock:
    """Time stands still until the engine, finding nothing else to do, jumps it to the next timer."""

    is_virtual = True

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._now = (start or datetime(2030, 1, 1, tzinfo=UTC)).astimezone(UTC)
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """Stop the engine from jumping to the next timer (e.g. to raise an event before a timeout)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance_to(self, when: datetime) -> None:
        with self._lock:
            self._now = max(self._now, when)

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self._now = self._now + delta
