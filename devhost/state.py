"""devhost's own small state (timer schedule status), in SQLite under the data dir.

The host keeps timer status in ``azure-webjobs-hosts/timers/<hostId>/<function>/status``; devhost keeps
the same three fields (Last, Next, LastUpdated) here so ``use_monitor`` survives restarts.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class ScheduleStatus:
    last: datetime | None
    next: datetime
    last_updated: datetime


class HostState:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS timer_status ("
            " function TEXT PRIMARY KEY, last TEXT, next TEXT NOT NULL, last_updated TEXT NOT NULL)"
        )

    def get_timer(self, function: str) -> ScheduleStatus | None:
        with self._lock:
            row = self._db.execute(
                "SELECT last, next, last_updated FROM timer_status WHERE function = ?", (function,)
            ).fetchone()
        if row is None:
            return None
        return ScheduleStatus(
            datetime.fromisoformat(row[0]) if row[0] else None,
            datetime.fromisoformat(row[1]),
            datetime.fromisoformat(row[2]),
        )

    def put_timer(self, function: str, status: ScheduleStatus) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO timer_status(function, last, next, last_updated) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(function) DO UPDATE SET last = excluded.last, next = excluded.next,"
                " last_updated = excluded.last_updated",
                (
                    function,
                    status.last.isoformat() if status.last else None,
                    status.next.isoformat(),
                    status.last_updated.isoformat(),
                ),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()
