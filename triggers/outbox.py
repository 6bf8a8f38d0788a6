"""Outbox relay timer: every 5 seconds, publish committed outbox records and start queued executions."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from datetime import UTC, datetime, timedelta
from functools import lru_cache

import azure.durable_functions as df
import azure.functions as func

from shared.adapters.factory import get_bus, get_execution_store, get_stores
from shared.adapters.telemetry import configure_telemetry
from shared.names import TriggerName
from shared.outbox import RelayStats, relay_once
from shared.submission import relay_starter
from shared.telemetry import SpanAttribute, SpanName, span
from triggers.blueprint import bp
from triggers.starter import ClientStarter

log = logging.getLogger(__name__)

RELAY_SCHEDULE = "*/5 * * * * *"
BATCH = 100
#: Batches per tick at most, so one tick cannot run into the next one.
MAX_BATCHES = 20
PURGE_AFTER = timedelta(days=1)


@lru_cache(maxsize=1)
def relay_owner() -> str:
    """Stable for the life of this worker process: claims of a crashed process expire."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def drain(starter: ClientStarter, now: datetime) -> RelayStats:
    stores = get_stores()
    total = RelayStats()
    start = relay_starter(stores, starter)
    with span(SpanName.OUTBOX_RELAY) as current:
        for _ in range(MAX_BATCHES):
            stats = relay_once(
                stores.executions, get_bus(), now, owner=relay_owner(), starter=start, limit=BATCH
            )
            for name in ("claimed", "published", "started", "failed", "deferred"):
                setattr(total, name, getattr(total, name) + getattr(stats, name))
            if stats.claimed < BATCH or stats.failed:
                break
        get_execution_store().purge_dispatched(now - PURGE_AFTER)
        for attribute, value in (
            (SpanAttribute.RELAY_CLAIMED, total.claimed),
            (SpanAttribute.RELAY_PUBLISHED, total.published),
            (SpanAttribute.RELAY_STARTED, total.started),
            (SpanAttribute.RELAY_FAILED, total.failed),
            (SpanAttribute.RELAY_DEFERRED, total.deferred),
        ):
            current.set_attribute(str(attribute), value)
    return total


@bp.function_name(TriggerName.OUTBOX_RELAY)
@bp.timer_trigger(arg_name="timer", schedule=RELAY_SCHEDULE, run_on_startup=False, use_monitor=False)
@bp.durable_client_input(client_name="client")
async def outbox_relay(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    configure_telemetry()
    loop = asyncio.get_running_loop()
    starter = ClientStarter(client, loop)
    stats = await loop.run_in_executor(None, drain, starter, datetime.now(UTC))
    if stats.claimed:
        log.info(
            "outbox relay: claimed=%d published=%d started=%d failed=%d deferred=%d",
            stats.claimed,
            stats.published,
            stats.started,
            stats.failed,
            stats.deferred,
        )
