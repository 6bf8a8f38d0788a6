"""Cron scheduler: fencing across a split brain, exactly-once occurrences, catch-up policies."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.ports import Stores
from shared.records import TriggerKind
from shared.scheduler import LEASE_NAME, ScheduleCatalog, fire_due_schedules
from shared.submission import SubmissionDeps
from tests.triggers.support import SMALL_DAG, T0, FakeStarter, add_tenant, make_deps, make_stores, publish

EVERY_10S = "*/10 * * * * *"


def scheduled(cron: str = EVERY_10S, catch_up: str = "skip", tz: str = "UTC") -> dict[str, Any]:
    return {**SMALL_DAG, "schedule": {"cron": cron, "timezone": tz, "catchUp": catch_up}}


@pytest.fixture
def stores(tmp_path: Path) -> Stores:
    s = make_stores(tmp_path)
    add_tenant(s)
    return s


def executions(stores: Stores) -> list[Any]:
    return sorted(
        stores.executions.list_executions("acme", limit=500).items,
        key=lambda e: e.input["schedule"]["occurrence"],
    )


def occurrences(stores: Stores) -> list[str]:
    return [e.input["schedule"]["occurrence"] for e in executions(stores)]


def test_each_occurrence_fires_once_across_ticks(tmp_path: Path, stores: Stores) -> None:
    publish(stores, scheduled())
    deps = make_deps(tmp_path, stores, FakeStarter())
    start = T0 + timedelta(seconds=1)  # 10:00:01
    first = fire_due_schedules(deps, start, "a")
    assert first.leader and first.fired == []  # a new schedule starts from now
    for tick in range(1, 7):  # ticks every 10 s, slightly jittered, up to 10:01:01
        fire_due_schedules(deps, start + timedelta(seconds=10 * tick + (tick % 3)), "a")
    fire_due_schedules(deps, start + timedelta(seconds=62), "a")  # a second tick right after
    assert occurrences(stores) == [f"2026-11-29T10:00:{s:02d}Z" for s in (10, 20, 30, 40, 50)] + [
        "2026-11-29T10:01:00Z"
    ]
    assert {e.trigger for e in executions(stores)} == {TriggerKind.SCHEDULE}
    assert all(e.version == 1 for e in executions(stores))


def test_only_the_lease_holder_fires_and_each_tick_gets_a_newer_token(tmp_path: Path, stores: Stores) -> None:
    publish(stores, scheduled())
    deps = make_deps(tmp_path, stores)
    first = fire_due_schedules(deps, T0, "a")
    assert first.leader
    # A tick of "a" still running (it holds the lease): "b" does nothing.
    held = stores.leases.acquire(LEASE_NAME, "a", 30, T0 + timedelta(seconds=15))
    assert held is not None
    other = fire_due_schedules(deps, T0 + timedelta(seconds=15), "b")
    assert not other.leader and other.fired == [] and executions(stores) == []
    stores.leases.release(held)
    # Released: the next tick runs wherever the timer lands, with a newer token.
    nxt = fire_due_schedules(deps, T0 + timedelta(seconds=16), "b")
    assert nxt.leader and nxt.fired and first.token is not None and nxt.token is not None
    assert nxt.token > held.token > first.token


def test_split_brain_stale_leader_is_refused_and_no_occurrence_runs_twice(
    tmp_path: Path, stores: Stores
) -> None:
    """Leader A pauses in the middle of a tick (inside its fast start) long enough for its lease to
    expire; B takes over and fires; A resumes and tries to record its progress with its old token."""
    publish(stores, scheduled())
    setup = make_deps(tmp_path, stores)
    fire_due_schedules(setup, T0, "a")  # A is leader (token 1) and starts the cursor at 10:00:00
    b_ticks: list[Any] = []

    class PausingStarter(FakeStarter):
        def start_new(self, orchestrator: str, instance_id: str, input: dict[str, Any]) -> None:
            super().start_new(orchestrator, instance_id, input)
            if not b_ticks:  # A "pauses" here: 40 s pass, B becomes leader and fires everything due
                b_ticks.append(fire_due_schedules(b_deps, T0 + timedelta(seconds=65), "b"))

    starter = PausingStarter()
    a_deps = make_deps(tmp_path, stores, starter)
    b_deps = make_deps(tmp_path, stores, starter)
    a = fire_due_schedules(a_deps, T0 + timedelta(seconds=25), "a", lease_seconds=30)
    b = b_ticks[0]
    assert a.leader and a.lost_lease
    assert b.leader and b.token is not None and a.token is not None and b.token > a.token
    # A fired 10:00:10 before it paused; B fired 10:00:10 again (a harmless duplicate) and the rest.
    assert occurrences(stores) == [f"2026-11-29T10:00:{s:02d}Z" for s in (10, 20, 30, 40, 50)] + [
        "2026-11-29T10:01:00Z"
    ]
    assert len(starter.started) == 6
    # A's old token can write nothing; B's cursor stands.
    cursor = stores.leases.get_fenced(LEASE_NAME, "acme/wf")
    assert cursor is not None and cursor["last"] == "2026-11-29T10:01:00Z"
    # A's next tick gets a newer token and fires nothing twice.
    again = fire_due_schedules(a_deps, T0 + timedelta(seconds=66), "a")
    assert again.leader and again.fired == [] and len(executions(stores)) == 6


def test_skip_drops_occurrences_missed_while_down(tmp_path: Path, stores: Stores) -> None:
    publish(stores, scheduled("0 * * * * *", "skip"))  # every minute
    deps = make_deps(tmp_path, stores)
    fire_due_schedules(deps, T0, "a")
    res = fire_due_schedules(deps, T0 + timedelta(hours=2, seconds=5), "a")  # down for two hours
    assert res.skipped == 119
    assert occurrences(stores) == ["2026-11-29T12:00:00Z"]  # only the on-time one


def test_run_once_fires_one_execution_for_everything_missed(tmp_path: Path, stores: Stores) -> None:
    publish(stores, scheduled("0 * * * * *", "runOnce"))
    deps = make_deps(tmp_path, stores)
    fire_due_schedules(deps, T0, "a")
    fire_due_schedules(deps, T0 + timedelta(hours=2, seconds=5), "a")
    ex = executions(stores)
    assert [e.input["schedule"]["occurrence"] for e in ex] == ["2026-11-29T10:01:00Z", "2026-11-29T12:00:00Z"]
    assert ex[0].input["schedule"]["catchUp"] == {
        "missed": 119,
        "countIsLowerBound": False,
        "from": "2026-11-29T10:01:00Z",
        "to": "2026-11-29T11:59:00Z",
    }
    assert "catchUp" not in ex[1].input["schedule"]
    # Nothing fires twice on the next tick.
    fire_due_schedules(deps, T0 + timedelta(hours=2, seconds=15), "a")
    assert len(executions(stores)) == 2


def test_over_the_tenant_limit_an_occurrence_waits_for_a_later_tick(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores, max_active_executions=1)
    publish(stores, scheduled())
    deps: SubmissionDeps = make_deps(tmp_path, stores)
    fire_due_schedules(deps, T0, "a")
    fire_due_schedules(deps, T0 + timedelta(seconds=21), "a")  # 10:00:10 fires; 10:00:20 is denied
    assert occurrences(stores) == ["2026-11-29T10:00:10Z"]
    cursor = stores.leases.get_fenced(LEASE_NAME, "acme/wf")
    assert cursor is not None and cursor["last"] == "2026-11-29T10:00:10Z"


def test_a_changed_schedule_restarts_from_now_and_time_zones_apply(tmp_path: Path, stores: Stores) -> None:
    publish(stores, scheduled())
    deps = make_deps(tmp_path, stores)
    catalog = ScheduleCatalog()
    fire_due_schedules(deps, T0 - timedelta(seconds=60), "a", catalog=catalog)
    # 11:00 in Paris (UTC+1 in November) is 10:00 UTC.
    publish(stores, scheduled("0 0 11 * * *", tz="Europe/Paris"))
    fire_due_schedules(deps, T0 - timedelta(seconds=30), "a", catalog=catalog)
    res = fire_due_schedules(deps, T0 + timedelta(seconds=5), "a", catalog=catalog)
    assert occurrences(stores) == ["2026-11-29T10:00:00Z"]
    assert res.fired and executions(stores)[0].version == 2


def test_workflows_without_a_schedule_are_ignored(tmp_path: Path, stores: Stores) -> None:
    publish(stores, SMALL_DAG, workflow="plain")
    deps = make_deps(tmp_path, stores)
    fire_due_schedules(deps, T0, "a")
    assert fire_due_schedules(deps, T0 + timedelta(minutes=5), "a").fired == []
    assert stores.leases.get_fenced(LEASE_NAME, "acme/plain") is None
