"""Full-loop engine tests on the virtual clock: real SDK, real SQLite, small test apps."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devhost.durable.api import (
    FunctionNotFoundError,
    InstanceExistsError,
    InstanceNotFoundError,
    InstanceQuery,
    InvalidStateError,
)
from devhost.durable.clock import VirtualClock
from devhost.durable.engine import DurableEngine
from tests.devhost.support.apps import ATTEMPTS, app_functions, build_evolving_app

WAIT = 20.0


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def engine(tmp_path: Path, clock: VirtualClock) -> Iterator[DurableEngine]:
    e = DurableEngine(app_functions(), str(tmp_path / "durable.sqlite3"), clock=clock, activity_workers=4)
    e.start()
    yield e
    e.stop()


def run(
    engine: DurableEngine, name: str, value: Any = None, instance_id: str | None = None
) -> dict[str, Any]:
    iid = engine.start_instance(name, instance_id, json.dumps(value))
    st = engine.wait_for_completion(iid, WAIT)
    assert st is not None
    return st


def output(st: dict[str, Any]) -> Any:
    return st["output"]


def test_sequence_and_status_shape(engine: DurableEngine) -> None:
    st = run(engine, "sequence", instance_id="seq-1")
    assert st["runtimeStatus"] == "Completed"
    assert output(st) == ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]
    assert st["name"] == "sequence"
    assert st["instanceId"] == "seq-1"
    assert st["input"] is None
    assert st["createdTime"].endswith("Z")
    full = engine.get_status("seq-1", show_history=True, show_history_output=True)
    assert full is not None
    kinds = [e["EventType"] for e in full["historyEvents"]]
    assert kinds[0] == "ExecutionStarted"
    assert kinds[-1] == "ExecutionCompleted"
    assert kinds.count("TaskCompleted") == 3
    assert full["historyEvents"][1]["FunctionName"] == "hello"
    assert engine.instance_stats("seq-1")["episodes"] == 4


def test_fan_out_fan_in(engine: DurableEngine) -> None:
    st = run(engine, "fan_out", 50)
    assert st["runtimeStatus"] == "Completed"
    assert output(st) == sum(2 * i for i in range(50))
    stats = engine.instance_stats(st["instanceId"])
    assert len(stats["activityLatencyMs"]) == 50
    # Completions are batched into episodes, so far fewer episodes than activities.
    assert stats["episodes"] < 50


def test_activity_retry_succeeds_on_third_attempt(engine: DurableEngine, clock: VirtualClock) -> None:
    ATTEMPTS.pop("retry-key", None)
    start = clock.now()
    st = run(engine, "retrying", "retry-key")
    assert st["runtimeStatus"] == "Completed"
    assert output(st) == "ok after 3"
    # Two 5 s retry timers fired on the virtual clock.
    assert clock.now() - start == timedelta(seconds=10)
    full = engine.get_status(st["instanceId"], show_history=True)
    assert full is not None
    kinds = [e["EventType"] for e in full["historyEvents"]]
    assert kinds.count("TaskFailed") == 2
    assert kinds.count("TimerFired") == 2


def test_retry_exhaustion_is_catchable(engine: DurableEngine) -> None:
    st = run(engine, "retry_exhausted")
    assert output(st) == "caught: True"


def test_timers_advance_current_utc_datetime(engine: DurableEngine, clock: VirtualClock) -> None:
    start = clock.now()
    st = run(engine, "timers")
    stamps = [datetime.fromisoformat(s) for s in output(st)]
    assert stamps == [start, start + timedelta(minutes=5), start + timedelta(minutes=15)]


def test_long_timer_is_honoured(engine: DurableEngine, clock: VirtualClock) -> None:
    start = clock.now()
    st = run(engine, "long_timer")
    assert output(st) == 10
    assert clock.now() == start + timedelta(days=10)


def test_external_event_wins_over_timeout(engine: DurableEngine, clock: VirtualClock) -> None:
    start = clock.now()
    clock.pause()
    iid = engine.start_instance("approval", None, None)
    assert engine.wait_for_idle(WAIT)
    engine.raise_event(iid, "Approve", json.dumps({"by": "ann"}))
    clock.resume()
    st = engine.wait_for_completion(iid, WAIT)
    assert st is not None
    assert output(st) == {"approved": {"by": "ann"}}
    # The losing timeout timer was dropped, so virtual time did not jump an hour ahead.
    assert engine.wait_for_idle(WAIT)
    assert clock.now() == start


def test_timeout_wins_without_event(engine: DurableEngine, clock: VirtualClock) -> None:
    start = clock.now()
    st = run(engine, "approval")
    out = output(st)
    assert out["timedOut"] is True
    assert datetime.fromisoformat(out["at"]) == start + timedelta(hours=1)


def test_events_raised_early_are_buffered(engine: DurableEngine) -> None:
    iid = engine.start_instance("wait_two_events", "two", None)
    engine.raise_event(iid, "B", "2")
    engine.raise_event(iid, "A", "1")
    st = engine.wait_for_completion(iid, WAIT)
    assert st is not None
    assert output(st) == [1, 2]


def test_sub_orchestrations(engine: DurableEngine) -> None:
    st = run(engine, "parent", instance_id="p1")
    assert output(st) == {"a": 12, "b": ["Hello Tokyo!", "Hello Seattle!", "Hello London!"]}
    child = engine.get_status("p1-child")
    assert child is not None
    assert child["runtimeStatus"] == "Completed"


def test_failed_sub_orchestration_is_reported_to_parent(engine: DurableEngine) -> None:
    st = run(engine, "failing_child_parent")
    assert output(st) == "child failed: True"


def test_uncaught_failure_fails_the_instance(engine: DurableEngine) -> None:
    st = run(engine, "thrower")
    assert st["runtimeStatus"] == "Failed"
    assert "kaboom" in output(st)
    assert "Orchestrator function 'thrower' failed" in output(st)


def test_continue_as_new_resets_history(engine: DurableEngine) -> None:
    st = run(engine, "counter_loop", 0, instance_id="loop")
    assert output(st) == 3
    assert st["input"] == 3
    full = engine.get_status("loop", show_history=True)
    assert full is not None
    assert [e["EventType"] for e in full["historyEvents"]].count("ExecutionStarted") == 1


def test_entities_call_signal_and_state(engine: DurableEngine) -> None:
    st = run(engine, "entity_user", "e1")
    assert output(st) == 15
    assert st["customStatus"] == {"value": 15}
    assert engine.read_entity("Counter", "e1") == (True, "15")
    engine.signal_entity("counter", "e1", "add", "7")
    assert engine.wait_for_idle(WAIT)
    assert engine.read_entity("Counter", "e1") == (True, "22")
    assert engine.read_entity("Counter", "nobody") == (False, None)


def test_custom_status_terminate_suspend_resume(engine: DurableEngine) -> None:
    iid = engine.start_instance("status_setter", None, None)
    assert engine.wait_for_idle(WAIT)
    st = engine.get_status(iid)
    assert st is not None
    assert (st["runtimeStatus"], st["customStatus"]) == ("Running", "step1")
    engine.suspend(iid, "pause")
    assert engine.wait_for_idle(WAIT)
    engine.raise_event(iid, "go", None)
    assert engine.wait_for_idle(WAIT)
    st = engine.get_status(iid)
    assert st is not None
    assert st["runtimeStatus"] == "Suspended"  # the event is held while suspended
    engine.resume(iid, "go on")
    st = engine.wait_for_completion(iid, WAIT)
    assert st is not None
    assert (st["runtimeStatus"], output(st), st["customStatus"]) == (
        "Completed",
        "done",
        {"step": 2},
    )

    other = engine.start_instance("status_setter", None, None)
    engine.terminate(other, "enough")
    st = engine.wait_for_completion(other, WAIT)
    assert st is not None
    assert (st["runtimeStatus"], output(st)) == ("Terminated", "enough")
    with pytest.raises(InvalidStateError):
        engine.raise_event(other, "go", None)


def test_errors_and_purge(engine: DurableEngine) -> None:
    with pytest.raises(FunctionNotFoundError):
        engine.start_instance("nope", None, None)
    with pytest.raises(InstanceNotFoundError):
        engine.raise_event("missing", "x", None)
    iid = engine.start_instance("wait_two_events", "dup", None)
    with pytest.raises(InstanceExistsError):
        engine.start_instance("wait_two_events", "dup", None)
    with pytest.raises(InvalidStateError):
        engine.purge(iid)
    engine.terminate(iid, None)
    assert engine.wait_for_completion(iid, WAIT) is not None
    assert engine.purge(iid) is True
    assert engine.get_status(iid) is None
    assert engine.purge(iid) is False
    # A finished id can be reused.
    st = run(engine, "sequence", instance_id="dup")
    assert st["runtimeStatus"] == "Completed"


def test_query_instances(engine: DurableEngine) -> None:
    for i in range(5):
        run(engine, "sequence", instance_id=f"q-{i}")
    engine.start_instance("wait_two_events", "q-waiting", None)
    assert engine.wait_for_idle(WAIT)
    page, token = engine.query_instances(InstanceQuery(runtime_status=("Completed",), top=3))
    assert [s["instanceId"] for s in page] == ["q-0", "q-1", "q-2"]
    assert token is not None
    page2, token2 = engine.query_instances(
        InstanceQuery(runtime_status=("Completed",), top=3, continuation_token=token)
    )
    assert [s["instanceId"] for s in page2] == ["q-3", "q-4"]
    assert token2 is None
    running, _ = engine.query_instances(InstanceQuery(runtime_status=("Running",)))
    assert [s["instanceId"] for s in running] == ["q-waiting"]
    assert engine.purge_many(InstanceQuery(instance_id_prefix="q-")) == 5


def test_nondeterminism_fails_the_instance(tmp_path: Path) -> None:
    db = str(tmp_path / "d.sqlite3")
    v1 = DurableEngine(app_functions(build_evolving_app(1)), db, clock=VirtualClock())
    v1.start()
    iid = v1.start_instance("evolving", "evo", None)
    assert v1.wait_for_idle(WAIT)
    v1.stop()
    v2 = DurableEngine(app_functions(build_evolving_app(2)), db, clock=VirtualClock())
    v2.start()
    try:
        v2.raise_event(iid, "go", "1")
        st = v2.wait_for_completion(iid, WAIT)
        assert st is not None
        assert st["runtimeStatus"] == "Failed"
        msg = output(st)
        assert "Non-deterministic" in msg
        assert "'hello'" in msg
        assert "'Double'" in msg
    finally:
        v2.stop()


def test_calling_an_unknown_activity_fails_the_orchestration(engine: DurableEngine) -> None:
    st = run(engine, "calls_missing")
    assert st["runtimeStatus"] == "Failed"
    assert "The function 'no_such_activity' doesn't exist" in output(st)


def test_sub_orchestration_without_id_gets_execution_scoped_id(engine: DurableEngine) -> None:
    st = run(engine, "parent", instance_id="p2")
    full = engine.get_status("p2", show_history=True)
    assert full is not None
    subs = [e for e in full["historyEvents"] if e["EventType"] == "SubOrchestrationInstanceCompleted"]
    assert subs[0]["InstanceId"].endswith(":0")
    assert subs[1]["InstanceId"] == "p2-child"
    assert st["runtimeStatus"] == "Completed"


def test_entity_operation_failure_reaches_the_caller(engine: DurableEngine) -> None:
    st = run(engine, "entity_failure")
    assert output(st) == "entity failed: True"
    with pytest.raises(FunctionNotFoundError):
        engine.signal_entity("NoSuchEntity", "k", "op", None)


def test_retry_inside_task_all(engine: DurableEngine) -> None:
    ATTEMPTS.pop("par", None)
    st = run(engine, "parallel_retry", "par")
    assert output(st) == ["ok after 3", "Hello B!", "Hello C!"]


def test_one_structured_log_line_per_invocation(
    engine: DurableEngine, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="devhost"):
        st = run(engine, "sequence", instance_id="logged")
    assert st["runtimeStatus"] == "Completed"
    recs = [json.loads(r.getMessage()) for r in caplog.records if r.name == "devhost"]
    mine = [r for r in recs if r.get("evt") == "invocation" and r.get("instanceId") == "logged"]
    assert [r["function"] for r in mine].count("hello") == 3
    assert [r["function"] for r in mine].count("sequence") == 4
    for r in mine:
        assert r["invocationId"]
        assert r["durationMs"] >= 0
        assert r["status"] == "Succeeded"
