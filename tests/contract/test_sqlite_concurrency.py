"""The embedded backends under real concurrency: threads and processes on one SQLite file."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.sqlite_store import SqliteStore
from shared.ports import ExecutionWrite, OutgoingMessage
from shared.records import NewEvent
from tests.contract.builders import T0, at, execution, outbox

WRITERS = 4
PER_WRITER = 25


def _append_events(path: str, execution_id: str, writer: int) -> None:
    store = SqliteStore(path)
    _append_with(store, execution_id, writer)
    store.close()


def _append_with(store: SqliteStore, execution_id: str, writer: int) -> None:
    for i in range(PER_WRITER):
        store.commit(
            ExecutionWrite(
                execution_id=execution_id,
                events=[NewEvent(type="tick", at=T0, data={"w": writer, "i": i})],
                outbox=[outbox(execution_id, payload={"w": writer, "i": i})],
            )
        )


def _claim_all(path: str, owner: str, out: multiprocessing.Queue[list[str]]) -> None:
    store = SqliteStore(path)
    mine: list[str] = []
    while batch := store.claim_outbox(owner, at(0), limit=7):
        mine += [r.id for r in batch]
        store.mark_dispatched(batch, at(0))
    store.close()
    out.put(mine)


def _consume(path: str, out: multiprocessing.Queue[list[str]]) -> None:
    bus = EmbeddedBus(path)
    got: list[str] = []
    while msgs := bus.receive("work", max_messages=5, max_wait_seconds=0.3):
        for m in msgs:
            bus.complete(m)
            got.append(m.message_id)
    bus.close()
    out.put(got)


def test_concurrent_writers_in_threads_get_contiguous_sequence_numbers(tmp_path: Path) -> None:
    # One store object shared by every thread, as the factory's singleton is.
    store = SqliteStore(tmp_path / "weft.sqlite3")
    store.commit(ExecutionWrite(execution_id="ex-1", execution=execution(id="ex-1")))
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(lambda w: _append_with(store, "ex-1", w), range(WRITERS)))
    events = store.list_events("ex-1", limit=10_000)
    assert len(events) == WRITERS * PER_WRITER
    seqs = [e.seq for e in events]
    outbox_seqs = [r.seq for r in store.claim_outbox("probe", at(0), limit=10_000)]
    assert sorted(seqs + outbox_seqs) == list(range(1, 2 * WRITERS * PER_WRITER + 1))


def test_processes_share_the_file_and_never_double_claim(tmp_path: Path) -> None:
    path = str(tmp_path / "weft.sqlite3")
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_append_events, args=(path, f"ex-{w}", w)) for w in range(WRITERS)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(60)
        assert p.exitcode == 0
    results: multiprocessing.Queue[list[str]] = ctx.Queue()
    relays = [ctx.Process(target=_claim_all, args=(path, f"relay-{i}", results)) for i in range(3)]
    for p in relays:
        p.start()
    claimed = [results.get(timeout=60) for _ in relays]
    for p in relays:
        p.join(60)
    flat = [i for ids in claimed for i in ids]
    assert len(flat) == WRITERS * PER_WRITER
    assert len(set(flat)) == len(flat)  # no record went to two relays


def test_embedded_bus_delivers_each_message_once_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "weft.sqlite3")
    bus = EmbeddedBus(path)
    ids = [f"m-{i}" for i in range(60)]
    bus.publish("work", [OutgoingMessage.from_json(i, {"i": i}) for i in ids])
    ctx = multiprocessing.get_context("fork")
    results: multiprocessing.Queue[list[str]] = ctx.Queue()
    consumers = [ctx.Process(target=_consume, args=(path, results)) for _ in range(3)]
    for p in consumers:
        p.start()
    got = [results.get(timeout=60) for _ in consumers]
    for p in consumers:
        p.join(60)
    flat = [i for ids_ in got for i in ids_]
    assert sorted(flat) == sorted(ids)
