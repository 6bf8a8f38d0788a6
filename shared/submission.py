"""The one submission path: every trigger (HTTP, schedule, blob, Service Bus) starts executions here.

``submit_execution`` does, in order:

1. **Checks that write nothing**: the tenant exists (``NotFoundError``); the input's JSON fits under
   ``max_input_bytes`` (``PayloadTooLargeError``); an idempotency key already used returns the
   execution it created (same request) or ``ConflictError`` (a different request); the workflow
   version exists (``NotFoundError``; ``version=None`` means the latest published one); the tenant
   is under ``maxActiveExecutions`` and ``submitsPerSecond`` (``AdmissionDeniedError`` with
   ``retry_after_seconds``). Admission's only write is taking the rate slot, after every check.
2. **One atomic write** (:class:`~shared.ports.ExecutionWrite`): the ``queued`` Execution with its
   trigger, the ``weft.execution.accepted`` lifecycle event and its outbox record, and a
   ``startExecution`` outbox record. An input over the claim-check threshold is stored in the
   PayloadStore first and the execution holds the reference.
3. **The fast path**: start the orchestration at once (instance id = execution id) through the
   :class:`DurableStarter`. A failure here is logged, never raised: the outbox relay starts any
   execution whose fast path was lost, and the starter never starts an instance that exists.

Idempotency keys (per tenant) are recorded *before* the execution with the execution id the
submit will use, so a submit that crashes between the two is completed by the next submit with the
same key (it writes the execution under the recorded id; two racing writers collide on the
execution id and both return the one that won).

Rate limit: the generic cell rate algorithm (a token bucket) on one small per-tenant document,
:class:`~shared.records.SubmitBucket`, which the TenantStore moves atomically
(``update_submit_bucket``: one SQLite write transaction; a Cosmos replace with its etag that
re-reads on a lost race), so it holds across instances. ``submitsPerSecond = r`` admits a burst of
``ceil(r * W)`` submits at once (``W = max(1, 1/r)`` seconds) and then one every ``1/r`` seconds; a
refused submit learns exactly when the next would be admitted and writes nothing. The cost is one
read and one conditional write per submit whatever the limit (it used to read ``ceil(r * W)``
executions). A submit whose execution write then fails has still used its slot; the limit is a
protection, not a quota. A replay of an idempotent submit is not a new submit and is never refused.

Pure: ports are injected; no azure imports.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from shared.claimcheck import encode_json, offload
from shared.errors import (
    AdmissionDeniedError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
)
from shared.execution_messages import ExecutionInput
from shared.lifecycle import LifecycleEvent, lifecycle
from shared.names import OrchestratorName
from shared.outbox import Starter
from shared.ports import ExecutionWrite, PayloadStore, Stores, TenantStore
from shared.records import (
    Execution,
    OutboxKind,
    OutboxRecord,
    SubmissionRecord,
    Tenant,
    TriggerKind,
    WorkflowVersion,
)
from shared.settings import WeftSettings
from shared.states import ExecutionStatus
from shared.telemetry import Dimension, MetricName, SpanName, count, dimensions, record, span
from shared.versioning import canonical_json

log = logging.getLogger(__name__)

#: When the tenant is at ``maxActiveExecutions`` nobody knows when one finishes: ask again soon.
ACTIVE_LIMIT_RETRY_SECONDS = 1.0
MIN_RETRY_SECONDS = 0.1
#: Float noise in ``interval`` sums (1/3 + 1/3 + ...) must not refuse a submit that is on time.
_EPSILON = 1e-4


class DurableStarter(Protocol):
    def start_new(self, orchestrator: str, instance_id: str, input: dict[str, Any]) -> None:
        """Start ``orchestrator`` as ``instance_id`` unless an instance with that id exists in any
        state (an existing one counts as started: Durable's own ``start_new`` would silently replace
        a finished instance, i.e. run the execution again). Raise when it could not tell or start."""
        ...


@dataclass(frozen=True)
class SubmissionDeps:
    stores: Stores
    payloads: PayloadStore
    #: ``None`` turns the fast path off; the outbox relay then starts the execution.
    starter: DurableStarter | None = None
    claim_check_threshold_bytes: int = 64 * 1024
    max_input_bytes: int = 1024 * 1024
    #: Read again at the rate bucket: a submit that queued in the process (threads, the store's
    #: write lock) is judged on when it reaches the bucket, not when it arrived; a stale ``now``
    #: would look like a submit ahead of the rate. ``None``: the submit's ``now``.
    clock: Callable[[], datetime] | None = None

    @classmethod
    def from_settings(
        cls,
        stores: Stores,
        payloads: PayloadStore,
        starter: DurableStarter | None,
        settings: WeftSettings,
    ) -> SubmissionDeps:
        return cls(
            stores=stores,
            payloads=payloads,
            starter=starter,
            claim_check_threshold_bytes=settings.claim_check_threshold_bytes,
            max_input_bytes=settings.max_input_bytes,
        )


@dataclass(frozen=True)
class SubmitResult:
    #: As stored: ``queued`` on a fresh submit; its current state on a replay.
    execution: Execution
    #: False: the submit replayed an earlier one (same idempotency key or execution id).
    created: bool
    #: The fast path started the orchestration (False: the relay will, or it is a replay).
    started: bool


def request_hash(workflow: str, version: int | None, input: Any) -> str:
    """What "the same request" means for an idempotency key: workflow, requested version, input."""
    doc = {"workflow": workflow, "version": version, "input": input}
    return hashlib.sha256(canonical_json(doc).encode("utf-8")).hexdigest()


def start_record_id(execution_id: str) -> str:
    return f"{execution_id}:start"


#: ``weft.reason`` values of ``weft.submissions.rejected``, by the limit that refused the submit.
_REJECTION_REASON = {"maxActiveExecutions": "max_active_executions", "submitsPerSecond": "rate_limited"}


def submit_execution(
    deps: SubmissionDeps,
    tenant_id: str,
    workflow: str,
    *,
    input: Any,
    version: int | None,
    idempotency_key: str | None,
    trigger: TriggerKind,
    now: datetime,
    execution_id: str | None = None,
) -> SubmitResult:
    """The one submission path of every trigger (see the module docstring), traced and counted."""
    attrs = dimensions(tenant_id=tenant_id, workflow=workflow, **{Dimension.TRIGGER: str(trigger)})
    started = time.perf_counter()
    with span(SpanName.SUBMIT, attrs) as current:
        try:
            result = _submit(
                deps,
                tenant_id,
                workflow,
                input=input,
                version=version,
                idempotency_key=idempotency_key,
                trigger=trigger,
                now=now,
                execution_id=execution_id,
            )
        except AdmissionDeniedError as exc:
            reason = _REJECTION_REASON.get(str(exc.details.get("limit")), "admission")
            count(MetricName.SUBMISSIONS_REJECTED, {**attrs, Dimension.REASON: reason})
            raise
        current.set_attribute(str(Dimension.EXECUTION_ID), result.execution.id)
    if result.created:
        count(MetricName.EXECUTIONS_SUBMITTED, attrs)
    record(MetricName.SUBMIT_LATENCY_MS, (time.perf_counter() - started) * 1000.0, attrs)
    return result


def _submit(
    deps: SubmissionDeps,
    tenant_id: str,
    workflow: str,
    *,
    input: Any,
    version: int | None,
    idempotency_key: str | None,
    trigger: TriggerKind,
    now: datetime,
    execution_id: str | None = None,
) -> SubmitResult:
    stores = deps.stores
    tenant = stores.tenants.get_tenant(tenant_id)
    if tenant is None:
        raise NotFoundError(f"tenant {tenant_id!r} does not exist", details={"tenant": tenant_id})
    size = len(encode_json(input))
    if size > deps.max_input_bytes:
        raise PayloadTooLargeError(
            f"input is {size} bytes; the maximum is {deps.max_input_bytes}",
            details={"size": size, "maxInputBytes": deps.max_input_bytes},
        )
    digest = request_hash(workflow, version, input)
    if idempotency_key is not None:
        recorded = stores.idempotency.get_submission(tenant_id, idempotency_key)
        if recorded is not None:
            return _replay(deps, recorded, digest, workflow, version, input, trigger, now)
    wv = _resolve_version(deps, tenant_id, workflow, version)
    _admit(deps, tenant, now)
    exec_id = execution_id or uuid.uuid4().hex
    if idempotency_key is not None:
        stored, created = stores.idempotency.put_submission(
            SubmissionRecord(
                tenant_id=tenant_id,
                key=idempotency_key,
                request_hash=digest,
                execution_id=exec_id,
                created_at=now,
            )
        )
        if not created:
            # A concurrent submit with the same key got there first.
            return _replay(deps, stored, digest, workflow, version, input, trigger, now)
    return _create(deps, wv, exec_id, input, idempotency_key, trigger, now)


def _resolve_version(
    deps: SubmissionDeps, tenant_id: str, workflow: str, version: int | None
) -> WorkflowVersion:
    defs = deps.stores.definitions
    wv = (
        defs.latest_version(tenant_id, workflow)
        if version is None
        else defs.get_version(tenant_id, workflow, version)
    )
    if wv is None:
        what = f"workflow {workflow!r}" + ("" if version is None else f" version {version}")
        raise NotFoundError(
            f"{what} has no published version" if version is None else f"{what} does not exist",
            details={"workflow": workflow, "version": version},
        )
    return wv


def _admit(deps: SubmissionDeps, tenant: Tenant, now: datetime) -> None:
    limits = tenant.limits
    executions = deps.stores.executions
    active = executions.count_active_executions(tenant.id)
    if active >= limits.max_active_executions:
        raise AdmissionDeniedError(
            f"tenant {tenant.id!r} has {active} active executions (limit {limits.max_active_executions})",
            retry_after_seconds=ACTIVE_LIMIT_RETRY_SECONDS,
            details={"limit": "maxActiveExecutions", "active": active},
        )
    retry = _take_submit_slot(deps.stores.tenants, tenant, now, deps.clock)
    if retry is not None:
        raise AdmissionDeniedError(
            f"tenant {tenant.id!r} is over its rate of {limits.submits_per_second} submits per second",
            retry_after_seconds=max(MIN_RETRY_SECONDS, retry),
            details={"limit": "submitsPerSecond", "submitsPerSecond": limits.submits_per_second},
        )


def submit_burst(submits_per_second: float) -> int:
    """How many submits may arrive at once: ``ceil(r * W)`` with ``W = max(1, 1/r)`` seconds."""
    window = max(1.0, 1.0 / submits_per_second)
    return max(1, math.ceil(submits_per_second * window))


def _take_submit_slot(
    tenants: TenantStore, tenant: Tenant, now: datetime, clock: Callable[[], datetime] | None
) -> float | None:
    """GCRA on the tenant's submit bucket: ``None`` when admitted (the bucket moved on), else the
    seconds until a submit would be (nothing written)."""
    rate = tenant.limits.submits_per_second
    interval = 1.0 / rate
    tolerance = (submit_burst(rate) - 1) * interval
    refused: list[float] = []

    def change(tat: datetime | None) -> datetime | None:
        refused.clear()
        at = now if clock is None else max(now, clock())
        start = at if tat is None or tat < at else tat
        ahead = (start - at).total_seconds()
        if ahead > tolerance + _EPSILON:
            refused.append(ahead - tolerance)
            return None
        return start + timedelta(seconds=interval)

    if tenants.update_submit_bucket(tenant.id, change):
        return None
    return refused[0]


def _replay(
    deps: SubmissionDeps,
    recorded: SubmissionRecord,
    digest: str,
    workflow: str,
    version: int | None,
    input: Any,
    trigger: TriggerKind,
    now: datetime,
) -> SubmitResult:
    if recorded.request_hash != digest:
        raise ConflictError(
            f"idempotency key {recorded.key!r} was used with a different request",
            details={"idempotencyKey": recorded.key, "executionId": recorded.execution_id},
        )
    existing = deps.stores.executions.get_execution(recorded.execution_id)
    if existing is not None:
        return SubmitResult(existing, created=False, started=False)
    # The key is recorded but its execution is not (yet): the first submit is in flight or died
    # between the two writes. Write it under the recorded id; if both write, one collides.
    wv = _resolve_version(deps, recorded.tenant_id, workflow, version)
    return _create(deps, wv, recorded.execution_id, input, recorded.key, trigger, now)


def _create(
    deps: SubmissionDeps,
    wv: WorkflowVersion,
    exec_id: str,
    input: Any,
    idempotency_key: str | None,
    trigger: TriggerKind,
    now: datetime,
) -> SubmitResult:
    stores = deps.stores
    stored_input = offload(deps.payloads, input, deps.claim_check_threshold_bytes, prefix=wv.tenant_id)
    execution = Execution(
        id=exec_id,
        tenant_id=wv.tenant_id,
        workflow=wv.workflow,
        version=wv.version,
        status=ExecutionStatus.QUEUED,
        trigger=trigger,
        input=stored_input,
        created_at=now,
        idempotency_key=idempotency_key,
    )
    event, accepted = lifecycle(execution, LifecycleEvent.EXECUTION_ACCEPTED, now, {"trigger": str(trigger)})
    start = OutboxRecord(
        id=start_record_id(exec_id),
        tenant_id=wv.tenant_id,
        execution_id=exec_id,
        kind=OutboxKind.START_EXECUTION,
        payload=ExecutionInput(execution_id=exec_id, tenant_id=wv.tenant_id).to_json_dict(),
        created_at=now,
    )
    try:
        result = stores.executions.commit(
            ExecutionWrite(exec_id, execution=execution, events=[event], outbox=[accepted, start])
        )
    except ConflictError:
        existing = stores.executions.get_execution(exec_id)
        if existing is None:
            raise
        if existing.tenant_id != wv.tenant_id or existing.workflow != wv.workflow:
            raise ConflictError(
                f"execution id {exec_id!r} is taken by another workflow", details={"executionId": exec_id}
            ) from None
        return SubmitResult(existing, created=False, started=False)
    stored = result.execution or execution
    return SubmitResult(stored, created=True, started=_fast_start(deps.starter, stored))


def _fast_start(starter: DurableStarter | None, execution: Execution) -> bool:
    if starter is None:
        return False
    try:
        starter.start_new(
            OrchestratorName.EXECUTION,
            execution.id,
            ExecutionInput(execution_id=execution.id, tenant_id=execution.tenant_id).to_json_dict(),
        )
    except Exception:
        # The startExecution outbox record is the safety net; the submit has succeeded.
        log.warning(
            "fast start of execution %s failed; the outbox relay will start it", execution.id, exc_info=True
        )
        return False
    return True


def relay_starter(stores: Stores, starter: DurableStarter) -> Starter:
    """The ``relay_once`` callback for ``startExecution`` records.

    An execution that has left ``queued`` was started (its orchestration ran ``start_execution``),
    even if the Durable history has been purged since, so it is not started again.
    """

    def start(record: OutboxRecord) -> None:
        execution = stores.executions.get_execution(record.execution_id)
        if execution is None:
            raise NotFoundError(f"execution {record.execution_id} of a start record does not exist")
        if execution.status is not ExecutionStatus.QUEUED:
            return
        payload = record.payload if isinstance(record.payload, dict) else None
        inp = (
            payload or ExecutionInput(execution_id=execution.id, tenant_id=execution.tenant_id).to_json_dict()
        )
        starter.start_new(OrchestratorName.EXECUTION, record.execution_id, inp)

    return start
