"""Timer triggers on NCRONTAB schedules, with ``run_on_startup`` and ``use_monitor`` as documented.

- ``use_monitor`` (default: true when the schedule recurs at most once a minute) persists the
  schedule status; a start finding that the recorded next occurrence passed while the host was down
  fires once at once with ``past_due=True``, as the host does.
- ``run_on_startup`` fires once when the host starts (Microsoft advises against it in production).
- The function receives ``azure.functions.TimerRequest`` built from the same JSON the host sends.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any

import azure.functions as func
from azure.functions.timer import TimerRequestConverter

from devhost.indexing import FunctionSpec
from devhost.invoker import Invoker
from devhost.state import HostState, ScheduleStatus
from shared.cron import CronSchedule, parse

log = logging.getLogger("devhost.timer")


def _flag(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def default_use_monitor(schedule: CronSchedule, now: datetime) -> bool:
    first = schedule.next_after(now)
    second = schedule.next_after(first) if first else None
    return first is None or second is None or (second - first).total_seconds() >= 60


def timer_request(past_due: bool, status: ScheduleStatus | None) -> func.TimerRequest:
    payload: dict[str, Any] = {"Schedule": {"AdjustForDST": True}, "IsPastDue": past_due}
    payload["ScheduleStatus"] = (
        {
            "Last": (status.last or datetime.min.replace(tzinfo=UTC)).isoformat(),
            "Next": status.next.isoformat(),
            "LastUpdated": status.last_updated.isoformat(),
        }
        if status
        else None
    )

    class _Datum:
        type = "json"
        value = json.dumps(payload)

    req: func.TimerRequest = TimerRequestConverter.decode(_Datum(), trigger_metadata={})  # type: ignore[arg-type]
    return req


class TimerTrigger:
    def __init__(
        self,
        spec: FunctionSpec,
        schedule_text: str,
        tz: tzinfo,
        invoker: Invoker,
        *,
        state: HostState,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.spec = spec
        try:
            self.schedule = parse(schedule_text, tz)
        except ValueError as exc:
            raise ValueError(f"timer function {spec.name!r}: {exc}") from exc
        self.invoker = invoker
        self.state = state
        self.now = now
        self.run_on_startup = bool(_flag(spec.trigger.get("runOnStartup")))
        explicit = _flag(spec.trigger.get("useMonitor"))
        self.use_monitor = default_use_monitor(self.schedule, now()) if explicit is None else explicit
        self.fired = 0

    async def _fire(self, past_due: bool, status: ScheduleStatus | None) -> None:
        arg = timer_request(past_due, status)
        try:
            await self.invoker.invoke(self.spec, {str(self.spec.trigger["name"]): arg})
        except Exception:
            # The host logs the failure and keeps the schedule; there is no retry for timers.
            log.exception("timer function %s failed", self.spec.name)
        self.fired += 1

    def _record(self, last: datetime | None, after: datetime) -> ScheduleStatus | None:
        nxt = self.schedule.next_after(after)
        if nxt is None or not self.use_monitor:
            return None
        status = ScheduleStatus(last, nxt, self.now())
        self.state.put_timer(self.spec.name, status)
        return status

    async def run(self, stop: asyncio.Event) -> None:
        now = self.now()
        status = self.state.get_timer(self.spec.name) if self.use_monitor else None
        if status is not None and status.next <= now:
            log.info(
                json.dumps({"evt": "timer.pastDue", "function": self.spec.name, "missed": str(status.next)})
            )
            status = self._record(status.next, now)
            await self._fire(True, status)
        elif self.run_on_startup:
            await self._fire(False, status)
        if status is None or status.next <= now:
            status = self._record(status.last if status else None, now)
        while not stop.is_set():
            now = self.now()
            nxt = self.schedule.next_after(now) if status is None else status.next
            if nxt is None:
                return
            delay = (nxt - now).total_seconds()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                    return
                except TimeoutError:
                    pass
            if self.now() < nxt:  # woke early (clock granularity): wait again
                continue
            status = self._record(nxt, nxt)
            await self._fire(False, status)
