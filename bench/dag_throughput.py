"""DAG throughput on devhost with the embedded backends, real clock, no-op handlers.

Workloads (issue 5): diamond-12 (1 -> 10 -> 1) with 50 concurrent executions, chain-12 with 20,
wide-500 (1 -> 498 -> 1) with 1. Each workload is measured in two ways, one JSON line each:

* ``"load": "closed"`` -- steady-state throughput. ``concurrency`` client threads each submit an
  execution, wait for it to finish and submit the next, for ``--duration`` seconds after a
  ``--warmup`` (whose executions are not counted); then no new execution is submitted and the ones
  in flight drain. ``tasksPerSecond`` counts the tasks whose handler finished inside the measured
  window (``task.succeeded`` events), divided by the window's length. Latencies in this mode are
  queueing-dominated: with N executions always waiting, every new task queues behind N others.
* ``"load": "paced"`` -- latency under a stated load. Executions are submitted open-loop at a fixed
  rate offering ``--paced-fraction`` (default 0.5) of the closed-loop throughput just measured
  (``offeredTasksPerSecond``), for ``--duration`` seconds, and drained.

Fields of every line:

* ``tasksPerSecond``: see above (paced: achieved, equal to the offered rate unless overloaded);
* ``schedulingLatencyMs`` p50/p95: from the moment a task's dependencies were satisfied (the
  orchestration time of the episode that saw them satisfied) to the moment its handler started
  (the ``schedulingLatencyMs`` of its ``task.started`` event), over the counted executions;
* ``executionLatencyMs`` p50/p95: execution ``createdAt`` to ``finishedAt``;
* ``orchestratorCpuSecondsPerTask``: CPU time of devhost's orchestrator threads (replay, the SDK,
  history I/O, entity batches) from the first submit to the end of the drain, divided by the tasks
  run in that span; ``processCpuSecondsPerTask``: the same for the whole process (activities,
  handlers, stores, the benchmark's own client threads included).

Usage: ``python bench/dag_throughput.py [--only diamond-12] [--duration 10] [--warmup 2]
[--paced-fraction 0.5] [--no-paced] [--activity-workers 8] [--orchestrator-workers 4]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devhost.weft_runtime import WeftRuntime, run_weft  # noqa: E402
from shared.execution_messages import ExecutionInput  # noqa: E402
from shared.lifecycle import LogEvent  # noqa: E402
from shared.names import OrchestratorName  # noqa: E402
from shared.ports import ExecutionWrite  # noqa: E402
from shared.records import Execution  # noqa: E402


def noop(tid: str, deps: list[str] | None = None) -> dict[str, Any]:
    return {"id": tid, "handler": "noop", "dependsOn": deps or []}


def diamond(width: int = 10) -> dict[str, Any]:
    middle = [noop(f"m{i}", ["root"]) for i in range(width)]
    return {
        "tasks": [noop("root"), *middle, noop("join", [m["id"] for m in middle])],
        "maxParallelism": width + 2,
    }


def chain(n: int = 12) -> dict[str, Any]:
    return {"tasks": [noop("t0")] + [noop(f"t{i}", [f"t{i - 1}"]) for i in range(1, n)]}


def wide(n: int = 500) -> dict[str, Any]:
    middle = [noop(f"w{i:03d}", ["root"]) for i in range(n - 2)]
    return {
        "tasks": [noop("root"), *middle, noop("sink", [m["id"] for m in middle])],
        "maxParallelism": n,
    }


WORKLOADS: dict[str, tuple[dict[str, Any], int]] = {
    "diamond-12": (diamond(), 50),
    "chain-12": (chain(), 20),
    "wide-500": (wide(), 1),
}


def orchestrator_cpu_seconds() -> float:
    """CPU (user + system) of devhost's orchestrator threads, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for thread in threading.enumerate():
        if not thread.name.startswith("devhost-orch") or thread.native_id is None:
            continue
        try:
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def process_cpu_seconds() -> float:
    usage = os.times()
    return usage.user + usage.system


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Submitter:
    """What ``WeftRuntime.submit`` does, with the version published once up front."""

    def __init__(self, rt: WeftRuntime, name: str, definition: dict[str, Any]) -> None:
        self.rt = rt
        self.name = name
        self.version = rt.publish(definition, workflow=name)

    def submit(self) -> str:
        execution_id = uuid.uuid4().hex
        self.rt.stores.executions.commit(
            ExecutionWrite(
                execution_id,
                execution=Execution(
                    id=execution_id,
                    tenant_id="acme",
                    workflow=self.name,
                    version=self.version,
                    created_at=self.rt.now(),
                ),
            )
        )
        self.rt.engine.start_instance(
            OrchestratorName.EXECUTION,
            execution_id,
            json.dumps(ExecutionInput(execution_id=execution_id, tenant_id="acme").to_json_dict()),
        )
        return execution_id

    def wait(self, execution_id: str) -> None:
        status = self.rt.wait(execution_id, timeout=600)
        if status["runtimeStatus"] != "Completed":
            raise RuntimeError(f"{self.name}: {execution_id} ended {status['runtimeStatus']}")


def summarise(
    rt: WeftRuntime,
    counted: list[str],
    window: tuple[datetime, datetime] | None,
) -> dict[str, Any]:
    scheduling: list[float] = []
    execution: list[float] = []
    finished_in_window = 0
    for execution_id in counted:
        ex = rt.execution(execution_id)
        if ex.finished_at is not None:
            execution.append((ex.finished_at - ex.created_at).total_seconds() * 1000.0)
        for event in rt.stores.executions.list_events(execution_id, limit=10_000):
            if event.type == LogEvent.TASK_STARTED:
                scheduling.append(float(event.data["schedulingLatencyMs"]))
            elif window is not None and event.type == LogEvent.TASK_SUCCEEDED:
                finished_in_window += window[0] <= event.at < window[1]
    return {
        "finishedInWindow": finished_in_window,
        "schedulingLatencyMs": {
            "p50": round(percentile(scheduling, 0.50), 2),
            "p95": round(percentile(scheduling, 0.95), 2),
        },
        "executionLatencyMs": {
            "p50": round(statistics.median(execution), 1) if execution else float("nan"),
            "p95": round(percentile(execution, 0.95), 1),
        },
    }


def closed_loop(
    rt: WeftRuntime, name: str, definition: dict[str, Any], concurrency: int, duration: float, warmup: float
) -> dict[str, Any]:
    sub = Submitter(rt, name, definition)
    per_execution = len(definition["tasks"])
    all_ids: list[str] = []
    lock = threading.Lock()
    t0 = time.monotonic()
    window_start = t0 + warmup
    window_end = window_start + duration
    errors: list[BaseException] = []

    def client() -> None:
        try:
            while time.monotonic() < window_end:
                execution_id = sub.submit()
                with lock:
                    all_ids.append(execution_id)
                sub.wait(execution_id)
        except BaseException as exc:
            errors.append(exc)

    cpu_before, process_before = orchestrator_cpu_seconds(), process_cpu_seconds()
    threads = [threading.Thread(target=client, name=f"bench-client-{i}") for i in range(concurrency)]
    for t in threads:
        t.start()
    time.sleep(max(0.0, window_start - time.monotonic()))
    wall_start = datetime.now(UTC)
    time.sleep(max(0.0, window_end - time.monotonic()))
    wall_end = datetime.now(UTC)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    cpu = orchestrator_cpu_seconds() - cpu_before
    process_cpu = process_cpu_seconds() - process_before
    tasks = per_execution * len(all_ids)
    summary = summarise(rt, all_ids, (wall_start, wall_end))
    span = (wall_end - wall_start).total_seconds()
    return {
        "workload": name,
        "load": "closed",
        "concurrency": concurrency,
        "windowSeconds": round(span, 3),
        "executions": len(all_ids),
        "tasks": tasks,
        "tasksPerSecond": round(summary.pop("finishedInWindow") / span, 1),
        **summary,
        "orchestratorCpuSecondsPerTask": round(cpu / tasks, 5),
        "processCpuSecondsPerTask": round(process_cpu / tasks, 5),
    }


def paced(
    rt: WeftRuntime, name: str, definition: dict[str, Any], tasks_per_second: float, duration: float
) -> dict[str, Any]:
    sub = Submitter(rt, name, definition)
    per_execution = len(definition["tasks"])
    interval = per_execution / tasks_per_second
    ids: list[str] = []
    cpu_before, process_before = orchestrator_cpu_seconds(), process_cpu_seconds()
    started = time.monotonic()
    n = 0
    while True:
        due = started + n * interval
        if due - started >= duration:
            break
        time.sleep(max(0.0, due - time.monotonic()))
        ids.append(sub.submit())
        n += 1
    for execution_id in ids:
        sub.wait(execution_id)
    wall = time.monotonic() - started
    cpu = orchestrator_cpu_seconds() - cpu_before
    process_cpu = process_cpu_seconds() - process_before
    tasks = per_execution * len(ids)
    summary = summarise(rt, ids, None)
    summary.pop("finishedInWindow")
    return {
        "workload": name,
        "load": "paced",
        "offeredTasksPerSecond": round(tasks_per_second, 1),
        "executions": len(ids),
        "tasks": tasks,
        "wallSeconds": round(wall, 3),
        "tasksPerSecond": round(tasks / wall, 1),
        **summary,
        "orchestratorCpuSecondsPerTask": round(cpu / tasks, 5),
        "processCpuSecondsPerTask": round(process_cpu / tasks, 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", choices=sorted(WORKLOADS), action="append")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--paced-fraction", type=float, default=0.5)
    parser.add_argument("--no-paced", action="store_true")
    parser.add_argument("--activity-workers", type=int, default=8)
    parser.add_argument("--orchestrator-workers", type=int, default=4)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="weft-bench-") as tmp,
        run_weft(
            Path(tmp),
            virtual=False,
            activity_workers=args.activity_workers,
            orchestrator_workers=args.orchestrator_workers,
        ) as rt,
    ):
        rt.tenant("acme", max_running_tasks=1000)
        for name in args.only or list(WORKLOADS):
            definition, concurrency = WORKLOADS[name]
            closed = closed_loop(rt, name, definition, concurrency, args.duration, args.warmup)
            print(json.dumps(closed), flush=True)
            if not args.no_paced:
                rate = closed["tasksPerSecond"] * args.paced_fraction
                print(json.dumps(paced(rt, name, definition, rate, args.duration)), flush=True)


if __name__ == "__main__":
    main()
