"""The API core, endpoint by endpoint: statuses, bodies, auth, problem+json (no HTTP, no Durable)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from shared.claimcheck import is_claim_check
from shared.errors import ErrorInfo
from shared.execution_messages import OperatorAction, OperatorActionKind
from shared.names import EventName, OrchestratorName
from shared.ports import ExecutionWrite, Stores
from shared.records import DeadLetter, Execution, TaskRun, hash_api_key
from shared.states import ExecutionStatus, TaskStatus
from tests.api.support import ADMIN, DAG, Api, make_api


@pytest.fixture
def api(tmp_path: Path) -> Api:
    return make_api(tmp_path)


def problem(r: Any, status: int) -> dict[str, Any]:
    assert r.status == status, r.json()
    assert r.content_type == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["status"] == status
    assert {"type", "title", "detail"} <= set(body)
    return body


# ------------------------------------------------------------------------------------ platform


def test_health_needs_no_key(api: Api) -> None:
    r = api.call("GET", "health")
    assert (r.status, r.json()) == (200, {"status": "ok"})


def test_openapi_is_served_without_a_key_and_is_valid(api: Api) -> None:
    from openapi_spec_validator import validate

    r = api.call("GET", "openapi.json")
    assert r.status == 200
    doc = r.json()
    validate(doc)
    assert doc["openapi"].startswith("3.1")
    assert "/api/v1/tenants/{tenant}/workflows/{workflow}/executions" in doc["paths"]


def test_create_tenant_needs_the_admin_key(api: Api) -> None:
    body = {"id": "acme"}
    problem(api.call("POST", "tenants", body=body), 401)
    problem(api.call("POST", "tenants", body=body, key="wrong"), 401)
    r = api.call("POST", "tenants", body=body, headers={"Authorization": f"Basic {ADMIN}"})
    problem(r, 401)
    key = api.tenant("other")
    problem(api.call("POST", "tenants", body=body, key=key), 403)
    r = api.call(
        "POST", "tenants", body={**body, "displayName": "Acme", "limits": {"maxRunningTasks": 7}}, key=ADMIN
    )
    assert r.status == 201
    out = r.json()
    assert out["displayName"] == "Acme"
    assert out["limits"]["maxRunningTasks"] == 7
    assert out["limits"]["maxActiveExecutions"] == api.deps.default_max_active_executions
    assert api.stores.tenants.get_tenant("acme") is not None


def test_duplicate_tenant_is_409_and_a_bad_one_is_400_with_every_problem(api: Api) -> None:
    api.tenant("acme")
    problem(api.call("POST", "tenants", body={"id": "acme"}, key=ADMIN), 409)
    body = problem(
        api.call("POST", "tenants", body={"id": "-bad", "limits": {"maxRunningTasks": 0}, "x": 1}, key=ADMIN),
        400,
    )
    paths = {e["path"] for e in body["errors"]}
    assert paths == {"$.id", "$.limits.maxRunningTasks", "$.x"}
    problem(api.call("POST", "tenants", raw=b"{not json", key=ADMIN), 400)
    problem(api.call("POST", "tenants", key=ADMIN), 400)


def test_without_a_configured_admin_key_admin_endpoints_are_closed(tmp_path: Path) -> None:
    api = make_api(tmp_path, admin_key=None)
    problem(api.call("POST", "tenants", body={"id": "acme"}, key=ADMIN), 401)


def test_api_keys_are_shown_once_stored_hashed_and_revocable(api: Api) -> None:
    key = api.tenant("acme")
    stored = api.stores.tenants.list_api_keys("acme")
    assert [k.key_hash for k in stored] == [hash_api_key(key)]
    assert key not in repr(stored)
    assert api.call("GET", "tenants/acme/workflows", key=key).status == 200
    api.stores.tenants.revoke_api_key("acme", stored[0].key_id, api.clock())
    problem(api.call("GET", "tenants/acme/workflows", key=key), 401)
    problem(api.call("POST", "tenants/nobody/api-keys", key=ADMIN), 404)


def test_revoking_a_key_through_the_api_locks_it_out(api: Api) -> None:
    key = api.tenant("acme")
    (record,) = api.stores.tenants.list_api_keys("acme")
    path = f"tenants/acme/api-keys/{record.key_id}"
    problem(api.call("DELETE", path, key=key), 403)
    r = api.call("DELETE", path, key=ADMIN)
    assert r.status == 200
    body = r.json()
    assert body["keyId"] == record.key_id
    assert body["revokedAt"] is not None
    assert "key" not in body
    problem(api.call("GET", "tenants/acme", key=key), 401)
    again = api.call("DELETE", path, key=ADMIN)
    assert (again.status, again.json()["revokedAt"]) == (200, body["revokedAt"])
    problem(api.call("DELETE", "tenants/acme/api-keys/nope", key=ADMIN), 404)


def test_a_tenant_reads_itself_and_no_other(api: Api) -> None:
    a = api.tenant("a", maxRunningTasks=3)
    api.tenant("b")
    r = api.call("GET", "tenants/a", key=a)
    assert r.status == 200
    assert r.json()["id"] == "a"
    assert r.json()["limits"]["maxRunningTasks"] == 3
    problem(api.call("GET", "tenants/b", key=a), 403)
    problem(api.call("GET", "tenants/ghost", key=ADMIN), 404)


def test_a_key_of_one_tenant_is_403_on_another_and_admin_sees_unknown_tenants_as_404(api: Api) -> None:
    a = api.tenant("a")
    api.tenant("b")
    problem(api.call("GET", "tenants/b/workflows", key=a), 403)
    problem(api.call("GET", "tenants/ghost/workflows", key=a), 403)
    problem(api.call("GET", "tenants/b/workflows"), 401)
    assert api.call("GET", "tenants/b/workflows", key=ADMIN).status == 200
    problem(api.call("GET", "tenants/ghost/workflows", key=ADMIN), 404)


# ------------------------------------------------------------------------------------ workflows


def test_put_creates_then_replaces_the_draft(api: Api) -> None:
    key = api.tenant("acme")
    assert api.call("PUT", "tenants/acme/workflows/wf", body=DAG, key=key).status == 201
    assert api.call("PUT", "tenants/acme/workflows/wf", body=DAG, key=key).status == 200
    draft = api.stores.definitions.get_draft("acme", "wf")
    assert draft is not None
    assert [t["id"] for t in draft.definition["tasks"]] == ["a", "b"]


def test_an_invalid_definition_lists_every_problem(api: Api) -> None:
    key = api.tenant("acme")
    bad = {
        "tasks": [
            {"id": "a", "handler": "no.such.handler"},
            {"id": "b", "handler": "noop", "dependsOn": ["missing"]},
            {"id": "c", "handler": "noop", "retry": {"maxAttempts": 0}},
        ]
    }
    body = problem(api.call("PUT", "tenants/acme/workflows/wf", body=bad, key=key), 400)
    paths = {e["path"] for e in body["errors"]}
    assert {"$.tasks[0].handler", "$.tasks[1].dependsOn[0]", "$.tasks[2].retry.maxAttempts"} <= paths
    assert api.stores.definitions.get_draft("acme", "wf") is None
    problem(api.call("PUT", "tenants/acme/workflows/wf", key=key), 400)
    problem(api.call("PUT", "tenants/acme/workflows/wf", raw=b'{"tasks": NaN}', key=key), 400)
    problem(api.call("PUT", "tenants/acme/workflows/-bad-", body=DAG, key=key), 400)


def test_publish_numbers_versions_and_an_identical_draft_returns_the_latest(api: Api) -> None:
    key = api.tenant("acme")
    problem(api.call("POST", "tenants/acme/workflows/wf/versions", key=key), 404)
    api.call("PUT", "tenants/acme/workflows/wf", body=DAG, key=key)
    r = api.call("POST", "tenants/acme/workflows/wf/versions", key=key)
    assert r.status == 201
    v1 = r.json()
    assert v1["version"] == 1
    assert v1["digest"].startswith("sha256:")
    r = api.call("POST", "tenants/acme/workflows/wf/versions", key=key)
    assert (r.status, r.json()["version"], r.json()["digest"]) == (200, 1, v1["digest"])
    changed = {**DAG, "description": "v2"}
    api.call("PUT", "tenants/acme/workflows/wf", body=changed, key=key)
    assert api.call("POST", "tenants/acme/workflows/wf/versions", key=key).json()["version"] == 2
    r = api.call("GET", "tenants/acme/workflows/wf/versions/1", key=key)
    assert r.status == 200
    assert r.json()["definition"]["tasks"][0]["id"] == "a"
    problem(api.call("GET", "tenants/acme/workflows/wf/versions/9", key=key), 404)
    problem(api.call("GET", "tenants/acme/workflows/wf/versions/one", key=key), 400)
    items = api.call("GET", "tenants/acme/workflows", key=key).json()["items"]
    assert [(i["workflow"], i["latestVersion"], i["hasDraft"]) for i in items] == [("wf", 2, True)]


def test_listing_pages_with_a_continuation_token_and_refuses_a_forged_one(api: Api) -> None:
    key = api.tenant("acme")
    for name in ("w1", "w2", "w3"):
        api.workflow("acme", key, name)
    first = api.call("GET", "tenants/acme/workflows", key=key, query={"limit": "2"}).json()
    assert [i["workflow"] for i in first["items"]] == ["w1", "w2"]
    rest = api.call(
        "GET", "tenants/acme/workflows", key=key, query={"continuationToken": first["continuationToken"]}
    ).json()
    assert [i["workflow"] for i in rest["items"]] == ["w3"]
    assert "continuationToken" not in rest
    problem(api.call("GET", "tenants/acme/workflows", key=key, query={"continuationToken": "garbage!"}), 400)
    problem(api.call("GET", "tenants/acme/workflows", key=key, query={"limit": "0"}), 400)
    problem(api.call("GET", "tenants/acme/workflows", key=key, query={"limit": "x"}), 400)


# ------------------------------------------------------------------------------------ executions


def submit(api: Api, key: str, body: Any = None, **kw: Any) -> Any:
    return api.call("POST", "tenants/acme/workflows/wf/executions", body=body, key=key, **kw)


def test_submit_accepts_starts_and_links_the_execution(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    r = submit(api, key, {"input": {"x": 5}})
    assert r.status == 202
    out = r.json()
    assert (out["status"], out["workflow"], out["version"]) == ("queued", "wf", 1)
    assert r.headers["Location"] == out["links"]["self"] == f"/api/v1/tenants/acme/executions/{out['id']}"
    assert api.durable.started[out["id"]]["orchestrator"] == OrchestratorName.EXECUTION
    ex = api.stores.executions.get_execution(out["id"])
    assert ex is not None
    assert (ex.input, ex.trigger) == ({"x": 5}, "http")
    got = api.call("GET", out["links"]["self"], key=key).json()
    assert got["input"] == {"x": 5}
    assert [(t["id"], t["status"], t["attempts"]) for t in got["tasks"]] == [
        ("a", "pending", 0),
        ("b", "pending", 0),
    ]


def test_submit_unknown_workflow_or_version_is_404_and_bad_bodies_400(api: Api) -> None:
    key = api.tenant("acme")
    problem(submit(api, key), 404)
    api.workflow("acme", key)
    problem(submit(api, key, {"version": 7}), 404)
    problem(submit(api, key, {"version": 0}), 400)
    problem(submit(api, key, {"inputs": 1}), 400)
    problem(submit(api, key, raw=b"[1, 2"), 400)
    problem(submit(api, key, headers={"Idempotency-Key": "has space"}), 400)
    assert submit(api, key, {"version": 1}).status == 202


def test_idempotency_key_same_body_same_execution_other_body_409(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    h = {"Idempotency-Key": "order-42"}
    first = submit(api, key, {"input": {"x": 1}}, headers=h)
    again = submit(api, key, {"input": {"x": 1}}, headers=h)
    assert first.status == again.status == 202
    assert first.json()["id"] == again.json()["id"]
    problem(submit(api, key, {"input": {"x": 2}}, headers=h), 409)
    assert len(api.stores.executions.list_executions("acme").items) == 1


def test_over_the_rate_limit_is_429_with_retry_after(api: Api) -> None:
    key = api.tenant("acme", submitsPerSecond=2)
    api.workflow("acme", key)
    assert [submit(api, key).status for _ in range(2)] == [202, 202]
    r = submit(api, key)
    problem(r, 429)
    assert int(r.headers["Retry-After"]) >= 1
    api.clock.advance(1.5)
    assert submit(api, key).status == 202


def test_over_max_active_executions_is_429(api: Api) -> None:
    key = api.tenant("acme", maxActiveExecutions=1)
    api.workflow("acme", key)
    assert submit(api, key).status == 202
    problem(submit(api, key), 429)


def test_large_input_is_claim_checked_and_returned_inline_too_large_is_413(tmp_path: Path) -> None:
    api = make_api(tmp_path, claim_check_threshold_bytes=1024, max_input_bytes=4096)
    key = api.tenant("acme")
    api.workflow("acme", key)
    big = {"blob": "x" * 2000}
    r = submit(api, key, {"input": big})
    assert r.status == 202
    ex = api.stores.executions.get_execution(r.json()["id"])
    assert ex is not None
    assert is_claim_check(ex.input)
    assert api.call("GET", r.headers["Location"], key=key).json()["input"] == big
    problem(submit(api, key, {"input": {"blob": "x" * 5000}}), 413)
    # Far over the limit: refused before the body is even parsed.
    problem(submit(api, key, raw=b"[" * 100_000), 413)


def test_executions_are_private_to_their_tenant(api: Api) -> None:
    key = api.tenant("acme")
    other = api.tenant("other")
    api.workflow("acme", key)
    ex_id = submit(api, key).json()["id"]
    problem(api.call("GET", f"tenants/acme/executions/{ex_id}", key=other), 403)
    problem(api.call("GET", f"tenants/other/executions/{ex_id}", key=other), 404)
    problem(api.call("GET", "tenants/acme/executions/nope", key=key), 404)


def test_list_executions_newest_first_with_filters(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    api.workflow("acme", key, "other")
    ids = []
    for _ in range(3):
        ids.append(submit(api, key).json()["id"])
        api.clock.advance(1)
    api.call("POST", "tenants/acme/workflows/other/executions", key=key)
    r = api.call("GET", "tenants/acme/executions", key=key, query={"workflow": "wf", "limit": "2"}).json()
    assert [i["id"] for i in r["items"]] == [ids[2], ids[1]]
    more = api.call(
        "GET",
        "tenants/acme/executions",
        key=key,
        query={"workflow": "wf", "continuationToken": r["continuationToken"]},
    ).json()
    assert [i["id"] for i in more["items"]] == [ids[0]]
    queued = api.call("GET", "tenants/acme/executions", key=key, query={"status": "queued"}).json()
    assert len(queued["items"]) == 4
    problem(api.call("GET", "tenants/acme/executions", key=key, query={"status": "sleeping"}), 400)


def test_cancel_raises_the_event_on_the_execution_and_its_batches(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    ex_id = submit(api, key).json()["id"]
    api.durable.start_new(OrchestratorName.TASK_BATCH, f"{ex_id}::g1b1", {})
    api.durable.start_new(OrchestratorName.TASK_BATCH, f"{ex_id}::g1b2", {})
    api.durable.finished.add(f"{ex_id}::g1b2")
    r = api.call("POST", f"tenants/acme/executions/{ex_id}/cancel", key=key)
    assert r.status == 202
    assert sorted(i for i, name, _ in api.durable.events if name == EventName.CANCEL) == [
        ex_id,
        f"{ex_id}::g1b1",
    ]


def test_cancel_of_a_never_started_execution_cancels_it_in_the_store_then_409(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    ex_id = submit(api, key).json()["id"]
    api.durable.started.clear()  # the fast path was lost and the relay has not run
    r = api.call("POST", f"tenants/acme/executions/{ex_id}/cancel", key=key)
    assert (r.status, r.json()["status"]) == (202, "cancelled")
    ex = api.stores.executions.get_execution(ex_id)
    assert ex is not None
    assert ex.status is ExecutionStatus.CANCELLED
    assert any(e.type == "weft.execution.cancelled" for e in api.stores.executions.list_events(ex_id))
    problem(api.call("POST", f"tenants/acme/executions/{ex_id}/cancel", key=key), 409)
    problem(api.call("POST", "tenants/acme/executions/nope/cancel", key=key), 404)


def test_events_are_delivered_reserved_names_refused_finished_409(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    ex_id = submit(api, key).json()["id"]
    r = api.call("POST", f"tenants/acme/executions/{ex_id}/events/approval", body={"ok": True}, key=key)
    assert r.status == 202
    assert (ex_id, "approval", {"ok": True}) in api.durable.events
    problem(api.call("POST", f"tenants/acme/executions/{ex_id}/events/weft.cancel", key=key), 400)
    api.durable.finished.add(ex_id)
    problem(api.call("POST", f"tenants/acme/executions/{ex_id}/events/approval", key=key), 409)
    finish(api.stores, ex_id, ExecutionStatus.SUCCEEDED)
    problem(api.call("POST", f"tenants/acme/executions/{ex_id}/events/approval", key=key), 409)


def finish(stores: Stores, ex_id: str, status: ExecutionStatus, runs: Sequence[TaskRun] = ()) -> Execution:
    ex = stores.executions.get_execution(ex_id)
    assert ex is not None
    done = ex.model_copy(update={"status": status, "finished_at": ex.created_at})
    result = stores.executions.commit(ExecutionWrite(ex_id, execution=done, task_runs=list(runs)))
    assert result.execution is not None
    return result.execution


def test_rerun_reuses_the_outputs_of_succeeded_tasks(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    old = submit(api, key, {"input": {"x": 3}}).json()["id"]
    finish(
        api.stores,
        old,
        ExecutionStatus.FAILED,
        [
            TaskRun(execution_id=old, task_id="a", status=TaskStatus.SUCCEEDED, attempts=1, output={"v": 1}),
            TaskRun(
                execution_id=old,
                task_id="b",
                status=TaskStatus.FAILED,
                attempts=3,
                error=ErrorInfo(type="Boom", message="boom"),
            ),
        ],
    )
    r = api.call("POST", f"tenants/acme/executions/{old}/rerun", key=key)
    assert r.status == 202
    new = r.json()["id"]
    assert new != old
    assert new in api.durable.started
    ex = api.stores.executions.get_execution(new)
    assert ex is not None
    assert (ex.rerun_of, ex.input, ex.status) == (old, {"x": 3}, ExecutionStatus.QUEUED)
    runs = {t.task_id: t for t in api.stores.executions.get_task_runs(new)}
    assert list(runs) == ["a"]
    assert (runs["a"].status, runs["a"].output) == (TaskStatus.SUCCEEDED, {"v": 1})
    problem(api.call("POST", f"tenants/acme/executions/{old}/rerun", body={"version": 5}, key=key), 404)


# ------------------------------------------------------------------------------------ dead letters


def dead_letter(api: Api, ex_id: str, task_id: str) -> DeadLetter:
    ex = api.stores.executions.get_execution(ex_id)
    assert ex is not None
    dl = DeadLetter(
        id=f"{ex_id}.{task_id}.3",
        tenant_id=ex.tenant_id,
        execution_id=ex_id,
        workflow=ex.workflow,
        task_id=task_id,
        attempts=3,
        error=ErrorInfo(type="Boom", message="boom"),
        created_at=api.clock(),
    )
    run = TaskRun(execution_id=ex_id, task_id=task_id, status=TaskStatus.DEAD_LETTERED, attempts=3)
    api.stores.executions.commit(
        ExecutionWrite(
            ex_id,
            execution=ex.model_copy(update={"status": ExecutionStatus.WAITING}),
            task_runs=[run],
            dead_letters=[dl],
        )
    )
    return dl


def test_dead_letters_are_listed_retried_and_skipped_once(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    ex_id = submit(api, key).json()["id"]
    dl_a = dead_letter(api, ex_id, "a")
    listed = api.call("GET", "tenants/acme/dead-letters", key=key, query={"status": "open"}).json()["items"]
    assert [(d["id"], d["taskId"], d["status"], d["attempts"]) for d in listed] == [(dl_a.id, "a", "open", 3)]
    r = api.call(
        "POST", f"tenants/acme/dead-letters/{dl_a.id}/retry", body={"params": {"result": 9}}, key=key
    )
    assert r.status == 202
    raised = [d for i, n, d in api.durable.events if n == EventName.OPERATOR_ACTION and i == ex_id]
    action = OperatorAction.model_validate(raised[0])
    assert (action.action, action.task_id, action.params) == (OperatorActionKind.RETRY, "a", {"result": 9})
    ex = api.stores.executions.get_execution(ex_id)
    assert ex is not None
    assert ex.status is ExecutionStatus.RUNNING
    problem(api.call("POST", f"tenants/acme/dead-letters/{dl_a.id}/retry", key=key), 409)
    problem(api.call("POST", f"tenants/acme/dead-letters/{dl_a.id}/skip", key=key), 409)
    resolved = api.call("GET", "tenants/acme/dead-letters", key=key, query={"status": "resolved"}).json()[
        "items"
    ]
    assert [(d["id"], d["resolution"]) for d in resolved] == [(dl_a.id, "retry")]

    dl_b = dead_letter(api, ex_id, "b")
    r = api.call(
        "POST", f"tenants/acme/dead-letters/{dl_b.id}/skip", body={"output": {"manual": True}}, key=key
    )
    assert r.status == 202
    run = api.stores.executions.get_task_run(ex_id, "b")
    assert run is not None
    assert (run.status, run.output) == (TaskStatus.SKIPPED, {"manual": True})
    problem(api.call("POST", "tenants/acme/dead-letters/nope/skip", key=key), 404)
    other = api.tenant("other")
    problem(api.call("POST", f"tenants/acme/dead-letters/{dl_b.id}/skip", key=other), 403)
    problem(api.call("POST", f"tenants/other/dead-letters/{dl_b.id}/skip", key=other), 404)
    problem(api.call("GET", "tenants/acme/dead-letters", key=key, query={"status": "closed"}), 400)


# ------------------------------------------------------------------------------------ failures


class BrokenTenants:
    def __getattr__(self, name: str) -> Any:
        def fail(*a: Any, **kw: Any) -> Any:
            raise RuntimeError("connection string AccountKey=hunter2 refused")

        return fail


def test_an_unexpected_error_is_a_500_that_leaks_nothing(api: Api) -> None:
    broken = replace(api.deps, stores=replace(api.stores, tenants=BrokenTenants()))
    api.deps = broken
    r = api.call("GET", "tenants/acme/workflows", key="some-key")
    body = problem(r, 500)
    assert "hunter2" not in r.body_bytes().decode()
    assert body["incident"]
    assert api.call("GET", "health").status == 200


def test_names_and_ids_are_matched_whole_not_up_to_a_trailing_newline(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    problem(api.call("PUT", "tenants/acme/workflows/wf%0A", body=DAG, key=key), 400)
    r = api.call("PUT", "tenants/acme/workflows/x", body=DAG, key=key)
    assert r.status == 201
    from shared.api import routes
    from shared.api.types import ApiRequest

    route = routes.BY_NAME["api_put_workflow"]
    params = {"tenant": "acme", "workflow": "wf\n"}
    req = ApiRequest(
        "PUT", "/api/v1/tenants/acme/workflows/wf", params, headers={"authorization": f"Bearer {key}"}
    )
    problem(
        routes.handle(route, replace(req, body=b'{"tasks": [{"id": "a", "handler": "noop"}]}'), api.deps), 400
    )
    get = routes.BY_NAME["api_get_version"]
    req = ApiRequest("GET", "/x", {**params, "version": "1"}, headers={"authorization": f"Bearer {key}"})
    problem(routes.handle(get, req, api.deps), 404)
    problem(
        api.call("POST", "tenants/acme/workflows/wf/executions", key=key, headers={"Idempotency-Key": "k\n"}),
        400,
    )


def test_request_bodies_are_strict_json(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    for bad in ({"version": True}, {"version": "1"}, {"version": 1.0}):
        problem(api.call("POST", "tenants/acme/workflows/wf/executions", body=bad, key=key), 400)
    body = problem(
        api.call("PUT", "tenants/acme/workflows/wf", body={**DAG, "maxParallelism": True}, key=key), 400
    )
    assert [e["path"] for e in body["errors"]] == ["$.maxParallelism"]
    problem(api.call("POST", "tenants", body={"id": "b", "limits": {"maxRunningTasks": "5"}}, key=ADMIN), 400)


def test_deeply_nested_json_is_a_400_not_a_500(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    for levels in (150, 500, 5000):
        raw = b'{"input": ' + b"[" * levels + b"]" * levels + b"}"
        problem(api.call("POST", "tenants/acme/workflows/wf/executions", raw=raw, key=key), 400)
    ok = b'{"input": ' + b"[" * 90 + b"]" * 90 + b"}"
    assert api.call("POST", "tenants/acme/workflows/wf/executions", raw=ok, key=key).status == 202


def test_values_json_cannot_carry_are_a_400_not_a_500(api: Api) -> None:
    key = api.tenant("acme")
    api.workflow("acme", key)
    for raw in (b'{"input": 1e400}', b'{"input": "\\ud800"}', b'{"input": {"\\udfff": 1}}'):
        problem(api.call("POST", "tenants/acme/workflows/wf/executions", raw=raw, key=key), 400)
    bad_def = b'{"tasks": [{"id": "a", "handler": "noop", "params": {"x": -1e999}}]}'
    problem(api.call("PUT", "tenants/acme/workflows/w2", raw=bad_def, key=key), 400)
    ok = b'{"input": "a\\u0000b \\ud83d\\ude00"}'
    assert api.call("POST", "tenants/acme/workflows/wf/executions", raw=ok, key=key).status == 202
