"""What a handler gets besides its params: identity, deadline, logger, trace context and ports."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from shared.errors import WeftError
from shared.ports import Bus, PayloadStore


class PortNotConfiguredError(WeftError):
    """The worker was started without the client a handler asked for: a deployment problem."""

    default_type = "weft.PortNotConfigured"
    default_non_retryable = True


def _utc_now() -> datetime:
    return datetime.now(UTC)


class HandlerPorts:
    """Lazily built clients a handler may use: built on first access, then reused.

    ``run_task`` passes factories (usually the adapters' lazy singletons), so a handler that never
    touches the bus never opens a bus connection. Tests use :meth:`of` with fakes.
    """

    def __init__(
        self,
        *,
        bus: Callable[[], Bus] | None = None,
        payload_store: Callable[[], PayloadStore] | None = None,
    ) -> None:
        self._bus_factory = bus
        self._payload_store_factory = payload_store
        self._bus: Bus | None = None
        self._payload_store: PayloadStore | None = None

    @classmethod
    def of(cls, *, bus: Bus | None = None, payload_store: PayloadStore | None = None) -> HandlerPorts:
        """Ports backed by ready-made clients."""
        return cls(
            bus=(lambda: bus) if bus is not None else None,
            payload_store=(lambda: payload_store) if payload_store is not None else None,
        )

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            if self._bus_factory is None:
                raise PortNotConfiguredError("no bus is configured for handlers")
            self._bus = self._bus_factory()
        return self._bus

    @property
    def payload_store(self) -> PayloadStore:
        if self._payload_store is None:
            if self._payload_store_factory is None:
                raise PortNotConfiguredError("no payload store is configured for handlers")
            self._payload_store = self._payload_store_factory()
        return self._payload_store


@dataclass(frozen=True)
class HandlerContext:
    """Everything about the current attempt. Handlers must be idempotent on ``idempotency_key``."""

    execution_id: str
    task_id: str
    tenant_id: str
    attempt: int
    #: Timezone-aware. Past it the orchestrator has given up on this attempt.
    deadline: datetime
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = field(
        default_factory=lambda: logging.getLogger("weft.handlers")
    )
    #: W3C ``traceparent`` of the task's span, to propagate to downstream calls.
    traceparent: str | None = None
    ports: HandlerPorts = field(default_factory=HandlerPorts)
    #: Wall clock; replaceable in tests. Activities, unlike orchestrators, may read real time.
    clock: Callable[[], datetime] = field(default=_utc_now, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.deadline.tzinfo is None:
            raise ValueError("deadline must be timezone-aware")
        if self.attempt < 1:
            raise ValueError(f"attempt counts from 1, got {self.attempt}")

    @property
    def idempotency_key(self) -> str:
        """``<executionId>/<taskId>/<attempt>``: equal for every delivery of the same attempt."""
        return f"{self.execution_id}/{self.task_id}/{self.attempt}"

    def remaining_seconds(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return (self.deadline - self.clock()).total_seconds()

    @property
    def bus(self) -> Bus:
        return self.ports.bus

    @property
    def payload_store(self) -> PayloadStore:
        return self.ports.payload_store
