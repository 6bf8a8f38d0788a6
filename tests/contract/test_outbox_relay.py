"""The outbox relay end to end over every store x bus pair: nothing lost, nothing doubled."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pytest

from shared.outbox import relay_once
from shared.ports import Bus, ExecutionStore, ExecutionWrite
from shared.records import NewEvent, OutboxKind, OutboxRecord
from tests.contract.backends import BusHarness
from tests.contract.builders import T0, at, execution, outbox


class Crash(Exception):
    pass


class CrashOnMark:
    """Wraps a store so that marking records dispatched dies, as a process killed right there."""

    def __init__(self, inner: ExecutionStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def mark_dispatched(self, records: Sequence[OutboxRecord], now: datetime) -> None:
        raise Crash("killed between publish and mark")


def _submit(store: ExecutionStore, bus_h: BusHarness, n: int) -> tuple[str, list[str]]:
    ex = execution()
    recs = [outbox(ex.id, kind=OutboxKind.START_EXECUTION, destination="")]
    recs += [outbox(ex.id, destination=bus_h.queue, payload={"n": i}) for i in range(n)]
    store.commit(
        ExecutionWrite(
            execution_id=ex.id, execution=ex, events=[NewEvent(type="submitted", at=T0)], outbox=recs
        )
    )
    return ex.id, [r.id for r in recs[1:]]


def _received(bus_h: BusHarness) -> list[tuple[str, int]]:
    """Every message on the queue, in the broker's enqueue order (sequence numbers).

    Without sessions Service Bus does not promise to hand messages out in enqueue order (a
    receiver's prefetched credit can deliver a later one first); the relay's promise is the order
    in which it publishes, which the sequence numbers record.
    """
    out = []
    while got := bus_h.bus.receive(bus_h.queue, max_messages=50, max_wait_seconds=bus_h.quiet_seconds):
        for m in got:
            bus_h.bus.complete(m)
            assert m.sequence_number is not None
            out.append((m.sequence_number, m.message_id, m.json()["n"]))
    return [(message_id, n) for _, message_id, n in sorted(out)]


def test_relay_starts_publishes_and_marks(execution_store: ExecutionStore, bus_backend: BusHarness) -> None:
    started: list[str] = []
    ex_id, ids = _submit(execution_store, bus_backend, 3)
    stats = relay_once(
        execution_store, bus_backend.bus, at(0), owner="r1", starter=lambda r: started.append(r.execution_id)
    )
    assert (stats.claimed, stats.started, stats.published, stats.failed) == (4, 1, 3, 0)
    assert started == [ex_id]
    assert _received(bus_backend) == [(i, n) for n, i in enumerate(ids)]  # message id = record id, in order
    again = relay_once(execution_store, bus_backend.bus, at(1), owner="r1", starter=started.append)  # type: ignore[arg-type]
    assert again.claimed == 0
    for rid in ids:
        rec = execution_store.get_outbox_record(ex_id, rid)
        assert rec is not None
        assert rec.dispatched_at == at(0)


def test_crash_between_publish_and_mark_resends_and_duplicate_detection_drops_it(
    execution_store: ExecutionStore, bus_backend: BusHarness
) -> None:
    _, ids = _submit(execution_store, bus_backend, 2)
    with pytest.raises(Crash):
        relay_once(CrashOnMark(execution_store), bus_backend.bus, at(0), owner="r1", starter=lambda r: None)  # type: ignore[arg-type]
    # Another relay takes over once r1's claim lease has run out, and publishes the same ids again.
    assert (
        relay_once(execution_store, bus_backend.bus, at(5), owner="r2", starter=lambda r: None).claimed == 0
    )
    stats = relay_once(execution_store, bus_backend.bus, at(31), owner="r2", starter=lambda r: None)
    assert stats.published == 2
    received = _received(bus_backend)
    assert sorted(mid for mid, _ in received) == sorted(ids)  # each exactly once


def test_failed_start_holds_back_later_records_of_that_execution(
    execution_store: ExecutionStore, bus_backend: BusHarness
) -> None:
    _, ids = _submit(execution_store, bus_backend, 2)

    def broken(_: OutboxRecord) -> None:
        raise RuntimeError("durable client unavailable")

    stats = relay_once(execution_store, bus_backend.bus, at(0), owner="r1", starter=broken)
    assert (stats.failed, stats.deferred, stats.published) == (1, 2, 0)
    assert _received(bus_backend) == []
    # Released, not left to expire: the next round goes through at once.
    ok = relay_once(execution_store, bus_backend.bus, at(1), owner="r1", starter=lambda r: None)
    assert (ok.started, ok.published) == (1, 2)
    assert [mid for mid, _ in _received(bus_backend)] == ids


def test_relay_without_a_bus_record_is_retried_not_lost(
    execution_store: ExecutionStore, bus_backend: BusHarness
) -> None:
    bus: Bus = bus_backend.bus
    ex = execution()
    rec = outbox(ex.id, destination=bus_backend.queue, payload={"n": 9})
    execution_store.commit(ExecutionWrite(execution_id=ex.id, execution=ex, outbox=[rec]))
    assert relay_once(execution_store, None, at(0), owner="r1").failed == 1
    assert relay_once(execution_store, bus, at(1), owner="r1").published == 1
    assert _received(bus_backend) == [(rec.id, 9)]
