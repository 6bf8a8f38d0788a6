"""The endpoint handlers: ``(ApiRequest, ApiDeps) -> ApiResponse``, one per route.

Authentication has happened before a handler runs (``shared.api.routes.handle``); errors are
raised as :mod:`shared.errors` types and turned into problem+json by the dispatcher.

Claim-checked values: ``GET .../executions/{id}`` resolves a claim-checked input and output (and
the claim-checked outputs of its leaves) through the PayloadStore, so clients always see plain
JSON; a payload that cannot be read is returned as its ``{"$ref", "size", "sha256"}`` envelope.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from shared.api import bodies, models
from shared.api.rerun import rerun_execution
from shared.api.types import ApiDeps, ApiRequest, ApiResponse
from shared.claimcheck import is_claim_check, resolve
from shared.definition import WorkflowDefinition
from shared.errors import (
    ConcurrencyError,
    ConflictError,
    NotFoundError,
    Problem,
    ValidationFailedError,
    WeftError,
)
from shared.execution_messages import OperatorActionKind
from shared.lifecycle import LifecycleEvent, lifecycle
from shared.names import EventName
from shared.operator import resolve_dead_letter
from shared.ports import ExecutionWrite, Page
from shared.records import (
    ApiKeyRecord,
    DeadLetter,
    DeadLetterStatus,
    Execution,
    Tenant,
    TenantLimits,
    TriggerKind,
    WorkflowDraft,
    hash_api_key,
    new_api_key,
)
from shared.states import EXECUTION_MACHINE, ExecutionStatus, TaskStatus
from shared.submission import SubmissionDeps, submit_execution
from shared.validation import find_problems
from shared.versioning import definition_digest, definition_document

log = logging.getLogger(__name__)

BASE = "/api/v1"
T = TypeVar("T")
MAX_CAS_ATTEMPTS = 10
IDEMPOTENCY_KEY_MAX = 200
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
#: Event names the platform uses itself (cancel, operator actions): not for clients.
RESERVED_EVENT_PREFIX = "weft."


def ok(model: BaseModel, status: int = 200, **headers: str) -> ApiResponse:
    return ApiResponse(
        status=status, body=model.model_dump(mode="json", by_alias=True, exclude_none=True), headers=headers
    )


def execution_url(tenant_id: str, execution_id: str) -> str:
    return f"{BASE}/tenants/{tenant_id}/executions/{execution_id}"


def _tenant(request: ApiRequest) -> str:
    return request.param("tenant")


def _paged(fetch: Callable[[str | None], Page[T]], token: str | None) -> Page[T]:
    """Run a listing; a token the store cannot read is the client's mistake (400), not a 500."""
    if token is None:
        return fetch(None)
    try:
        return fetch(token)
    except WeftError:
        raise
    except Exception:
        log.info("listing refused a continuation token", exc_info=True)
        raise bodies.bad_token() from None


# ------------------------------------------------------------------------------------ platform


def health(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    return ok(models.Health())


def create_tenant(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    body = bodies.read_body(request, models.CreateTenant, required=True)
    given = body.limits or models.LimitsIn()
    limits = TenantLimits(
        max_running_tasks=given.max_running_tasks or deps.default_max_running_tasks,
        max_active_executions=given.max_active_executions or deps.default_max_active_executions,
        submits_per_second=given.submits_per_second or deps.default_submits_per_second,
    )
    tenant = deps.stores.tenants.create_tenant(
        Tenant(id=body.id, display_name=body.display_name or body.id, limits=limits, created_at=deps.clock())
    )
    return ok(_tenant_out(tenant), 201)


def get_tenant(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    tenant = deps.stores.tenants.get_tenant(_tenant(request))
    if tenant is None:
        raise NotFoundError(f"tenant {_tenant(request)!r} does not exist")
    return ok(_tenant_out(tenant))


def _tenant_out(tenant: Tenant) -> models.TenantOut:
    return models.TenantOut(
        id=tenant.id,
        display_name=tenant.display_name,
        limits=models.Limits.model_validate(tenant.limits.model_dump()),
        created_at=tenant.created_at,
    )


def revoke_api_key(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    """Revoke a key (idempotent): requests with it get 401 from then on."""
    record = deps.stores.tenants.revoke_api_key(_tenant(request), request.param("keyId"), deps.clock())
    return ok(
        models.ApiKeyOut(
            key_id=record.key_id,
            tenant_id=record.tenant_id,
            name=record.name,
            created_at=record.created_at,
            revoked_at=record.revoked_at,
        )
    )


def create_api_key(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    body = bodies.read_body(request, models.CreateApiKey)
    tenant_id = _tenant(request)
    if deps.stores.tenants.get_tenant(tenant_id) is None:
        raise NotFoundError(f"tenant {tenant_id!r} does not exist")
    key_id, key = new_api_key()
    record = deps.stores.tenants.add_api_key(
        ApiKeyRecord(
            key_id=key_id,
            tenant_id=tenant_id,
            key_hash=hash_api_key(key),
            name=body.name,
            created_at=deps.clock(),
        )
    )
    out = models.ApiKeyCreated(
        key=key, key_id=record.key_id, tenant_id=tenant_id, name=record.name, created_at=record.created_at
    )
    return ok(out, 201)


# ------------------------------------------------------------------------------------ workflows


def _workflow_name(request: ApiRequest) -> str:
    name = request.param("workflow")
    if not re.fullmatch(models.WORKFLOW_NAME_PATTERN, name):
        raise ValidationFailedError(
            [
                Problem(
                    path="$.path.workflow",
                    message="1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
                )
            ]
        )
    return name


def _validated(deps: ApiDeps, doc: Any) -> WorkflowDefinition:
    problems = find_problems(doc, deps.known_handlers())
    if not problems:
        # The validator parses leniently (true would pass as 1); the API holds JSON to its schema.
        try:
            WorkflowDefinition.model_validate_json(json.dumps(doc), strict=True, by_alias=True, by_name=False)
        except ValidationError as exc:
            problems = bodies.problems_of(exc)
    if problems:
        raise ValidationFailedError(problems, f"the workflow definition has {len(problems)} problem(s)")
    return WorkflowDefinition.model_validate(doc, by_alias=True, by_name=False)


def put_workflow(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    tenant_id = _tenant(request)
    workflow = _workflow_name(request)
    if not request.body:
        raise ValidationFailedError([Problem(path="$", message="a workflow definition is required")])
    definition = _validated(deps, bodies.parse_json(request.body))
    document = definition_document(definition)
    defs = deps.stores.definitions
    for _ in range(MAX_CAS_ATTEMPTS):
        current = defs.get_draft(tenant_id, workflow)
        draft = WorkflowDraft(
            tenant_id=tenant_id,
            workflow=workflow,
            definition=document,
            updated_at=deps.clock(),
            etag=current.etag if current else None,
        )
        try:
            saved = defs.save_draft(draft)
        except ConcurrencyError:
            continue
        out = models.DraftSaved(tenant_id=tenant_id, workflow=workflow, updated_at=saved.updated_at)
        return ok(out, 200 if current else 201)
    raise ConcurrencyError(f"workflow {workflow!r}: too many concurrent saves")


def publish(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    tenant_id = _tenant(request)
    workflow = request.param("workflow")
    draft = deps.stores.definitions.get_draft(tenant_id, workflow)
    if draft is None:
        raise NotFoundError(f"workflow {workflow!r} has no draft to publish")
    # Checked again: a handler the draft uses may have been removed since it was saved.
    definition = _validated(deps, draft.definition)
    version, created = deps.stores.definitions.publish(
        tenant_id, workflow, definition_digest(definition), definition_document(definition), deps.clock()
    )
    out = models.Published(
        workflow=workflow, version=version.version, digest=version.digest, published_at=version.published_at
    )
    return ok(out, 201 if created else 200)


def list_workflows(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    tenant_id = _tenant(request)
    limit = bodies.query_limit(request)
    page = _paged(
        lambda t: deps.stores.definitions.list_workflows(tenant_id, limit=limit, continuation=t),
        bodies.query_token(request),
    )
    items = [
        models.WorkflowItem(
            workflow=s.workflow,
            latest_version=s.latest_version,
            latest_digest=s.latest_digest,
            has_draft=s.has_draft,
            updated_at=s.updated_at,
        )
        for s in page.items
    ]
    return ok(models.WorkflowList(items=items, continuation_token=page.continuation))


def get_version(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    tenant_id = _tenant(request)
    workflow = request.param("workflow")
    number = bodies.path_int(request, "version")
    wv = deps.stores.definitions.get_version(tenant_id, workflow, number)
    if wv is None:
        raise NotFoundError(f"workflow {workflow!r} version {number} does not exist")
    out = models.VersionOut(
        workflow=wv.workflow,
        version=wv.version,
        digest=wv.digest,
        definition=wv.definition,
        published_at=wv.published_at,
    )
    return ok(out)


# ------------------------------------------------------------------------------------ executions


def _accepted(execution: Execution) -> ApiResponse:
    url = execution_url(execution.tenant_id, execution.id)
    out = models.ExecutionAccepted(
        id=execution.id,
        status=execution.status,
        workflow=execution.workflow,
        version=execution.version,
        links=models.Links(self=url),
    )
    return ok(out, 202, Location=url)


def _idempotency_key(request: ApiRequest) -> str | None:
    key = request.header("idempotency-key")
    if key is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(key):
        raise ValidationFailedError(
            [
                Problem(
                    path="$.header.Idempotency-Key",
                    message=f"1-{IDEMPOTENCY_KEY_MAX} visible ASCII characters",
                )
            ]
        )
    return key


def submit(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    tenant_id = _tenant(request)
    workflow = request.param("workflow")
    key = _idempotency_key(request)
    body = bodies.read_body(request, models.SubmitBody)
    result = submit_execution(
        _submission_deps(deps),
        tenant_id,
        workflow,
        input=body.input,
        version=body.version,
        idempotency_key=key,
        trigger=TriggerKind.HTTP,
        now=deps.clock(),
    )
    return _accepted(result.execution)


def _submission_deps(deps: ApiDeps) -> SubmissionDeps:
    return SubmissionDeps(
        stores=deps.stores,
        payloads=deps.payloads,
        starter=deps.durable,
        claim_check_threshold_bytes=deps.claim_check_threshold_bytes,
        max_input_bytes=deps.max_input_bytes,
        clock=deps.clock,
    )


def _execution(deps: ApiDeps, tenant_id: str, execution_id: str) -> Execution:
    ex = deps.stores.executions.get_execution(execution_id)
    # Another tenant's execution does not exist for this caller.
    if ex is None or ex.tenant_id != tenant_id:
        raise NotFoundError(f"execution {execution_id!r} does not exist")
    return ex


def _resolved(deps: ApiDeps, value: Any) -> Any:
    if not is_claim_check(value):
        return value
    try:
        return resolve(deps.payloads, value)
    except WeftError:
        log.warning("claim-checked payload %s could not be read", value.get("$ref"), exc_info=True)
        return value


def get_execution(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    ex = _execution(deps, _tenant(request), request.param("id"))
    runs = {r.task_id: r for r in deps.stores.executions.get_task_runs(ex.id)}
    wv = deps.stores.definitions.get_version(ex.tenant_id, ex.workflow, ex.version)
    order = [t.get("id") for t in (wv.definition.get("tasks", []) if wv else []) if isinstance(t, dict)]
    task_ids = [t for t in order if isinstance(t, str)] + sorted(set(runs) - set(order))
    tasks = []
    for task_id in task_ids:
        run = runs.get(task_id)
        tasks.append(
            models.TaskOut(
                id=task_id,
                status=run.status if run else TaskStatus.PENDING,
                attempts=run.attempts if run else 0,
                started_at=run.started_at if run else None,
                finished_at=run.finished_at if run else None,
                error=run.error if run else None,
            )
        )
    output = _resolved(deps, ex.output)
    if isinstance(output, dict):
        output = {k: _resolved(deps, v) for k, v in output.items()}
    out = models.ExecutionOut(
        id=ex.id,
        workflow=ex.workflow,
        version=ex.version,
        status=ex.status,
        trigger=ex.trigger,
        created_at=ex.created_at,
        started_at=ex.started_at,
        finished_at=ex.finished_at,
        input=_resolved(deps, ex.input),
        output=output,
        error=ex.error,
        rerun_of=ex.rerun_of,
        tasks=tasks,
    )
    return ok(out)


def _status_filter(request: ApiRequest, enum: type[T], values: list[str]) -> T | None:
    raw = request.query.get("status")
    if raw is None or raw == "":
        return None
    if raw not in values:
        raise ValidationFailedError(
            [Problem(path="$.query.status", message=f"one of {', '.join(values)}; got {raw!r}")]
        )
    return enum(raw)  # type: ignore[call-arg]


def list_executions(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    tenant_id = _tenant(request)
    status = _status_filter(request, ExecutionStatus, [s.value for s in ExecutionStatus])
    workflow = request.query.get("workflow") or None
    limit = bodies.query_limit(request)
    page = _paged(
        lambda t: deps.stores.executions.list_executions(
            tenant_id, workflow=workflow, status=status, limit=limit, continuation=t
        ),
        bodies.query_token(request),
    )
    items = [
        models.ExecutionItem(
            id=e.id,
            workflow=e.workflow,
            version=e.version,
            status=e.status,
            trigger=e.trigger,
            created_at=e.created_at,
            started_at=e.started_at,
            finished_at=e.finished_at,
            error=e.error,
            rerun_of=e.rerun_of,
        )
        for e in page.items
    ]
    return ok(models.ExecutionList(items=items, continuation_token=page.continuation))


def _finished(ex: Execution) -> ConflictError:
    return ConflictError(
        f"execution {ex.id} has already finished ({ex.status})", details={"status": str(ex.status)}
    )


def cancel(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    """Raise ``weft.cancel`` on the execution and its running task batches; the orchestrator
    finalizes it as cancelled. An execution whose orchestration does not exist (never started)
    is cancelled here, in the store."""
    ex = _execution(deps, _tenant(request), request.param("id"))
    if EXECUTION_MACHINE.is_terminal(ex.status):
        raise _finished(ex)
    by = request.principal.name if request.principal else "anonymous"
    delivered = deps.durable.raise_event(ex.id, EventName.CANCEL, {"by": by})
    for instance in deps.durable.running_instances(f"{ex.id}::"):
        deps.durable.raise_event(instance, EventName.CANCEL, {"by": by})
    if not delivered:
        ex = _cancel_in_store(deps, ex)
    return ok(models.CancelAccepted(id=ex.id, status=ex.status), 202)


def _cancel_in_store(deps: ApiDeps, ex: Execution) -> Execution:
    for _ in range(MAX_CAS_ATTEMPTS):
        if EXECUTION_MACHINE.is_terminal(ex.status):
            return ex  # the orchestration finished it meanwhile
        now = deps.clock()
        done = ex.model_copy(update={"status": ExecutionStatus.CANCELLED, "finished_at": now})
        event, outbox = lifecycle(done, LifecycleEvent.EXECUTION_CANCELLED, now, {"reason": "cancelled"})
        try:
            result = deps.stores.executions.commit(
                ExecutionWrite(ex.id, execution=done, events=[event], outbox=[outbox])
            )
        except ConcurrencyError:
            fresh = deps.stores.executions.get_execution(ex.id)
            if fresh is None:
                raise NotFoundError(f"execution {ex.id!r} does not exist") from None
            ex = fresh
            continue
        return result.execution or done
    raise ConcurrencyError(f"execution {ex.id}: too many concurrent updates")


def raise_event(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    name = request.param("name")
    if not re.fullmatch(models.EVENT_NAME_PATTERN, name) or name.lower().startswith(RESERVED_EVENT_PREFIX):
        raise ValidationFailedError(
            [
                Problem(
                    path="$.path.name",
                    message="1-128 letters, digits, '_', '.' or '-', not starting with 'weft.' (reserved)",
                )
            ]
        )
    data = bodies.parse_json(request.body) if request.body else {}
    ex = _execution(deps, _tenant(request), request.param("id"))
    if EXECUTION_MACHINE.is_terminal(ex.status):
        raise _finished(ex)
    if not deps.durable.raise_event(ex.id, name, data):
        raise ConflictError(f"execution {ex.id} is not running yet; send the event again shortly")
    return ok(models.EventAccepted(execution_id=ex.id, name=name), 202)


def rerun(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    body = bodies.read_body(request, models.RerunBody)
    old = _execution(deps, _tenant(request), request.param("id"))
    new = rerun_execution(_submission_deps(deps), old, version=body.version, now=deps.clock())
    return _accepted(new)


# ------------------------------------------------------------------------------------ dead letters


def _dead_letter_out(d: DeadLetter) -> models.DeadLetterOut:
    return models.DeadLetterOut(
        id=d.id,
        execution_id=d.execution_id,
        workflow=d.workflow,
        task_id=d.task_id,
        attempts=d.attempts,
        error=d.error,
        status=d.status,
        created_at=d.created_at,
        resolved_at=d.resolved_at,
        resolution=d.resolution,
    )


def list_dead_letters(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    tenant_id = _tenant(request)
    status = _status_filter(request, DeadLetterStatus, [s.value for s in DeadLetterStatus])
    limit = bodies.query_limit(request)
    page = _paged(
        lambda t: deps.stores.executions.list_dead_letters(
            tenant_id, status=status, limit=limit, continuation=t
        ),
        bodies.query_token(request),
    )
    items = [_dead_letter_out(d) for d in page.items]
    return ok(models.DeadLetterList(items=items, continuation_token=page.continuation))


def _operate(
    request: ApiRequest,
    deps: ApiDeps,
    kind: OperatorActionKind,
    *,
    params: dict[str, Any] | None = None,
    output: Any = None,
) -> ApiResponse:
    tenant_id = _tenant(request)
    dl_id = request.param("id")
    action = resolve_dead_letter(
        deps.stores,
        deps.payloads,
        tenant_id,
        dl_id,
        kind,
        now=deps.clock,
        params=params,
        output=output,
        resolved_by=request.principal.name if request.principal else None,
        claim_check_threshold=deps.claim_check_threshold_bytes,
    )
    dl = deps.stores.executions.get_dead_letter(tenant_id, dl_id)
    assert dl is not None  # resolve_dead_letter just committed it
    if not deps.durable.raise_event(dl.execution_id, EventName.OPERATOR_ACTION, action.to_json_dict()):
        # Resolved in the store but the orchestration is gone: nothing waits for the action any more.
        log.error("operator action on %s: execution %s has no running orchestration", dl_id, dl.execution_id)
    out = models.ActionAccepted(
        id=dl.id, execution_id=dl.execution_id, task_id=dl.task_id, action=dl.resolution or kind.value
    )
    return ok(out, 202)


def retry_dead_letter(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    body = bodies.read_body(request, models.RetryBody)
    return _operate(request, deps, OperatorActionKind.RETRY, params=body.params)


def skip_dead_letter(request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    body = bodies.read_body(request, models.SkipBody)
    return _operate(request, deps, OperatorActionKind.SKIP, output=body.output)
