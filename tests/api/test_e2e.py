"""The API end to end over real HTTP: the function app on devhost (durable engine, virtual clock,
SQLite stores and payloads in a temp dir), driven with httpx like a client would."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from shared.api.routes import ROUTES
from shared.api.types import AuthKind
from tests.api.http_support import ADMIN, DAG, TERMINAL, Client, running_weft
from tests.devhost.harness import RunningHost
from tests.support.azurite import Azurite

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, azurite: Azurite) -> Iterator[RunningHost]:
    with running_weft(tmp_path_factory.mktemp("api-e2e"), azurite) as h:
        yield h


@pytest.fixture(scope="module")
def api(host: RunningHost) -> Client:
    return Client(host.url)


def problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["status"] == status
    return body


def test_publish_submit_watch(api: Client) -> None:
    assert api.call("GET", "health").json() == {"status": "ok"}
    problem(api.call("POST", "tenants", json={"id": "loop"}), 401)
    problem(api.call("POST", "tenants", key="nope", json={"id": "loop"}), 401)
    key = api.tenant("loop")
    problem(api.call("POST", "tenants", key=ADMIN, json={"id": "loop"}), 409)
    problem(api.call("POST", "tenants", key=key, json={"id": "loop2"}), 403)
    problem(api.call("POST", "tenants", key=ADMIN, json={"id": ""}), 400)
    problem(api.call("POST", "tenants/ghost/api-keys", key=ADMIN), 404)

    bad = {
        "tasks": [
            {"id": "a", "handler": "nope"},
            {"id": "b", "handler": "noop", "dependsOn": ["zz"]},
            {"id": "c", "handler": "noop", "timeoutSeconds": -1},
        ]
    }
    body = problem(api.call("PUT", "tenants/loop/workflows/wf", key=key, json=bad), 400)
    assert len(body["errors"]) >= 3
    assert api.call("PUT", "tenants/loop/workflows/wf", key=key, json=DAG).status_code == 201
    assert api.call("PUT", "tenants/loop/workflows/wf", key=key, json=DAG).status_code == 200
    r = api.call("POST", "tenants/loop/workflows/wf/versions", key=key)
    assert (r.status_code, r.json()["version"]) == (201, 1)
    r = api.call("POST", "tenants/loop/workflows/wf/versions", key=key)
    assert (r.status_code, r.json()["version"]) == (200, 1)
    problem(api.call("POST", "tenants/loop/workflows/none/versions", key=key), 404)
    assert [w["workflow"] for w in api.call("GET", "tenants/loop/workflows", key=key).json()["items"]] == [
        "wf"
    ]
    assert api.call("GET", "tenants/loop/workflows/wf/versions/1", key=key).json()["version"] == 1
    problem(api.call("GET", "tenants/loop/workflows/wf/versions/2", key=key), 404)

    problem(api.submit("loop", key, name="none"), 404)
    problem(api.submit("loop", key, {"version": 3}), 404)
    problem(api.submit("loop", key, {"input": {"big": "x" * (1024 * 1024)}}), 413)
    r = api.submit("loop", key, {"input": {"x": [1, 2]}})
    assert r.status_code == 202
    accepted = r.json()
    assert r.headers["Location"] == accepted["links"]["self"]
    done = api.wait("loop", key, accepted["id"])
    assert done["status"] == "succeeded"
    assert done["output"] == {"b": [1, 2]}
    assert [(t["id"], t["status"], t["attempts"]) for t in done["tasks"]] == [
        ("a", "succeeded", 1),
        ("b", "succeeded", 1),
    ]
    assert done["startedAt"] and done["finishedAt"]
    listed = api.call("GET", "tenants/loop/executions", key=key, params={"status": "succeeded"}).json()
    assert accepted["id"] in [i["id"] for i in listed["items"]]
    problem(api.call("POST", f"tenants/loop/executions/{accepted['id']}/cancel", key=key), 409)
    problem(api.call("POST", f"tenants/loop/executions/{accepted['id']}/events/approve", key=key), 409)


def test_large_input_is_claim_checked_and_read_back(api: Client) -> None:
    key = api.tenant("big")
    api.publish("big", key, DAG)
    x = "y" * (100 * 1024)
    r = api.submit("big", key, {"input": {"x": x}})
    assert r.status_code == 202
    done = api.wait("big", key, r.json()["id"])
    assert done["status"] == "succeeded"
    assert done["input"] == {"x": x}
    from shared.adapters.factory import get_execution_store
    from shared.claimcheck import is_claim_check

    stored = get_execution_store().get_execution(r.json()["id"])
    assert stored is not None
    assert is_claim_check(stored.input), "an input over 64 KB travels by reference"


def _fill(template: str, tenant: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: tenant if m.group(1) == "tenant" else "1", template)


def test_every_tenant_endpoint_refuses_other_tenants_and_missing_keys(api: Client) -> None:
    a = api.tenant("auth-a")
    api.tenant("auth-b")
    tenant_routes = [r for r in ROUTES if r.auth is AuthKind.TENANT]
    assert len(tenant_routes) == 14
    for route in tenant_routes:
        path = _fill(route.template, "auth-b")
        problem(api.call(route.method, path, key=a, json={}), 403)
        problem(api.call(route.method, path, json={}), 401)
        problem(api.call(route.method, path, key="weft_forged_key", json={}), 401)
        # The admin key passes authentication everywhere (then 404s for the made-up ids).
        assert api.call(route.method, path, key=ADMIN, json={}).status_code not in (401, 403)
    for route in (r for r in ROUTES if r.auth is AuthKind.ADMIN):
        problem(api.call(route.method, _fill(route.template, "auth-a"), key=a, json={"id": "x"}), 403)


def test_same_idempotency_key_concurrently_gives_one_execution(api: Client) -> None:
    key = api.tenant("idem")
    api.publish("idem", key, DAG)
    headers = {"Idempotency-Key": "order-7"}
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(lambda _: api.submit("idem", key, {"input": {"x": 1}}, headers=headers), range(8))
        )
    assert {r.status_code for r in results} == {202}
    ids = {r.json()["id"] for r in results}
    assert len(ids) == 1
    problem(api.submit("idem", key, {"input": {"x": 2}}, headers=headers), 409)
    assert api.wait("idem", key, ids.pop())["status"] == "succeeded"
    assert len(api.call("GET", "tenants/idem/executions", key=key).json()["items"]) == 1


def test_over_the_limit_is_429_and_every_accepted_submit_completes(api: Client) -> None:
    key = api.tenant("busy", submitsPerSecond=5)
    api.publish("busy", key, DAG)
    lock = threading.Lock()
    accepted: list[str] = []
    refused: list[httpx.Response] = []

    def one(i: int) -> None:
        r = api.submit("busy", key, {"input": {"x": i}})
        with lock:
            if r.status_code == 202:
                accepted.append(r.json()["id"])
            else:
                refused.append(r)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(40)))
    assert refused, "40 submits at once must exceed 5 per second"
    assert accepted
    for r in refused:
        problem(r, 429)
        assert int(r.headers["Retry-After"]) >= 1
    for ex_id in accepted:
        assert api.wait("busy", key, ex_id)["status"] == "succeeded"
    items: list[str] = []
    token: str | None = None
    while True:
        params = {"limit": "100", **({"continuationToken": token} if token else {})}
        page = api.call("GET", "tenants/busy/executions", key=key, params=params).json()
        items += [i["id"] for i in page["items"]]
        token = page.get("continuationToken")
        if not token:
            break
    assert sorted(items) == sorted(accepted)


DEAD: dict[str, Any] = {
    "onTaskFailure": "deadLetter",
    "defaults": {"retry": {"maxAttempts": 1}},
    "tasks": [
        {"id": "a", "handler": "noop", "params": {"result": 1}},
        {"id": "flaky", "handler": "fail", "params": {"times": -1}, "dependsOn": ["a"]},
        {
            "id": "after",
            "handler": "noop",
            "params": {"result": "${{ tasks.flaky.output }}"},
            "dependsOn": ["flaky"],
        },
    ],
}


def _open_dead_letter(api: Client, tenant: str, key: str, execution_id: str) -> dict[str, Any]:
    api.wait(tenant, key, execution_id, {"waiting", *TERMINAL})
    r = api.call("GET", f"tenants/{tenant}/dead-letters", key=key, params={"status": "open"})
    items: list[dict[str, Any]] = r.json()["items"]
    mine = [d for d in items if d["executionId"] == execution_id]
    assert len(mine) == 1, items
    return mine[0]


def test_dead_letter_recovered_by_retry_with_new_params_and_by_skip(api: Client) -> None:
    key = api.tenant("ops")
    api.publish("ops", key, DEAD)

    first = api.submit("ops", key).json()["id"]
    dl = _open_dead_letter(api, "ops", key, first)
    assert (dl["taskId"], dl["status"], dl["attempts"]) == ("flaky", "open", 1)
    assert dl["error"]["type"] == "TestFailure"
    r = api.call(
        "POST",
        f"tenants/ops/dead-letters/{dl['id']}/retry",
        key=key,
        json={"params": {"times": 0, "result": "fixed"}},
    )
    assert r.status_code == 202
    problem(api.call("POST", f"tenants/ops/dead-letters/{dl['id']}/retry", key=key), 409)
    problem(api.call("POST", f"tenants/ops/dead-letters/{dl['id']}/skip", key=key), 409)
    done = api.wait("ops", key, first)
    assert done["status"] == "succeeded"
    assert done["output"] == {"after": "fixed"}

    second = api.submit("ops", key).json()["id"]
    dl = _open_dead_letter(api, "ops", key, second)
    r = api.call("POST", f"tenants/ops/dead-letters/{dl['id']}/skip", key=key, json={"output": "by hand"})
    assert r.status_code == 202
    done = api.wait("ops", key, second)
    assert done["status"] == "succeeded"
    assert {t["id"]: t["status"] for t in done["tasks"]}["flaky"] == "skipped"
    assert done["output"] == {"after": "by hand"}
    resolved = api.call("GET", "tenants/ops/dead-letters", key=key, params={"status": "resolved"}).json()[
        "items"
    ]
    assert {d["resolution"] for d in resolved} == {"retry", "skip"}
    problem(api.call("POST", "tenants/ops/dead-letters/nope/retry", key=key), 404)


def test_events_cancel_and_rerun(api: Client) -> None:
    key = api.tenant("ctl")
    api.publish("ctl", key, DEAD)
    ex_id = api.submit("ctl", key).json()["id"]
    _open_dead_letter(api, "ctl", key, ex_id)  # the orchestration now waits for an operator
    r = api.call("POST", f"tenants/ctl/executions/{ex_id}/events/approval", key=key, json={"approved": True})
    assert r.status_code == 202
    problem(api.call("POST", f"tenants/ctl/executions/{ex_id}/events/weft.operator", key=key), 400)
    assert api.call("POST", f"tenants/ctl/executions/{ex_id}/cancel", key=key).status_code == 202
    done = api.wait("ctl", key, ex_id)
    assert done["status"] == "cancelled"
    problem(api.call("POST", f"tenants/ctl/executions/{ex_id}/cancel", key=key), 409)

    # Rerun on a fixed version: "a" succeeded before and is reused, the rest runs.
    fixed = {
        **DEAD,
        "tasks": [
            *DEAD["tasks"][:1],
            {**DEAD["tasks"][1], "params": {"times": 0, "result": 2}},
            DEAD["tasks"][2],
        ],
    }
    version = api.publish("ctl", key, fixed)
    assert version == 2
    r = api.call("POST", f"tenants/ctl/executions/{ex_id}/rerun", key=key, json={"version": 2})
    assert r.status_code == 202
    new = r.json()
    assert (new["version"], new["workflow"]) == (2, "wf")
    assert r.headers["Location"].endswith(new["id"])
    done = api.wait("ctl", key, new["id"])
    assert done["status"] == "succeeded"
    assert done["rerunOf"] == ex_id
    assert done["output"] == {"after": 2}
    from shared.adapters.factory import get_execution_store

    started = {
        e.data.get("taskId") for e in get_execution_store().list_events(new["id"]) if e.type == "task.started"
    }
    assert started == {"flaky", "after"}, "the succeeded task 'a' must be reused, not run again"
    problem(api.call("POST", "tenants/ctl/executions/nope/rerun", key=key), 404)
