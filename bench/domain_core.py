"""How fast the pure domain core is on the largest definitions Weft accepts (500 tasks).

Run: PYTHONPATH=. .venv/bin/python bench/domain_core.py
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from shared.dag import DagIndex, DagRun
from shared.params import resolve_params
from shared.states import TaskStatus
from shared.validation import validate_definition
from shared.versioning import definition_digest

N = 500


def shapes() -> dict[str, dict[str, list[str]]]:
    rng = random.Random(7)
    ids = [f"t{i}" for i in range(N)]
    return {
        "chain": {t: ([ids[i - 1]] if i else []) for i, t in enumerate(ids)},
        "fan-out/fan-in": {
            **{"start": []},
            **{t: ["start"] for t in ids[: N - 2]},
            **{"end": ids[: N - 2]},
        },
        "random (<=4 deps)": {
            t: [ids[j] for j in rng.sample(range(i), min(i, rng.randint(0, 4)))] for i, t in enumerate(ids)
        },
    }


def document(graph: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "tasks": [
            {
                "id": t,
                "handler": "noop",
                "dependsOn": deps,
                # Every task reads the output of each dependency: the worst case for the ancestry check.
                "params": {d: f"${{{{ tasks.{d}.output.value }}}}" for d in deps[:4]}
                | {"day": "${{ input.day }}"},
            }
            for t, deps in graph.items()
        ]
    }


def timed(fn: Callable[[], object], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def simulate(index: DagIndex) -> None:
    run = DagRun(index)
    queue = list(run.ready())
    while queue:
        task = queue.pop()
        run.start(task)
        run.set_status(task, TaskStatus.RUNNING)
        queue.extend(run.set_status(task, TaskStatus.SUCCEEDED).ready)
    assert run.is_complete()


def main() -> None:
    print(f"{N} tasks, median of 5 runs")
    print(f"{'shape':<20} {'edges':>6} {'validate ms':>12} {'digest ms':>10} {'index ms':>9} {'run ms':>7}")
    for name, graph in shapes().items():
        doc = document(graph)
        defn = validate_definition(doc, {"noop"})
        index = DagIndex.build(defn.dependencies())
        edges = sum(len(d) for d in graph.values())
        validate_ms = timed(partial(validate_definition, doc, {"noop"}))
        digest_ms = timed(partial(definition_digest, defn))
        index_ms = timed(partial(DagIndex.build, defn.dependencies()))
        run_ms = timed(partial(simulate, index))
        print(
            f"{name:<20} {edges:>6} {validate_ms:>12.1f} {digest_ms:>10.1f} {index_ms:>9.1f} {run_ms:>7.1f}"
        )
    params = {"rows": "${{ tasks.a.output.rows }}", "path": "s3://b/${{ input.day }}/${{ tasks.a.output.n }}"}
    outputs = {"a": {"rows": list(range(1000)), "n": 3}}
    per_call = timed(lambda: [resolve_params(params, {"day": "d"}, outputs) for _ in range(1000)]) / 1000
    print(f"resolve_params: {per_call * 1000:.1f} us per call")


if __name__ == "__main__":
    main()
