"""devhost throughput: a fan-out orchestration of no-op activities on the real clock.

Runs devhost in this process (function_app.app with the example settings, Azurite, a temporary
data dir, a free port), then:
1. submit phase: CLIENTS concurrent HTTP clients (closed loop, in a separate process) POST
   /api/v1/selftest (width 1), SUBMITS_PER_CLIENT each -> submit latency (each submit also starts
   an orchestration that devhost runs meanwhile);
2. fan-out phase: INSTANCES orchestrations of WIDTH no-op activities each, started over HTTP, run to
   completion -> activities/s, orchestrator episodes/s and scheduled->started latency of activities
   (the engine's own samples: time from the work item being queued to an activity worker taking it).

Usage: PYTHONPATH=. .venv/bin/python bench/devhost_throughput.py [--instances 20 --width 100 --clients 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devhost.host import DevHost, HostOptions  # noqa: E402

KEY = "bench-function-key"


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


async def submit(session: aiohttp.ClientSession, base: str, width: int) -> tuple[str, float]:
    t0 = time.perf_counter()
    async with session.post(f"{base}/api/v1/selftest?code={KEY}", json={"width": width}) as r:
        body = await r.json(content_type=None)
        if r.status != 202:
            raise RuntimeError(f"submit failed: {r.status} {body}")
    return str(body["id"]), (time.perf_counter() - t0) * 1000


async def submit_phase(base: str, clients: int, per_client: int) -> tuple[list[float], list[str]]:
    lat: list[float] = []
    ids: list[str] = []
    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def client() -> None:
            for _ in range(per_client):
                iid, ms = await submit(session, base, 1)
                lat.append(ms)
                ids.append(iid)

        await asyncio.gather(*(client() for _ in range(clients)))
    return lat, ids


async def fanout_phase(base: str, instances: int, width: int) -> list[str]:
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(*(submit(session, base, width) for _ in range(instances)))
    return [iid for iid, _ in results]


def wait_all(engine: Any, ids: list[str], timeout: float) -> list[dict[str, Any]]:
    out = []
    for iid in ids:
        st = engine.wait_for_completion(iid, timeout)
        if st is None or st["runtimeStatus"] != "Completed":
            raise RuntimeError(f"instance {iid} did not complete: {st}")
        out.append(st)
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="devhost-bench-"))
    # What `make run` gives the app (the example settings, Azurite), in a throw-away data dir.
    settings = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    settings.update(
        {
            "WEFT_TASK_HUB": "bench",
            "WEFT_DATA_DIR": str(data / "weft"),
            "DEVHOST_FUNCTION_KEY": KEY,
            "DEVHOST_MASTER_KEY": "bench-master-key",
        }
    )
    host = DevHost(
        HostOptions(
            app="function_app:app",
            root=ROOT,
            port=0,
            data_dir=data,
            max_activities=args.activity_workers,
            max_orchestrators=args.orchestrator_workers,
            with_azurite=True,
            settings_overrides=settings,
        )
    )
    await host.start()
    base = f"http://127.0.0.1:{host.port}"
    engine: Any = host.backend
    loop = asyncio.get_running_loop()
    try:
        # The load generator runs in its own process so it does not share devhost's GIL.
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--submit-client",
            base,
            "--clients",
            str(args.clients),
            "--submits-per-client",
            str(args.submits_per_client),
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        sub = json.loads(out)
        lat, sub_ids = sub["latencies"], sub["ids"]
        await loop.run_in_executor(None, wait_all, engine, sub_ids, 120.0)

        t0 = time.perf_counter()
        ids = await fanout_phase(base, args.instances, args.width)
        await loop.run_in_executor(None, wait_all, engine, ids, 600.0)
        elapsed = time.perf_counter() - t0

        episodes = 0
        sched: list[float] = []
        for iid in ids:
            s = engine.instance_stats(iid)
            episodes += int(s["episodes"])
            sched.extend(float(x) for x in s["activityLatencyMs"])
        activities = args.instances * args.width
        return {
            "config": {
                "instances": args.instances,
                "width": args.width,
                "activityWorkers": host.backend and engine.activity_workers,
                "orchestratorWorkers": host.backend and engine.orchestrator_workers,
                "submitClients": args.clients,
            },
            "submitLatencyMs": {
                "n": len(lat),
                "p50": round(pct(lat, 50), 2),
                "p95": round(pct(lat, 95), 2),
                "max": round(max(lat), 2),
            },
            "fanout": {
                "elapsedSeconds": round(elapsed, 3),
                "activities": activities,
                "activitiesPerSecond": round(activities / elapsed, 1),
                "orchestratorEpisodes": episodes,
                "episodesPerSecond": round(episodes / elapsed, 1),
                "scheduledToStartedMs": {
                    "n": len(sched),
                    "p50": round(pct(sched, 50), 2),
                    "p95": round(pct(sched, 95), 2),
                    "mean": round(statistics.fmean(sched), 2) if sched else None,
                },
            },
        }
    finally:
        await host.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=20)
    p.add_argument("--width", type=int, default=100)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--submits-per-client", type=int, default=10)
    p.add_argument("--activity-workers", type=int, default=None)
    p.add_argument("--orchestrator-workers", type=int, default=None)
    p.add_argument("--submit-client", metavar="BASE_URL", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.submit_client:
        lat, ids = asyncio.run(submit_phase(a.submit_client, a.clients, a.submits_per_client))
        print(json.dumps({"latencies": lat, "ids": ids}))
    else:
        print(json.dumps(asyncio.run(main(a)), indent=2))
