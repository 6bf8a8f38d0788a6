"""Every store port on Cosmos DB (``WEFT_STORE=cosmos``), after the design in docs/data-model.md.

* ``executions`` (pk ``/pk`` = execution id) holds an execution, its task runs, its event log, its
  outbox records, its dead letters and a sequence counter, so :meth:`CosmosStore.commit` is ONE
  transactional batch in one logical partition: all of it lands or none of it.
* ``definitions`` (pk ``/tenantId``), ``tenants`` (pk ``/id``), ``leases`` (pk ``/name``) and
  ``idempotency`` (pk ``/pk``).

Concurrency is optimistic: writes carry ``IfMatch`` with the etag the caller read (412 ->
:class:`ConcurrencyError`). Paging tokens are opaque keysets over the same ORDER BY the composite
indexes serve, fetched with ``TOP n+1`` so a page is exactly ``limit`` long and the last page says
so. Throttling (429) is retried by the SDK and then by :func:`with_retries`, honouring
``x-ms-retry-after-ms``. Queries stay inside what both Cosmos DB and the local test server accept:
no DISTINCT, OFFSET/LIMIT, GROUP BY, LIKE, no stored procedures.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from azure.core import MatchConditions
from azure.cosmos import ContainerProxy, CosmosClient, exceptions

from shared.adapters.cosmos_support import (
    DEFINITIONS,
    EXECUTIONS,
    IDEMPOTENCY,
    LEASES,
    TENANTS,
    RetryBudget,
    decode_token,
    encode_token,
    fixed_ts,
    from_doc,
    params,
    parse_ts,
    to_doc,
    with_retries,
)
from shared.errors import ConcurrencyError, ConflictError, NotFoundError, StaleFencingTokenError
from shared.ports import CommitResult, ExecutionWrite, FaultHook, Page
from shared.records import (
    ApiKeyRecord,
    AttemptRecord,
    DeadLetter,
    DeadLetterResolution,
    DeadLetterStatus,
    Execution,
    ExecutionEvent,
    Lease,
    OutboxRecord,
    SubmissionRecord,
    SubmitBucket,
    TaskRun,
    Tenant,
    WorkflowDraft,
    WorkflowSummary,
    WorkflowVersion,
)
from shared.states import EXECUTION_MACHINE, ExecutionStatus

MAX_BATCH_OPERATIONS = 100
#: Re-tries of an optimistic read-modify-write that lost a race on a bookkeeping document
#: (the sequence counter, a workflow head, a lease), never on a caller's etag.
_RACE_RETRIES = 20
_TERMINAL = sorted(str(s) for s in EXECUTION_MACHINE.terminal)


def _race_attempts() -> Iterator[int]:
    """The attempts of an optimistic read-modify-write, with a short, growing, jittered pause
    before each retry: writers that retry at once keep colliding in lockstep and run out of tries."""
    for attempt in range(_RACE_RETRIES):
        if attempt:
            time.sleep(random.uniform(0.0, min(0.05, 0.002 * 2**attempt)))
        yield attempt


_SUBMISSION_TTL = 7 * 24 * 3600
_ATTEMPT_TTL = 30 * 24 * 3600

Op = tuple[Any, ...]
_IF_MATCH = MatchConditions.IfNotModified


class _Retry(Exception):
    """A bookkeeping document moved under us: re-read and try the whole step again."""


def _task_doc_id(task_id: str) -> str:
    return f"task:{task_id}"


def _event_doc_id(seq: int) -> str:
    return f"event:{seq:010d}"


def _outbox_doc_id(record_id: str) -> str:
    return f"outbox:{record_id}"


def _dead_letter_doc_id(dead_letter_id: str) -> str:
    return f"deadletter:{dead_letter_id}"


def _page_of(items: list[Any], limit: int, key: Callable[[Any], list[Any]]) -> Page[Any]:
    if len(items) > limit:
        items = items[:limit]
        return Page(items=items, continuation=encode_token(key(items[-1])))
    return Page(items=items)


def _write_op(doc: dict[str, Any], etag: str | None) -> Op:
    """Create when the caller has no etag, else replace only if nobody wrote since it read."""
    if etag is None:
        return ("create", (doc,))
    return ("replace", (doc["id"], doc), {"if_match_etag": etag})


class CosmosStore:
    """Implements DefinitionStore, ExecutionStore, IdempotencyStore, LeaseStore and TenantStore."""

    def __init__(
        self,
        client: CosmosClient,
        database: str,
        *,
        fault_hook: FaultHook | None = None,
        outbox_ttl_seconds: int = 24 * 3600,
        retry: RetryBudget | None = None,
    ) -> None:
        db = client.get_database_client(database)
        self._executions = db.get_container_client(EXECUTIONS)
        self._definitions = db.get_container_client(DEFINITIONS)
        self._tenants = db.get_container_client(TENANTS)
        self._leases = db.get_container_client(LEASES)
        self._idempotency = db.get_container_client(IDEMPOTENCY)
        #: Failure injection (tests only): called with a step name as each item of a commit is added.
        self.fault_hook = fault_hook
        self.outbox_ttl_seconds = outbox_ttl_seconds
        self._retry = retry or RetryBudget()

    def close(self) -> None:
        """The client is a process-wide singleton (see cosmos_support.get_client): nothing to do."""

    # ------------------------------------------------------------------------------ helpers

    def _call(self, fn: Callable[[], Any]) -> Any:
        return with_retries(fn, self._retry)

    def _read(self, c: ContainerProxy, doc_id: str, pk: str) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = self._call(lambda: c.read_item(doc_id, partition_key=pk))
        except exceptions.CosmosResourceNotFoundError:
            return None
        return doc

    def _query(
        self,
        c: ContainerProxy,
        sql: str,
        *,
        pk: str | None = None,
        **values: Any,
    ) -> list[Any]:
        def run() -> list[Any]:
            if pk is not None:
                return list(c.query_items(sql, parameters=params(**values), partition_key=pk))
            return list(c.query_items(sql, parameters=params(**values), enable_cross_partition_query=True))

        result: list[Any] = self._call(run)
        return result

    def _batch(self, c: ContainerProxy, ops: Sequence[Op], pk: str) -> list[dict[str, Any]]:
        if len(ops) > MAX_BATCH_OPERATIONS:
            raise ValueError(
                f"one atomic write holds at most {MAX_BATCH_OPERATIONS} items, got {len(ops)}: "
                "split the task runs over several commits"
            )
        result: list[dict[str, Any]] = self._call(lambda: c.execute_item_batch(list(ops), partition_key=pk))
        return result

    def _fault(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    # ------------------------------------------------------------------------------ tenants

    def create_tenant(self, tenant: Tenant) -> Tenant:
        doc = to_doc(tenant, doc_id=tenant.id, pk=None, doc_type="tenant")
        try:
            stored = self._call(lambda: self._tenants.create_item(doc))
        except exceptions.CosmosResourceExistsError as exc:
            raise ConflictError(f"tenant {tenant.id!r} already exists") from exc
        return from_doc(Tenant, stored)

    def get_tenant(self, tenant_id: str) -> Tenant | None:
        doc = self._read(self._tenants, tenant_id, tenant_id)
        return from_doc(Tenant, doc) if doc and doc.get("docType") == "tenant" else None

    def update_tenant(self, tenant: Tenant) -> Tenant:
        if tenant.etag is None:
            raise ConcurrencyError("updating a tenant needs the etag it was read with")
        doc = to_doc(tenant, doc_id=tenant.id, pk=None, doc_type="tenant")
        try:
            stored = self._call(
                lambda: self._tenants.replace_item(
                    tenant.id, doc, etag=tenant.etag, match_condition=_IF_MATCH
                )
            )
        except exceptions.CosmosResourceNotFoundError as exc:
            raise NotFoundError(f"tenant {tenant.id!r} not found") from exc
        except exceptions.CosmosAccessConditionFailedError as exc:
            raise ConcurrencyError(f"tenant {tenant.id!r} was changed by someone else") from exc
        return from_doc(Tenant, stored)

    def list_tenants(self, *, limit: int = 50, continuation: str | None = None) -> Page[Tenant]:
        after = str(decode_token(continuation)[0]) if continuation else ""
        docs = self._query(
            self._tenants,
            "SELECT TOP @n * FROM c WHERE c.docType = 'tenant' AND c.id > @after ORDER BY c.id",
            n=limit + 1,
            after=after,
        )
        return _page_of([from_doc(Tenant, d) for d in docs], limit, lambda t: [t.id])

    def add_api_key(self, record: ApiKeyRecord) -> ApiKeyRecord:
        if self.get_tenant(record.tenant_id) is None:
            raise NotFoundError(f"tenant {record.tenant_id!r} not found")
        if self._query(
            self._tenants,
            "SELECT VALUE c.keyId FROM c WHERE c.docType = 'apiKey' AND c.keyId = @k",
            k=record.key_id,
        ):
            raise ConflictError("API key already exists")
        doc_id = f"apikey:{record.key_hash}"
        doc = to_doc(record, doc_id=doc_id, pk=None, doc_type="apiKey")
        try:
            self._call(lambda: self._tenants.create_item(doc))
        except exceptions.CosmosResourceExistsError as exc:
            raise ConflictError("API key already exists") from exc
        return record

    def resolve_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        doc_id = f"apikey:{key_hash}"
        doc = self._read(self._tenants, doc_id, doc_id)
        return from_doc(ApiKeyRecord, doc, etag=False) if doc else None

    # The bucket lives in the tenants container, in its own logical partition, next to the tenant.
    @staticmethod
    def _bucket_id(tenant_id: str) -> str:
        return f"submitbucket:{tenant_id}"

    def update_submit_bucket(
        self, tenant_id: str, change: Callable[[datetime | None], datetime | None]
    ) -> bool:
        doc_id = self._bucket_id(tenant_id)
        for _ in _race_attempts():
            doc = self._read(self._tenants, doc_id, doc_id)
            current = from_doc(SubmitBucket, doc) if doc else None
            new = change(current.tat if current else None)
            if new is None:
                return False
            body = to_doc(
                SubmitBucket(tenant_id=tenant_id, tat=new),
                doc_id=doc_id,
                pk=None,
                doc_type="submitBucket",
                sortable=(),
            )
            try:
                if current is None:
                    self._call(partial(self._tenants.create_item, body))
                else:
                    replace = partial(
                        self._tenants.replace_item, doc_id, body, etag=current.etag, match_condition=_IF_MATCH
                    )
                    self._call(replace)
            except (exceptions.CosmosAccessConditionFailedError, exceptions.CosmosResourceExistsError):
                continue  # another submit moved the bucket: decide again on what it wrote
            return True
        raise ConcurrencyError(f"the submit bucket of tenant {tenant_id!r} is too busy; try again")

    def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        docs = self._query(
            self._tenants,
            "SELECT * FROM c WHERE c.docType = 'apiKey' AND c.tenantId = @t ORDER BY c.keyId",
            t=tenant_id,
        )
        return [from_doc(ApiKeyRecord, d, etag=False) for d in docs]

    def revoke_api_key(self, tenant_id: str, key_id: str, now: datetime) -> ApiKeyRecord:
        docs = self._query(
            self._tenants,
            "SELECT * FROM c WHERE c.docType = 'apiKey' AND c.tenantId = @t AND c.keyId = @k",
            t=tenant_id,
            k=key_id,
        )
        if not docs:
            raise NotFoundError(f"API key {key_id!r} not found")
        rec = from_doc(ApiKeyRecord, docs[0], etag=False)
        if rec.revoked_at is None:
            rec = rec.model_copy(update={"revoked_at": now})
            doc = to_doc(rec, doc_id=docs[0]["id"], pk=None, doc_type="apiKey")
            self._call(lambda: self._tenants.replace_item(doc["id"], doc))
        return rec

    # -------------------------------------------------------------------------- definitions

    def _head(self, tenant_id: str, workflow: str) -> dict[str, Any] | None:
        return self._read(self._definitions, f"wf:{workflow}", tenant_id)

    @staticmethod
    def _head_op(
        head: dict[str, Any] | None, tenant_id: str, workflow: str, updated_at: datetime, **changes: Any
    ) -> Op:
        base = {
            "latestVersion": None,
            "latestDigest": None,
            "hasDraft": False,
            **{k: v for k, v in (head or {}).items() if not k.startswith("_")},
        }
        doc = {
            **base,
            **changes,
            "id": f"wf:{workflow}",
            "docType": "workflow",
            "tenantId": tenant_id,
            "workflow": workflow,
            "updatedAt": fixed_ts(updated_at),
        }
        return _write_op(doc, head["_etag"] if head else None)

    def save_draft(self, draft: WorkflowDraft) -> WorkflowDraft:
        doc = to_doc(
            draft, doc_id=f"draft:{draft.workflow}", pk=None, doc_type="draft", sortable=("updatedAt",)
        )
        for _ in _race_attempts():
            head = self._head(draft.tenant_id, draft.workflow)
            ops = [
                _write_op(doc, draft.etag),
                self._head_op(head, draft.tenant_id, draft.workflow, draft.updated_at, hasDraft=True),
            ]
            try:
                results = self._batch(self._definitions, ops, draft.tenant_id)
            except exceptions.CosmosBatchOperationError as exc:
                if exc.error_index == 1:
                    continue  # the head moved (another draft or publish): re-read it
                if exc.status_code == 404:
                    raise NotFoundError(f"draft of {draft.workflow!r} not found") from exc
                raise ConcurrencyError(f"draft of {draft.workflow!r} was changed by someone else") from exc
            return draft.model_copy(update={"etag": results[0]["eTag"]})
        raise ConcurrencyError(f"workflow {draft.workflow!r} is changing too fast; try again")

    def get_draft(self, tenant_id: str, workflow: str) -> WorkflowDraft | None:
        doc = self._read(self._definitions, f"draft:{workflow}", tenant_id)
        return from_doc(WorkflowDraft, doc) if doc else None

    def publish(
        self, tenant_id: str, workflow: str, digest: str, definition: dict[str, Any], now: datetime
    ) -> tuple[WorkflowVersion, bool]:
        for _ in _race_attempts():
            head = self._head(tenant_id, workflow)
            latest = int(head["latestVersion"]) if head and head.get("latestVersion") else 0
            if head and latest and head.get("latestDigest") == digest:
                existing = self.get_version(tenant_id, workflow, latest)
                if existing is not None:
                    return existing, False
            version = WorkflowVersion(
                tenant_id=tenant_id,
                workflow=workflow,
                version=latest + 1,
                digest=digest,
                definition=definition,
                published_at=now,
            )
            ops = [
                self._head_op(
                    head, tenant_id, workflow, now, latestVersion=version.version, latestDigest=digest
                ),
                (
                    "create",
                    (
                        to_doc(
                            version,
                            doc_id=f"ver:{workflow}:{version.version:08d}",
                            pk=None,
                            doc_type="version",
                            sortable=(),
                        ),
                    ),
                ),
            ]
            try:
                self._batch(self._definitions, ops, tenant_id)
            except exceptions.CosmosBatchOperationError:
                continue  # a concurrent publisher took this number: re-read the head
            return version, True
        raise ConcurrencyError(f"workflow {workflow!r} is being published too fast; try again")

    def get_version(self, tenant_id: str, workflow: str, version: int) -> WorkflowVersion | None:
        doc = self._read(self._definitions, f"ver:{workflow}:{version:08d}", tenant_id)
        return from_doc(WorkflowVersion, doc, etag=False) if doc else None

    def latest_version(self, tenant_id: str, workflow: str) -> WorkflowVersion | None:
        head = self._head(tenant_id, workflow)
        if not head or not head.get("latestVersion"):
            return None
        return self.get_version(tenant_id, workflow, int(head["latestVersion"]))

    def list_versions(
        self, tenant_id: str, workflow: str, *, limit: int = 50, continuation: str | None = None
    ) -> Page[WorkflowVersion]:
        before = int(decode_token(continuation)[0]) if continuation else 2**52
        docs = self._query(
            self._definitions,
            "SELECT TOP @n * FROM c WHERE c.docType = 'version' AND c.workflow = @w AND c.version < @before "
            "ORDER BY c.version DESC",
            pk=tenant_id,
            n=limit + 1,
            w=workflow,
            before=before,
        )
        items = [from_doc(WorkflowVersion, d, etag=False) for d in docs]
        return _page_of(items, limit, lambda v: [v.version])

    def list_workflows(
        self, tenant_id: str, *, limit: int = 50, continuation: str | None = None
    ) -> Page[WorkflowSummary]:
        after = str(decode_token(continuation)[0]) if continuation else ""
        docs = self._query(
            self._definitions,
            "SELECT TOP @n * FROM c WHERE c.docType = 'workflow' AND c.workflow > @after ORDER BY c.workflow",
            pk=tenant_id,
            n=limit + 1,
            after=after,
        )
        items = [from_doc(WorkflowSummary, d, etag=False) for d in docs]
        return _page_of(items, limit, lambda w: [w.workflow])

    # --------------------------------------------------------------------------- executions

    def commit(self, write: ExecutionWrite) -> CommitResult:
        _check_same_execution(write)
        for _ in _race_attempts():
            try:
                return self._commit_once(write)
            except _Retry:
                continue
        raise ConcurrencyError(f"execution {write.execution_id!r} is changing too fast; try again")

    def _commit_once(self, write: ExecutionWrite) -> CommitResult:
        eid = write.execution_id
        ops: list[Op] = []
        #: What each op is, to map a failed batch back to the caller's item.
        kinds: list[str] = []
        if write.execution is not None:
            ex = write.execution
            ops.append(_write_op(to_doc(ex, doc_id=ex.id, pk=eid, doc_type="execution"), ex.etag))
            kinds.append("execution")
            self._fault("execution")
        for run in write.task_runs:
            doc = to_doc(run, doc_id=_task_doc_id(run.task_id), pk=eid, doc_type="taskRun", sortable=())
            ops.append(_write_op(doc, run.etag))
            kinds.append("taskRun")
            self._fault(f"taskRun:{run.task_id}")
        events: list[ExecutionEvent] = []
        records: list[OutboxRecord] = []
        if write.events or write.outbox:
            counter = self._read(self._executions, "counter", eid)
            seq = int(counter["seq"]) if counter else 0
            for new in write.events:
                seq += 1
                event = ExecutionEvent(execution_id=eid, seq=seq, type=new.type, at=new.at, data=new.data)
                doc = to_doc(event, doc_id=_event_doc_id(seq), pk=eid, doc_type="event", sortable=())
                ops.append(("create", (doc,)))
                kinds.append("event")
                events.append(event)
                self._fault("event")
            for rec in write.outbox:
                seq += 1
                stored = rec.model_copy(
                    update={"seq": seq, "dispatched_at": None, "claimed_by": None, "claimed_until": None}
                )
                doc = to_doc(
                    stored, doc_id=_outbox_doc_id(rec.id), pk=eid, doc_type="outbox", id_field="recordId"
                )
                ops.append(("create", (doc,)))
                kinds.append("outbox")
                records.append(stored)
                self._fault(f"outbox:{rec.id}")
            counter_doc = {"id": "counter", "pk": eid, "docType": "counter", "seq": seq}
            ops.append(_write_op(counter_doc, counter["_etag"] if counter else None))
            kinds.append("counter")
        for dl in write.dead_letters:
            doc = to_doc(
                dl, doc_id=_dead_letter_doc_id(dl.id), pk=eid, doc_type="deadLetter", id_field="deadLetterId"
            )
            ops.append(_write_op(doc, dl.etag))
            kinds.append("deadLetter")
            self._fault(f"deadLetter:{dl.id}")
        if not ops:
            return CommitResult()
        try:
            results = self._batch(self._executions, ops, eid)
        except exceptions.CosmosBatchOperationError as exc:
            raise _batch_error(exc, kinds, write) from exc

        etags = iter(r.get("eTag") for r in results)
        result = CommitResult(
            execution=(
                write.execution.model_copy(update={"etag": next(etags)})
                if write.execution is not None
                else None
            ),
            events=events,
            outbox=records,
        )
        for run in write.task_runs:
            result.task_runs[run.task_id] = run.model_copy(update={"etag": next(etags)})
        for _ in range(len(events) + len(records) + (1 if events or records else 0)):
            next(etags)
        result.dead_letters.extend(dl.model_copy(update={"etag": next(etags)}) for dl in write.dead_letters)
        return result

    def get_execution(self, execution_id: str) -> Execution | None:
        doc = self._read(self._executions, execution_id, execution_id)
        return from_doc(Execution, doc) if doc and doc.get("docType") == "execution" else None

    def list_executions(
        self,
        tenant_id: str,
        *,
        workflow: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
        continuation: str | None = None,
    ) -> Page[Execution]:
        where = ["c.docType = 'execution'", "c.tenantId = @t"]
        values: dict[str, Any] = {"t": tenant_id, "n": limit + 1}
        # The ORDER BY names the equality filters first so one composite index serves the query.
        order = ["c.tenantId ASC"]
        if status is not None:
            where.append("c.status = @s")
            values["s"] = str(status)
            order.append("c.status ASC")
        if workflow is not None:
            where.append("c.workflow = @w")
            values["w"] = workflow
            if status is None:
                order.append("c.workflow ASC")
        if continuation:
            created, last_id = decode_token(continuation)
            where.append("(c.createdAt < @ca OR (c.createdAt = @ca AND c.id < @cid))")
            values.update(ca=created, cid=last_id)
        order += ["c.createdAt DESC", "c.id DESC"]
        sql = f"SELECT TOP @n * FROM c WHERE {' AND '.join(where)} ORDER BY {', '.join(order)}"  # noqa: S608
        items = [from_doc(Execution, d) for d in self._query(self._executions, sql, **values)]
        return _page_of(items, limit, lambda e: [fixed_ts(e.created_at), e.id])

    def count_active_executions(self, tenant_id: str) -> int:
        rows = self._query(
            self._executions,
            "SELECT VALUE COUNT(1) FROM c WHERE c.docType = 'execution' AND c.tenantId = @t "
            "AND NOT ARRAY_CONTAINS(@terminal, c.status)",
            t=tenant_id,
            terminal=_TERMINAL,
        )
        return int(sum(rows))

    def get_task_runs(self, execution_id: str) -> list[TaskRun]:
        docs = self._query(
            self._executions,
            "SELECT * FROM c WHERE c.docType = 'taskRun' ORDER BY c.taskId",
            pk=execution_id,
        )
        return [from_doc(TaskRun, d) for d in docs]

    def get_task_run(self, execution_id: str, task_id: str) -> TaskRun | None:
        doc = self._read(self._executions, _task_doc_id(task_id), execution_id)
        return from_doc(TaskRun, doc) if doc else None

    def list_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int = 1000
    ) -> list[ExecutionEvent]:
        docs = self._query(
            self._executions,
            "SELECT TOP @n * FROM c WHERE c.docType = 'event' AND c.seq > @after ORDER BY c.seq",
            pk=execution_id,
            n=limit,
            after=after_seq,
        )
        return [from_doc(ExecutionEvent, d, etag=False) for d in docs]

    # ------------------------------------------------------------------------------- outbox

    def _pending_outbox(self, execution_id: str) -> list[dict[str, Any]]:
        return self._query(
            self._executions,
            "SELECT * FROM c WHERE c.docType = 'outbox' AND IS_NULL(c.dispatchedAt) ORDER BY c.seq",
            pk=execution_id,
        )

    def claim_outbox(
        self, owner: str, now: datetime, *, lease_seconds: float = 30.0, limit: int = 100
    ) -> list[OutboxRecord]:
        until = now + timedelta(seconds=lease_seconds)
        # Which executions have undispatched records: a cross-partition scan of the small
        # ``dispatchedAt = null`` slice; each execution is then claimed inside its own partition,
        # where its records are read in full and in order.
        candidates = self._query(
            self._executions,
            "SELECT TOP @n VALUE c.executionId FROM c WHERE c.docType = 'outbox' AND IS_NULL(c.dispatchedAt) "
            "ORDER BY c.executionId",
            n=max(limit * 20, 1000),
        )
        claimed: list[OutboxRecord] = []
        for eid in sorted(set(candidates)):
            room = min(limit - len(claimed), MAX_BATCH_OPERATIONS)
            if room <= 0:
                break
            claimed.extend(self._claim_execution(eid, owner, now, until, room))
        return claimed

    def _claim_execution(
        self, eid: str, owner: str, now: datetime, until: datetime, room: int
    ) -> list[OutboxRecord]:
        ops: list[Op] = []
        records: list[OutboxRecord] = []
        for doc in self._pending_outbox(eid):
            if len(records) >= room:
                break
            rec = from_doc(OutboxRecord, doc, id_field="recordId", etag=False)
            held_by_other = (
                rec.claimed_by is not None
                and rec.claimed_by != owner
                and rec.claimed_until is not None
                and rec.claimed_until > now
            )
            if held_by_other:
                break  # order per execution: nothing after a record another relay is publishing
            rec = rec.model_copy(update={"claimed_by": owner, "claimed_until": until})
            new = to_doc(rec, doc_id=doc["id"], pk=eid, doc_type="outbox", id_field="recordId")
            ops.append(("replace", (doc["id"], new), {"if_match_etag": doc["_etag"]}))
            records.append(rec)
        if not ops:
            return []
        try:
            self._batch(self._executions, ops, eid)
        except exceptions.CosmosBatchOperationError:
            return []  # another relay claimed (part of) it meanwhile: all or nothing, skip it
        return records

    def _update_outbox(
        self, rec: OutboxRecord, change: Callable[[OutboxRecord], OutboxRecord | None], ttl: int | None = None
    ) -> None:
        doc_id = _outbox_doc_id(rec.id)
        for _ in _race_attempts():
            doc = self._read(self._executions, doc_id, rec.execution_id)
            if doc is None:
                return
            new_rec = change(from_doc(OutboxRecord, doc, id_field="recordId", etag=False))
            if new_rec is None:
                return
            new = to_doc(new_rec, doc_id=doc_id, pk=rec.execution_id, doc_type="outbox", id_field="recordId")
            if ttl is not None:
                new["ttl"] = ttl
            try:
                self._call(
                    partial(
                        self._executions.replace_item,
                        doc_id,
                        new,
                        etag=doc["_etag"],
                        match_condition=_IF_MATCH,
                    )
                )
            except exceptions.CosmosAccessConditionFailedError:
                continue
            return

    def release_outbox(self, records: Sequence[OutboxRecord], owner: str) -> None:
        def free(current: OutboxRecord) -> OutboxRecord | None:
            if current.claimed_by != owner or current.dispatched_at is not None:
                return None
            return current.model_copy(update={"claimed_by": None, "claimed_until": None})

        for rec in records:
            self._update_outbox(rec, free)

    def mark_dispatched(self, records: Sequence[OutboxRecord], now: datetime) -> None:
        def done(current: OutboxRecord) -> OutboxRecord | None:
            if current.dispatched_at is not None:
                return None
            return current.model_copy(update={"dispatched_at": now})

        for rec in records:
            # The ttl makes Cosmos delete the record once it has served its purpose.
            self._update_outbox(rec, done, ttl=self.outbox_ttl_seconds)

    def get_outbox_record(self, execution_id: str, record_id: str) -> OutboxRecord | None:
        doc = self._read(self._executions, _outbox_doc_id(record_id), execution_id)
        return from_doc(OutboxRecord, doc, id_field="recordId", etag=False) if doc else None

    def purge_dispatched(self, before: datetime) -> int:
        """Nothing to do: dispatched records carry a ``ttl`` and Cosmos expires them."""
        return 0

    # ------------------------------------------------------------------------- dead letters

    def _dead_letter_doc(self, tenant_id: str, dead_letter_id: str) -> dict[str, Any] | None:
        docs = self._query(
            self._executions,
            "SELECT * FROM c WHERE c.docType = 'deadLetter' AND c.tenantId = @t AND c.deadLetterId = @id",
            t=tenant_id,
            id=dead_letter_id,
        )
        return docs[0] if docs else None

    def get_dead_letter(self, tenant_id: str, dead_letter_id: str) -> DeadLetter | None:
        doc = self._dead_letter_doc(tenant_id, dead_letter_id)
        return from_doc(DeadLetter, doc, id_field="deadLetterId") if doc else None

    def list_dead_letters(
        self,
        tenant_id: str,
        *,
        status: DeadLetterStatus | None = None,
        limit: int = 50,
        continuation: str | None = None,
    ) -> Page[DeadLetter]:
        where = ["c.docType = 'deadLetter'", "c.tenantId = @t"]
        values: dict[str, Any] = {"t": tenant_id, "n": limit + 1}
        if status is not None:
            where.append("c.status = @s")
            values["s"] = str(status)
        if continuation:
            created, last_id = decode_token(continuation)
            where.append("(c.createdAt < @ca OR (c.createdAt = @ca AND c.deadLetterId < @cid))")
            values.update(ca=created, cid=last_id)
        sql = (
            f"SELECT TOP @n * FROM c WHERE {' AND '.join(where)} "  # noqa: S608 - fixed fragments
            "ORDER BY c.tenantId ASC, c.createdAt DESC, c.deadLetterId DESC"
        )
        docs = self._query(self._executions, sql, **values)
        items = [from_doc(DeadLetter, d, id_field="deadLetterId") for d in docs]
        return _page_of(items, limit, lambda d: [fixed_ts(d.created_at), d.id])

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
        doc = self._dead_letter_doc(tenant_id, dead_letter_id)
        if doc is None:
            raise NotFoundError(f"dead letter {dead_letter_id!r} not found")
        current = from_doc(DeadLetter, doc, id_field="deadLetterId")
        if current.etag != if_match:
            raise ConcurrencyError("dead letter was changed by someone else")
        if current.status == DeadLetterStatus.RESOLVED:
            raise ConflictError("dead letter is already resolved")
        resolved = current.model_copy(
            update={
                "status": DeadLetterStatus.RESOLVED,
                "resolution": resolution,
                "resolved_at": now,
                "resolved_by": resolved_by,
            }
        )
        new = to_doc(
            resolved,
            doc_id=doc["id"],
            pk=current.execution_id,
            doc_type="deadLetter",
            id_field="deadLetterId",
        )
        try:
            stored = self._call(
                lambda: self._executions.replace_item(
                    doc["id"], new, etag=if_match, match_condition=_IF_MATCH
                )
            )
        except exceptions.CosmosAccessConditionFailedError as exc:
            raise ConcurrencyError("dead letter was changed by someone else") from exc
        return resolved.model_copy(update={"etag": stored["_etag"]})

    # -------------------------------------------------------------------------- idempotency

    def _put_if_absent(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        """Create; on 409 return the existing document (None when we created it)."""
        try:
            self._call(lambda: self._idempotency.create_item(doc))
        except exceptions.CosmosResourceExistsError:
            existing = self._read(self._idempotency, doc["id"], doc["pk"])
            if existing is None:  # expired between the 409 and the read: take the slot
                return self._put_if_absent(doc)
            return existing
        return None

    def put_submission(self, record: SubmissionRecord) -> tuple[SubmissionRecord, bool]:
        doc = to_doc(record, doc_id=f"sub:{record.key}", pk=record.tenant_id, doc_type="submission")
        doc["ttl"] = _SUBMISSION_TTL
        existing = self._put_if_absent(doc)
        if existing is None:
            return record, True
        return from_doc(SubmissionRecord, existing, etag=False), False

    def get_submission(self, tenant_id: str, key: str) -> SubmissionRecord | None:
        doc = self._read(self._idempotency, f"sub:{key}", tenant_id)
        return from_doc(SubmissionRecord, doc, etag=False) if doc else None

    def record_attempt(self, record: AttemptRecord) -> tuple[AttemptRecord, bool]:
        doc_id = f"att:{record.task_id}:{record.attempt}"
        doc = to_doc(record, doc_id=doc_id, pk=record.execution_id, doc_type="attempt", sortable=())
        doc["ttl"] = _ATTEMPT_TTL
        existing = self._put_if_absent(doc)
        if existing is None:
            return record, True
        return from_doc(AttemptRecord, existing, etag=False), False

    def get_attempt(self, execution_id: str, task_id: str, attempt: int) -> AttemptRecord | None:
        doc = self._read(self._idempotency, f"att:{task_id}:{attempt}", execution_id)
        return from_doc(AttemptRecord, doc, etag=False) if doc else None

    # ------------------------------------------------------------------------------- leases

    def _lease_doc(self, name: str) -> dict[str, Any] | None:
        return self._read(self._leases, "lease", name)

    def _put_lease(self, current: dict[str, Any] | None, name: str, **fields: Any) -> bool:
        """Write the lease document if nobody else did since ``current`` was read."""
        doc = {
            "id": "lease",
            "name": name,
            "holder": None,
            "token": 0,
            "expiresAt": None,
            **{k: v for k, v in (current or {}).items() if not k.startswith("_")},
            **fields,
        }
        try:
            if current is None:
                self._call(lambda: self._leases.create_item(doc))
            else:
                self._call(
                    lambda: self._leases.replace_item(
                        "lease", doc, etag=current["_etag"], match_condition=_IF_MATCH
                    )
                )
        except (exceptions.CosmosAccessConditionFailedError, exceptions.CosmosResourceExistsError):
            return False
        return True

    @staticmethod
    def _live(doc: dict[str, Any] | None, now: datetime) -> bool:
        return bool(doc and doc.get("holder") is not None and parse_ts(doc["expiresAt"]) > now)

    def acquire(self, name: str, holder: str, ttl_seconds: float, now: datetime) -> Lease | None:
        expires = now + timedelta(seconds=ttl_seconds)
        for _ in _race_attempts():
            doc = self._lease_doc(name)
            live = self._live(doc, now)
            if doc is not None and live and doc["holder"] != holder:
                return None
            previous = int(doc["token"]) if doc else 0
            # The token only ever grows: the document is never deleted, a release keeps it.
            token = previous if (doc is not None and live) else previous + 1
            if self._put_lease(doc, name, holder=holder, token=token, expiresAt=fixed_ts(expires)):
                return Lease(name=name, holder=holder, token=token, expires_at=expires)
        return None

    def renew(self, lease: Lease, ttl_seconds: float, now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)
        for _ in _race_attempts():
            doc = self._lease_doc(lease.name)
            if doc is None or doc.get("holder") != lease.holder or int(doc["token"]) != lease.token:
                break
            if self._put_lease(doc, lease.name, expiresAt=fixed_ts(expires)):
                return lease.model_copy(update={"expires_at": expires})
        raise StaleFencingTokenError(
            f"lease {lease.name!r} was lost", details={"name": lease.name, "token": lease.token}
        )

    def release(self, lease: Lease) -> None:
        for _ in _race_attempts():
            doc = self._lease_doc(lease.name)
            if doc is None or doc.get("holder") != lease.holder or int(doc["token"]) != lease.token:
                return
            if self._put_lease(doc, lease.name, holder=None):
                return

    def get(self, name: str) -> Lease | None:
        doc = self._lease_doc(name)
        if doc is None or doc.get("holder") is None:
            return None
        return Lease(
            name=name, holder=doc["holder"], token=int(doc["token"]), expires_at=parse_ts(doc["expiresAt"])
        )

    @staticmethod
    def _fence(name: str, token: int, doc: dict[str, Any] | None) -> None:
        current = int(doc["token"]) if doc else 0
        if token < current:
            raise StaleFencingTokenError(
                f"fencing token {token} of {name!r} is older than {current}",
                details={"name": name, "token": token, "current": current},
            )

    def check_fence(self, name: str, token: int) -> None:
        self._fence(name, token, self._lease_doc(name))

    def put_fenced(self, name: str, token: int, key: str, value: dict[str, Any]) -> None:
        state = {"id": f"state:{key}", "name": name, "token": token, "value": value}
        for _ in _race_attempts():
            lease = self._lease_doc(name)
            self._fence(name, token, lease)
            ops: list[Op] = [("upsert", (state,))]
            if lease is not None:
                # Unchanged lease body, conditional on its etag: the check above and the write
                # below are one atomic step; a new holder in between makes the batch fail.
                body = {k: v for k, v in lease.items() if not k.startswith("_")}
                ops.insert(0, ("replace", ("lease", body), {"if_match_etag": lease["_etag"]}))
            else:
                ops.insert(0, ("create", ({"id": "lease", "name": name, "holder": None, "token": 0},)))
            try:
                self._batch(self._leases, ops, name)
            except exceptions.CosmosBatchOperationError:
                continue
            return
        raise ConcurrencyError(f"lease {name!r} is changing too fast; try again")

    def get_fenced(self, name: str, key: str) -> dict[str, Any] | None:
        doc = self._read(self._leases, f"state:{key}", name)
        if doc is None:
            return None
        value: dict[str, Any] = doc["value"]
        return value


# ------------------------------------------------------------------------------------------


def _check_same_execution(write: ExecutionWrite) -> None:
    eid = write.execution_id
    ids = [write.execution.id] if write.execution is not None else []
    ids += [r.execution_id for r in write.task_runs]
    ids += [r.execution_id for r in write.outbox]
    ids += [d.execution_id for d in write.dead_letters]
    if any(i != eid for i in ids):
        raise ValueError(f"every item of an ExecutionWrite must belong to execution {eid!r}")


def _batch_error(
    exc: exceptions.CosmosBatchOperationError, kinds: list[str], write: ExecutionWrite
) -> Exception:
    """Map the failed operation of a commit batch to the port's error."""
    index = exc.error_index
    kind = kinds[index] if 0 <= index < len(kinds) else "?"
    status = exc.status_code
    if kind in ("counter", "event"):
        return _Retry()  # lost the race for the sequence counter: re-read it and try again
    what = {
        "execution": "execution",
        "taskRun": "task run",
        "deadLetter": "dead letter",
        "outbox": "outbox record",
    }
    label = what.get(kind, kind)
    if status == 404:
        return NotFoundError(f"{label} not found", details={"executionId": write.execution_id})
    if status == 409 and kind in ("execution", "outbox"):
        return ConflictError(f"{label} already exists", details={"executionId": write.execution_id})
    if status in (409, 412):
        return ConcurrencyError(
            f"{label} was changed by someone else", details={"executionId": write.execution_id}
        )
    return exc
