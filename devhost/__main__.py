"""``python -m devhost``: run the function app locally (what ``make run`` starts)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from devhost.host import DevHost, HostError, HostOptions


def parse_args(argv: list[str] | None = None) -> HostOptions:
    p = argparse.ArgumentParser(prog="python -m devhost", description=__doc__)
    p.add_argument("--app", default="function_app:app", help="module:attribute of the FunctionApp")
    p.add_argument("--root", type=Path, default=Path.cwd(), help="app root (host.json, local.settings.json)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7071, help="0 picks a free port")
    p.add_argument("--data-dir", type=Path, default=None, help="SQLite state (default .weft/devhost)")
    p.add_argument("--virtual-clock", action="store_true", help="durable timers fire at once, in order")
    p.add_argument(
        "--max-activities", type=int, default=None, help="overrides maxConcurrentActivityFunctions"
    )
    p.add_argument(
        "--max-orchestrators", type=int, default=None, help="overrides maxConcurrentOrchestratorFunctions"
    )
    p.add_argument("--with-azurite", action="store_true", help="start Azurite unless one already listens")
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args(argv)
    for knob in ("max_activities", "max_orchestrators"):
        v = getattr(a, knob)
        if v is not None and v < 1:
            p.error(f"--{knob.replace('_', '-')} must be >= 1")
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if logging.getLogger().level > logging.DEBUG:
        # The Azure SDKs log every HTTP request at INFO; blob polling would flood the console.
        logging.getLogger("azure").setLevel(logging.WARNING)
    return HostOptions(
        app=a.app,
        root=a.root,
        host=a.host,
        port=a.port,
        data_dir=a.data_dir,
        virtual_clock=a.virtual_clock,
        max_activities=a.max_activities,
        max_orchestrators=a.max_orchestrators,
        with_azurite=a.with_azurite,
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    root = str(options.root.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        asyncio.run(DevHost(options).serve_forever())
    except HostError as exc:
        print(f"devhost: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
