"""SIGKILL the host in the middle of many executions; a restarted host finishes every one of them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from devhost.weft_runtime import run_weft
from shared.lifecycle import LogEvent
from shared.states import ExecutionStatus, TaskStatus

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_sigkill_mid_run_then_restart_completes_everything_once(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.execution.crash_worker", str(tmp_path), "12"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert worker.stdout is not None
        ids = json.loads(worker.stdout.readline())
        time.sleep(0.6)  # some executions are mid-flight, some tasks mid-attempt
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)

    with run_weft(tmp_path, virtual=False, activity_workers=4) as rt:
        unfinished_at_kill = sum(1 for i in ids if rt.execution(i).status is not ExecutionStatus.SUCCEEDED)
        for execution_id in ids:
            status = rt.wait(execution_id, timeout=120)
            assert status["runtimeStatus"] == "Completed", status
        for execution_id in ids:
            ex = rt.execution(execution_id)
            assert ex.status is ExecutionStatus.SUCCEEDED
            runs = rt.stores.executions.get_task_runs(execution_id)
            assert {r.task_id for r in runs} == {"a", "b0", "b1", "b2", "b3", "c"}
            assert all(r.status is TaskStatus.SUCCEEDED for r in runs)
            events = rt.stores.executions.list_events(execution_id, limit=10_000)
            succeeded = Counter(e.data["taskId"] for e in events if e.type == LogEvent.TASK_SUCCEEDED)
            # At least once delivery, but each attempt's outcome is recorded exactly once.
            assert all(n == 1 for n in succeeded.values()), succeeded
            for run in runs:
                for attempt in range(1, run.attempts + 1):
                    assert rt.stores.idempotency.get_attempt(execution_id, run.task_id, attempt) is not None
    assert unfinished_at_kill > 0, "the kill came too late to test anything"
