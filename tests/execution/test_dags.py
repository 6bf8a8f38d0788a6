"""Executions of real workflow definitions on devhost's durable engine, on a virtual clock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from shared.definition import WorkflowDefinition
from shared.execution_messages import ExecutionInput
from shared.names import OrchestratorName
from shared.ports import ExecutionWrite
from shared.records import Execution
from shared.retry import RetryPolicy, retry_seed
from shared.states import ExecutionStatus, TaskStatus
from tests.execution.harness import Harness, run_harness


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with run_harness(tmp_path, monkeypatch) as harness:
        yield harness


def task(tid: str, deps: list[str] | None = None, handler: str = "noop", **params: Any) -> dict[str, Any]:
    return {"id": tid, "handler": handler, "params": params, "dependsOn": deps or []}


def test_diamond_runs_every_task_once_and_succeeds(h: Harness) -> None:
    middle = [task(f"m{i}", ["root"], result={"i": i}) for i in range(10)]
    definition = {
        "tasks": [task("root"), *middle, task("join", [m["id"] for m in middle], result="done")],
        "maxParallelism": 20,
    }
    execution_id = h.submit(definition)
    status = h.wait(execution_id)
    assert status["runtimeStatus"] == "Completed", status
    ex = h.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    assert ex.output == {"join": "done"}
    runs = {r.task_id: r for r in h.stores.executions.get_task_runs(execution_id)}
    assert set(runs) == {"root", "join", *(f"m{i}" for i in range(10))}
    assert all(r.status is TaskStatus.SUCCEEDED and r.attempts == 1 for r in runs.values())


def _history(h: Harness, execution_id: str) -> list[dict[str, Any]]:
    status = h.engine.get_status(execution_id, show_history=True, show_history_output=True)
    assert status is not None
    return list(status["historyEvents"])


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")[:26] + "+00:00")


def test_chain_passes_outputs_and_input_between_tasks(h: Harness) -> None:
    definition = {
        "tasks": [
            task("extract", result={"rows": [1, 2, 3], "source": "s3"}),
            task(
                "transform",
                ["extract"],
                result={"n": "${{ tasks.extract.output.rows }}", "d": "${{ input.date }}"},
            ),
            task("load", ["transform"], result="loaded ${{ tasks.transform.output.n }} on ${{ input.date }}"),
        ]
    }
    execution_id = h.submit(definition, inp={"date": "2026-11-29"})
    h.wait(execution_id)
    runs = {r.task_id: r for r in h.stores.executions.get_task_runs(execution_id)}
    assert runs["transform"].output == {"n": [1, 2, 3], "d": "2026-11-29"}
    assert runs["load"].output == "loaded [1,2,3] on 2026-11-29"
    assert h.execution(execution_id).output == {"load": "loaded [1,2,3] on 2026-11-29"}


def test_retries_wait_exactly_next_delay_on_durable_timers(h: Harness) -> None:
    retry = {"maxAttempts": 3, "initialIntervalSeconds": 10, "backoffCoefficient": 2, "jitter": "full"}
    definition = {"tasks": [{**task("flaky", handler="fail", times=2), "retry": retry}]}
    execution_id = h.submit(definition)
    h.wait(execution_id)
    run = h.stores.executions.get_task_run(execution_id, "flaky")
    assert run is not None and run.status is TaskStatus.SUCCEEDED and run.attempts == 3
    policy = RetryPolicy.model_validate(retry)
    expected = [policy.next_delay(n, retry_seed(execution_id, "flaky", n)) for n in (1, 2)]
    timeout = WorkflowDefinition.model_validate(definition).defaults.timeout_seconds
    backoffs = [
        (_ts(e["FireAt"]) - _ts(e["Timestamp"])).total_seconds()
        for e in _history(h, execution_id)
        if e["EventType"] == "TimerCreated"
        and (_ts(e["FireAt"]) - _ts(e["Timestamp"])).total_seconds() < timeout
    ]
    assert backoffs == pytest.approx(expected, abs=1e-6)
    assert 0 < expected[0] <= 10 and 0 < expected[1] <= 20


def test_non_retryable_error_fails_the_execution_after_one_attempt(h: Harness) -> None:
    definition = {
        "tasks": [
            task("a"),
            {
                **task("b", ["a"], handler="fail", times=-1, retryable=False, errorType="Boom"),
                "retry": {"maxAttempts": 5, "initialIntervalSeconds": 1},
            },
            task("c", ["b"]),
        ]
    }
    execution_id = h.submit(definition)
    h.wait(execution_id)
    ex = h.execution(execution_id)
    assert ex.status is ExecutionStatus.FAILED
    assert ex.error is not None and ex.error.type == "Boom" and ex.error.details["taskId"] == "b"
    runs = {r.task_id: r for r in h.stores.executions.get_task_runs(execution_id)}
    assert runs["b"].status is TaskStatus.FAILED and runs["b"].attempts == 1
    assert runs["c"].status is TaskStatus.CANCELLED


def test_fail_execution_cancels_tasks_not_yet_started(h: Harness) -> None:
    definition = {
        "tasks": [
            {
                **task("bad", handler="fail", times=-1),
                "retry": {"maxAttempts": 2, "initialIntervalSeconds": 1},
            },
            task("after", ["bad"]),
            task("slow0"),
            task("later", ["slow0", "bad"]),
        ],
        "onTaskFailure": "failExecution",
    }
    execution_id = h.submit(definition)
    h.wait(execution_id)
    runs = {r.task_id: r for r in h.stores.executions.get_task_runs(execution_id)}
    assert h.execution(execution_id).status is ExecutionStatus.FAILED
    assert runs["bad"].status is TaskStatus.FAILED and runs["bad"].attempts == 2
    assert runs["after"].status is TaskStatus.CANCELLED
    assert runs["later"].status is TaskStatus.CANCELLED
    assert runs["slow0"].status is TaskStatus.SUCCEEDED


def test_wide_500_task_dag_completes(h: Harness) -> None:
    middle = [task(f"w{i:03d}", ["root"]) for i in range(498)]
    definition = {
        "tasks": [task("root"), *middle, task("sink", [m["id"] for m in middle])],
        "maxParallelism": 500,
    }
    execution_id = h.submit(definition)
    status = h.wait(execution_id, timeout=300)
    assert status["runtimeStatus"] == "Completed"
    runs = h.stores.executions.get_task_runs(execution_id)
    assert len(runs) == 500
    assert all(r.status is TaskStatus.SUCCEEDED for r in runs)
    # The fan-out ran in task-batch sub-orchestrations, so no single history holds all 500 tasks.
    assert len(_history(h, execution_id)) < 200


def test_long_chain_continues_as_new_and_completes(h: Harness) -> None:
    n = 150
    tasks = [task("t0", result=0)] + [task(f"t{i}", [f"t{i - 1}"], result=i) for i in range(1, n)]
    execution_id = h.submit({"tasks": tasks})
    status = h.wait(execution_id, timeout=300)
    assert status["runtimeStatus"] == "Completed"
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert h.execution(execution_id).output == {f"t{n - 1}": n - 1}
    output = status["output"] if isinstance(status["output"], dict) else json.loads(status["output"])
    assert output["generation"] > 1


def test_an_orchestration_that_fails_leaves_its_execution_failed(h: Harness) -> None:
    h.publish({"tasks": [task("a")]})
    execution_id = "broken-execution"
    # Bound to a version that does not exist: start_execution cannot load it.
    h.stores.executions.commit(
        ExecutionWrite(
            execution_id,
            execution=Execution(
                id=execution_id, tenant_id="acme", workflow="wf", version=99, created_at=h.now()
            ),
        )
    )
    h.engine.start_instance(
        OrchestratorName.EXECUTION,
        execution_id,
        json.dumps(ExecutionInput(execution_id=execution_id, tenant_id="acme").to_json_dict()),
    )
    status = h.wait(execution_id)
    assert status["runtimeStatus"] == "Failed"
    ex = h.execution(execution_id)
    assert ex.status is ExecutionStatus.FAILED
    assert ex.error is not None
    assert ex.error.type == "weft.OrchestrationFailed"
    assert "version 99" in ex.error.message
