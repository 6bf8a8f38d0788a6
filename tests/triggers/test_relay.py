"""The outbox relay with the submission path: lost fast paths are started once, events published."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from shared.adapters.embedded_bus import EmbeddedBus
from shared.lifecycle import WORKFLOW_EVENTS_TOPIC
from shared.outbox import relay_once
from shared.ports import ExecutionWrite
from shared.records import TriggerKind
from shared.states import ExecutionStatus
from shared.submission import relay_starter, submit_execution
from tests.triggers.support import T0, FakeStarter, add_tenant, make_deps, make_stores, publish


def test_relay_starts_what_the_fast_path_lost_once_and_publishes_the_accepted_event(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores)
    publish(stores)
    bus = EmbeddedBus(tmp_path / "bus.sqlite3", clock=lambda: T0)
    lost = submit_execution(
        make_deps(tmp_path, stores, FakeStarter(fail=True)),
        "acme",
        "wf",
        input=None,
        version=None,
        idempotency_key=None,
        trigger=TriggerKind.HTTP,
        now=T0,
    )
    fast = FakeStarter()
    ok = submit_execution(
        make_deps(tmp_path, stores, fast),
        "acme",
        "wf",
        input=None,
        version=None,
        idempotency_key=None,
        trigger=TriggerKind.HTTP,
        now=T0,
    )
    relay = FakeStarter(started=dict(fast.started))  # the Durable hub already has the fast one
    stats = relay_once(stores.executions, bus, T0, owner="r1", starter=relay_starter(stores, relay))
    assert (stats.claimed, stats.published, stats.started, stats.failed) == (4, 2, 2, 0)
    assert set(relay.started) == {lost.execution.id, ok.execution.id}
    assert relay.calls == 2  # both asked; the existing instance was not started again
    again = relay_once(
        stores.executions, bus, T0 + timedelta(minutes=5), owner="r2", starter=relay_starter(stores, relay)
    )
    assert again.claimed == 0 and relay.calls == 2
    events = bus.receive(WORKFLOW_EVENTS_TOPIC, max_messages=10)
    bodies = [json.loads(m.body) for m in events]
    assert sorted(b["executionId"] for b in bodies) == sorted([lost.execution.id, ok.execution.id])
    assert {b["type"] for b in bodies} == {"weft.execution.accepted"}
    assert {b["specVersion"] for b in bodies} == {"1.0"}


def test_relay_does_not_start_an_execution_that_already_left_queued(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores)
    publish(stores)
    res = submit_execution(
        make_deps(tmp_path, stores, FakeStarter(fail=True)),
        "acme",
        "wf",
        input=None,
        version=None,
        idempotency_key=None,
        trigger=TriggerKind.HTTP,
        now=T0,
    )
    # Its orchestration ran and finished (e.g. started by another relay whose mark was lost), and the
    # Durable history has been purged since: the store says it is not queued any more.
    stores.executions.commit(
        ExecutionWrite(
            res.execution.id,
            execution=res.execution.model_copy(
                update={"status": ExecutionStatus.SUCCEEDED, "finished_at": T0}
            ),
        )
    )
    starter = FakeStarter()
    relay_once(stores.executions, None, T0, owner="r", starter=relay_starter(stores, starter), limit=10)
    assert starter.calls == 0


def test_a_failing_starter_leaves_the_record_for_the_next_round(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores)
    publish(stores)
    bus = EmbeddedBus(tmp_path / "bus.sqlite3", clock=lambda: T0)
    submit_execution(
        make_deps(tmp_path, stores),
        "acme",
        "wf",
        input=None,
        version=None,
        idempotency_key=None,
        trigger=TriggerKind.HTTP,
        now=T0,
    )
    down = FakeStarter(fail=True)
    first = relay_once(stores.executions, bus, T0, owner="r", starter=relay_starter(stores, down))
    assert first.failed == 1
    up = FakeStarter()
    second = relay_once(stores.executions, bus, T0, owner="r", starter=relay_starter(stores, up))
    assert second.started == 1 and len(up.started) == 1
