"""Storage records: what the store ports read and write.

Every record is a :class:`~shared.model.WeftModel` (frozen, camelCase on the wire). Records that can
be updated carry an ``etag``: ``None`` means "not stored yet" (a write with ``etag=None`` is a
create and fails if the record exists); a value is the version the writer read, and the write is
refused with :class:`~shared.errors.ConcurrencyError` when the stored version has moved on. Adapters
return records with the new etag filled in.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from shared.errors import ErrorInfo
from shared.model import WeftModel
from shared.states import ExecutionStatus, TaskStatus

JsonDict = dict[str, Any]

#: The key of a claim-check envelope: ``{"$ref": "<reference>", "size": n, "sha256": "..."}``.
CLAIM_CHECK_KEY = "$ref"


class TenantLimits(WeftModel):
    max_running_tasks: int = Field(default=100, ge=1)
    max_active_executions: int = Field(default=1000, ge=1)
    submits_per_second: float = Field(default=50.0, gt=0)


class Tenant(WeftModel):
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    display_name: str
    limits: TenantLimits = Field(default_factory=TenantLimits)
    created_at: datetime
    etag: str | None = None


class SubmitBucket(WeftModel):
    """A tenant's submit-rate state: one small document, read and replaced with its etag.

    ``tat`` is the generic cell rate algorithm's theoretical arrival time: the tenant's submits
    have used up the rate until then (see ``shared.submission``)."""

    tenant_id: str
    tat: datetime
    etag: str | None = None


class ApiKeyRecord(WeftModel):
    """A tenant API key. Only the SHA-256 of the key is stored; the key itself is shown once."""

    key_id: str
    tenant_id: str
    key_hash: str = Field(min_length=64, max_length=64)
    name: str = ""
    created_at: datetime
    revoked_at: datetime | None = None


def new_api_key() -> tuple[str, str]:
    """Return ``(key_id, key)``: a public id and a 256-bit secret (``weft_<id>_<secret>``)."""
    key_id = secrets.token_hex(8)
    return key_id, f"weft_{key_id}_{secrets.token_urlsafe(32)}"


def hash_api_key(key: str) -> str:
    # A high-entropy random key needs no slow KDF: SHA-256 is not brute-forceable at 256 bits.
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class WorkflowDraft(WeftModel):
    tenant_id: str
    workflow: str
    definition: JsonDict
    updated_at: datetime
    etag: str | None = None


class WorkflowVersion(WeftModel):
    """An immutable published version; ``definition`` is the raw JSON of shared.definition's model."""

    tenant_id: str
    workflow: str
    version: int = Field(ge=1)
    digest: str
    definition: JsonDict
    published_at: datetime


class WorkflowSummary(WeftModel):
    """One row of "list workflows": a workflow with a draft, a published version, or both."""

    tenant_id: str
    workflow: str
    latest_version: int | None = None
    latest_digest: str | None = None
    has_draft: bool = False
    updated_at: datetime


class TriggerKind(StrEnum):
    HTTP = "http"
    SCHEDULE = "schedule"
    BLOB = "blob"
    SERVICEBUS = "servicebus"


class Execution(WeftModel):
    id: str
    tenant_id: str
    workflow: str
    version: int
    status: ExecutionStatus = ExecutionStatus.QUEUED
    trigger: TriggerKind = TriggerKind.HTTP
    #: Inline JSON, or a claim-check envelope ``{"$ref": ...}`` (see shared.claimcheck).
    input: Any = None
    output: Any = None
    error: ErrorInfo | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    idempotency_key: str | None = None
    rerun_of: str | None = None
    etag: str | None = None


class TaskRun(WeftModel):
    execution_id: str
    task_id: str
    status: TaskStatus = TaskStatus.PENDING
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    output: Any = None
    error: ErrorInfo | None = None
    etag: str | None = None


class NewEvent(WeftModel):
    """An event to append; the store assigns its ``seq``."""

    type: str
    at: datetime
    data: JsonDict = Field(default_factory=dict)


class ExecutionEvent(WeftModel):
    """One entry of an execution's append-only log; ``seq`` is 1, 2, 3... per execution."""

    execution_id: str
    seq: int
    type: str
    at: datetime
    data: JsonDict = Field(default_factory=dict)


class OutboxKind(StrEnum):
    #: Handed to the starter callback (the Durable client), not to the bus.
    START_EXECUTION = "startExecution"
    #: Published to ``destination`` on the bus.
    MESSAGE = "message"
    #: An execution event published to ``destination`` (e.g. a notifications topic).
    EVENT = "event"


class OutboxRecord(WeftModel):
    """A message that must leave the store exactly when the write that created it commits.

    The relay publishes it with ``message_id = id``, so a re-send after a crash is dropped by the
    bus's duplicate detection. ``seq`` orders the records of one execution (assigned by the store
    from the same per-execution counter as events). ``claimedBy``/``claimedUntil`` are the relay's
    claim lease; ``dispatchedAt`` is set once published.
    """

    id: str
    tenant_id: str
    execution_id: str
    kind: OutboxKind = OutboxKind.MESSAGE
    destination: str | None = None
    payload: Any = None
    subject: str | None = None
    application_properties: dict[str, str | int | float | bool] = Field(default_factory=dict)
    scheduled_enqueue_time: datetime | None = None
    created_at: datetime
    seq: int = 0
    dispatched_at: datetime | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None


class DeadLetterStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


class DeadLetterResolution(StrEnum):
    RETRY = "retry"
    SKIP = "skip"
    CANCEL = "cancel"


class DeadLetter(WeftModel):
    id: str
    tenant_id: str
    execution_id: str
    workflow: str
    task_id: str
    attempts: int
    error: ErrorInfo
    status: DeadLetterStatus = DeadLetterStatus.OPEN
    created_at: datetime
    resolved_at: datetime | None = None
    resolution: DeadLetterResolution | None = None
    resolved_by: str | None = None
    etag: str | None = None


class SubmissionRecord(WeftModel):
    """An idempotency key of a submission: the same key with the same request returns the same run."""

    tenant_id: str
    key: str
    request_hash: str
    execution_id: str
    created_at: datetime


class AttemptRecord(WeftModel):
    """The recorded outcome of one task attempt (``TaskOutcome`` JSON); recorded once."""

    execution_id: str
    task_id: str
    attempt: int
    outcome: JsonDict
    recorded_at: datetime


class Lease(WeftModel):
    """A named lease. ``token`` is the fencing token: it strictly increases with every new holder."""

    name: str
    holder: str
    token: int
    expires_at: datetime
