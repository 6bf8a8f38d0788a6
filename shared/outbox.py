"""The outbox relay: moves committed outbox records to where they go, at least once.

``relay_once`` claims undispatched records (a claim lease, so two relays never publish the same
record at the same time and a crashed relay's records come back after the lease), hands them on in
order per execution, and marks them dispatched. Bus messages carry ``message_id = record.id``: a crash
between publishing and marking re-sends the record with the same id, and the bus's duplicate
detection drops it. ``startExecution`` records go to the ``starter`` callback (the Durable client
in the function app), which must itself be idempotent (start with instance id = execution id).

Call it from a timer (and later from the Cosmos change feed) with a stable ``owner`` per process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby

from shared.ports import Bus, ExecutionStore, OutgoingMessage
from shared.records import OutboxKind, OutboxRecord

log = logging.getLogger(__name__)

#: Receives each ``startExecution`` record; raise to leave it for a later attempt.
Starter = Callable[[OutboxRecord], None]


@dataclass
class RelayStats:
    claimed: int = 0
    published: int = 0
    started: int = 0
    failed: int = 0
    #: Claimed but given back because an earlier record of the same execution failed.
    deferred: int = 0
    #: Dispatched records deleted (backends with TTL report 0: the store expires them itself).
    purged: int = 0


def outbox_message(record: OutboxRecord) -> OutgoingMessage:
    """The bus message for a record; its id is the record id, for duplicate detection."""
    props = dict(record.application_properties)
    props.setdefault("tenantId", record.tenant_id)
    props.setdefault("executionId", record.execution_id)
    props.setdefault("kind", str(record.kind))
    return OutgoingMessage.from_json(
        record.id,
        record.payload,
        subject=record.subject,
        correlation_id=record.execution_id,
        application_properties=props,
        scheduled_enqueue_time=record.scheduled_enqueue_time,
    )


def relay_once(
    store: ExecutionStore,
    bus: Bus | None,
    now: datetime,
    *,
    owner: str,
    starter: Starter | None = None,
    limit: int = 100,
    lease_seconds: float = 30.0,
    retain_dispatched: timedelta | None = None,
) -> RelayStats:
    """One relay round. With ``retain_dispatched``, records dispatched longer ago than that are
    purged afterwards (the embedded store has no TTL; Cosmos expires them by ``ttl``)."""
    stats = RelayStats()
    records = store.claim_outbox(owner, now, lease_seconds=lease_seconds, limit=limit)
    stats.claimed = len(records)
    for _, group in groupby(records, key=lambda r: r.execution_id):
        batch = list(group)
        done: list[OutboxRecord] = []
        for i, rec in enumerate(batch):
            try:
                _dispatch(rec, bus, starter)
            except Exception:
                # Keep per-execution order: nothing after a record that did not go out.
                log.exception(
                    "outbox record %s (%s) of execution %s was not dispatched",
                    rec.id,
                    rec.kind,
                    rec.execution_id,
                )
                stats.failed += 1
                stats.deferred += len(batch) - i - 1
                store.release_outbox(batch[i:], owner)
                break
            done.append(rec)
            if rec.kind == OutboxKind.START_EXECUTION:
                stats.started += 1
            else:
                stats.published += 1
        if done:
            store.mark_dispatched(done, now)
    if retain_dispatched is not None:
        stats.purged = store.purge_dispatched(now - retain_dispatched)
    return stats


def _dispatch(rec: OutboxRecord, bus: Bus | None, starter: Starter | None) -> None:
    if rec.kind == OutboxKind.START_EXECUTION:
        if starter is None:
            raise RuntimeError("no starter is wired for startExecution records")
        starter(rec)
        return
    if bus is None:
        raise RuntimeError("no bus is wired for outbox messages")
    if not rec.destination:
        raise ValueError(f"outbox record {rec.id} has no destination")
    bus.publish(rec.destination, [outbox_message(rec)])
