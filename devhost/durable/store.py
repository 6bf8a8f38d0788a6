"""SQLite (WAL) persistence: the source of truth for instances, history, work items and entities.

One connection guarded by a lock: SQLite serialises writers anyway, and a single connection avoids
busy-waiting.  Every row of a work-item table (messages, activities, entity_messages) is claimed by
a host through ``lease_owner``/``lease_until``; the engine renews its own leases and adopts rows whose
lease expired or whose owner process is gone.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS hosts(
  host_id TEXT PRIMARY KEY, hostname TEXT, pid INTEGER, heartbeat REAL);
CREATE TABLE IF NOT EXISTS instances(
  instance_id TEXT PRIMARY KEY, name TEXT NOT NULL, execution_id TEXT NOT NULL,
  status TEXT NOT NULL, input TEXT, output TEXT, custom_status TEXT,
  created TEXT NOT NULL, last_updated TEXT NOT NULL,
  parent_instance_id TEXT, parent_execution_id TEXT, parent_task_id INTEGER,
  suspended INTEGER NOT NULL DEFAULT 0, created_epoch REAL NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS ix_instances_status ON instances(status);
CREATE TABLE IF NOT EXISTS history(
  instance_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL,
  PRIMARY KEY(instance_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages(
  id INTEGER PRIMARY KEY AUTOINCREMENT, instance_id TEXT NOT NULL, execution_id TEXT,
  event TEXT NOT NULL, visible_at REAL NOT NULL, lease_owner TEXT, lease_until REAL);
CREATE INDEX IF NOT EXISTS ix_messages_instance ON messages(instance_id);
CREATE TABLE IF NOT EXISTS activities(
  id INTEGER PRIMARY KEY AUTOINCREMENT, instance_id TEXT NOT NULL, execution_id TEXT NOT NULL,
  task_id INTEGER NOT NULL, name TEXT NOT NULL, input TEXT, scheduled_at REAL NOT NULL,
  lease_owner TEXT, lease_until REAL);
CREATE TABLE IF NOT EXISTS entity_messages(
  id INTEGER PRIMARY KEY AUTOINCREMENT, entity_id TEXT NOT NULL, body TEXT NOT NULL,
  visible_at REAL NOT NULL DEFAULT 0, lease_owner TEXT, lease_until REAL);
CREATE INDEX IF NOT EXISTS ix_entity_messages_entity ON entity_messages(entity_id);
CREATE TABLE IF NOT EXISTS entities(
  entity_id TEXT PRIMARY KEY, name TEXT NOT NULL, key TEXT NOT NULL, exists_ INTEGER NOT NULL,
  state TEXT, last_modified TEXT NOT NULL);
"""

# Table names below come only from this constant, never from input (hence the S608 waivers).
WORK_TABLES = ("messages", "activities", "entity_messages")


def host_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


def _owner_alive(owner: str, me: str) -> bool:
    if owner == me:
        return True
    parts = owner.split(":")
    if len(parts) < 3 or parts[0] != socket.gethostname():
        return True  # another machine: only lease expiry can tell
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if pid == os.getpid():
        return False  # an earlier engine in this same process (stopped or crashed)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Store:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=10000")
        self.conn.executescript(SCHEMA)

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Cursor]:
        with self.lock:
            cur = self.conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            return list(self.conn.execute(sql, params).fetchall())

    # ---- leases --------------------------------------------------------------------------------
    def heartbeat(self, host_id: str, now_epoch: float) -> None:
        parts = host_id.split(":")
        with self.tx() as cur:
            cur.execute(
                "INSERT INTO hosts(host_id, hostname, pid, heartbeat) VALUES(?,?,?,?) "
                "ON CONFLICT(host_id) DO UPDATE SET heartbeat=excluded.heartbeat",
                (host_id, parts[0], int(parts[1]) if len(parts) > 1 else 0, now_epoch),
            )

    def renew_leases(self, host_id: str, until: float) -> None:
        with self.tx() as cur:
            for t in WORK_TABLES:
                cur.execute(f"UPDATE {t} SET lease_until=? WHERE lease_owner=?", (until, host_id))  # noqa: S608

    def adopt_orphans(self, host_id: str, now_epoch: float, until: float) -> dict[str, list[int]]:
        """Claim rows whose lease expired or whose owner process is dead. Returns adopted ids by table."""
        adopted: dict[str, list[int]] = {t: [] for t in WORK_TABLES}
        with self.tx() as cur:
            for t in WORK_TABLES:
                rows = cur.execute(
                    f"SELECT id, lease_owner, lease_until FROM {t} "  # noqa: S608
                    "WHERE lease_owner IS NULL OR lease_owner != ?",
                    (host_id,),
                ).fetchall()
                for rid, owner, lease_until in rows:
                    if (
                        owner is None
                        or lease_until is None
                        or lease_until < now_epoch
                        or not _owner_alive(owner, host_id)
                    ):
                        adopted[t].append(rid)
                if adopted[t]:
                    cur.executemany(
                        f"UPDATE {t} SET lease_owner=?, lease_until=? WHERE id=?",  # noqa: S608
                        [(host_id, until, rid) for rid in adopted[t]],
                    )
        return adopted


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
