"""The routing table: one entry per endpoint, the single source for the Functions registrations
(``triggers/api.py``), the in-process router the tests use, and the OpenAPI document.

:func:`handle` runs one request through authentication, the body size limit and the handler, and
turns every error into problem+json; it never raises.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from shared.api import auth, bodies, endpoints, models, problems
from shared.api.auth import AuthFailure
from shared.api.openapi import openapi_document
from shared.api.types import ApiDeps, ApiRequest, ApiResponse, AuthKind
from shared.errors import NotFoundError
from shared.names import TriggerName
from shared.records import DeadLetterStatus
from shared.states import ExecutionStatus

Handler = Callable[[ApiRequest, ApiDeps], ApiResponse]

BASE_PATH = "/api/v1"
#: Bodies of endpoints that take no large values.
SMALL_BODY = 64 * 1024
#: A definition: 500 tasks with up to 64 KB of params each would be 32 MB; real ones are far smaller.
DEFINITION_BODY = 4 * 1024 * 1024
#: Input (or a skipped task's output) up to ``max_input_bytes``, plus the JSON around it.
LARGE_BODY = -1


@dataclass(frozen=True)
class Param:
    name: str
    location: str  # "query" | "header" | "path"
    schema: dict[str, Any]
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class Route:
    name: TriggerName
    method: str
    #: Relative to ``/api/v1``, Functions/ASP.NET style: ``tenants/{tenant}/executions/{id}``.
    template: str
    handler: Handler
    auth: AuthKind
    summary: str
    #: Success statuses and their body model (``None``: schema-less JSON).
    responses: dict[int, type[BaseModel] | None]
    #: Error statuses this endpoint can answer with (besides 401/403 from ``auth``).
    errors: tuple[int, ...] = ()
    request_model: type[BaseModel] | None = None
    #: ``{}``-style schema for bodies that are not a model (an event's payload).
    request_schema: dict[str, Any] | None = None
    body_required: bool = False
    params: tuple[Param, ...] = ()
    path_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_body: int = SMALL_BODY
    response_headers: dict[int, dict[str, str]] = field(default_factory=dict)

    @property
    def function_route(self) -> str:
        """The Functions ``route=`` (the host adds the ``api/`` prefix)."""
        return f"v1/{self.template}" if self.template else "v1"

    @property
    def path(self) -> str:
        return f"{BASE_PATH}/{self.template}"

    def path_schema(self, name: str) -> dict[str, Any]:
        return self.path_schemas.get(name) or PATH_SCHEMAS.get(name) or {"type": "string", "minLength": 1}

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"\{(\w+)\}", self.template)

    def body_limit(self, deps: ApiDeps) -> int:
        return deps.max_input_bytes + SMALL_BODY if self.max_body == LARGE_BODY else self.max_body


#: What the path parameters look like (a value outside these is a 4xx: unknown, or not yours).
PATH_SCHEMAS: dict[str, dict[str, Any]] = {
    "tenant": {"type": "string", "maxLength": 64, "pattern": models.TENANT_ID_PATTERN},
    "workflow": {"type": "string", "pattern": models.WORKFLOW_NAME_PATTERN},
    # Execution ids (hex) and dead-letter ids (<executionId>.<taskId>.<attempt>).
    "id": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"},
    "name": {"type": "string", "pattern": models.EVENT_NAME_PATTERN},
}

_LIST = (
    Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100, "default": 50}),
    Param(
        "continuationToken",
        "query",
        {"type": "string", "maxLength": bodies.MAX_TOKEN, "pattern": bodies.TOKEN_PATTERN},
        "From the previous page",
    ),
)
_TENANT_ERRORS = (400, 404)

ROUTES: tuple[Route, ...] = (
    Route(
        TriggerName.API_HEALTH,
        "GET",
        "health",
        endpoints.health,
        AuthKind.NONE,
        "Liveness",
        {200: models.Health},
    ),
    Route(
        TriggerName.API_OPENAPI,
        "GET",
        "openapi.json",
        lambda r, d: openapi_response(),
        AuthKind.NONE,
        "This document",
        {200: None},
    ),
    Route(
        TriggerName.API_CREATE_TENANT,
        "POST",
        "tenants",
        endpoints.create_tenant,
        AuthKind.ADMIN,
        "Create a tenant (admin)",
        {201: models.TenantOut},
        (400, 409, 413),
        request_model=models.CreateTenant,
        body_required=True,
    ),
    Route(
        TriggerName.API_CREATE_API_KEY,
        "POST",
        "tenants/{tenant}/api-keys",
        endpoints.create_api_key,
        AuthKind.ADMIN,
        "Create an API key for a tenant (admin); the key is shown once",
        {201: models.ApiKeyCreated},
        (400, 404, 409, 413),
        request_model=models.CreateApiKey,
    ),
    Route(
        TriggerName.API_REVOKE_API_KEY,
        "DELETE",
        "tenants/{tenant}/api-keys/{keyId}",
        endpoints.revoke_api_key,
        AuthKind.ADMIN,
        "Revoke an API key (admin); requests with it get 401 from then on",
        {200: models.ApiKeyOut},
        (400, 404),
    ),
    Route(
        TriggerName.API_GET_TENANT,
        "GET",
        "tenants/{tenant}",
        endpoints.get_tenant,
        AuthKind.TENANT,
        "Read a tenant and its limits",
        {200: models.TenantOut},
        _TENANT_ERRORS,
    ),
    Route(
        TriggerName.API_PUT_WORKFLOW,
        "PUT",
        "tenants/{tenant}/workflows/{workflow}",
        endpoints.put_workflow,
        AuthKind.TENANT,
        "Save the draft definition of a workflow (201 created, 200 replaced)",
        {201: models.DraftSaved, 200: models.DraftSaved},
        (*_TENANT_ERRORS, 409, 413),
        request_schema={"$ref": "#/components/schemas/WorkflowDefinition"},
        body_required=True,
        max_body=DEFINITION_BODY,
    ),
    Route(
        TriggerName.API_PUBLISH_WORKFLOW,
        "POST",
        "tenants/{tenant}/workflows/{workflow}/versions",
        endpoints.publish,
        AuthKind.TENANT,
        "Publish the draft as the next immutable version (200: identical to the latest version)",
        {201: models.Published, 200: models.Published},
        (*_TENANT_ERRORS, 409, 413),
    ),
    Route(
        TriggerName.API_LIST_WORKFLOWS,
        "GET",
        "tenants/{tenant}/workflows",
        endpoints.list_workflows,
        AuthKind.TENANT,
        "List workflows, by name",
        {200: models.WorkflowList},
        _TENANT_ERRORS,
        params=_LIST,
    ),
    Route(
        TriggerName.API_GET_VERSION,
        "GET",
        "tenants/{tenant}/workflows/{workflow}/versions/{version}",
        endpoints.get_version,
        AuthKind.TENANT,
        "A published version",
        {200: models.VersionOut},
        _TENANT_ERRORS,
        path_schemas={"version": {"type": "integer", "minimum": 1, "maximum": 2**31}},
    ),
    Route(
        TriggerName.API_SUBMIT_EXECUTION,
        "POST",
        "tenants/{tenant}/workflows/{workflow}/executions",
        endpoints.submit,
        AuthKind.TENANT,
        "Submit an execution (version: the latest published one unless given)",
        {202: models.ExecutionAccepted},
        (*_TENANT_ERRORS, 409, 413, 429),
        request_model=models.SubmitBody,
        params=(
            Param(
                "Idempotency-Key",
                "header",
                {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^[\x21-\x7e]+$"},
                "The same key with the same body returns the same execution; with another body, 409",
            ),
        ),
        max_body=LARGE_BODY,
        response_headers={202: {"Location": "The execution's URL"}, 429: {"Retry-After": "Seconds"}},
    ),
    Route(
        TriggerName.API_GET_EXECUTION,
        "GET",
        "tenants/{tenant}/executions/{id}",
        endpoints.get_execution,
        AuthKind.TENANT,
        "An execution with its tasks",
        {200: models.ExecutionOut},
        _TENANT_ERRORS,
    ),
    Route(
        TriggerName.API_LIST_EXECUTIONS,
        "GET",
        "tenants/{tenant}/executions",
        endpoints.list_executions,
        AuthKind.TENANT,
        "List executions, newest first",
        {200: models.ExecutionList},
        _TENANT_ERRORS,
        params=(
            Param("workflow", "query", {"type": "string"}),
            Param("status", "query", {"type": "string", "enum": [s.value for s in ExecutionStatus]}),
            *_LIST,
        ),
    ),
    Route(
        TriggerName.API_CANCEL_EXECUTION,
        "POST",
        "tenants/{tenant}/executions/{id}/cancel",
        endpoints.cancel,
        AuthKind.TENANT,
        "Cancel an execution (409 when it has finished)",
        {202: models.CancelAccepted},
        (*_TENANT_ERRORS, 409, 413),
    ),
    Route(
        TriggerName.API_RAISE_EVENT,
        "POST",
        "tenants/{tenant}/executions/{id}/events/{name}",
        endpoints.raise_event,
        AuthKind.TENANT,
        "Deliver an external event (e.g. an approval); the body is its JSON payload (empty: {})",
        {202: models.EventAccepted},
        (*_TENANT_ERRORS, 409, 413),
        request_schema={},
        max_body=LARGE_BODY,
    ),
    Route(
        TriggerName.API_RERUN_EXECUTION,
        "POST",
        "tenants/{tenant}/executions/{id}/rerun",
        endpoints.rerun,
        AuthKind.TENANT,
        "Start a new execution with the same input; succeeded tasks reuse their outputs",
        {202: models.ExecutionAccepted},
        (*_TENANT_ERRORS, 409, 413, 429),
        request_model=models.RerunBody,
        response_headers={202: {"Location": "The new execution's URL"}, 429: {"Retry-After": "Seconds"}},
    ),
    Route(
        TriggerName.API_LIST_DEAD_LETTERS,
        "GET",
        "tenants/{tenant}/dead-letters",
        endpoints.list_dead_letters,
        AuthKind.TENANT,
        "List dead-lettered tasks, newest first",
        {200: models.DeadLetterList},
        _TENANT_ERRORS,
        params=(
            Param("status", "query", {"type": "string", "enum": [s.value for s in DeadLetterStatus]}),
            *_LIST,
        ),
    ),
    Route(
        TriggerName.API_RETRY_DEAD_LETTER,
        "POST",
        "tenants/{tenant}/dead-letters/{id}/retry",
        endpoints.retry_dead_letter,
        AuthKind.TENANT,
        "Retry a dead-lettered task, optionally with new params (409 when resolved)",
        {202: models.ActionAccepted},
        (*_TENANT_ERRORS, 409, 413),
        request_model=models.RetryBody,
        max_body=LARGE_BODY,
    ),
    Route(
        TriggerName.API_SKIP_DEAD_LETTER,
        "POST",
        "tenants/{tenant}/dead-letters/{id}/skip",
        endpoints.skip_dead_letter,
        AuthKind.TENANT,
        "Skip a dead-lettered task, recording the given output (409 when resolved)",
        {202: models.ActionAccepted},
        (*_TENANT_ERRORS, 409, 413),
        request_model=models.SkipBody,
        max_body=LARGE_BODY,
    ),
)

BY_NAME: dict[str, Route] = {str(r.name): r for r in ROUTES}


def handle(route: Route, request: ApiRequest, deps: ApiDeps) -> ApiResponse:
    """Authenticate, check the body size, run the handler; errors become problem+json."""
    try:
        principal = auth.authenticate(request, deps, route.auth)
        if route.auth is AuthKind.TENANT and principal is not None and principal.admin:
            tenant = request.route_params.get("tenant", "")
            if deps.stores.tenants.get_tenant(tenant) is None:
                raise NotFoundError(f"tenant {tenant!r} does not exist")
        _check_path(route, request)
        limit = route.body_limit(deps)
        if len(request.body) > limit:
            return problems.problem(
                413,
                f"the body is {len(request.body)} bytes; this endpoint takes at most {limit}",
                code="weft.PayloadTooLarge",
            )
        return route.handler(dataclasses.replace(request, principal=principal), deps)
    except AuthFailure as failure:
        return failure.response
    except Exception as exc:
        return problems.from_exception(exc)


def _check_path(route: Route, request: ApiRequest) -> None:
    """An id or workflow name that cannot exist is not found (the endpoint that creates a workflow
    checks its name itself and answers 400)."""
    for name in ("id", "workflow"):
        value = request.route_params.get(name)
        if value is None or (name == "workflow" and route.method == "PUT"):
            continue
        pattern = route.path_schema(name).get("pattern")
        if pattern is not None and not re.fullmatch(pattern, value):
            raise NotFoundError(f"no {name} {value!r}")


# --------------------------------------------------------------------------- in-process router


def _compile(route: Route) -> re.Pattern[str]:
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(route.path))
    return re.compile(f"^{pattern}$", re.IGNORECASE)


_COMPILED = [(r, _compile(r)) for r in ROUTES]


def match(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The route for a request path, as the Functions host would pick it (literal segments win)."""
    found = [(r, m) for r, rx in _COMPILED if r.method == method.upper() and (m := rx.match(path))]
    if not found:
        return None
    route, m = min(found, key=lambda rm: len(rm[0].path_params))
    return route, m.groupdict()


def openapi_response() -> ApiResponse:
    return ApiResponse(status=200, body=openapi_document(ROUTES))
