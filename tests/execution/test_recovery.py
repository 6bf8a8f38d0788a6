"""Dead letters and operator actions, cancellation, timeouts and the tenant gate, on devhost."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from shared.execution_messages import OperatorActionKind
from shared.handlers.context import HandlerContext
from shared.handlers.registry import REGISTRY
from shared.names import EntityName, EventName
from shared.operator import resolve_dead_letter
from shared.records import DeadLetter, DeadLetterStatus
from shared.states import ExecutionStatus, TaskStatus
from tests.execution.harness import Harness, run_harness

T = TypeVar("T")


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with run_harness(tmp_path, monkeypatch) as harness:
        yield harness


@pytest.fixture
def real_h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with run_harness(tmp_path, monkeypatch, virtual=False) as harness:
        yield harness


def task(tid: str, deps: list[str] | None = None, handler: str = "noop", **params: Any) -> dict[str, Any]:
    return {"id": tid, "handler": handler, "params": params, "dependsOn": deps or []}


def eventually(probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def open_dead_letter(h: Harness, execution_id: str) -> DeadLetter | None:
    page = h.stores.executions.list_dead_letters("acme", status=DeadLetterStatus.OPEN)
    return next((d for d in page.items if d.execution_id == execution_id), None)


def operate(
    h: Harness, dl: DeadLetter, action: OperatorActionKind, *, double_encoded: bool = False, **kwargs: Any
) -> None:
    from shared.adapters.factory import get_payload_store

    op = resolve_dead_letter(h.stores, get_payload_store(), "acme", dl.id, action, now=h.now, **kwargs)
    data = json.dumps(op.to_json_dict())
    # The Durable SDK's own client sends event data JSON-encoded twice; both forms must work.
    h.engine.raise_event(
        dl.execution_id, EventName.OPERATOR_ACTION, json.dumps(data) if double_encoded else data
    )


DEAD_LETTER_DAG = {
    "tasks": [
        task("a"),
        {
            **task("b", ["a"], handler="fail", times=-1),
            "retry": {"maxAttempts": 2, "initialIntervalSeconds": 1},
        },
        task("c", ["b"], result="${{ tasks.b.output }}"),
        task("side", ["a"], result="independent"),
    ],
    "onTaskFailure": "deadLetter",
}


def test_dead_letter_waits_while_other_branches_finish_then_retry_with_new_params(h: Harness) -> None:
    execution_id = h.submit(DEAD_LETTER_DAG)
    dl = eventually(lambda: open_dead_letter(h, execution_id))
    assert dl.task_id == "b"
    assert dl.attempts == 2
    assert dl.error.type == "TestFailure"
    eventually(lambda: h.execution(execution_id).status is ExecutionStatus.WAITING)
    side = eventually(lambda: h.stores.executions.get_task_run(execution_id, "side"))
    eventually(lambda: h.stores.executions.get_task_run(execution_id, "side").status is TaskStatus.SUCCEEDED)
    assert side.task_id == "side"

    operate(h, dl, OperatorActionKind.RETRY, params={"times": 0, "result": {"fixed": True}})
    h.wait(execution_id)
    ex = h.execution(execution_id)
    assert ex.status is ExecutionStatus.SUCCEEDED
    runs = {r.task_id: r for r in h.stores.executions.get_task_runs(execution_id)}
    assert runs["b"].status is TaskStatus.SUCCEEDED
    assert runs["b"].attempts == 3
    assert runs["c"].output == {"fixed": True}
    resolved = h.stores.executions.get_dead_letter("acme", dl.id)
    assert resolved is not None
    assert resolved.status is DeadLetterStatus.RESOLVED


@pytest.mark.parametrize("double_encoded", [False, True])
def test_dead_letter_skip_with_output_satisfies_dependants(h: Harness, double_encoded: bool) -> None:
    execution_id = h.submit(DEAD_LETTER_DAG)
    dl = eventually(lambda: open_dead_letter(h, execution_id))
    operate(h, dl, OperatorActionKind.SKIP, output={"manual": 1}, double_encoded=double_encoded)
    h.wait(execution_id)
    runs = {r.task_id: r for r in h.stores.executions.get_task_runs(execution_id)}
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    assert runs["b"].status is TaskStatus.SKIPPED
    assert runs["c"].output == {"manual": 1}


def test_dead_letter_cancel_cancels_the_execution(h: Harness) -> None:
    execution_id = h.submit(DEAD_LETTER_DAG)
    dl = eventually(lambda: open_dead_letter(h, execution_id))
    operate(h, dl, OperatorActionKind.CANCEL)
    h.wait(execution_id)
    runs = {r.task_id: r for r in h.stores.executions.get_task_runs(execution_id)}
    assert h.execution(execution_id).status is ExecutionStatus.CANCELLED
    assert runs["b"].status is TaskStatus.CANCELLED
    assert runs["c"].status is TaskStatus.CANCELLED


class Blocker:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.returned = threading.Event()

    def set(self) -> None:
        self.release.set()


@pytest.fixture
def blocker() -> Iterator[Blocker]:
    b = Blocker()

    def block(params: dict[str, Any], ctx: HandlerContext) -> Any:
        # Ignores its deadline on purpose: it stands for a hung handler.
        b.release.wait(timeout=float(params.get("max", 10)))
        b.returned.set()
        return {"released": b.release.is_set()}

    REGISTRY.register("test.block", block)
    yield b
    b.set()
    REGISTRY.unregister("test.block")


def test_cancel_mid_run_stops_scheduling_and_cancels_pending(h: Harness, blocker: Blocker) -> None:
    execution_id = h.submit({"tasks": [task("first", handler="test.block"), task("second", ["first"])]})
    eventually(
        lambda: (
            (r := h.stores.executions.get_task_run(execution_id, "first")) is not None
            and r.status is TaskStatus.RUNNING
        )
    )
    h.engine.raise_event(execution_id, EventName.CANCEL, json.dumps({"reason": "test"}))
    h.wait(execution_id)
    # The cancellation did not wait for the hung task to return.
    assert not blocker.returned.is_set()
    runs = {r.task_id: r for r in h.stores.executions.get_task_runs(execution_id)}
    assert h.execution(execution_id).status is ExecutionStatus.CANCELLED
    assert runs["first"].status is TaskStatus.CANCELLED
    assert runs["second"].status is TaskStatus.CANCELLED
    blocker.set()


def test_a_hung_attempt_times_out_on_the_durable_timer(real_h: Harness, blocker: Blocker) -> None:
    definition = {
        "tasks": [
            {**task("hang", handler="test.block", max=5), "timeoutSeconds": 0.5, "retry": {"maxAttempts": 1}}
        ],
    }
    execution_id = real_h.submit(definition)
    real_h.wait(execution_id, timeout=30)
    assert not blocker.returned.is_set()
    ex = real_h.execution(execution_id)
    assert ex.status is ExecutionStatus.FAILED
    assert ex.error is not None
    assert ex.error.type == "weft.Timeout"
    # The hung attempt finishing later does not overwrite the recorded timeout.
    blocker.set()
    assert blocker.returned.wait(5)
    time.sleep(0.2)
    run = real_h.stores.executions.get_task_run(execution_id, "hang")
    assert run is not None
    assert run.status is TaskStatus.FAILED
    assert run.error is not None
    assert run.error.type == "weft.Timeout"


def test_tenant_limit_holds_across_concurrent_executions(h: Harness) -> None:
    lock = threading.Lock()
    running = 0
    peak = 0

    def track(params: dict[str, Any], ctx: HandlerContext) -> Any:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return ctx.task_id

    REGISTRY.register("test.track", track)
    try:
        h.tenant("acme", max_running_tasks=2)
        definition = {
            "tasks": [
                task("a", handler="test.track"),
                task("b", handler="test.track"),
                task("c", ["a", "b"], handler="test.track"),
            ],
            "maxParallelism": 10,
        }
        ids = [h.submit(definition) for _ in range(10)]
        for execution_id in ids:
            h.wait(execution_id, timeout=120)
            assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    finally:
        REGISTRY.unregister("test.track")
    assert peak == 2


def test_an_expired_lease_is_reclaimed(h: Harness) -> None:
    h.tenant("acme", max_running_tasks=1)
    ghost = {
        "requests": [{"owner": "crashed-orchestration/x/1", "leaseSeconds": 60}],
        "now": h.now().isoformat(),
        "maxRunningTasks": 1,
    }
    h.engine.signal_entity(EntityName.TENANT_GATE, "acme", "acquire", json.dumps(ghost))
    eventually(lambda: h.engine.read_entity(EntityName.TENANT_GATE, "acme")[0])
    started = h.now()
    execution_id = h.submit({"tasks": [task("only")]})
    h.wait(execution_id, timeout=60)
    assert h.execution(execution_id).status is ExecutionStatus.SUCCEEDED
    _, raw = h.engine.read_entity(EntityName.TENANT_GATE, "acme")
    state = json.loads(raw or "{}")
    assert state["reclaimedLeasesTotal"] == 1
    # The task could only start once the crashed owner's lease ran out, 60 s later.
    run = h.stores.executions.get_task_run(execution_id, "only")
    assert run is not None
    assert (h.now() - started).total_seconds() >= 60
