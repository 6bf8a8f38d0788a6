"""Latency of the submission path itself (``shared.submission.submit_execution``) on SQLite.

No HTTP and no Durable: the admission reads, the idempotency record, the one atomic write and a
no-op fast start. What the HTTP submit (bench/submit_latency.py) adds on top is the host and the
Durable client call. Tenant limits are raised so nothing is denied.

    PYTHONPATH=. .venv/bin/python bench/submission_path.py [--submits 2000] [--threads 1,8,50]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.adapters.payload_store import FileSystemPayloadStore
from shared.adapters.sqlite_store import SqliteStore
from shared.definition import WorkflowDefinition
from shared.ports import Stores
from shared.records import Tenant, TenantLimits, TriggerKind
from shared.submission import SubmissionDeps, submit_execution
from shared.versioning import definition_digest

DAG: dict[str, Any] = {
    "tasks": [{"id": f"t{i}", "handler": "noop", "dependsOn": [f"t{i - 1}"] if i else []} for i in range(10)]
}


class NoopStarter:
    def start_new(self, orchestrator: str, instance_id: str, input: dict[str, Any]) -> None:
        return None


def run(submits: int, threads: int, keyed: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        s = SqliteStore(Path(tmp) / "weft.sqlite3")
        stores = Stores(definitions=s, executions=s, idempotency=s, leases=s, tenants=s)
        now = datetime.now(UTC)
        stores.tenants.create_tenant(
            Tenant(
                id="acme",
                display_name="acme",
                limits=TenantLimits(max_active_executions=10**9, submits_per_second=10**9),
                created_at=now,
            )
        )
        stores.definitions.publish(
            "acme", "wf", definition_digest(WorkflowDefinition.model_validate(DAG)), DAG, now
        )
        deps = SubmissionDeps(
            stores=stores, payloads=FileSystemPayloadStore(Path(tmp) / "p"), starter=NoopStarter()
        )

        def one(i: int) -> float:
            t0 = time.perf_counter()
            submit_execution(
                deps,
                "acme",
                "wf",
                input={"i": i, "date": "2026-11-29"},
                version=None,
                idempotency_key=f"k{i}" if keyed else None,
                trigger=TriggerKind.HTTP,
                now=datetime.now(UTC),
            )
            return (time.perf_counter() - t0) * 1000

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            lat = sorted(pool.map(one, range(submits)))
        wall = time.perf_counter() - start
        q = statistics.quantiles(lat, n=100)
        return {"p50": q[49], "p95": q[94], "p99": q[98], "per_s": submits / wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submits", type=int, default=2000)
    ap.add_argument("--threads", default="1,8,50")
    args = ap.parse_args()
    print(f"{'threads':>7} {'key':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'submits/s':>10}")
    for n in (int(x) for x in args.threads.split(",")):
        for keyed in (False, True):
            r = run(args.submits, n, keyed)
            print(
                f"{n:>7} {'yes' if keyed else 'no':>5} {r['p50']:8.2f} {r['p95']:8.2f} "
                f"{r['p99']:8.2f} {r['per_s']:10.0f}"
            )


if __name__ == "__main__":
    main()
