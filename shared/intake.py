"""Blob and Service Bus submissions: plain functions the triggers call (no azure imports).

**Blob** ``incoming/{tenant}/{workflow}/{name}``: one execution per blob content. The input is
``{"blob": {container, name, size, etag, url}}``. The idempotency key is derived from the blob
name and the SHA-256 of its content: a redelivery of the same blob version (a host retry, lost
receipts, two hosts) and a re-upload of the same bytes under the same name (which gets a new ETag)
both map to the execution that already exists. The ETag is recorded in the input.

**Service Bus** ``submissions`` queue: body ``{tenant, workflow, version?, input?}``; the idempotency
key is the message id. Outcomes:

* accepted: the function returns, the host completes the message;
* **rejected** (a poison message: body not JSON or not that shape, unknown tenant / workflow /
  version, input too large, message id reused with another body): a copy goes to the
  ``submissions-rejected`` queue with ``DeadLetterReason`` and ``DeadLetterErrorDescription``
  application properties (Service Bus's own names) and the same message id, then the original is
  completed. The Python worker cannot settle a message itself (``deadletter`` needs the preview
  SDK-type bindings), and raising would only make the host abandon it until the broker
  dead-letters it as ``MaxDeliveryCountExceeded``, without the reason and after useless retries;
* **deferred** (over the tenant's limits): a copy is scheduled for when the limit says to come
  back (same idempotency key, carried in ``weft-idempotency-key``), and the original completed;
  after ``MAX_DEFERRALS`` it is rejected instead;
* anything else (a store or bus failure) raises: the host abandons the message and Service Bus
  redelivers it, and dead-letters it after the queue's max delivery count.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field, ValidationError

from shared.errors import (
    AdmissionDeniedError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    WeftError,
)
from shared.model import WeftModel
from shared.ports import Bus, OutgoingMessage, PropertyValue
from shared.records import TriggerKind
from shared.submission import SubmissionDeps, SubmitResult, submit_execution

log = logging.getLogger(__name__)

INCOMING_CONTAINER = "incoming"
SUBMISSIONS_QUEUE = "submissions"
REJECTED_QUEUE = "submissions-rejected"
#: Application property carrying the original message id on deferred copies.
IDEMPOTENCY_PROPERTY = "weft-idempotency-key"
DEFERRALS_PROPERTY = "weft-deferrals"
ORIGINAL_ID_PROPERTY = "weft-original-message-id"
MAX_DEFERRALS = 50


# ------------------------------------------------------------------------------------- blob


@dataclass(frozen=True)
class BlobInfo:
    container: str
    name: str  # inside the container: "<tenant>/<workflow>/<name>"
    size: int
    etag: str
    url: str
    sha256: str


def split_blob_path(path: str) -> tuple[str, str]:
    """``"incoming/acme/wf/x.csv"`` (the trigger's InputStream.name) -> ``("incoming", "acme/wf/x.csv")``."""
    container, _, name = path.partition("/")
    return container, name


def blob_idempotency_key(name: str, sha256: str) -> str:
    return "blob:" + hashlib.sha256(f"{name}\n{sha256}".encode()).hexdigest()


def submit_blob(deps: SubmissionDeps, blob: BlobInfo, now: datetime) -> SubmitResult:
    """Start the execution of ``<tenant>/<workflow>`` for a blob. Raises NotFoundError and the
    other submission errors: the trigger logs them, since retrying a blob for an unknown workflow
    cannot help."""
    parts = blob.name.split("/", 2)
    if len(parts) < 3 or not all(parts):
        raise NotFoundError(
            f"blob {blob.name!r} is not under <tenant>/<workflow>/", details={"blob": blob.name}
        )
    tenant, workflow, _ = parts
    info = {
        "container": blob.container,
        "name": blob.name,
        "size": blob.size,
        "etag": blob.etag,
        "url": blob.url,
    }
    try:
        return submit_execution(
            deps,
            tenant,
            workflow,
            input={"blob": info},
            version=None,
            idempotency_key=blob_idempotency_key(blob.name, blob.sha256),
            trigger=TriggerKind.BLOB,
            now=now,
        )
    except ConflictError as exc:
        # Same name and bytes under a new ETag (a re-upload): the content already has its execution.
        existing = deps.stores.executions.get_execution(str(exc.details.get("executionId", "")))
        if existing is None:
            raise
        return SubmitResult(existing, created=False, started=False)


def submit_blob_patiently(
    deps: SubmissionDeps,
    blob: BlobInfo,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    *,
    max_wait_seconds: float = 120.0,
) -> SubmitResult:
    """:func:`submit_blob`, waiting out the tenant's limits for up to ``max_wait_seconds``.

    A blob over the limits must not fail the function: the host gives a blob up (poison) after a
    few failed attempts, which would lose the submission. Past the wait it raises the last
    AdmissionDeniedError and the host's own retries take over.
    """
    waited = 0.0
    while True:
        try:
            return submit_blob(deps, blob, now())
        except AdmissionDeniedError as exc:
            if waited + exc.retry_after_seconds > max_wait_seconds:
                raise
            sleep(exc.retry_after_seconds)
            waited += exc.retry_after_seconds


# ------------------------------------------------------------------------------- Service Bus


class SubmissionMessage(WeftModel):
    tenant: str = Field(min_length=1, max_length=64)
    workflow: str = Field(min_length=1, max_length=200)
    version: int | None = Field(default=None, ge=1)
    input: Any = None


@dataclass(frozen=True)
class InboundMessage:
    message_id: str
    body: bytes
    delivery_count: int = 1
    subject: str | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    application_properties: Mapping[str, PropertyValue] = field(default_factory=dict)


@dataclass(frozen=True)
class MessageOutcome:
    action: Literal["accepted", "rejected", "deferred"]
    execution_id: str | None = None
    reason: str | None = None
    description: str | None = None


def handle_submission_message(
    deps: SubmissionDeps, bus: Bus, msg: InboundMessage, now: datetime
) -> MessageOutcome:
    """Submit the message's execution, or route the message (rejected / deferred). Raises only for
    failures worth a redelivery."""
    try:
        body = SubmissionMessage.model_validate_json(msg.body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '$'}: {e['msg']}" for e in exc.errors())
        return _reject(bus, msg, "InvalidBody", problems)
    key = str(msg.application_properties.get(IDEMPOTENCY_PROPERTY) or msg.message_id)
    try:
        res = submit_execution(
            deps,
            body.tenant,
            body.workflow,
            input=body.input,
            version=body.version,
            idempotency_key=f"sb:{key}",
            trigger=TriggerKind.SERVICEBUS,
            now=now,
        )
    except NotFoundError as exc:
        return _reject(bus, msg, "UnknownTenantOrWorkflow", exc.message)
    except PayloadTooLargeError as exc:
        return _reject(bus, msg, "PayloadTooLarge", exc.message)
    except ConflictError as exc:
        return _reject(bus, msg, "IdempotencyConflict", exc.message)
    except AdmissionDeniedError as exc:
        return _defer(bus, msg, key, exc, now)
    except WeftError as exc:
        if exc.non_retryable:
            return _reject(bus, msg, exc.type, exc.message)
        raise
    return MessageOutcome("accepted", execution_id=res.execution.id)


def _copy(
    msg: InboundMessage,
    message_id: str,
    props: dict[str, PropertyValue],
    *,
    scheduled: datetime | None = None,
) -> OutgoingMessage:
    return OutgoingMessage(
        message_id=message_id,
        body=msg.body,
        subject=msg.subject,
        content_type=msg.content_type,
        correlation_id=msg.correlation_id,
        application_properties={**msg.application_properties, **props},
        scheduled_enqueue_time=scheduled,
    )


def _reject(bus: Bus, msg: InboundMessage, reason: str, description: str) -> MessageOutcome:
    description = description[:1024]
    props: dict[str, PropertyValue] = {
        "DeadLetterReason": reason,
        "DeadLetterErrorDescription": description,
        ORIGINAL_ID_PROPERTY: msg.message_id,
    }
    # Same message id: a redelivery of the original after a crash here is dropped by duplicate detection.
    bus.publish(REJECTED_QUEUE, [_copy(msg, msg.message_id, props)])
    log.warning(
        json.dumps(
            {
                "evt": "submission.rejected",
                "messageId": msg.message_id,
                "reason": reason,
                "description": description,
            }
        )
    )
    return MessageOutcome("rejected", reason=reason, description=description)


def _defer(
    bus: Bus, msg: InboundMessage, key: str, exc: AdmissionDeniedError, now: datetime
) -> MessageOutcome:
    deferrals = int(msg.application_properties.get(DEFERRALS_PROPERTY, 0) or 0) + 1
    if deferrals > MAX_DEFERRALS:
        return _reject(
            bus,
            msg,
            "AdmissionDenied",
            f"still over the tenant's limits after {MAX_DEFERRALS} deferrals: {exc.message}",
        )
    props: dict[str, PropertyValue] = {IDEMPOTENCY_PROPERTY: key, DEFERRALS_PROPERTY: deferrals}
    when = now + timedelta(seconds=exc.retry_after_seconds)
    bus.publish(SUBMISSIONS_QUEUE, [_copy(msg, f"{key}:deferred:{deferrals}", props, scheduled=when)])
    return MessageOutcome("deferred", reason="AdmissionDenied", description=exc.message)
