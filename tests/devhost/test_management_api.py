"""The Durable management HTTP API, driven by the real DurableOrchestrationClient (SDK 1.7.0).

The engine is replaced by an in-memory backend here, so these tests pin down the HTTP contract
(URLs, status codes, payloads) the SDK relies on; tests/devhost/test_e2e_http.py runs the real engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import httpx
import pytest
from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus

from devhost.host import EngineConfig
from tests.devhost.fake_backend import FakeBackend
from tests.devhost.harness import RunningHost

APP = "tests.devhost.apps.http_app:app"


@dataclass
class Env:
    host: RunningHost
    backend: FakeBackend

    def client(self) -> df.DurableOrchestrationClient:
        assert self.host.host is not None
        return df.DurableOrchestrationClient(self.host.host.endpoints.client_binding())

    def call(self, fn: Any) -> Any:
        return self.host.call(fn)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    backend = FakeBackend("testhub")

    def factory(cfg: EngineConfig) -> FakeBackend:
        return backend

    settings = {"DEVHOST_FUNCTION_KEY": "f", "DEVHOST_MASTER_KEY": "m", "DEVHOST_DURABLE_KEY": "sys"}
    with RunningHost(APP, tmp_path, settings=settings, backend_factory=factory) as h:
        yield Env(h, backend)


def test_client_binding_has_the_extension_shape(env: Env) -> None:
    assert env.host.host is not None
    b = json.loads(env.host.host.endpoints.client_binding())
    assert set(b) >= {
        "taskHubName",
        "creationUrls",
        "managementUrls",
        "baseUrl",
        "requiredQueryStringParameters",
        "rpcBaseUrl",
        "httpBaseUrl",
        "maxGrpcMessageSizeInBytes",
        "grpcHttpClientTimeout",
    }
    assert b["rpcBaseUrl"].endswith("/durabletask/")
    assert b["managementUrls"]["id"] == "INSTANCEID"
    assert "/instances/INSTANCEID?" in b["managementUrls"]["statusQueryGetUri"]
    assert b["requiredQueryStringParameters"] == "code=sys"
    assert "{functionName}[/{instanceId}]" in b["creationUrls"]["createNewInstancePostUri"]


def test_start_new_with_a_caller_chosen_id_and_input(env: Env) -> None:
    iid = env.call(lambda: env.client().start_new("hello_orchestrator", "my-id", {"a": 1}))
    assert iid == "my-id"
    assert env.backend.calls == ["start:hello_orchestrator:my-id"]
    # The SDK double-encodes the input; the extension keeps the body as it came.
    assert env.backend.instances["my-id"]["input"] == json.dumps({"a": 1})


def test_start_new_generates_an_id(env: Env) -> None:
    iid = env.call(lambda: env.client().start_new("hello_orchestrator"))
    assert iid
    assert iid in env.backend.instances


def test_start_new_of_an_unknown_orchestrator_raises_a_clear_error(env: Env) -> None:
    with pytest.raises(Exception, match="doesn't exist"):
        env.call(lambda: env.client().start_new("nope"))


def test_start_new_with_a_running_id_is_a_conflict(env: Env) -> None:
    env.call(lambda: env.client().start_new("hello_orchestrator", "dup"))
    with pytest.raises(Exception, match="already exists"):
        env.call(lambda: env.client().start_new("hello_orchestrator", "dup"))
    r = httpx.post(f"{env.host.url}/durabletask/orchestrators/hello_orchestrator/dup")
    assert r.status_code == 409


def test_get_status_with_history_and_input(env: Env) -> None:
    env.call(lambda: env.client().start_new("hello_orchestrator", "s1", "x"))
    env.backend.set_status("s1", "Completed", "hello x")
    st = env.call(lambda: env.client().get_status("s1", show_history=True, show_input=True))
    assert st.runtime_status == OrchestrationRuntimeStatus.Completed
    assert st.output == "hello x"
    assert st.input_ == '"x"'
    assert st.historyEvents[0]["FunctionName"] == "hello_orchestrator"


def test_get_status_of_a_missing_instance_is_falsy(env: Env) -> None:
    st = env.call(lambda: env.client().get_status("missing"))
    assert not st


def test_query_by_status_and_time(env: Env) -> None:
    for i in range(3):
        env.call(lambda i=i: env.client().start_new("hello_orchestrator", f"q{i}"))
    env.backend.set_status("q1", "Completed")
    now = datetime.now(UTC)
    done = env.call(
        lambda: env.client().get_status_by(
            created_time_from=now - timedelta(minutes=1),
            created_time_to=now + timedelta(minutes=1),
            runtime_status=[OrchestrationRuntimeStatus.Completed],
        )
    )
    assert [s.instance_id for s in done] == ["q1"]
    pending = env.call(
        lambda: env.client().get_status_by(runtime_status=[OrchestrationRuntimeStatus.Pending])
    )
    assert sorted(s.instance_id for s in pending) == ["q0", "q2"]
    later = env.call(lambda: env.client().get_status_by(created_time_from=now + timedelta(minutes=5)))
    assert later == []
    assert len(env.call(lambda: env.client().get_status_all())) == 3


def test_query_pages_with_a_continuation_token(env: Env) -> None:
    for i in range(5):
        env.backend.start_instance("hello_orchestrator", f"p{i}", None)
    r = httpx.get(f"{env.host.url}/durabletask/instances/", params={"top": "2"})
    assert r.status_code == 200
    assert len(r.json()) == 2
    token = r.headers["x-ms-continuation-token"]
    seen = [x["instanceId"] for x in r.json()]
    while token:
        r = httpx.get(
            f"{env.host.url}/durabletask/instances/",
            params={"top": "2"},
            headers={"x-ms-continuation-token": token},
        )
        seen += [x["instanceId"] for x in r.json()]
        token = r.headers["x-ms-continuation-token"]
    assert sorted(seen) == [f"p{i}" for i in range(5)]


def test_raise_event(env: Env) -> None:
    env.call(lambda: env.client().start_new("hello_orchestrator", "e1"))
    env.call(lambda: env.client().raise_event("e1", "Approve", {"ok": True}))
    assert env.backend.events == [("e1", "Approve", json.dumps(json.dumps({"ok": True})))]
    with pytest.raises(Exception, match="No instance"):
        env.call(lambda: env.client().raise_event("nobody", "Approve", 1))
    env.backend.set_status("e1", "Completed")
    with pytest.raises(Exception, match="is gone"):
        env.call(lambda: env.client().raise_event("e1", "Approve", 1))


def test_terminate_suspend_resume(env: Env) -> None:
    env.call(lambda: env.client().start_new("hello_orchestrator", "t1"))
    env.call(lambda: env.client().suspend("t1", "pause"))
    assert env.backend.instances["t1"]["runtimeStatus"] == "Suspended"
    env.call(lambda: env.client().resume("t1", "go"))
    assert env.backend.instances["t1"]["runtimeStatus"] == "Running"
    env.call(lambda: env.client().terminate("t1", "stop it"))
    assert env.backend.instances["t1"]["runtimeStatus"] == "Terminated"
    assert env.backend.instances["t1"]["output"] == "stop it"
    env.call(lambda: env.client().terminate("t1", "again"))  # 410: the SDK treats it as done
    with pytest.raises(Exception, match="No instance"):
        env.call(lambda: env.client().terminate("nobody", "x"))


def test_purge_single_and_by_query(env: Env) -> None:
    env.call(lambda: env.client().start_new("hello_orchestrator", "g1"))
    r = httpx.delete(f"{env.host.url}/durabletask/instances/g1")
    assert r.status_code == 412  # still running
    env.backend.set_status("g1", "Completed")
    res = env.call(lambda: env.client().purge_instance_history("g1"))
    assert res.instances_deleted == 1
    assert env.call(lambda: env.client().purge_instance_history("g1")).instances_deleted == 0
    for i in range(3):
        env.call(lambda i=i: env.client().start_new("hello_orchestrator", f"h{i}"))
    env.backend.set_status("h0", "Failed")
    env.backend.set_status("h1", "Completed")
    res = env.call(
        lambda: env.client().purge_instance_history_by(
            created_time_from=datetime.now(UTC) - timedelta(hours=1),
            runtime_status=[OrchestrationRuntimeStatus.Completed, OrchestrationRuntimeStatus.Failed],
        )
    )
    assert res.instances_deleted == 2
    assert sorted(env.backend.instances) == ["h2"]


def test_signal_and_read_entity(env: Env) -> None:
    eid = df.EntityId("Counter", "k1")
    env.call(lambda: env.client().signal_entity(eid, "add", 5))
    assert env.backend.signals == [("counter", "k1", "add", json.dumps(json.dumps(5)))]
    missing = env.call(lambda: env.client().read_entity_state(eid))
    assert not missing.entity_exists
    env.backend.entities[("counter", "k1")] = json.dumps(5)
    state = env.call(lambda: env.client().read_entity_state(eid))
    assert state.entity_exists
    assert state.entity_state == 5


def test_check_status_urls_use_the_public_webhooks_with_the_system_key(env: Env) -> None:
    r = httpx.post(f"{env.host.url}/api/start/hello_orchestrator", params={"id": "w1"}, json="bob")
    assert r.status_code == 202
    links = r.json()
    assert links["id"] == "w1"
    assert links["statusQueryGetUri"].startswith(f"{env.host.url}/runtime/webhooks/durabletask/instances/w1?")
    assert "code=sys" in links["statusQueryGetUri"]
    assert r.headers["Location"] == links["statusQueryGetUri"]
    st = httpx.get(links["statusQueryGetUri"])
    assert st.status_code == 202  # Pending
    assert st.json()["runtimeStatus"] == "Pending"
    env.backend.set_status("w1", "Completed", "hello bob")
    st = httpx.get(links["statusQueryGetUri"])
    assert st.status_code == 200
    assert st.json()["output"] == "hello bob"
    # The webhooks need the system key, like the extension's.
    no_key = links["statusQueryGetUri"].replace("code=sys", "code=bad")
    assert httpx.get(no_key).status_code == 401
    term = links["terminatePostUri"].replace("{text}", "x")
    assert httpx.post(term).status_code == 410
