"""End to end on the real engine: HTTP starter -> orchestration -> status URL, as `make run` serves it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import httpx
import pytest

from tests.devhost.harness import RunningHost
from tests.support.azurite import Azurite

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {
    "WEFT_TASK_HUB": "e2ehub",
    "DEVHOST_FUNCTION_KEY": "fkey",
    "DEVHOST_MASTER_KEY": "mkey",
    "DEVHOST_DURABLE_KEY": "syskey",
}


def app_settings(azurite: Azurite) -> dict[str, str]:
    """What `make run` gives the app: the example settings, storage pointed at the test's Azurite."""
    import json

    from devhost.indexing import connection_settings, index_app

    values: dict[str, str] = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    out = {
        k: (azurite.connection_string if v == "UseDevelopmentStorage=true" else v) for k, v in values.items()
    }
    import function_app

    # A connection missing from the example is test_indexing's failure to report, not this test's.
    for name in connection_settings(index_app(function_app.app)):
        out.setdefault(name, azurite.connection_string)
    return {**out, **SETTINGS}


def _reset_app_singletons() -> None:
    from shared.adapters.factory import reset_for_tests
    from shared.settings import reset_settings_cache

    reset_settings_cache()
    reset_for_tests()


@pytest.fixture
def weft(tmp_path: Path, azurite: Azurite) -> Iterator[RunningHost]:
    settings = {**app_settings(azurite), "WEFT_DATA_DIR": str(tmp_path / "weft")}
    _reset_app_singletons()
    try:
        with RunningHost("function_app:app", ROOT, settings=settings, data_dir=tmp_path / "data") as h:
            yield h
    finally:
        _reset_app_singletons()


def poll(url: str, until: set[str], timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(url)
        if r.json().get("runtimeStatus") in until or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def test_selftest_starter_runs_the_fanout_to_completion(weft: RunningHost) -> None:
    r = httpx.post(f"{weft.url}/api/v1/selftest", params={"code": "fkey"}, json={"width": 12})
    assert r.status_code == 202
    links = r.json()
    assert r.headers["Location"] == links["statusQueryGetUri"]
    done = poll(links["statusQueryGetUri"], {"Completed", "Failed", "Terminated"})
    assert done.status_code == 200
    body = done.json()
    assert body["runtimeStatus"] == "Completed"
    assert body["name"] == "selftest_fanout"
    assert body["output"] == {"width": 12, "sum": sum(range(12))}
    # The starter's client ran on the host loop, so its start call took the in-process transport.
    assert weft.host is not None
    assert weft.host._shortcut is not None
    assert weft.host._shortcut.calls >= 1


def test_rpc_can_go_over_http(tmp_path: Path, azurite: Azurite) -> None:
    settings = {**app_settings(azurite), "DEVHOST_RPC_OVER_HTTP": "1", "WEFT_DATA_DIR": str(tmp_path / "w")}
    with RunningHost("function_app:app", ROOT, settings=settings, data_dir=tmp_path / "d") as h:
        assert h.host is not None
        assert h.host._shortcut is None
        r = httpx.post(f"{h.url}/api/v1/selftest", params={"code": "fkey"}, json={"width": 2})
        assert r.status_code == 202
        assert poll(r.json()["statusQueryGetUri"], {"Completed"}).json()["runtimeStatus"] == "Completed"


def test_selftest_requires_the_function_key(weft: RunningHost) -> None:
    assert httpx.post(f"{weft.url}/api/v1/selftest", json={}).status_code == 401


def test_selftest_rejects_a_non_object_body_with_problem_json(weft: RunningHost) -> None:
    r = httpx.post(f"{weft.url}/api/v1/selftest", params={"code": "fkey"}, content=b"[1,2]")
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/problem+json")


def test_sdk_client_manages_a_real_instance(weft: RunningHost) -> None:
    assert weft.host is not None
    binding = weft.host.endpoints.client_binding()

    async def scenario() -> tuple[Any, Any, Any]:
        client = df.DurableOrchestrationClient(binding)
        iid = await client.start_new("selftest_fanout", "e2e-1", {"width": 3})
        deadline = time.monotonic() + 60
        st = await client.get_status(iid, show_history=True, show_input=True)
        while st.runtime_status is None or st.runtime_status.value not in ("Completed", "Failed"):
            assert time.monotonic() < deadline
            st = await client.get_status(iid, show_history=True, show_input=True)
        found = await client.get_status_by(runtime_status=[df.OrchestrationRuntimeStatus.Completed])
        purged = await client.purge_instance_history(iid)
        return st, [s.instance_id for s in found], purged.instances_deleted

    st, found, purged = weft.call(scenario)
    assert st.runtime_status == df.OrchestrationRuntimeStatus.Completed
    assert st.output == {"width": 3, "sum": 3}
    assert "e2e-1" in found
    assert purged == 1
    events = st.historyEvents
    assert events[0]["EventType"] == "ExecutionStarted"
    assert events[-1]["EventType"] == "ExecutionCompleted"


def test_cli_serves_until_sigterm_then_stops_gracefully(tmp_path: Path, azurite: Azurite) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys

    env = {
        **os.environ,
        **app_settings(azurite),
        "PYTHONPATH": str(ROOT),
        "WEFT_DATA_DIR": str(tmp_path / "w"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "devhost", "--port", "0", "--data-dir", str(tmp_path / "d")],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        url = None
        for line in proc.stderr:
            if '"host.started"' in line:
                url = json.loads(line[line.index("{") :])["url"]
                break
        assert url, "devhost did not report host.started"
        status = httpx.get(f"{url}/admin/host/status", headers={"x-functions-key": "mkey"})
        assert status.json()["state"] == "Running"
        r = httpx.post(f"{url}/api/v1/selftest", params={"code": "fkey"}, json={"width": 3})
        assert poll(r.json()["statusQueryGetUri"], {"Completed"}).json()["runtimeStatus"] == "Completed"
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
        assert '"host.stopped"' in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
