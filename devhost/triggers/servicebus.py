"""Service Bus triggers fed from the ``shared.ports.Bus`` port (the embedded SQLite bus locally).

As the Service Bus extension does with ``autoCompleteMessages`` (the default): receive under
peek-lock, invoke with an ``azure.functions.ServiceBusMessage``, complete on success and abandon on
an exception, so the bus dead-letters the message once its max delivery count is exceeded.
Queue triggers read ``queueName``; topic triggers read ``topicName`` + ``subscriptionName``; both may
use ``%SETTING%``. ``maxConcurrentCalls`` (host.json ``extensions.serviceBus``) sets how many
messages one function handles at a time (default 16, as the extension).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import datetime
from typing import Any

from azure.functions.servicebus import ServiceBusMessage

from devhost.indexing import FunctionSpec
from devhost.invoker import Invoker
from shared.errors import LockLostError
from shared.ports import Bus, ReceivedMessage, subscription_entity

log = logging.getLogger("devhost.servicebus")


def entity_of(spec: FunctionSpec, resolve: Callable[[str], str]) -> str:
    trig = spec.trigger
    if trig.get("queueName"):
        return resolve(str(trig["queueName"]))
    if trig.get("topicName") and trig.get("subscriptionName"):
        return subscription_entity(resolve(str(trig["topicName"])), resolve(str(trig["subscriptionName"])))
    raise ValueError(f"Service Bus function {spec.name!r} needs queueName or topicName + subscriptionName")


def to_function_message(m: ReceivedMessage) -> ServiceBusMessage:
    props: dict[str, Any] = dict(m.application_properties)
    enq: datetime | None = m.enqueued_time
    meta: dict[str, Any] = {
        "MessageId": m.message_id,
        "DeliveryCount": m.delivery_count,
        "LockToken": m.lock_token,
        "SequenceNumber": m.sequence_number,
        "EnqueuedTimeUtc": enq.isoformat() if enq else None,
        "ContentType": m.content_type,
        "CorrelationId": m.correlation_id,
        "Subject": m.subject,
        "ApplicationProperties": props,
        "UserProperties": props,
    }
    return ServiceBusMessage(
        body=m.body,
        trigger_metadata=meta,
        application_properties=props,
        content_type=m.content_type,
        correlation_id=m.correlation_id,
        dead_letter_reason=m.dead_letter_reason,
        dead_letter_error_description=m.dead_letter_description,
        delivery_count=m.delivery_count,
        enqueued_time_utc=enq,
        enqueued_sequence_number=m.sequence_number,
        locked_until=m.locked_until,
        lock_token=m.lock_token,
        message_id=m.message_id,
        sequence_number=m.sequence_number,
        subject=m.subject,
        label=m.subject,
        user_properties=props,
    )


class ServiceBusTrigger:
    def __init__(
        self,
        spec: FunctionSpec,
        entity: str,
        bus: Bus,
        invoker: Invoker,
        executor: Executor,
        *,
        max_concurrent_calls: int = 16,
        wait_seconds: float = 1.0,
    ) -> None:
        self.spec = spec
        self.entity = entity
        self.bus = bus
        self.invoker = invoker
        self.executor = executor
        self.max_concurrent_calls = max(1, max_concurrent_calls)
        self.wait_seconds = wait_seconds
        self.completed = 0
        self.abandoned = 0

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    async def handle(self, m: ReceivedMessage) -> None:
        try:
            await self.invoker.invoke(self.spec, {str(self.spec.trigger["name"]): to_function_message(m)})
        except Exception:
            log.exception(
                "Service Bus function %s failed on message %s (delivery %d); abandoning",
                self.spec.name,
                m.message_id,
                m.delivery_count,
            )
            with contextlib.suppress(LockLostError):
                await self._call(self.bus.abandon, m)
            self.abandoned += 1
            return
        try:
            await self._call(self.bus.complete, m)
            self.completed += 1
        except LockLostError:
            log.warning(
                "lock lost on message %s of %s; it will be delivered again", m.message_id, self.entity
            )

    async def run(self, stop: asyncio.Event) -> None:
        # One receive loop per function (cheap on the bus), up to max_concurrent_calls in flight.
        inflight: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            free = self.max_concurrent_calls - len(inflight)
            if free <= 0:
                await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                msgs: list[ReceivedMessage] = await self._call(
                    self.bus.receive, self.entity, max_messages=free, max_wait_seconds=self.wait_seconds
                )
            except Exception:
                log.exception("receive from %s failed; retrying", self.entity)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.wait_seconds)
                continue
            if not msgs:
                # An adapter that returns at once when empty must not make this loop spin.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=0.05)
            for m in msgs:
                task = asyncio.create_task(self.handle(m))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.gather(*inflight, return_exceptions=True)
