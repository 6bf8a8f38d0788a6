"""Crash and resume: SIGKILL the engine mid-run, restart it, and every instance completes correctly."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from devhost.durable.store import Store

N = 30
ROOT = Path(__file__).resolve().parents[2]


def spawn(db: Path, start: bool) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "devhost.durable.worker_main",
        "--app",
        "tests.devhost.support.crash_app:app",
        "--db",
        str(db),
        "--prefix",
        "crash",
    ]
    if start:
        cmd += ["--start", f"crash_workflow:{N}"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(f"worker did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc


def statuses(db: Path) -> dict[str, tuple[str, str | None]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute(
            "SELECT instance_id, status, output FROM instances WHERE instance_id LIKE 'crash-%' "
            "AND instance_id NOT LIKE '%:%' AND parent_instance_id IS NULL"
        ).fetchall()
    finally:
        conn.close()
    return {r[0]: (r[1], r[2]) for r in rows}


def wait_until(pred: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(pred) and pred():
            return True
        time.sleep(0.02)
    return False


def test_sigkill_mid_run_then_restart_completes_every_instance(tmp_path: Path) -> None:
    db = tmp_path / "durable.sqlite3"
    first = spawn(db, start=True)
    try:
        # Kill once some, but not all, instances are done.
        assert wait_until(lambda: sum(s == "Completed" for s, _ in statuses(db).values()) >= 3, 60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    at_kill = statuses(db)
    assert len(at_kill) == N
    unfinished = [i for i, (s, _) in at_kill.items() if s != "Completed"]
    assert unfinished, "the kill came too late to test anything"

    second = spawn(db, start=False)
    try:
        assert wait_until(lambda: all(s == "Completed" for s, _ in statuses(db).values()), 90), statuses(db)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)
    final = statuses(db)
    for i in range(N):
        status, out = final[f"crash-{i}"]
        assert status == "Completed"
        assert json.loads(out or "null") == [i, 40, 4 * i]
    assert second.returncode == 0


def test_expired_or_orphaned_claims_are_adopted(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    now = time.time()
    rows = [
        ("elsewhere:1:a", now + 60),  # another machine, lease still valid: left alone
        ("elsewhere:1:b", now - 1),  # another machine, lease expired: adopted
        (f"{os.uname().nodename}:999999999:c", now + 60),  # this machine, process gone: adopted
    ]
    with store.tx() as cur:
        for owner, until in rows:
            cur.execute(
                "INSERT INTO activities(instance_id, execution_id, task_id, name, input, scheduled_at, "
                "lease_owner, lease_until) VALUES('i','e',0,'a',NULL,0,?,?)",
                (owner, until),
            )
    adopted = store.adopt_orphans("me:1:z", now, now + 60)
    assert adopted["activities"] == [2, 3]
    owners = [r[0] for r in store.query("SELECT lease_owner FROM activities ORDER BY id")]
    assert owners == ["elsewhere:1:a", "me:1:z", "me:1:z"]
    store.close()
