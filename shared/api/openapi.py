"""The OpenAPI 3.1 document, generated from the routing table and the pydantic models.

Served at ``GET /api/v1/openapi.json``. Schemas are pydantic's JSON Schema (draft 2020-12, which
OpenAPI 3.1 uses as is): request bodies in validation mode, responses in serialization mode.
"""

from __future__ import annotations

import copy
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from shared.api import models
from shared.api.problems import PROBLEM_JSON
from shared.api.types import AuthKind
from shared.definition import WorkflowDefinition

if TYPE_CHECKING:
    from shared.api.routes import Route

REF = "#/components/schemas/{model}"
VERSION = "1.0.0"


def _schemas(
    route_list: tuple[Route, ...],
) -> tuple[dict[tuple[type[BaseModel], str], Any], dict[str, Any]]:
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (models.ProblemDetails, "serialization"),
        (WorkflowDefinition, "validation"),
    ]
    for r in route_list:
        if r.request_model is not None:
            wanted.append((r.request_model, "validation"))
        wanted.extend((m, "serialization") for m in r.responses.values() if m is not None)
    unique = list(dict.fromkeys(wanted))
    refs, doc = models_json_schema(unique, ref_template=REF, by_alias=True)
    out: dict[tuple[type[BaseModel], str], Any] = {}
    for (m, mode), schema in refs.items():
        if isinstance(m, type) and issubclass(m, BaseModel):
            out[(m, mode)] = schema
    return out, doc.get("$defs", {})


def _problem(description: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": REF.format(model="ProblemDetails")}}},
    }
    if headers:
        out["headers"] = {h: {"description": d, "schema": {"type": "string"}} for h, d in headers.items()}
    return out


_EXECUTION_LINKS = {
    name: {
        "operationId": op,
        "parameters": {"tenant": "$request.path.tenant", "id": "$response.body#/id"},
    }
    for name, op in (
        ("GetExecution", "api_get_execution"),
        ("CancelExecution", "api_cancel_execution"),
        ("RaiseEvent", "api_raise_event"),
        ("RerunExecution", "api_rerun_execution"),
    )
}
#: OpenAPI links: where an id a response returns can be used next (clients, and stateful testing).
LINKS: dict[str, dict[int, dict[str, Any]]] = {
    "api_submit_execution": {202: _EXECUTION_LINKS},
    "api_rerun_execution": {202: _EXECUTION_LINKS},
    "api_create_tenant": {
        201: {
            "CreateApiKey": {
                "operationId": "api_create_api_key",
                "parameters": {"tenant": "$response.body#/id"},
            }
        }
    },
}


def _operation(route: Route, refs: dict[tuple[type[BaseModel], str], Any]) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": str(route.name), "summary": route.summary}
    params: list[dict[str, Any]] = [
        {
            "name": p,
            "in": "path",
            "required": True,
            "schema": route.path_schema(p),
        }
        for p in route.path_params
    ]
    params.extend(
        {
            "name": p.name,
            "in": p.location,
            "required": p.required,
            "schema": p.schema,
            **({"description": p.description} if p.description else {}),
        }
        for p in route.params
    )
    if params:
        op["parameters"] = params
    body_schema: dict[str, Any] | None = None
    if route.request_model is not None:
        body_schema = refs[(route.request_model, "validation")]
    elif route.request_schema is not None:
        body_schema = route.request_schema
    if body_schema is not None:
        op["requestBody"] = {
            "required": route.body_required,
            "content": {"application/json": {"schema": body_schema}},
        }
    responses: dict[str, Any] = {}
    for status, model in route.responses.items():
        entry: dict[str, Any] = {"description": HTTPStatus(status).phrase}
        schema = refs[(model, "serialization")] if model is not None else {"type": "object"}
        entry["content"] = {"application/json": {"schema": schema}}
        links = LINKS.get(str(route.name), {}).get(status)
        if links:
            entry["links"] = links
        hdrs = route.response_headers.get(status)
        if hdrs:
            entry["headers"] = {h: {"description": d, "schema": {"type": "string"}} for h, d in hdrs.items()}
        responses[str(status)] = entry
    errors = set(route.errors)
    if route.auth is not AuthKind.NONE:
        errors |= {401, 403}
        op["security"] = [{"bearer": []}]
    if route.auth is not AuthKind.NONE:
        # Unexpected failures (500) and store throttling or outages (503, with Retry-After).
        errors |= {500, 503}
    for status in sorted(errors):
        responses[str(status)] = _problem(HTTPStatus(status).phrase, route.response_headers.get(status))
    op["responses"] = responses
    tag: Literal["platform", "workflows", "executions", "dead-letters"] = "platform"
    if "dead-letters" in route.template:
        tag = "dead-letters"
    elif "executions" in route.template:
        tag = "executions"
    elif "workflows" in route.template:
        tag = "workflows"
    op["tags"] = [tag]
    return op


_CACHE: dict[int, tuple[tuple[Route, ...], dict[str, Any]]] = {}


def _document(routes: tuple[Route, ...]) -> dict[str, Any]:
    cached = _CACHE.get(id(routes))
    if cached is not None and cached[0] is routes:
        return cached[1]
    doc = _build(routes)
    _CACHE[id(routes)] = (routes, doc)
    return doc


def _build(routes: tuple[Route, ...]) -> dict[str, Any]:
    refs, defs = _schemas(routes)
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, refs)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Weft API",
            "version": VERSION,
            "description": (
                "Multi-tenant DAG workflow orchestration. Tenant endpoints take "
                "`Authorization: Bearer <tenant API key>`; admin endpoints the admin key. "
                "Errors are application/problem+json (RFC 9457)."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": defs,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def openapi_document(routes: tuple[Route, ...]) -> dict[str, Any]:
    """A fresh copy (callers may mutate it)."""
    return copy.deepcopy(_document(routes))
