"""Lifecycle events: what Weft tells the world about executions, through the outbox.

Each event is written to the execution's event log and, in the same atomic write, as an outbox
record for the ``workflow-events`` topic. The message body is a versioned envelope (see
``docs/events.md``)::

    {"specVersion": "1.0", "id": "...", "type": "weft.execution.succeeded", "time": "...",
     "tenantId": "...", "executionId": "...", "workflow": "...", "version": 3, "data": {...}}

Outbox record ids are derived from the execution and the event, so a redelivered activity that
writes the same event again collides with the first write instead of duplicating it, and the bus's
duplicate detection drops a relay's re-send.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.records import Execution, NewEvent, OutboxKind, OutboxRecord

WORKFLOW_EVENTS_TOPIC = "workflow-events"
EVENT_SPEC_VERSION = "1.0"


class LifecycleEvent(StrEnum):
    EXECUTION_ACCEPTED = "weft.execution.accepted"
    EXECUTION_STARTED = "weft.execution.started"
    EXECUTION_SUCCEEDED = "weft.execution.succeeded"
    EXECUTION_FAILED = "weft.execution.failed"
    EXECUTION_CANCELLED = "weft.execution.cancelled"
    TASK_DEAD_LETTERED = "weft.task.deadLettered"


class LogEvent(StrEnum):
    """Execution-log-only event types (not published)."""

    TASK_STARTED = "task.started"
    TASK_SUCCEEDED = "task.succeeded"
    TASK_FAILED = "task.failed"
    TASK_RETRYING = "task.retrying"
    TASK_TIMED_OUT = "task.timedOut"
    TASK_SKIPPED = "task.skipped"
    TASK_CANCELLED = "task.cancelled"
    TASK_RETRIED_BY_OPERATOR = "task.retriedByOperator"


def lifecycle(
    execution: Execution,
    event: LifecycleEvent,
    at: datetime,
    data: dict[str, Any] | None = None,
    *,
    discriminator: str = "",
) -> tuple[NewEvent, OutboxRecord]:
    """The log entry and the outbox record of one lifecycle event, ready for one ExecutionWrite."""
    record_id = f"{execution.id}:{event.value}{':' + discriminator if discriminator else ''}"
    body = {
        "specVersion": EVENT_SPEC_VERSION,
        "id": record_id,
        "type": event.value,
        "time": at.isoformat(),
        "tenantId": execution.tenant_id,
        "executionId": execution.id,
        "workflow": execution.workflow,
        "version": execution.version,
        "data": data or {},
    }
    outbox = OutboxRecord(
        id=record_id,
        tenant_id=execution.tenant_id,
        execution_id=execution.id,
        kind=OutboxKind.EVENT,
        destination=WORKFLOW_EVENTS_TOPIC,
        payload=body,
        subject=event.value,
        application_properties={
            "tenantId": execution.tenant_id,
            "workflow": execution.workflow,
            "type": event.value,
        },
        created_at=at,
    )
    return NewEvent(type=event.value, at=at, data=data or {}), outbox
