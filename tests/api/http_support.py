"""Running the function app on devhost for the API's HTTP tests, and a client that checks every
response against the OpenAPI document."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.api.support import assert_conforms
from tests.devhost.harness import RunningHost
from tests.support.azurite import Azurite

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "e2e-admin-key"
TERMINAL = {"succeeded", "failed", "cancelled"}

DAG = {
    "tasks": [
        {"id": "a", "handler": "noop", "params": {"result": {"n": 1}}},
        {"id": "b", "handler": "noop", "params": {"result": "${{ input.x }}"}, "dependsOn": ["a"]},
    ]
}


def app_settings(azurite: Azurite, data: Path) -> dict[str, str]:
    import json

    from devhost.indexing import connection_settings, index_app

    values: dict[str, str] = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    out = {
        k: (azurite.connection_string if v == "UseDevelopmentStorage=true" else v) for k, v in values.items()
    }
    import function_app

    for name in connection_settings(index_app(function_app.app)):
        out.setdefault(name, azurite.connection_string)
    return {
        **out,
        "WEFT_TASK_HUB": "apihub",
        "WEFT_DATA_DIR": str(data / "weft"),
        "WEFT_PAYLOAD_STORE": "fs",
        "WEFT_ADMIN_KEY": ADMIN,
    }


def _reset_app_singletons() -> None:
    from shared.adapters.factory import reset_for_tests
    from shared.settings import reset_settings_cache

    reset_settings_cache()
    reset_for_tests()


class Client:
    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=f"{base}/api/v1", timeout=30)

    def call(self, method: str, path: str, *, key: str | None = None, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        r = self.http.request(method, path, headers=headers, **kw)
        self._conforms(method, r)
        return r

    def _conforms(self, method: str, r: httpx.Response) -> None:
        from shared.api.routes import match
        from shared.api.types import ApiResponse

        found = match(method, r.request.url.path)
        assert found is not None
        ctype = r.headers.get("content-type", "").split(";")[0]
        assert_conforms(found[0], ApiResponse(status=r.status_code, body=r.content, content_type=ctype))

    def tenant(self, tenant_id: str, **limits: Any) -> str:
        body: dict[str, Any] = {"id": tenant_id}
        if limits:
            body["limits"] = limits
        assert self.call("POST", "tenants", key=ADMIN, json=body).status_code == 201
        r = self.call("POST", f"tenants/{tenant_id}/api-keys", key=ADMIN, json={"name": "e2e"})
        assert r.status_code == 201
        key: str = r.json()["key"]
        return key

    def publish(self, tenant: str, key: str, definition: dict[str, Any], name: str = "wf") -> int:
        r = self.call("PUT", f"tenants/{tenant}/workflows/{name}", key=key, json=definition)
        assert r.status_code in (200, 201), r.text
        r = self.call("POST", f"tenants/{tenant}/workflows/{name}/versions", key=key)
        assert r.status_code in (200, 201), r.text
        version: int = r.json()["version"]
        return version

    def submit(self, tenant: str, key: str, body: Any = None, name: str = "wf", **kw: Any) -> httpx.Response:
        return self.call("POST", f"tenants/{tenant}/workflows/{name}/executions", key=key, json=body, **kw)

    def wait(
        self, tenant: str, key: str, execution_id: str, until: set[str] = TERMINAL, timeout: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            r = self.call("GET", f"tenants/{tenant}/executions/{execution_id}", key=key)
            assert r.status_code == 200
            body: dict[str, Any] = r.json()
            if body["status"] in until:
                return body
            assert time.monotonic() < deadline, f"{execution_id} stuck in {body['status']}"
            time.sleep(0.05)


@contextmanager
def running_weft(data: Path, azurite: Azurite) -> Iterator[RunningHost]:
    """The function app on devhost: durable engine on a virtual clock, stores and payloads in ``data``."""
    _reset_app_singletons()
    try:
        with RunningHost(
            "function_app:app",
            ROOT,
            settings=app_settings(azurite, data),
            data_dir=data / "devhost",
            virtual_clock=True,
        ) as h:
            yield h
    finally:
        _reset_app_singletons()
