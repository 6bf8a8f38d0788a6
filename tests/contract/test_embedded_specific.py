"""Behaviour only the embedded backends have (no TTL, so the relay purges)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from shared.adapters.embedded_bus import EmbeddedBus
from shared.adapters.sqlite_store import SqliteStore
from shared.outbox import relay_once
from shared.ports import ExecutionWrite
from tests.contract.builders import at, execution, outbox


def test_relay_purges_records_dispatched_longer_ago_than_retention(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "weft.sqlite3")
    bus = EmbeddedBus(tmp_path / "weft.sqlite3", clock=lambda: at(0))
    ex = execution()
    first, second = outbox(ex.id, destination="q"), outbox(ex.id, destination="q")
    store.commit(ExecutionWrite(execution_id=ex.id, execution=ex, outbox=[first]))
    keep = timedelta(hours=1)
    assert relay_once(store, bus, at(0), owner="r", retain_dispatched=keep).purged == 0
    store.commit(ExecutionWrite(execution_id=ex.id, outbox=[second]))
    stats = relay_once(store, bus, at(3601), owner="r", retain_dispatched=keep)
    assert stats.published == 1
    assert stats.purged == 1
    assert store.get_outbox_record(ex.id, first.id) is None
    kept = store.get_outbox_record(ex.id, second.id)
    assert kept is not None
    assert kept.dispatched_at == at(3601)
