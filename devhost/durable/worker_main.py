"""Run the durable engine alone on an app: ``python -m devhost.durable.worker_main --app mod:attr --db path``.

For crash-and-resume tests and quick experiments without the HTTP host.  ``--start NAME:COUNT``
starts COUNT instances ``<prefix>-<i>`` (input i) unless they exist (finished ones too), so a
restarted worker resumes the same set.  SIGTERM stops gracefully.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
import threading
from typing import Any

from devhost.durable.clock import Clock, RealClock, VirtualClock
from devhost.durable.engine import DurableEngine


def load_functions(spec: str) -> list[Any]:
    module_name, _, attr = spec.partition(":")
    obj = getattr(importlib.import_module(module_name), attr or "app")
    if callable(obj) and not hasattr(obj, "get_functions"):
        obj = obj()
    if hasattr(obj, "get_functions"):
        obj.functions_bindings = {}
        return list(obj.get_functions())
    return list(obj)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devhost.durable.worker_main")
    p.add_argument("--app", required=True, help="module:attribute of a DFApp (or a factory returning one)")
    p.add_argument("--db", required=True)
    p.add_argument("--start", default=None, help="ORCHESTRATOR:COUNT instances to start if absent")
    p.add_argument("--prefix", default="inst")
    p.add_argument("--virtual-clock", action="store_true")
    p.add_argument("--activity-workers", type=int, default=4)
    p.add_argument("--orchestrator-workers", type=int, default=4)
    p.add_argument("--lease-seconds", type=float, default=60.0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    clock: Clock = VirtualClock() if args.virtual_clock else RealClock()
    engine = DurableEngine(
        load_functions(args.app),
        args.db,
        clock=clock,
        activity_workers=args.activity_workers,
        orchestrator_workers=args.orchestrator_workers,
        lease_seconds=args.lease_seconds,
    )
    engine.start()
    if args.start:
        name, _, count = args.start.partition(":")
        for i in range(int(count or 1)):
            iid = f"{args.prefix}-{i}"
            if engine.get_status(iid, show_input=False) is None:
                engine.start_instance(name, iid, json.dumps(i))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    engine.stop(graceful=True, timeout=10.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
