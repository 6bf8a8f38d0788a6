"""Atomic writes per second and latency percentiles of ExecutionStore.commit.

Each measured write is what a task completion commits: the task run's new status (with its etag),
one execution event and one outbox record, all in one atomic write. Writes go to distinct
executions (round-robin) so the figure is the store's throughput, not one partition's contention,
plus a "hot" run where every writer hits the same execution.

    PYTHONPATH=. .venv/bin/python bench/store_throughput.py [--backend sqlite] [--writes 2000] [--threads 1,4]

Backends register in BACKENDS: a name -> context manager yielding an ExecutionStore. The Cosmos
stand-in registers from bench/cosmos_backend.py (``open_store()``) when that module exists.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.errors import ConcurrencyError
from shared.ports import ExecutionStore, ExecutionWrite
from shared.records import Execution, NewEvent, OutboxRecord, TaskRun
from shared.states import TaskStatus


@contextmanager
def _sqlite() -> Iterator[ExecutionStore]:
    from shared.adapters.sqlite_store import SqliteStore

    with tempfile.TemporaryDirectory(prefix="weft-bench-") as d:
        store = SqliteStore(Path(d) / "weft.sqlite3")
        try:
            yield store
        finally:
            store.close()


BACKENDS: dict[str, Callable[[], AbstractContextManager[ExecutionStore]]] = {"sqlite": _sqlite}
try:
    BACKENDS["cosmos"] = importlib.import_module("bench.cosmos_backend").open_store
except ModuleNotFoundError as exc:
    if exc.name != "bench.cosmos_backend":
        raise


@dataclass
class Result:
    label: str
    writes: int
    seconds: float
    latencies_ms: list[float]
    conflicts: int

    def line(self) -> str:
        lat = sorted(self.latencies_ms)
        p50 = statistics.median(lat)
        p95 = lat[int(0.95 * (len(lat) - 1))]
        p99 = lat[int(0.99 * (len(lat) - 1))]
        return (
            f"{self.label:<28} {self.writes / self.seconds:9.0f} writes/s   "
            f"mean {statistics.fmean(lat):6.2f} ms   p50 {p50:6.2f} ms   "
            f"p95 {p95:7.2f} ms   p99 {p99:7.2f} ms   etag retries {self.conflicts}"
        )


def _seed(store: ExecutionStore, n_exec: int, tasks: int) -> list[str]:
    now = datetime.now(UTC)
    ids = []
    for i in range(n_exec):
        eid = f"bench-{i}-{time.monotonic_ns()}"
        store.commit(
            ExecutionWrite(
                execution_id=eid,
                execution=Execution(id=eid, tenant_id="bench", workflow="wf", version=1, created_at=now),
                task_runs=[TaskRun(execution_id=eid, task_id=f"t{t}") for t in range(tasks)],
            )
        )
        ids.append(eid)
    return ids


def _one_write(store: ExecutionStore, eid: str, task_id: str, n: int) -> int:
    """Commit one task-completion write; returns how many etag retries it needed."""
    retries = 0
    while True:
        run = store.get_task_run(eid, task_id)
        assert run is not None
        now = datetime.now(UTC)
        try:
            store.commit(
                ExecutionWrite(
                    execution_id=eid,
                    task_runs=[
                        run.model_copy(update={"status": TaskStatus.RUNNING, "attempts": run.attempts + 1})
                    ],
                    events=[NewEvent(type="taskCompleted", at=now, data={"taskId": task_id, "n": n})],
                    outbox=[
                        OutboxRecord(
                            id=f"{eid}-{task_id}-{n}",
                            tenant_id="bench",
                            execution_id=eid,
                            destination="tasks",
                            payload={"taskId": task_id, "n": n},
                            created_at=now,
                        )
                    ],
                )
            )
            return retries
        except ConcurrencyError:
            retries += 1


def run(store: ExecutionStore, label: str, writes: int, threads: int, hot: bool) -> Result:
    ids = _seed(store, 1 if hot else max(threads * 4, 16), threads)
    counter = iter(range(writes))
    lock = threading.Lock()
    latencies: list[float] = []
    conflicts = 0

    def worker(w: int) -> None:
        nonlocal conflicts
        while True:
            with lock:
                n = next(counter, None)
            if n is None:
                return
            eid = ids[n % len(ids)]
            t0 = time.perf_counter()
            retries = _one_write(store, eid, f"t{w}", n)
            dt = (time.perf_counter() - t0) * 1000
            with lock:
                latencies.append(dt)
                conflicts += retries

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    return Result(label, writes, time.perf_counter() - start, latencies, conflicts)


def _process_worker(path: str, writes: int, worker: int, out: Any) -> None:
    from shared.adapters.sqlite_store import SqliteStore

    store = SqliteStore(path)
    ids = _seed(store, 8, 1)
    latencies = []
    for n in range(writes):
        t0 = time.perf_counter()
        _one_write(store, ids[n % len(ids)], "t0", n + worker * writes)
        latencies.append((time.perf_counter() - t0) * 1000)
    store.close()
    out.put(latencies)


def run_processes(processes: int, writes: int) -> Result:
    """SQLite only: several processes (as several Functions workers would) on one file."""
    from shared.adapters.sqlite_store import SqliteStore

    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="weft-bench-") as d:
        path = str(Path(d) / "weft.sqlite3")
        SqliteStore(path).close()  # create the schema once, before the race
        out = ctx.Queue()
        procs = [ctx.Process(target=_process_worker, args=(path, writes, w, out)) for w in range(processes)]
        start = time.perf_counter()
        for p in procs:
            p.start()
        latencies = [x for _ in procs for x in out.get(timeout=600)]
        seconds = time.perf_counter() - start
        for p in procs:
            p.join()
    return Result(f"sqlite {processes} processes", writes * processes, seconds, latencies, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sqlite", choices=sorted(BACKENDS))
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--threads", default="1,4")
    parser.add_argument("--processes", type=int, default=2, help="SQLite only; 0 to skip")
    args = parser.parse_args(argv)
    print(f"== ExecutionStore.commit on {args.backend}: task run + event + outbox record per write")
    with BACKENDS[args.backend]() as store:
        for threads in (int(t) for t in args.threads.split(",")):
            print(run(store, f"{args.backend} {threads} thread(s)", args.writes, threads, hot=False).line())
        hot_threads = max(int(t) for t in args.threads.split(","))
        print(
            run(
                store, f"{args.backend} {hot_threads} thr, 1 execution", args.writes // 2, hot_threads, True
            ).line()
        )
    if args.backend == "sqlite" and args.processes > 0:
        print(run_processes(args.processes, args.writes // args.processes).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
