"""Golden single-step replays: hand-built histories -> the real SDK -> devhost's model of the extension.

Each test feeds the SDK (azure-functions-durable 1.7.0, replay schema V3) a history as the extension
would, then checks both the SDK's action list and the decisions (with DTFx sequence ids) that devhost
derives from it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from devhost.durable.functions import FunctionRegistry, invoke_entity, invoke_orchestrator
from devhost.durable.replay import (
    NondeterminismError,
    ReplayResult,
    flatten_actions,
    parse_orchestrator_output,
    replay,
)
from tests.devhost.support.apps import app_functions
from tests.devhost.support.history_builder import HistoryBuilder

REGISTRY = FunctionRegistry(app_functions())


def step(
    orchestrator: str, b: HistoryBuilder, input_value: Any = None
) -> tuple[dict[str, Any], ReplayResult]:
    fn = REGISTRY.orchestrator(orchestrator)
    assert fn is not None
    raw, _ = invoke_orchestrator(fn, b.context_body(input_value), "inst")
    state = parse_orchestrator_output(raw)
    assert state["schemaVersion"] == 2  # V3 on the wire (ReplaySchema.V3 == 2)
    return state, replay("inst", "x", flatten_actions(state), b.history())


def decisions(result: ReplayResult) -> list[tuple[str, int, str]]:
    return [(d.kind, d.event_id, d.name or d.instance_id or "") for d in result.decisions]


def test_fan_out_schedules_every_activity_with_sequential_ids() -> None:
    b = HistoryBuilder().episode().started("fan_out", 3)
    state, result = step("fan_out", b, 3)
    assert state["isDone"] is False
    (when_all,) = state["actions"][0]
    assert when_all["actionType"] == 12
    assert [a["functionName"] for a in when_all["compoundActions"]] == ["Double"] * 3
    assert decisions(result) == [
        ("activity", 0, "Double"),
        ("activity", 1, "Double"),
        ("activity", 2, "Double"),
    ]
    assert [d.input for d in result.decisions] == ["0", "1", "2"]
    assert not result.finished


def _fanned_out(n: int) -> HistoryBuilder:
    b = HistoryBuilder().episode().started("fan_out", n)
    for i in range(n):
        b.scheduled(i, "Double", i)
    return b


def test_fan_in_completes_when_all_results_arrive_in_any_order() -> None:
    b = _fanned_out(3).episode().completed(2, 4).completed(0, 0).episode().completed(1, 2)
    state, result = step("fan_out", b, 3)
    assert state["isDone"] is True
    assert state["output"] == 6
    assert result.finished
    assert result.decisions == []


def test_partial_fan_in_waits_without_new_work() -> None:
    b = _fanned_out(3).episode().completed(1, 2)
    state, result = step("fan_out", b, 3)
    assert state["isDone"] is False
    assert not result.finished
    assert result.decisions == []


def test_retry_exhaustion_follows_dtfx_retry_interceptor() -> None:
    b = HistoryBuilder().episode().started("retry_exhausted").scheduled(0, "always_fails", "boom")
    t1 = b.now
    # Attempt 1 fails: the extension schedules a retry timer (id 1) first_retry_interval later.
    b.episode().failed(0, "Activity function 'always_fails' failed: RuntimeError: boom")
    state, result = step("retry_exhausted", b)
    assert state["isDone"] is False
    # The SDK wraps a retryable task in a one-child WhenAll; the extension retries the inner action.
    (wrapper,) = state["actions"][0]
    assert wrapper["actionType"] == 12
    (action,) = wrapper["compoundActions"]
    assert action["actionType"] == 1
    assert action["retryOptions"] == {"firstRetryIntervalInMilliseconds": 1000, "maxNumberOfAttempts": 2}
    (timer,) = result.decisions
    assert (timer.kind, timer.event_id) == ("timer", 1)
    assert timer.fire_at == b.now + timedelta(seconds=1)
    assert b.now > t1
    # The timer fires: attempt 2 is scheduled with the next id.
    fire1 = b.now + timedelta(seconds=1)
    b.timer_created(1, fire1).episode(at=fire1).timer_fired(1, fire1)
    _, result = step("retry_exhausted", b)
    assert decisions(result) == [("activity", 2, "always_fails")]
    # Attempt 2 (the last) fails: DTFx still waits on one more, trailing timer.
    b.scheduled(2, "always_fails", "boom").episode().failed(
        2, "Activity function 'always_fails' failed: boom"
    )
    state, result = step("retry_exhausted", b)
    assert state["isDone"] is False
    assert decisions(result) == [("timer", 3, "")]
    fire2 = b.now + timedelta(seconds=1)
    b.timer_created(3, fire2).episode(at=fire2).timer_fired(3, fire2)
    state, result = step("retry_exhausted", b)
    assert state["isDone"] is True
    assert state["output"] == "caught: True"
    assert result.finished
    assert result.decisions == []


def test_external_event_beats_timeout_and_cancels_the_timer() -> None:
    b = HistoryBuilder().episode().started("approval")
    state, result = step("approval", b)
    (when_any,) = state["actions"][0]
    assert when_any["actionType"] == 11
    assert [a["actionType"] for a in when_any["compoundActions"]] == [6, 5]
    (timer,) = result.decisions
    assert (timer.kind, timer.event_id, timer.fire_at) == ("timer", 0, b.now + timedelta(hours=1))
    b.timer_created(0, b.now + timedelta(hours=1)).episode().raised("Approve", "yes")
    state, result = step("approval", b)
    assert state["isDone"] is True
    assert state["output"] == {"approved": "yes"}
    assert state["actions"][0][0]["compoundActions"][1]["isCanceled"] is True
    assert result.finished
    assert result.canceled_timer_ids == [0]


def test_timeout_beats_external_event() -> None:
    b = HistoryBuilder().episode().started("approval")
    fire = b.now + timedelta(hours=1)
    b.timer_created(0, fire).episode(at=fire).timer_fired(0, fire)
    state, result = step("approval", b)
    assert state["isDone"] is True
    assert state["output"]["timedOut"] is True
    assert state["output"]["at"] == fire.isoformat()
    assert result.finished


def test_event_raised_before_the_wait_is_buffered() -> None:
    b = HistoryBuilder().episode().started("wait_two_events").raised("B", 2).raised("A", 1)
    state, result = step("wait_two_events", b)
    assert state["isDone"] is True
    assert state["output"] == [1, 2]
    assert result.finished


def test_sub_orchestrations_in_sequence() -> None:
    b = HistoryBuilder().episode().started("parent")
    state, result = step("parent", b)
    (sub,) = result.decisions
    assert (sub.kind, sub.event_id, sub.name, sub.input) == ("sub", 0, "fan_out", "4")
    assert sub.instance_id == "x:0"  # DTFx: ExecutionId + ":" + sequence id when none is given
    b.sub_created(0, "fan_out", sub.instance_id, 4).episode().sub_completed(0, 12)
    state, result = step("parent", b)
    (sub2,) = result.decisions
    assert (sub2.kind, sub2.event_id, sub2.instance_id) == ("sub", 1, "inst-child")
    b.sub_created(1, "sequence", "inst-child").episode().sub_completed(1, ["x"])
    state, result = step("parent", b)
    assert state["output"] == {"a": 12, "b": ["x"]}
    assert result.finished


def test_failed_sub_orchestration_surfaces_as_exception() -> None:
    b = HistoryBuilder().episode().started("failing_child_parent").sub_created(0, "thrower", "c1", "x")
    b.episode().sub_failed(0, "Orchestrator function 'thrower' failed: kaboom")
    state, result = step("failing_child_parent", b)
    assert state["output"] == "child failed: True"
    assert result.finished


def test_continue_as_new_carries_the_new_input() -> None:
    b = (
        HistoryBuilder()
        .episode()
        .started("counter_loop", 1)
        .scheduled(0, "Double", 1)
        .episode()
        .completed(0, 2)
    )
    state, result = step("counter_loop", b, 1)
    assert state["isDone"] is True
    assert state["actions"][0][-1] == {"actionType": 4, "input": "2"}
    assert result.finished
    assert result.continue_as_new
    assert result.continue_as_new_input == "2"


def test_entities_signal_and_call_use_event_sent_and_request_ids() -> None:
    b = HistoryBuilder().episode().started("entity_user", "k")
    state, result = step("entity_user", b, "k")
    kinds = [(d.kind, d.event_id, d.instance_id, d.operation) for d in result.decisions]
    assert kinds == [("entity_signal", 0, "@counter@k", "add"), ("entity_call", 1, "@counter@k", "add")]
    assert [a["actionType"] for a in state["actions"][0]] == [9, 7]
    call = result.decisions[1]
    assert call.request_id
    b.event_sent(0, "@counter@k", result.decisions[0].request_id or "", "add")
    b.event_sent(1, "@counter@k", call.request_id, "add").episode().entity_response(call.request_id, 15)
    state, result = step("entity_user", b, "k")
    (get,) = result.decisions
    assert (get.kind, get.event_id, get.operation) == ("entity_call", 2, "get")
    assert get.request_id
    b.event_sent(2, "@counter@k", get.request_id, "get").episode().entity_response(get.request_id, 15)
    state, result = step("entity_user", b, "k")
    assert state["output"] == 15
    assert state["customStatus"] == {"value": 15}
    assert result.finished


def test_entity_batch_protocol_double_encoded_inputs() -> None:
    fn = REGISTRY.entity("counter")
    assert fn is not None
    body = {
        "self": {"name": "counter", "key": "k"},
        "exists": True,
        "state": json.dumps(5),
        "batch": [
            {"name": "add", "input": json.dumps(json.dumps(3)), "isSignal": True},
            {"name": "get", "input": json.dumps(json.dumps(None)), "isSignal": False},
            {"name": "fail", "input": json.dumps(json.dumps(None)), "isSignal": False},
        ],
    }
    out = json.loads(invoke_entity(fn, json.dumps(body), "@counter@k"))
    assert out["entityExists"] is True
    assert json.loads(out["entityState"]) == 8
    assert [json.loads(r["result"]) for r in out["results"][:2]] == [8, 8]
    assert out["results"][2]["isError"] is True
    assert out["signals"] == []


def test_nondeterminism_different_activity_name() -> None:
    b = (
        HistoryBuilder()
        .episode()
        .started("fan_out", 1)
        .scheduled(0, "hello", "x")
        .episode()
        .completed(0, "r")
    )
    with pytest.raises(NondeterminismError, match=r"'hello'.*sequence id 0.*'Double'"):
        step("fan_out", b, 1)


def test_nondeterminism_different_action_type() -> None:
    b = HistoryBuilder().episode().started("fan_out", 1)
    b.timer_created(0, b.now + timedelta(minutes=1)).episode()
    with pytest.raises(
        NondeterminismError, match=r"durable timer.*sequence id 0.*activity task named 'Double'"
    ):
        step("fan_out", b, 1)


def test_nondeterminism_history_has_more_work_than_the_code() -> None:
    b = (
        HistoryBuilder()
        .episode()
        .started("sequence")
        .scheduled(0, "hello", "Tokyo")
        .scheduled(1, "hello", "x")
    )
    b.episode()
    with pytest.raises(NondeterminismError, match=r"'hello' with sequence id 1.*has not \(yet\) scheduled"):
        step("sequence", b)


def test_long_timer_is_split_by_the_sdk_and_honoured_piecewise() -> None:
    b = HistoryBuilder().episode().started("long_timer")
    start = b.now
    _, result = step("long_timer", b)
    (t0,) = result.decisions
    assert t0.fire_at == start + timedelta(days=3)
    b.timer_created(0, t0.fire_at).episode(at=t0.fire_at).timer_fired(0, t0.fire_at)
    _, result = step("long_timer", b)
    (t1,) = result.decisions
    assert (t1.event_id, t1.fire_at) == (1, start + timedelta(days=6))


def test_retry_inside_task_all_interleaves_ids_in_history_order() -> None:
    b = HistoryBuilder().episode().started("parallel_retry", "k")
    _, result = step("parallel_retry", b, "k")
    assert decisions(result) == [("activity", 0, "flaky"), ("activity", 1, "hello")]
    b.scheduled(0, "flaky", "k").scheduled(1, "hello", "B")
    # The retried activity fails, then the plain one completes: the retry timer takes id 2.
    b.episode().failed(0, "Activity function 'flaky' failed: attempt 1").completed(1, "Hello B!")
    _, result = step("parallel_retry", b, "k")
    (timer,) = result.decisions
    assert (timer.kind, timer.event_id) == ("timer", 2)
    assert timer.fire_at is not None
    b.timer_created(2, timer.fire_at).episode(at=timer.fire_at).timer_fired(2, timer.fire_at)
    _, result = step("parallel_retry", b, "k")
    assert decisions(result) == [("activity", 3, "flaky")]
    b.scheduled(3, "flaky", "k").episode().completed(3, "ok")
    state, result = step("parallel_retry", b, "k")
    assert state["isDone"] is False
    assert decisions(result) == [("activity", 4, "hello")]
    b.scheduled(4, "hello", "C").episode().completed(4, "Hello C!")
    state, result = step("parallel_retry", b, "k")
    assert state["output"] == ["ok", "Hello B!", "Hello C!"]
    assert result.finished
