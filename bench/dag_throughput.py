"""DAG throughput on devhost with the embedded backends, real clock, no-op handlers.

Prints one JSON line per workload:

* ``tasksPerSecond``: tasks finished / wall time from the first submit to the last completion;
* ``schedulingLatencyMs`` p50/p95: from the moment a task's dependencies were satisfied (the
  orchestration time of the episode that saw them satisfied) to the moment its handler started;
* ``executionLatencyMs`` p50/p95: execution ``createdAt`` to ``finishedAt``;
* ``orchestratorCpuSecondsPerTask``: CPU time of devhost's orchestrator threads (replay, the SDK,
  history I/O) divided by the number of tasks; ``processCpuSecondsPerTask``: the whole process
  (activities, handlers, stores, entities included).

Usage: ``python bench/dag_throughput.py [--only diamond-12] [--activity-workers 8]``.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devhost.weft_runtime import WeftRuntime, run_weft  # noqa: E402
from shared.lifecycle import LogEvent  # noqa: E402


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


def run_workload(rt: WeftRuntime, name: str, definition: dict[str, Any], count: int) -> dict[str, Any]:
    rt.publish(definition, workflow=name)
    cpu_before = orchestrator_cpu_seconds()
    process_before = process_cpu_seconds()
    started = time.perf_counter()
    ids = [rt.submit(definition, workflow=name) for _ in range(count)]
    for execution_id in ids:
        status = rt.wait(execution_id, timeout=600)
        if status["runtimeStatus"] != "Completed":
            raise RuntimeError(f"{name}: {execution_id} ended {status['runtimeStatus']}")
    wall = time.perf_counter() - started
    cpu = orchestrator_cpu_seconds() - cpu_before
    process_cpu = process_cpu_seconds() - process_before

    tasks = len(definition["tasks"]) * count
    scheduling: list[float] = []
    execution: list[float] = []
    for execution_id in ids:
        ex = rt.execution(execution_id)
        if ex.finished_at is not None:
            execution.append((ex.finished_at - ex.created_at).total_seconds() * 1000.0)
        for event in rt.stores.executions.list_events(execution_id, limit=10_000):
            if event.type == LogEvent.TASK_STARTED:
                scheduling.append(float(event.data["schedulingLatencyMs"]))
    return {
        "workload": name,
        "executions": count,
        "tasks": tasks,
        "wallSeconds": round(wall, 3),
        "tasksPerSecond": round(tasks / wall, 1),
        "schedulingLatencyMs": {
            "p50": round(percentile(scheduling, 0.50), 2),
            "p95": round(percentile(scheduling, 0.95), 2),
        },
        "executionLatencyMs": {
            "p50": round(statistics.median(execution), 1),
            "p95": round(percentile(execution, 0.95), 1),
        },
        "orchestratorCpuSecondsPerTask": round(cpu / tasks, 5),
        "processCpuSecondsPerTask": round(process_cpu / tasks, 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(WORKLOADS), action="append")
    parser.add_argument("--activity-workers", type=int, default=8)
    parser.add_argument("--orchestrator-workers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="weft-bench-") as tmp:
        with run_weft(
            Path(tmp),
            virtual=False,
            activity_workers=args.activity_workers,
            orchestrator_workers=args.orchestrator_workers,
        ) as rt:
            rt.tenant("acme", max_running_tasks=1000)
            for name in args.only or list(WORKLOADS):
                definition, count = WORKLOADS[name]
                print(json.dumps(run_workload(rt, name, definition, count)), flush=True)


if __name__ == "__main__":
    main()
