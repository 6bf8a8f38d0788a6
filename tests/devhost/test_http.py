"""HTTP triggers on devhost: routing, methods, query, headers, auth levels, errors, admin status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devhost.host import EngineConfig, HostError
from tests.devhost.fake_backend import FakeBackend
from tests.devhost.harness import RunningHost

APP = "tests.devhost.apps.http_app:app"
KEYS = {"DEVHOST_FUNCTION_KEY": "fkey", "DEVHOST_MASTER_KEY": "mkey"}


@pytest.fixture
def host(tmp_path: Path) -> Iterator[RunningHost]:
    backend = FakeBackend()

    def factory(cfg: EngineConfig) -> FakeBackend:
        return backend

    with RunningHost(APP, tmp_path, settings=KEYS, backend_factory=factory) as h:
        yield h


def test_route_params_query_and_headers_reach_the_function(host: RunningHost) -> None:
    r = httpx.get(f"{host.url}/api/items/acme/42", params={"q": "x"}, headers={"x-test": "h"})
    assert r.status_code == 200
    assert r.json() == {"tenant": "acme", "id": 42, "q": "x", "hdr": "h", "method": "GET"}


def test_routes_are_case_insensitive_and_literal_segments_win(host: RunningHost) -> None:
    assert httpx.get(f"{host.url}/API/Items/acme/1").status_code == 200
    assert httpx.get(f"{host.url}/api/items/special/1").text == "special"


def test_int_constraint_and_methods_are_enforced(host: RunningHost) -> None:
    assert httpx.get(f"{host.url}/api/items/acme/notanint").status_code == 404
    assert httpx.post(f"{host.url}/api/items/acme/1").status_code == 404
    assert httpx.get(f"{host.url}/api/nothing-here").status_code == 404


def test_async_function_gets_the_body_and_sets_status_and_headers(host: RunningHost) -> None:
    r = httpx.put(f"{host.url}/api/echo", content=b"\x00payload")
    assert r.status_code == 201
    assert r.content == b"\x00payload"
    assert r.headers["x-echo"] == "yes"


def test_function_auth_level_needs_a_key(host: RunningHost) -> None:
    assert httpx.get(f"{host.url}/api/fn").status_code == 401
    assert httpx.get(f"{host.url}/api/fn", params={"code": "wrong"}).status_code == 401
    assert httpx.get(f"{host.url}/api/fn", params={"code": "fkey"}).text == "function ok"
    assert httpx.get(f"{host.url}/api/fn", headers={"x-functions-key": "fkey"}).status_code == 200
    assert httpx.get(f"{host.url}/api/fn", params={"code": "mkey"}).status_code == 200


def test_admin_auth_level_needs_the_master_key(host: RunningHost) -> None:
    assert httpx.get(f"{host.url}/api/adm", params={"code": "fkey"}).status_code == 401
    assert httpx.get(f"{host.url}/api/adm", headers={"x-functions-key": "mkey"}).text == "admin ok"


def test_anonymous_needs_no_key(host: RunningHost) -> None:
    assert httpx.get(f"{host.url}/api/items/a/1").status_code == 200


def test_unhandled_exception_is_a_500(host: RunningHost) -> None:
    assert httpx.get(f"{host.url}/api/boom").status_code == 500


def test_requests_run_concurrently(host: RunningHost) -> None:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(lambda i: httpx.get(f"{host.url}/api/items/t/{i}").json()["id"], range(40)))
    assert codes == list(range(40))


def test_admin_status_answers_while_up(host: RunningHost) -> None:
    assert httpx.get(f"{host.url}/admin/host/status").status_code == 401
    r = httpx.get(f"{host.url}/admin/host/status", headers={"x-functions-key": "mkey"})
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "Running"
    assert "hello_orchestrator" in body["functions"]
    assert body["version"]
    assert httpx.get(f"{host.url}/admin/host/ping").status_code == 200


def test_invocations_are_logged_one_structured_line_each(
    host: RunningHost, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="devhost.invocation")
    httpx.get(f"{host.url}/api/items/a/7")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "devhost.invocation"]
    assert len(lines) == 1
    assert lines[0]["function"] == "get_item"
    assert lines[0]["status"] == "Succeeded"
    assert lines[0]["invocationId"]
    assert lines[0]["durationMs"] >= 0


def test_function_auth_without_a_key_setting_fails_at_startup(tmp_path: Path) -> None:
    with (
        pytest.raises(HostError, match="DEVHOST_FUNCTION_KEY"),
        RunningHost(APP, tmp_path, backend_factory=lambda cfg: FakeBackend()),
    ):
        pass
