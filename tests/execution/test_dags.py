"""Executions of real workflow definitions on devhost's durable engine, on a virtual clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
