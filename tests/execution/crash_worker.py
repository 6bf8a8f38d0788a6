"""Subprocess for the crash test: submits executions on devhost's engine, then runs until killed."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from devhost.weft_runtime import run_weft


def main() -> None:
    data_dir, count = Path(sys.argv[1]), int(sys.argv[2])
    definition = {
        "tasks": [
            {"id": "a", "handler": "sleep", "params": {"seconds": 0.05}},
            *(
                {"id": f"b{i}", "handler": "sleep", "params": {"seconds": 0.05}, "dependsOn": ["a"]}
                for i in range(4)
            ),
            {"id": "c", "handler": "noop", "dependsOn": [f"b{i}" for i in range(4)]},
        ],
        "maxParallelism": 8,
    }
    with run_weft(data_dir, virtual=False, activity_workers=4) as rt:
        rt.tenant("acme", max_running_tasks=6)
        ids = [rt.submit(definition) for _ in range(count)]
        print(json.dumps(ids), flush=True)
        while True:  # until SIGKILL
            time.sleep(1)


if __name__ == "__main__":
    main()
