"""Ports: what the core needs from persistence and messaging, as typing Protocols.

Adapters live in ``shared/adapters/`` (SQLite + embedded bus by default; Cosmos DB, Service Bus and
Blob in Azure) and are chosen by ``shared.adapters.factory`` from ``WEFT_STORE``/``WEFT_BUS``.
``tests/contract/`` runs one suite over every adapter: the docstrings here are the contract.

Conventions every adapter follows:

* Optimistic concurrency: a record with ``etag=None`` is created (``ConflictError`` if it already
  exists, for executions/tenants; ``ConcurrencyError`` for task runs, drafts and dead letters, so a
  racing creator retries); a record with an etag replaces the stored one only if the etags match,
  else ``ConcurrencyError``. Returned records carry the new etag.
* Paging: ``Page.continuation`` is an opaque string; pass it back to get the next page; ``None``
  means there is no more. Tokens from one backend mean nothing to another.
* Time comes in as arguments (``now``) wherever the store's decision depends on it (leases, outbox
  claims, message locks via the bus's clock), so tests control it.
* Missing things: ``get_*`` returns ``None``; operations on a missing record raise ``NotFoundError``.

Backend builders the factory imports lazily (so a missing SDK never breaks an import):
``shared.adapters.cosmos.build_stores(settings) -> Stores`` and
``shared.adapters.servicebus_bus.build_bus(settings) -> Bus``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from shared.records import (
    ApiKeyRecord,
    AttemptRecord,
    DeadLetter,
    DeadLetterResolution,
    DeadLetterStatus,
    Execution,
    ExecutionEvent,
    Lease,
    NewEvent,
    OutboxRecord,
    SubmissionRecord,
    TaskRun,
    Tenant,
    WorkflowDraft,
    WorkflowSummary,
    WorkflowVersion,
)
from shared.states import ExecutionStatus

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    continuation: str | None = None


#: Failure injection for the contract suite: adapters call the hook with a step name
#: (e.g. ``"execution"``, ``"taskRun:a"``, ``"event"``, ``"outbox:<id>"``) while they build an
#: atomic write; a hook that raises must leave nothing of that write behind.
FaultHook = Callable[[str], None]


# --------------------------------------------------------------------------------------------
# Definitions


class DefinitionStore(Protocol):
    def save_draft(self, draft: WorkflowDraft) -> WorkflowDraft:
        """Create (etag None) or replace (etag = the one read) the draft of a workflow."""
        ...

    def get_draft(self, tenant_id: str, workflow: str) -> WorkflowDraft | None: ...

    def publish(
        self, tenant_id: str, workflow: str, digest: str, definition: dict[str, Any], now: datetime
    ) -> tuple[WorkflowVersion, bool]:
        """Publish an immutable version (1, 2, 3, ...). If ``digest`` equals the latest version's,
        return that version and ``False``; otherwise the new version and ``True``. Concurrent
        publishers never produce two versions with the same number."""
        ...

    def get_version(self, tenant_id: str, workflow: str, version: int) -> WorkflowVersion | None: ...

    def latest_version(self, tenant_id: str, workflow: str) -> WorkflowVersion | None: ...

    def list_versions(
        self, tenant_id: str, workflow: str, *, limit: int = 50, continuation: str | None = None
    ) -> Page[WorkflowVersion]:
        """Newest version first."""
        ...

    def list_workflows(
        self, tenant_id: str, *, limit: int = 50, continuation: str | None = None
    ) -> Page[WorkflowSummary]:
        """Workflows of a tenant that have a draft or a version, ordered by name."""
        ...


# --------------------------------------------------------------------------------------------
# Executions


#: The most items one :class:`ExecutionWrite` may hold (a Cosmos transactional batch holds 100
#: operations; the sequence counter, when events or outbox records are appended, is one of them).
#: Every backend refuses a bigger write with ``ValueError``, so nothing works only on SQLite.
MAX_WRITE_ITEMS = 100


@dataclass(frozen=True)
class ExecutionWrite:
    """Everything one state change writes, applied all-or-nothing by :meth:`ExecutionStore.commit`.

    All items belong to ``execution_id`` (one Cosmos logical partition, so this is one
    transactional batch). Etag rules per item as in the module docstring; ``events`` get the next
    ``seq`` numbers of the execution in order, and so do ``outbox`` records (same counter), so
    the relay can publish an execution's records in the order they were written.
    """

    execution_id: str
    execution: Execution | None = None
    task_runs: Sequence[TaskRun] = ()
    events: Sequence[NewEvent] = ()
    outbox: Sequence[OutboxRecord] = ()
    dead_letters: Sequence[DeadLetter] = ()

    def item_count(self) -> int:
        """Items as counted against :data:`MAX_WRITE_ITEMS` (including the sequence counter)."""
        counter = 1 if self.events or self.outbox else 0
        return (
            (1 if self.execution is not None else 0)
            + len(self.task_runs)
            + len(self.events)
            + len(self.outbox)
            + len(self.dead_letters)
            + counter
        )


@dataclass(frozen=True)
class CommitResult:
    """The records as stored (new etags, assigned sequence numbers)."""

    execution: Execution | None = None
    task_runs: dict[str, TaskRun] = field(default_factory=dict)
    events: list[ExecutionEvent] = field(default_factory=list)
    outbox: list[OutboxRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)


class ExecutionStore(Protocol):
    def commit(self, write: ExecutionWrite) -> CommitResult:
        """Apply ``write`` atomically: on any failure (etag mismatch -> ``ConcurrencyError``,
        existing execution created again -> ``ConflictError``, an injected fault, a crash) nothing
        of it is stored. Every item must carry ``write.execution_id``, and the write may hold at
        most :data:`MAX_WRITE_ITEMS` items (else ``ValueError``, before anything is written)."""
        ...

    def get_execution(self, execution_id: str) -> Execution | None: ...

    def list_executions(
        self,
        tenant_id: str,
        *,
        workflow: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        continuation: str | None = None,
    ) -> Page[Execution]:
        """A tenant's executions, newest ``createdAt`` first (ties by id, descending)."""
        ...

    def count_active_executions(self, tenant_id: str) -> int:
        """Executions of the tenant that are not in a terminal status (admission control)."""
        ...

    def get_task_runs(self, execution_id: str) -> list[TaskRun]:
        """Ordered by task id."""
        ...

    def get_task_run(self, execution_id: str, task_id: str) -> TaskRun | None: ...

    def list_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[ExecutionEvent]:
        """Events with ``seq > after_seq`` in ``seq`` order."""
        ...

    # Outbox -------------------------------------------------------------------------------

    def claim_outbox(
        self, owner: str, now: datetime, *, lease_seconds: float = 30.0, limit: int = 100
    ) -> list[OutboxRecord]:
        """Claim up to ``limit`` undispatched records whose claim is free or expired, for
        ``lease_seconds``. A record is only claimed when every earlier undispatched record of
        its execution is claimed by this owner (in this call or before), so per-execution order
        holds. Returned ordered by (executionId, seq). Two owners never hold the same record."""
        ...

    def release_outbox(self, records: Sequence[OutboxRecord], owner: str) -> None:
        """Give back claims (e.g. after a publish failure) so they can be claimed at once."""
        ...

    def mark_dispatched(self, records: Sequence[OutboxRecord], now: datetime) -> None:
        """Mark records published. Idempotent. Dispatched records are purged later (TTL)."""
        ...

    def get_outbox_record(self, execution_id: str, record_id: str) -> OutboxRecord | None: ...

    def purge_dispatched(self, before: datetime) -> int:
        """Delete records dispatched before ``before``; returns how many (0 where TTL does it)."""
        ...

    # Dead letters -------------------------------------------------------------------------

    def get_dead_letter(self, tenant_id: str, dead_letter_id: str) -> DeadLetter | None: ...

    def list_dead_letters(
        self,
        tenant_id: str,
        *,
        status: DeadLetterStatus | None = None,
        limit: int = 50,
        continuation: str | None = None,
    ) -> Page[DeadLetter]:
        """Newest ``createdAt`` first (ties by id, descending)."""
        ...

    def resolve_dead_letter(
        self,
        tenant_id: str,
        dead_letter_id: str,
        *,
        resolution: DeadLetterResolution,
        if_match: str,
        now: datetime,
        resolved_by: str | None = None,
    ) -> DeadLetter:
        """Mark resolved. ``NotFoundError`` if missing, ``ConcurrencyError`` on etag mismatch,
        ``ConflictError`` if already resolved. (To resolve together with a task-state change and
        an outbox record, put the resolved record in an :class:`ExecutionWrite` instead.)"""
        ...


# --------------------------------------------------------------------------------------------
# Idempotency


class IdempotencyStore(Protocol):
    def put_submission(self, record: SubmissionRecord) -> tuple[SubmissionRecord, bool]:
        """Put-if-absent on (tenantId, key): returns ``(stored, created)``; when the key exists the
        stored record is returned unchanged (the caller compares ``request_hash``)."""
        ...

    def get_submission(self, tenant_id: str, key: str) -> SubmissionRecord | None: ...

    def record_attempt(self, record: AttemptRecord) -> tuple[AttemptRecord, bool]:
        """Record the outcome of (executionId, taskId, attempt) once: a second call returns the
        first outcome and ``False``."""
        ...

    def get_attempt(self, execution_id: str, task_id: str, attempt: int) -> AttemptRecord | None: ...


# --------------------------------------------------------------------------------------------
# Leases and fencing


class LeaseStore(Protocol):
    def acquire(self, name: str, holder: str, ttl_seconds: float, now: datetime) -> Lease | None:
        """Take the lease if it is free or expired (new, strictly greater token), or extend it if
        ``holder`` already holds it (same token). ``None`` while someone else holds it. Tokens
        never repeat, across holders, releases and restarts."""
        ...

    def renew(self, lease: Lease, ttl_seconds: float, now: datetime) -> Lease:
        """Extend a held lease; ``StaleFencingTokenError`` if another holder took it since."""
        ...

    def release(self, lease: Lease) -> None:
        """Let go (no error if already lost). The token counter is kept."""
        ...

    def get(self, name: str) -> Lease | None: ...

    def check_fence(self, name: str, token: int) -> None:
        """``StaleFencingTokenError`` if ``token`` is older than the lease's current token."""
        ...

    def put_fenced(self, name: str, token: int, key: str, value: dict[str, Any]) -> None:
        """Write state owned by the lease holder (e.g. a schedule's next fire time), refused with
        ``StaleFencingTokenError`` when ``token`` is older than the current one; the check and the
        write are one atomic step (same partition as the lease)."""
        ...

    def get_fenced(self, name: str, key: str) -> dict[str, Any] | None: ...


# --------------------------------------------------------------------------------------------
# Tenants


class TenantStore(Protocol):
    def create_tenant(self, tenant: Tenant) -> Tenant:
        """``ConflictError`` if the id exists."""
        ...

    def get_tenant(self, tenant_id: str) -> Tenant | None: ...

    def update_tenant(self, tenant: Tenant) -> Tenant:
        """Replace if ``tenant.etag`` matches (``ConcurrencyError``); ``NotFoundError`` if missing."""
        ...

    def list_tenants(self, *, limit: int = 50, continuation: str | None = None) -> Page[Tenant]:
        """Ordered by id."""
        ...

    def add_api_key(self, record: ApiKeyRecord) -> ApiKeyRecord:
        """``NotFoundError`` for an unknown tenant; ``ConflictError`` for a duplicate hash or id."""
        ...

    def resolve_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        """The key record for a hash (revoked ones included: the caller checks ``revoked_at``)."""
        ...

    def update_submit_bucket(
        self, tenant_id: str, change: Callable[[datetime | None], datetime | None]
    ) -> bool:
        """Atomically move the tenant's submit-rate state (:class:`SubmitBucket` ``tat``; ``None``
        before the first submit) to ``change(tat)``; ``change`` returning ``None`` writes nothing.
        True when written. ``change`` is pure and may be called again after a lost race; a store
        that keeps losing raises ``ConcurrencyError``."""
        ...

    def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]: ...

    def revoke_api_key(self, tenant_id: str, key_id: str, now: datetime) -> ApiKeyRecord: ...


@dataclass(frozen=True)
class Stores:
    """One backend's store adapters (one object may implement several ports)."""

    definitions: DefinitionStore
    executions: ExecutionStore
    idempotency: IdempotencyStore
    leases: LeaseStore
    tenants: TenantStore


# --------------------------------------------------------------------------------------------
# Bus

PropertyValue = str | int | float | bool

#: Address of an entity's dead-letter subqueue, as Service Bus spells it.
DEAD_LETTER_SUFFIX = "/$DeadLetterQueue"


def subscription_entity(topic: str, subscription: str) -> str:
    return f"{topic}/subscriptions/{subscription}"


@dataclass(frozen=True)
class OutgoingMessage:
    message_id: str
    body: bytes
    subject: str | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    application_properties: Mapping[str, PropertyValue] = field(default_factory=dict)
    scheduled_enqueue_time: datetime | None = None

    @classmethod
    def from_json(
        cls,
        message_id: str,
        value: Any,
        *,
        subject: str | None = None,
        correlation_id: str | None = None,
        application_properties: Mapping[str, PropertyValue] | None = None,
        scheduled_enqueue_time: datetime | None = None,
    ) -> OutgoingMessage:
        return cls(
            message_id=message_id,
            body=json.dumps(value, separators=(",", ":")).encode("utf-8"),
            subject=subject,
            content_type="application/json",
            correlation_id=correlation_id,
            application_properties=dict(application_properties or {}),
            scheduled_enqueue_time=scheduled_enqueue_time,
        )


@dataclass(frozen=True)
class ReceivedMessage:
    """A message under peek-lock. ``entity`` is where it was received from (settle it there)."""

    entity: str
    message_id: str
    body: bytes
    lock_token: str
    delivery_count: int
    locked_until: datetime | None
    enqueued_time: datetime | None = None
    sequence_number: int | None = None
    subject: str | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    application_properties: Mapping[str, PropertyValue] = field(default_factory=dict)
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    #: The adapter's own handle (e.g. the SDK message), needed to settle; not part of the contract.
    raw: Any = field(default=None, repr=False, compare=False)

    def json(self) -> Any:
        return json.loads(self.body)


@runtime_checkable
class Bus(Protocol):
    """Queues and topics with peek-lock, duplicate detection, scheduling and dead-lettering.

    Entities: a queue ``name``; a topic ``name`` (publish only); a subscription
    ``topic/subscriptions/sub`` (receive only); the dead-letter subqueue of a queue or
    subscription is ``<entity>/$DeadLetterQueue``.
    """

    def publish(self, entity: str, messages: Sequence[OutgoingMessage]) -> None:
        """Send (or schedule) messages. A ``message_id`` already sent to the entity within the
        duplicate-detection window is accepted and dropped."""
        ...

    def receive(
        self, entity: str, *, max_messages: int = 1, max_wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        """Lock and return up to ``max_messages`` available messages, waiting up to
        ``max_wait_seconds`` for the first. Each delivery increments ``delivery_count``; a
        message whose lock expires becomes available again. Works on ``.../$DeadLetterQueue``."""
        ...

    def complete(self, message: ReceivedMessage) -> None:
        """Remove the message. ``LockLostError`` if the lock expired or was taken over."""
        ...

    def abandon(self, message: ReceivedMessage) -> None:
        """Release the lock now; past the entity's max delivery count the message is
        dead-lettered with reason ``MaxDeliveryCountExceeded``."""
        ...

    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None: ...

    def renew_lock(self, message: ReceivedMessage) -> datetime:
        """Extend the lock; returns the new expiry. ``LockLostError`` if already lost."""
        ...

    def peek_dead_letters(self, entity: str, *, max_messages: int = 10) -> list[ReceivedMessage]:
        """Read the dead-letter subqueue of ``entity`` without locking or removing."""
        ...

    def redrive_dead_letters(self, entity: str, *, max_messages: int = 100) -> int:
        """Move up to ``max_messages`` dead-lettered messages back to ``entity``; body, subject and
        application properties are kept, the delivery count starts again. Returns how many moved.
        For a subscription the message comes back to that subscription; on Service Bus the re-send
        goes through the topic, so the other subscriptions may get a copy too (consumers are
        idempotent). A re-sent message may get a new ``message_id`` (the original id would be
        dropped by duplicate detection); the original is kept in application property
        ``weft-original-message-id`` where the backend changes it."""
        ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------------------------
# Payloads


class PayloadStore(Protocol):
    """Claim check: large payloads are stored here and passed around by reference."""

    def put(self, data: bytes, *, content_type: str = "application/octet-stream", prefix: str = "") -> str:
        """Store ``data``; return an opaque reference (``prefix`` groups blobs, e.g. a tenant id)."""
        ...

    def get(self, reference: str) -> bytes:
        """``NotFoundError`` for an unknown reference."""
        ...

    def delete(self, reference: str) -> None:
        """No error if already gone."""
        ...
