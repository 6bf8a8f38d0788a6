"""Submit latency of the HTTP API: p50/p95 of POST .../executions with 50 concurrent clients.

Runs devhost in this process on the real clock (function_app.app with the example settings,
Azurite, embedded SQLite stores and bus, a temporary data dir, a free port). Over HTTP it creates a
tenant with limits that do not throttle, an API key and a one-task workflow, then a load generator
in a separate process (so it does not share devhost's GIL) drives CLIENTS clients, each with its
own connection, for CLIENTS x SUBMITS_PER_CLIENT submits (after a short warm-up). Every accepted
execution is then waited for, so the figures are for submits that really ran; refusals are counted
and a few of their bodies shown. Target on this machine: p95 <= 20 ms.

Modes (methodology):
- closed loop (default): each client submits again as soon as its previous answer arrives. This
  measures capacity: by Little's law latency ~= CLIENTS / throughput, so 50 clients at p95 <= 20 ms
  would need over 2,500 submits/s from one devhost process.
- ``--think-ms T``: closed loop with exponential pauses of mean T between a client's submits.
- ``--rate R``: open loop, the load a front door sees: submits arrive at R per second (Poisson)
  whatever the answers, each taken by a free client of the CLIENTS; latency counts from the
  arrival, so one that waited for a free client is charged for the wait (no coordinated omission).
  Report the rate with the figures.

Latency is the client's: HTTP, auth, admission, the atomic write and the fast-path start, while
devhost also runs every accepted execution and the outbox relay in the same process.

Usage: PYTHONPATH=. .venv/bin/python bench/submit_latency.py [--clients 50 --submits-per-client 20]
       [--rate 25 | --think-ms 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devhost.host import DevHost, HostOptions  # noqa: E402

ADMIN = "bench-admin-key"
TENANT = "bench"
WORKFLOW = {"tasks": [{"id": "a", "handler": "noop", "params": {"result": "${{ input.n }}"}}]}


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


async def paced(rate: float, clients: int, per_client: int, one: Any) -> None:
    """Open loop: ``clients * per_client`` submits arrive at ``rate`` per second (Poisson), each
    taken by whichever of the ``clients`` clients is free; latency counts from the arrival, so a
    submit that waited for a free client is charged for the wait (no coordinated omission)."""
    arrivals: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()

    async def client() -> None:
        while (item := await arrivals.get()) is not None:
            await one(*item)

    workers = [asyncio.create_task(client()) for _ in range(clients)]
    due = time.perf_counter()
    for n in range(clients * per_client):
        due += random.expovariate(rate)
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        arrivals.put_nowait((n, due))
    for _ in workers:
        arrivals.put_nowait(None)
    await asyncio.gather(*workers)


async def load(
    base: str, key: str, clients: int, per_client: int, think_ms: float, rate: float = 0.0
) -> dict[str, Any]:
    url = f"{base}/api/v1/tenants/{TENANT}/workflows/wf/executions"
    headers = {"Authorization": f"Bearer {key}"}
    lat: list[float] = []
    ids: list[str] = []
    statuses: dict[int, int] = {}
    refusals: list[Any] = []  # a few bodies of non-202 answers, to say why
    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn, headers=headers) as session:

        async def one(n: int, arrived: float | None = None) -> None:
            t0 = time.perf_counter() if arrived is None else arrived
            async with session.post(url, json={"input": {"n": n}}) as r:
                body = await r.json(content_type=None)
            ms = (time.perf_counter() - t0) * 1000
            statuses[r.status] = statuses.get(r.status, 0) + 1
            if r.status == 202:
                lat.append(ms)
                ids.append(body["id"])
            elif len(refusals) < 5:
                refusals.append(body)

        for n in range(min(clients, 10)):  # warm-up: connections, caches, first-call imports
            await one(-n)
        lat.clear()
        ids.clear()
        statuses.clear()

        async def client(c: int) -> None:
            if think_ms:
                await asyncio.sleep(random.uniform(0, think_ms / 1000))  # staggered start
            for i in range(per_client):
                await one(c * per_client + i)
                if think_ms:
                    # Exponential pauses: clients do not march in lockstep bursts.
                    await asyncio.sleep(random.expovariate(1000 / think_ms))

        t0 = time.perf_counter()
        if rate > 0:
            await paced(rate, clients, per_client, one)
        else:
            await asyncio.gather(*(client(c) for c in range(clients)))
        elapsed = time.perf_counter() - t0
    return {"latencies": lat, "ids": ids, "statuses": statuses, "refusals": refusals, "elapsed": elapsed}


async def setup(base: str) -> str:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession() as s:
        # Far above what one devhost sustains, so nothing is refused; the limiter's cost is one
        # bucket read and write per submit whatever the limit.
        limits = {"submitsPerSecond": 1_000_000, "maxActiveExecutions": 10_000_000}
        body = {"id": TENANT, "limits": limits}
        async with s.post(f"{base}/api/v1/tenants", json=body, headers=admin) as r:
            assert r.status == 201, await r.text()
        async with s.post(f"{base}/api/v1/tenants/{TENANT}/api-keys", headers=admin) as r:
            assert r.status == 201, await r.text()
            key = str((await r.json())["key"])
        auth = {"Authorization": f"Bearer {key}"}
        async with s.put(f"{base}/api/v1/tenants/{TENANT}/workflows/wf", json=WORKFLOW, headers=auth) as r:
            assert r.status == 201, await r.text()
        async with s.post(f"{base}/api/v1/tenants/{TENANT}/workflows/wf/versions", headers=auth) as r:
            assert r.status == 201, await r.text()
    return key


async def wait_all(base: str, key: str, ids: list[str], timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    final: dict[str, int] = {}
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as s:
        for ex_id in ids:
            while True:
                async with s.get(f"{base}/api/v1/tenants/{TENANT}/executions/{ex_id}") as r:
                    status = (await r.json())["status"]
                if status in ("succeeded", "failed", "cancelled"):
                    final[status] = final.get(status, 0) + 1
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"execution {ex_id} still {status} after {timeout}s")
                await asyncio.sleep(0.05)
    return final


async def main(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="submit-bench-"))
    settings = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    settings.update(
        {
            "WEFT_TASK_HUB": "submitbench",
            "WEFT_DATA_DIR": str(data / "weft"),
            "WEFT_PAYLOAD_STORE": "fs",
            "WEFT_ADMIN_KEY": ADMIN,
        }
    )
    host = DevHost(
        HostOptions(
            app="function_app:app",
            root=ROOT,
            port=0,
            data_dir=data,
            with_azurite=True,
            max_activities=args.activity_workers,
            max_orchestrators=args.orchestrator_workers,
            settings_overrides=settings,
        )
    )
    await host.start()
    base = f"http://127.0.0.1:{host.port}"
    try:
        key = await setup(base)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--load",
            base,
            "--key",
            key,
            "--clients",
            str(args.clients),
            "--submits-per-client",
            str(args.submits_per_client),
            "--think-ms",
            str(args.think_ms),
            "--rate",
            str(args.rate),
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        res = json.loads(out)
        lat: list[float] = res["latencies"]
        final = await wait_all(base, key, res["ids"], 300.0)
        return {
            "config": {
                "clients": args.clients,
                "submitsPerClient": args.submits_per_client,
                "thinkMs": args.think_ms,
                "mode": f"open loop, {args.rate}/s offered" if args.rate > 0 else "closed loop",
                "activityWorkers": args.activity_workers,
                "orchestratorWorkers": args.orchestrator_workers,
                "clock": "real",
            },
            "statuses": res["statuses"],
            **({"refusals": res["refusals"]} if res["refusals"] else {}),
            "submitLatencyMs": {
                "n": len(lat),
                "p50": round(pct(lat, 50), 2),
                "p95": round(pct(lat, 95), 2),
                "p99": round(pct(lat, 99), 2),
                "max": round(max(lat), 2) if lat else None,
            },
            "submitsPerSecond": round(len(lat) / res["elapsed"], 1),
            "executionsFinished": final,
            "targetP95Ms": 20,
        }
    finally:
        await host.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--submits-per-client", type=int, default=20)
    p.add_argument("--activity-workers", type=int, default=None, help="devhost --max-activities")
    p.add_argument("--orchestrator-workers", type=int, default=None, help="devhost --max-orchestrators")
    p.add_argument("--think-ms", type=float, default=0.0, help="pause of each client between submits")
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="open loop: offered submits per second over all clients (0: closed loop)",
    )
    p.add_argument("--load", metavar="BASE_URL", help=argparse.SUPPRESS)
    p.add_argument("--key", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.load:
        print(
            json.dumps(asyncio.run(load(a.load, a.key, a.clients, a.submits_per_client, a.think_ms, a.rate)))
        )
    else:
        print(json.dumps(asyncio.run(main(a)), indent=2))
