"""Cron schedules of published workflows: a timer every 10 seconds runs the fenced scheduler tick."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from datetime import UTC, datetime
from functools import lru_cache

import azure.durable_functions as df
import azure.functions as func

from shared.adapters.factory import get_payload_store, get_stores
from shared.adapters.telemetry import configure_telemetry
from shared.names import TriggerName
from shared.scheduler import ScheduleCatalog, TickResult, fire_due_schedules
from shared.settings import get_settings
from shared.submission import SubmissionDeps
from shared.telemetry import SpanAttribute, SpanName, span
from triggers.blueprint import bp
from triggers.starter import ClientStarter

log = logging.getLogger(__name__)

TICK_SCHEDULE = "*/10 * * * * *"


@lru_cache(maxsize=1)
def scheduler_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@lru_cache(maxsize=1)
def catalog() -> ScheduleCatalog:
    return ScheduleCatalog()


def tick(starter: ClientStarter, now: datetime) -> TickResult:
    deps = SubmissionDeps.from_settings(get_stores(), get_payload_store(), starter, get_settings())
    with span(SpanName.SCHEDULE_TICK) as current:
        result = fire_due_schedules(deps, now, scheduler_holder(), catalog=catalog())
        current.set_attribute(str(SpanAttribute.SCHEDULE_FIRED), len(result.fired))
        current.set_attribute(str(SpanAttribute.SCHEDULE_LOST_LEASE), bool(result.lost_lease))
    return result


@bp.function_name(TriggerName.SCHEDULE_TICK)
@bp.timer_trigger(arg_name="timer", schedule=TICK_SCHEDULE, run_on_startup=False, use_monitor=False)
@bp.durable_client_input(client_name="client")
async def schedule_tick(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    configure_telemetry()
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(None, tick, ClientStarter(client, loop), datetime.now(UTC))
    if result.fired or result.skipped or result.lost_lease:
        log.info(
            "scheduler: token=%s fired=%d skipped=%d lostLease=%s",
            result.token,
            len(result.fired),
            result.skipped,
            result.lost_lease,
        )
