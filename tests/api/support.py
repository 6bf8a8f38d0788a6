"""The API core with SQLite stores, a file payload store, a settable clock and a fake Durable client."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from shared.adapters.payload_store import FileSystemPayloadStore
from shared.adapters.sqlite_store import SqliteStore
from shared.api import routes
from shared.api.openapi import openapi_document
from shared.api.types import ApiDeps, ApiRequest, ApiResponse
from shared.ports import Stores

T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
ADMIN = "admin-secret-key"

DAG: dict[str, Any] = {
    "tasks": [
        {"id": "a", "handler": "noop", "params": {"result": 1}},
        {"id": "b", "handler": "noop", "params": {"result": "${{ input.x }}"}, "dependsOn": ["a"]},
    ]
}


@dataclass
class FakeDurable:
    """Instances are "live" once started until ``finish``ed; events are recorded."""

    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    events: list[tuple[str, str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_new(self, orchestrator: str, instance_id: str, input: dict[str, Any]) -> None:
        with self.lock:
            self.started.setdefault(instance_id, {"orchestrator": orchestrator, "input": input})

    def raise_event(self, instance_id: str, name: str, data: Any) -> bool:
        with self.lock:
            if instance_id not in self.started or instance_id in self.finished:
                return False
            self.events.append((instance_id, name, data))
            return True

    def running_instances(self, prefix: str) -> list[str]:
        with self.lock:
            return [i for i in self.started if i.startswith(prefix) and i not in self.finished]

    def terminate(self, instance_id: str, reason: str) -> None:
        with self.lock:
            self.finished.add(instance_id)


@dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Api:
    deps: ApiDeps
    stores: Stores
    durable: FakeDurable
    clock: Clock

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        raw: bytes | None = None,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> ApiResponse:
        full = path if path.startswith("/api/") else f"/api/v1/{path.lstrip('/')}"
        found = routes.match(method, full)
        assert found is not None, f"no route for {method} {full}"
        route, params = found
        hdrs = {k.lower(): v for k, v in (headers or {}).items()}
        if key is not None:
            hdrs["authorization"] = f"Bearer {key}"
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        request = ApiRequest(
            method=method, path=full, route_params=params, query=dict(query or {}), headers=hdrs, body=data
        )
        response = routes.handle(route, request, self.deps)
        assert_conforms(route, response)
        return response

    # conveniences ----------------------------------------------------------------------

    def tenant(self, tenant_id: str, **limits: Any) -> str:
        """Create a tenant and return a fresh API key of it."""
        body: dict[str, Any] = {"id": tenant_id}
        if limits:
            body["limits"] = limits
        r = self.call("POST", "tenants", body=body, key=ADMIN)
        assert r.status == 201, r.json()
        r = self.call("POST", f"tenants/{tenant_id}/api-keys", key=ADMIN)
        assert r.status == 201, r.json()
        key: str = r.json()["key"]
        return key

    def workflow(
        self, tenant_id: str, key: str, name: str = "wf", definition: dict[str, Any] | None = None
    ) -> int:
        r = self.call("PUT", f"tenants/{tenant_id}/workflows/{name}", body=definition or DAG, key=key)
        assert r.status in (200, 201), r.json()
        r = self.call("POST", f"tenants/{tenant_id}/workflows/{name}/versions", key=key)
        assert r.status in (200, 201), r.json()
        version: int = r.json()["version"]
        return version


def make_api(tmp_path: Path, **overrides: Any) -> Api:
    store = SqliteStore(tmp_path / "weft.sqlite3")
    stores = Stores(definitions=store, executions=store, idempotency=store, leases=store, tenants=store)
    durable = FakeDurable()
    clock = Clock()
    deps = ApiDeps(
        stores=stores,
        payloads=FileSystemPayloadStore(tmp_path / "payloads"),
        durable=durable,
        clock=clock,
        admin_key=ADMIN,
    )
    if overrides:
        deps = replace(deps, **overrides)
    return Api(deps=deps, stores=stores, durable=durable, clock=clock)


_DOC = openapi_document(routes.ROUTES)


def assert_conforms(route: routes.Route, response: ApiResponse) -> None:
    """Every response the core gives is documented: its status, content type and body schema."""
    op = _DOC["paths"][route.path][route.method.lower()]
    documented = op["responses"].get(str(response.status))
    assert documented is not None, f"{route.name}: status {response.status} is not documented"
    media = documented["content"].get(response.content_type)
    assert media is not None, f"{route.name}: {response.content_type} is not documented for {response.status}"
    schema = {**media["schema"], "components": _DOC["components"]}
    errors = list(Draft202012Validator(schema).iter_errors(response.json()))
    assert not errors, f"{route.name} {response.status}: {[e.message for e in errors][:3]}"
