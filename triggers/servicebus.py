"""Service Bus trigger on the ``submissions`` queue (see shared/intake.py for poison handling)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import azure.durable_functions as df
import azure.functions as func

from shared.adapters.factory import get_bus, get_payload_store, get_stores
from shared.adapters.telemetry import configure_telemetry
from shared.intake import SUBMISSIONS_QUEUE, InboundMessage, MessageOutcome, handle_submission_message
from shared.names import TriggerName
from shared.ports import PropertyValue
from shared.settings import get_settings
from shared.submission import SubmissionDeps
from triggers.blueprint import bp
from triggers.starter import ClientStarter

log = logging.getLogger(__name__)


def inbound(msg: func.ServiceBusMessage) -> InboundMessage:
    props: dict[str, PropertyValue] = {
        str(k): v
        for k, v in (msg.application_properties or {}).items()
        if isinstance(v, str | int | float | bool)
    }
    return InboundMessage(
        message_id=msg.message_id or "",
        body=msg.get_body(),
        delivery_count=msg.delivery_count or 1,
        subject=msg.subject,
        content_type=msg.content_type,
        correlation_id=msg.correlation_id,
        application_properties=props,
    )


def handle(starter: ClientStarter, msg: InboundMessage) -> MessageOutcome:
    deps = SubmissionDeps.from_settings(get_stores(), get_payload_store(), starter, get_settings())
    return handle_submission_message(deps, get_bus(), msg, datetime.now(UTC))


@bp.function_name(TriggerName.SERVICEBUS_SUBMIT)
@bp.service_bus_queue_trigger(arg_name="msg", queue_name=SUBMISSIONS_QUEUE, connection="ServiceBusConnection")
@bp.durable_client_input(client_name="client")
async def servicebus_submit(msg: func.ServiceBusMessage, client: df.DurableOrchestrationClient) -> None:
    configure_telemetry()
    loop = asyncio.get_running_loop()
    # Raising (store or bus failure) makes the host abandon the message: Service Bus redelivers it.
    outcome = await loop.run_in_executor(None, handle, ClientStarter(client, loop), inbound(msg))
    log.info(
        "submission message %s: %s %s", msg.message_id, outcome.action, outcome.execution_id or outcome.reason
    )
