"""The embedded bus (``WEFT_BUS=embedded``): Service Bus semantics on the store's SQLite file.

It emulates what Weft relies on: peek-lock with lock expiry and renewal, delivery counts with
dead-lettering past ``max_delivery_count``, scheduled enqueue, duplicate detection by message id
within a window, topics fanning out to subscriptions, and the ``$DeadLetterQueue`` subqueue.
Time comes from an injectable clock so tests can move it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.adapters.sqlite_db import SqliteDatabase, from_ts, ts
from shared.errors import LockLostError
from shared.ports import DEAD_LETTER_SUFFIX, OutgoingMessage, PropertyValue, ReceivedMessage

MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"

SCHEMA = """
CREATE TABLE IF NOT EXISTS bus_messages (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, entity TEXT NOT NULL, dlq INTEGER NOT NULL DEFAULT 0,
  message_id TEXT NOT NULL, body BLOB NOT NULL, subject TEXT, content_type TEXT, correlation_id TEXT,
  props TEXT NOT NULL, enqueued_at TEXT NOT NULL, visible_at TEXT NOT NULL, lock_token TEXT,
  locked_until TEXT, delivery_count INTEGER NOT NULL DEFAULT 0, dl_reason TEXT, dl_description TEXT);
CREATE INDEX IF NOT EXISTS bus_ready ON bus_messages (entity, dlq, visible_at, seq);
CREATE INDEX IF NOT EXISTS bus_lock ON bus_messages (lock_token);
CREATE TABLE IF NOT EXISTS bus_dedup (
  entity TEXT NOT NULL, message_id TEXT NOT NULL, expires_at TEXT NOT NULL,
  PRIMARY KEY (entity, message_id));
CREATE INDEX IF NOT EXISTS bus_dedup_expiry ON bus_dedup (expires_at);
"""


@dataclass(frozen=True)
class EntityConfig:
    """A queue, or a topic when it has subscriptions (which share the topic's settings)."""

    name: str
    subscriptions: tuple[str, ...] = ()
    max_delivery_count: int = 10
    lock_seconds: float = 60.0
    duplicate_window_seconds: float = 600.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _split(entity: str) -> tuple[str, str | None, bool]:
    """``(topic_or_queue, subscription, is_dead_letter)`` for an entity address."""
    dlq = entity.lower().endswith(DEAD_LETTER_SUFFIX.lower())
    if dlq:
        entity = entity[: -len(DEAD_LETTER_SUFFIX)]
    parts = entity.split("/")
    if len(parts) == 3 and parts[1].lower() == "subscriptions":
        return parts[0], parts[2], dlq
    if len(parts) != 1 or not parts[0]:
        raise ValueError(f"invalid entity address {entity!r}")
    return parts[0], None, dlq


class EmbeddedBus:
    def __init__(
        self,
        path: str | os.PathLike[str],
        entities: Sequence[EntityConfig] = (),
        *,
        clock: Callable[[], datetime] = _utcnow,
        default_config: EntityConfig | None = None,
        poll_interval_seconds: float = 0.05,
    ) -> None:
        self.db = SqliteDatabase(path, SCHEMA)
        self._entities: Mapping[str, EntityConfig] = {e.name: e for e in entities}
        self._default = default_config or EntityConfig(name="")
        self._clock = clock
        self._poll = poll_interval_seconds

    def close(self) -> None:
        self.db.close()

    def _config(self, name: str) -> EntityConfig:
        # Unknown names are queues with default settings, so `make run` needs no set-up step.
        return self._entities.get(name) or EntityConfig(
            name=name,
            max_delivery_count=self._default.max_delivery_count,
            lock_seconds=self._default.lock_seconds,
            duplicate_window_seconds=self._default.duplicate_window_seconds,
        )

    def _storage_entity(self, entity: str) -> tuple[str, bool, EntityConfig]:
        base, sub, dlq = _split(entity)
        cfg = self._config(base)
        if sub is not None:
            if sub not in cfg.subscriptions:
                raise ValueError(f"topic {base!r} has no subscription {sub!r}")
            return f"{base}/subscriptions/{sub}", dlq, cfg
        if cfg.subscriptions:
            raise ValueError(f"{base!r} is a topic: receive from one of its subscriptions")
        return base, dlq, cfg

    # ------------------------------------------------------------------------------ publish

    def publish(self, entity: str, messages: Sequence[OutgoingMessage]) -> None:
        base, sub, dlq = _split(entity)
        if sub is not None or dlq:
            raise ValueError(f"cannot publish to {entity!r}: publish to a queue or a topic")
        cfg = self._config(base)
        targets = [f"{base}/subscriptions/{s}" for s in cfg.subscriptions] or [base]
        now = self._clock()
        now_s = ts(now)
        window_end = ts(now + timedelta(seconds=cfg.duplicate_window_seconds))
        with self.db.write() as c:
            c.execute("DELETE FROM bus_dedup WHERE expires_at <= ?", (now_s,))
            for msg in messages:
                cur = c.execute(
                    "INSERT OR IGNORE INTO bus_dedup (entity, message_id, expires_at) VALUES (?, ?, ?)",
                    (base, msg.message_id, window_end),
                )
                if cur.rowcount == 0:
                    continue  # duplicate within the window: accepted and dropped, as Service Bus does
                visible = ts(msg.scheduled_enqueue_time) if msg.scheduled_enqueue_time else now_s
                for target in targets:
                    c.execute(
                        "INSERT INTO bus_messages (entity, message_id, body, subject, content_type, "
                        "correlation_id, props, enqueued_at, visible_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            target,
                            msg.message_id,
                            bytes(msg.body),
                            msg.subject,
                            msg.content_type,
                            msg.correlation_id,
                            json.dumps(dict(msg.application_properties)),
                            now_s,
                            visible,
                        ),
                    )

    # ------------------------------------------------------------------------------ receive

    def receive(
        self, entity: str, *, max_messages: int = 1, max_wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        stored, dlq, cfg = self._storage_entity(entity)
        deadline = time.monotonic() + max_wait_seconds
        while True:
            got = self._try_receive(entity, stored, dlq, cfg, max_messages)
            if got or time.monotonic() >= deadline:
                return got
            time.sleep(min(self._poll, max(0.0, deadline - time.monotonic())))

    def _try_receive(
        self, address: str, stored: str, dlq: bool, cfg: EntityConfig, max_messages: int
    ) -> list[ReceivedMessage]:
        now = self._clock()
        now_s = ts(now)
        until = now + timedelta(seconds=cfg.lock_seconds)
        out: list[ReceivedMessage] = []
        # Idle pollers look first without the write lock, so they never queue behind writers.
        ready = (
            self.db.connection()
            .execute(
                "SELECT 1 FROM bus_messages WHERE entity = ? AND dlq = ? AND visible_at <= ? LIMIT 1",
                (stored, int(dlq), now_s),
            )
            .fetchone()
        )
        if ready is None:
            return out
        with self.db.write() as c:
            rows = c.execute(
                "SELECT * FROM bus_messages WHERE entity = ? AND dlq = ? AND visible_at <= ? "
                "ORDER BY seq LIMIT ?",
                (stored, int(dlq), now_s, max_messages * 4 + 16),
            ).fetchall()
            for r in rows:
                if len(out) >= max_messages:
                    break
                if not dlq and r["delivery_count"] >= cfg.max_delivery_count:
                    # Its last lock expired unsettled: it has used up its deliveries.
                    self._to_dlq(c, r["seq"], MAX_DELIVERY_REASON, _max_delivery_text(cfg), now_s)
                    continue
                token = str(uuid.uuid4())
                count = r["delivery_count"] + 1
                c.execute(
                    "UPDATE bus_messages SET lock_token = ?, locked_until = ?, visible_at = ?, "
                    "delivery_count = ? WHERE seq = ?",
                    (token, ts(until), ts(until), count, r["seq"]),
                )
                out.append(_message(address, r, token=token, count=count, locked_until=until))
        return out

    # ------------------------------------------------------------------------------- settle

    def _settle(self, message: ReceivedMessage, sql: str, *params: object) -> None:
        with self.db.write() as c:
            cur = c.execute(
                f"{sql} WHERE lock_token = ? AND locked_until > ?",
                (*params, message.lock_token, ts(self._clock())),
            )
            if cur.rowcount == 0:
                raise LockLostError(
                    "the message lock expired or was lost", details={"messageId": message.message_id}
                )

    def complete(self, message: ReceivedMessage) -> None:
        self._settle(message, "DELETE FROM bus_messages")

    def abandon(self, message: ReceivedMessage) -> None:
        _, dlq, cfg = self._storage_entity(message.entity)
        now_s = ts(self._clock())
        if not dlq and message.delivery_count >= cfg.max_delivery_count:
            self._settle(
                message,
                "UPDATE bus_messages SET dlq = 1, lock_token = NULL, locked_until = NULL, visible_at = ?, "
                "dl_reason = ?, dl_description = ?",
                now_s,
                MAX_DELIVERY_REASON,
                _max_delivery_text(cfg),
            )
            return
        self._settle(
            message,
            "UPDATE bus_messages SET lock_token = NULL, locked_until = NULL, visible_at = ?",
            now_s,
        )

    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None:
        _, dlq, _ = self._storage_entity(message.entity)
        if dlq:
            raise ValueError("a dead-lettered message cannot be dead-lettered again")
        self._settle(
            message,
            "UPDATE bus_messages SET dlq = 1, lock_token = NULL, locked_until = NULL, visible_at = ?, "
            "dl_reason = ?, dl_description = ?",
            ts(self._clock()),
            reason,
            description,
        )

    def renew_lock(self, message: ReceivedMessage) -> datetime:
        _, _, cfg = self._storage_entity(message.entity)
        until = self._clock() + timedelta(seconds=cfg.lock_seconds)
        self._settle(
            message, "UPDATE bus_messages SET locked_until = ?, visible_at = ?", ts(until), ts(until)
        )
        return until

    @staticmethod
    def _to_dlq(c: sqlite3.Connection, seq: int, reason: str, description: str, now_s: str) -> None:
        c.execute(
            "UPDATE bus_messages SET dlq = 1, lock_token = NULL, locked_until = NULL, visible_at = ?, "
            "dl_reason = ?, dl_description = ? WHERE seq = ?",
            (now_s, reason, description, seq),
        )

    # --------------------------------------------------------------------------- dead letters

    def peek_dead_letters(self, entity: str, *, max_messages: int = 10) -> list[ReceivedMessage]:
        stored, _, _ = self._storage_entity(entity)
        rows = self.db.connection().execute(
            "SELECT * FROM bus_messages WHERE entity = ? AND dlq = 1 ORDER BY seq LIMIT ?",
            (stored, max_messages),
        )
        return [
            _message(stored + DEAD_LETTER_SUFFIX, r, token="", count=r["delivery_count"], locked_until=None)
            for r in rows
        ]

    def redrive_dead_letters(self, entity: str, *, max_messages: int = 100) -> int:
        stored, _, _ = self._storage_entity(entity)
        with self.db.write() as c:
            cur = c.execute(
                "UPDATE bus_messages SET dlq = 0, delivery_count = 0, lock_token = NULL, "
                "locked_until = NULL, visible_at = ?, dl_reason = NULL, dl_description = NULL WHERE seq IN "
                "(SELECT seq FROM bus_messages WHERE entity = ? AND dlq = 1 ORDER BY seq LIMIT ?)",
                (ts(self._clock()), stored, max_messages),
            )
            return cur.rowcount


def _max_delivery_text(cfg: EntityConfig) -> str:
    return f"Message could not be consumed after {cfg.max_delivery_count} delivery attempts."


def _message(
    address: str, r: sqlite3.Row, *, token: str, count: int, locked_until: datetime | None
) -> ReceivedMessage:
    props: dict[str, PropertyValue] = json.loads(r["props"])
    return ReceivedMessage(
        entity=address,
        message_id=r["message_id"],
        body=bytes(r["body"]),
        lock_token=token,
        delivery_count=count,
        locked_until=locked_until,
        enqueued_time=from_ts(r["enqueued_at"]),
        sequence_number=int(r["seq"]),
        subject=r["subject"],
        content_type=r["content_type"],
        correlation_id=r["correlation_id"],
        application_properties=props,
        dead_letter_reason=r["dl_reason"],
        dead_letter_description=r["dl_description"],
    )
