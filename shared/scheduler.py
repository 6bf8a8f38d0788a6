"""Cron schedules: the leader fires each due occurrence of every scheduled workflow exactly once.

Called every 10 seconds by a timer (``triggers/schedules.py``); see ``docs/schedules.md``.

* **Leader election with fencing.** A tick first takes the ``weft-scheduler`` lease (a new, greater
  fencing token) and releases it at the end; a tick that finds it held (another tick still running,
  or a paused one whose lease has not expired) does nothing. Every write the scheduler owns (the per-schedule
  cursor, "fired up to here") goes through ``LeaseStore.put_fenced`` with the lease's fencing token
  and is refused once a newer holder exists, so a paused, expired leader cannot move a cursor
  back or forward. The tick stops at the first refusal.
* **Harmless duplicates.** An occurrence's execution id and idempotency key are derived from
  (tenant, workflow, cron, time zone, occurrence time). A stale leader that submitted before it was
  refused and the new leader that submits the same occurrence write the same execution id: the
  second write collides and returns the first execution. So no occurrence ever makes two executions.
* **Catch-up.** Occurrences older than ``grace_seconds`` (default 60 s: several ticks) at the time
  of a tick were missed (the app was down, or the tenant was over its limits). ``skip`` forgets
  them; ``runOnce`` fires one execution for all of them, identified by the first missed time, with
  ``catchUp`` details in its input. Occurrences within the grace fire one by one.
* **Which workflows.** The latest published version's ``definition.schedule``, found by listing
  tenants and their workflows every tick; the schedule of a (tenant, workflow, version) is cached
  in the :class:`ScheduleCatalog` (versions are immutable), so a tick costs one list query per
  tenant page plus one read per new version.
* A schedule seen for the first time (or whose cron or time zone changed) starts from the tick's
  time: past occurrences of a new schedule are not fired.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.cron import CronSchedule, parse
from shared.definition import CatchUp, Schedule
from shared.errors import AdmissionDeniedError, StaleFencingTokenError, WeftError
from shared.ports import Stores
from shared.records import Lease, TriggerKind
from shared.submission import SubmissionDeps, submit_execution

log = logging.getLogger(__name__)

LEASE_NAME = "weft-scheduler"
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_GRACE_SECONDS = 60.0
#: Missed occurrences counted for a runOnce catch-up (beyond this the count is "at least").
MAX_MISSED_COUNTED = 1000
_ID_NAMESPACE = uuid.UUID("6f9d3c52-5a0e-4c55-9d0b-7f3a1f0c2b11")


@dataclass(frozen=True)
class ScheduledWorkflow:
    tenant_id: str
    workflow: str
    version: int
    schedule: Schedule

    @property
    def key(self) -> str:
        return f"{self.tenant_id}/{self.workflow}"


@dataclass
class ScheduleCatalog:
    """Which workflows have a schedule. Caches the schedule per immutable (tenant, workflow, version)."""

    _by_version: dict[tuple[str, str, int], Schedule | None] = field(default_factory=dict)

    def scheduled(self, stores: Stores) -> Iterator[ScheduledWorkflow]:
        for tenant_id in _all_tenants(stores):
            cont: str | None = None
            while True:
                page = stores.definitions.list_workflows(tenant_id, limit=200, continuation=cont)
                for summary in page.items:
                    if summary.latest_version is None:
                        continue
                    sched = self._schedule(stores, tenant_id, summary.workflow, summary.latest_version)
                    if sched is not None:
                        yield ScheduledWorkflow(tenant_id, summary.workflow, summary.latest_version, sched)
                cont = page.continuation
                if cont is None:
                    break

    def _schedule(self, stores: Stores, tenant_id: str, workflow: str, version: int) -> Schedule | None:
        k = (tenant_id, workflow, version)
        if k not in self._by_version:
            wv = stores.definitions.get_version(tenant_id, workflow, version)
            raw = wv.definition.get("schedule") if wv is not None else None
            self._by_version[k] = Schedule.model_validate(raw) if isinstance(raw, dict) else None
        return self._by_version[k]


def _all_tenants(stores: Stores) -> Iterator[str]:
    cont: str | None = None
    while True:
        page = stores.tenants.list_tenants(limit=200, continuation=cont)
        yield from (t.id for t in page.items)
        cont = page.continuation
        if cont is None:
            return


@dataclass
class TickResult:
    leader: bool
    token: int | None = None
    #: Execution ids submitted this tick (including harmless duplicates of earlier submits).
    fired: list[str] = field(default_factory=list)
    #: Missed occurrences dropped by ``skip``.
    skipped: int = 0
    #: True when a fenced write was refused: a newer leader exists and this tick stopped.
    lost_lease: bool = False


def occurrence_execution_id(sw: ScheduledWorkflow, occurrence: datetime) -> str:
    name = "\n".join([sw.tenant_id, sw.workflow, sw.schedule.cron, sw.schedule.timezone, _iso(occurrence)])
    return "sch-" + uuid.uuid5(_ID_NAMESPACE, name).hex


def _iso(t: datetime) -> str:
    return t.astimezone(ZoneInfo("UTC")).isoformat().replace("+00:00", "Z")


def _parse_iso(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def _cron(schedule: Schedule) -> CronSchedule:
    try:
        tz = ZoneInfo(schedule.timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {schedule.timezone!r}") from exc
    return parse(schedule.cron, tz)


def fire_due_schedules(
    deps: SubmissionDeps,
    now: datetime,
    holder: str,
    *,
    catalog: ScheduleCatalog | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
) -> TickResult:
    leases = deps.stores.leases
    lease = leases.acquire(LEASE_NAME, holder, lease_seconds, now)
    if lease is None:
        return TickResult(leader=False)
    result = TickResult(leader=True, token=lease.token)
    try:
        for sw in list((catalog or ScheduleCatalog()).scheduled(deps.stores)):
            try:
                _fire_one(deps, lease, sw, now, grace_seconds, result)
            except StaleFencingTokenError:
                log.warning("scheduler %s lost the lease (token %d); stopping this tick", holder, lease.token)
                result.lost_lease = True
                return result
            except Exception:
                # One broken schedule (or a store hiccup) must not stop the others.
                log.exception("schedule of %s failed this tick", sw.key)
    finally:
        # Leader per tick: the timer lands on any worker process, so the next tick's process must
        # not wait for this lease to expire. (A no-op when a newer holder has taken it.)
        leases.release(lease)
    return result


def _fire_one(
    deps: SubmissionDeps,
    lease: Lease,
    sw: ScheduledWorkflow,
    now: datetime,
    grace_seconds: float,
    result: TickResult,
) -> None:
    leases = deps.stores.leases
    cursor = leases.get_fenced(LEASE_NAME, sw.key)
    identity = {"cron": sw.schedule.cron, "timezone": sw.schedule.timezone}
    if cursor is None or {k: cursor.get(k) for k in identity} != identity:
        leases.put_fenced(LEASE_NAME, lease.token, sw.key, {**identity, "last": _iso(now)})
        return
    cron = _cron(sw.schedule)
    last = _parse_iso(str(cursor["last"]))
    on_time_from = now - timedelta(seconds=grace_seconds)

    def advance(to: datetime) -> None:
        leases.put_fenced(LEASE_NAME, lease.token, sw.key, {**identity, "last": _iso(to)})

    first = cron.next_after(last)
    if first is not None and first <= on_time_from:
        missed = _missed(cron, first, on_time_from)
        last_missed = missed[-1]
        if sw.schedule.catch_up is CatchUp.RUN_ONCE:
            catch_up = {
                "missed": len(missed),
                "countIsLowerBound": len(missed) >= MAX_MISSED_COUNTED,
                "from": _iso(first),
                "to": _iso(last_missed),
            }
            if not _submit(deps, lease, sw, first, now, result, catch_up=catch_up):
                return
        else:
            result.skipped += len(missed)
            log.info("schedule %s: skipped %d missed occurrence(s) from %s", sw.key, len(missed), _iso(first))
        advance(last_missed if len(missed) < MAX_MISSED_COUNTED else on_time_from)
        last = last_missed if len(missed) < MAX_MISSED_COUNTED else on_time_from
    for occurrence in cron.between(last, now):
        if not _submit(deps, lease, sw, occurrence, now, result):
            return
        advance(occurrence)


def _missed(cron: CronSchedule, first: datetime, until: datetime) -> list[datetime]:
    out = [first]
    cur = first
    while len(out) < MAX_MISSED_COUNTED:
        nxt = cron.next_after(cur)
        if nxt is None or nxt > until:
            break
        out.append(nxt)
        cur = nxt
    return out


def _submit(
    deps: SubmissionDeps,
    lease: Lease,
    sw: ScheduledWorkflow,
    occurrence: datetime,
    now: datetime,
    result: TickResult,
    *,
    catch_up: dict[str, Any] | None = None,
) -> bool:
    """Submit one occurrence; False when it must wait for a later tick (over the tenant's limits)."""
    # Cheap early exit for a leader that was replaced; the cursor write is the real guard.
    deps.stores.leases.check_fence(LEASE_NAME, lease.token)
    execution_id = occurrence_execution_id(sw, occurrence)
    schedule_input: dict[str, Any] = {
        "occurrence": _iso(occurrence),
        "cron": sw.schedule.cron,
        "timezone": sw.schedule.timezone,
    }
    if catch_up is not None:
        schedule_input["catchUp"] = catch_up
    try:
        res = submit_execution(
            deps,
            sw.tenant_id,
            sw.workflow,
            input={"schedule": schedule_input},
            version=sw.version,
            idempotency_key=f"schedule:{execution_id}",
            trigger=TriggerKind.SCHEDULE,
            now=now,
            execution_id=execution_id,
        )
    except AdmissionDeniedError as exc:
        log.warning("schedule %s: occurrence %s deferred: %s", sw.key, _iso(occurrence), exc.message)
        return False
    except WeftError as exc:
        # Not retryable by waiting (e.g. the version vanished): log and move past the occurrence.
        log.error("schedule %s: occurrence %s not fired: %s", sw.key, _iso(occurrence), exc.message)
        return True
    result.fired.append(res.execution.id)
    return True
