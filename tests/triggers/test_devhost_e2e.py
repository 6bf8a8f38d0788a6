"""The submission triggers on devhost, end to end: the whole function app, Azurite, the embedded bus.

Each test starts devhost with a real clock on a fresh data folder, so the outbox relay (every 5 s)
and the cron tick (every 10 s) run as they do in Azure; waits poll the store, no timing is asserted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from azure.storage.blob import BlobServiceClient

from shared.adapters import factory
from shared.intake import REJECTED_QUEUE, SUBMISSIONS_QUEUE
from shared.ports import OutgoingMessage, Stores
from shared.records import Execution, TriggerKind
from shared.settings import reset_settings_cache
from shared.states import ExecutionStatus, TaskStatus
from shared.submission import SubmissionDeps, submit_execution
from tests.devhost.harness import RunningHost
from tests.support.azurite import Azurite
from tests.triggers.support import add_tenant, publish

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
FILES_DAG = {"tasks": [{"id": "read", "handler": "noop", "params": {"result": "${{ input.blob.name }}"}}]}
TERMINAL = {ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED}


@dataclass
class Weft:
    host: RunningHost
    stores: Stores
    azurite: Azurite

    def executions(self) -> list[Execution]:
        return self.stores.executions.list_executions("acme", limit=100).items

    def finished(self, execution_id: str, timeout: float = 60) -> Execution:
        def done() -> Execution | None:
            ex = self.stores.executions.get_execution(execution_id)
            return ex if ex is not None and ex.status in TERMINAL else None

        return wait_for(done, timeout, f"execution {execution_id} to finish")


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def weft(tmp_path: Path, azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Iterator[Weft]:
    # The app reads WEFT_* from the process environment (shared.settings), as on the host.
    monkeypatch.setenv("WEFT_DATA_DIR", str(tmp_path / "weft"))
    monkeypatch.setenv("WEFT_PAYLOAD_STORE", "fs")
    monkeypatch.setenv("WEFT_STORE", "sqlite")
    monkeypatch.setenv("WEFT_BUS", "embedded")
    reset_settings_cache()
    factory.reset_for_tests()
    stores = factory.get_stores()
    add_tenant(stores)
    publish(stores)
    publish(stores, FILES_DAG, workflow="files")
    settings = {
        "AzureWebJobsStorage": azurite.connection_string,
        "BlobTriggerConnection": azurite.connection_string,
        "DEVHOST_BLOB_POLL_SECONDS": "0.2",
        "WEFT_TASK_HUB": "triggershub",
        "DEVHOST_FUNCTION_KEY": "fkey",
        "DEVHOST_MASTER_KEY": "mkey",
    }
    try:
        with RunningHost("function_app:app", ROOT, settings=settings, data_dir=tmp_path / "host") as h:
            yield Weft(h, stores, azurite)
    finally:
        factory.reset_for_tests()
        reset_settings_cache()


def test_a_submitted_small_dag_runs_to_succeeded(weft: Weft) -> None:
    """The first end-to-end run of the orchestrator: submit -> fast path -> tasks -> finalize."""
    starts = spy_starts(weft)
    bus = factory.get_bus()
    bus.publish(
        SUBMISSIONS_QUEUE,
        [
            OutgoingMessage.from_json(
                "order-42", {"tenant": "acme", "workflow": "wf", "input": {"x": "hello"}}
            )
        ],
    )
    ex = wait_for(lambda: next(iter(weft.executions()), None), 30, "the message's execution")
    done = weft.finished(ex.id)
    assert done.status is ExecutionStatus.SUCCEEDED, done
    assert done.trigger is TriggerKind.SERVICEBUS and done.idempotency_key == "sb:order-42"
    assert done.output == {"c": "hello"}
    runs = {r.task_id: r for r in weft.stores.executions.get_task_runs(ex.id)}
    assert {k: (r.status, r.attempts) for k, r in runs.items()} == dict.fromkeys(
        ("a", "b", "c"), (TaskStatus.SUCCEEDED, 1)
    )

    # The relay published the lifecycle events, in order, to workflow-events.
    def events() -> list[str] | None:
        msgs = bus.receive("workflow-events", max_messages=20, max_wait_seconds=0.5)
        for m in msgs:
            bus.complete(m)
        seen.extend(json.loads(m.body)["type"] for m in msgs)
        return seen if "weft.execution.succeeded" in seen else None

    seen: list[str] = []
    assert wait_for(events, 30, "the succeeded event") == [
        "weft.execution.accepted",
        "weft.execution.started",
        "weft.execution.succeeded",
    ]
    # The relay handled the start record (it comes before "started"): the finished instance was
    # found and not started again; the fast path was the only start.
    assert starts.count(ex.id) == 1


def spy_starts(weft: Weft) -> list[str]:
    """Instance ids devhost's engine is asked to start (through the SDK client and management API)."""
    assert weft.host.host is not None and weft.host.host.backend is not None
    engine: Any = weft.host.host.backend
    real = engine.start_instance
    calls: list[str] = []

    def counting(orchestrator: str, instance_id: str | None, *args: Any, **kw: Any) -> str:
        calls.append(str(instance_id))
        result: str = real(orchestrator, instance_id, *args, **kw)
        return result

    engine.start_instance = counting
    return calls


def test_the_client_starter_never_restarts_an_existing_instance(weft: Weft) -> None:
    import azure.durable_functions as df

    from shared.execution_messages import ExecutionInput
    from shared.names import OrchestratorName
    from triggers.starter import ClientStarter

    assert weft.host.host is not None
    client = df.DurableOrchestrationClient(weft.host.host._client_binding())
    starter = ClientStarter(client, weft.host.loop)
    deps = SubmissionDeps(stores=weft.stores, payloads=factory.get_payload_store(), starter=starter)
    starts = spy_starts(weft)
    res = submit_execution(
        deps,
        "acme",
        "wf",
        input={"x": 1},
        version=None,
        idempotency_key=None,
        trigger=TriggerKind.HTTP,
        now=datetime.now(UTC),
    )
    assert res.started
    assert weft.finished(res.execution.id).status is ExecutionStatus.SUCCEEDED
    inp = ExecutionInput(execution_id=res.execution.id, tenant_id="acme").to_json_dict()
    starter.start_new(OrchestratorName.EXECUTION, res.execution.id, inp)
    assert starts == [res.execution.id]


def test_the_relay_starts_an_execution_whose_fast_path_was_lost(weft: Weft) -> None:
    deps = SubmissionDeps(stores=weft.stores, payloads=factory.get_payload_store(), starter=None)
    res = submit_execution(
        deps,
        "acme",
        "wf",
        input={"x": 1},
        version=None,
        idempotency_key=None,
        trigger=TriggerKind.HTTP,
        now=datetime.now(UTC),
    )
    assert not res.started
    assert weft.finished(res.execution.id).status is ExecutionStatus.SUCCEEDED


def test_a_blob_dropped_into_azurite_starts_exactly_one_execution(weft: Weft) -> None:
    service = BlobServiceClient.from_connection_string(weft.azurite.connection_string)
    container = service.get_container_client("incoming")
    if not container.exists():
        container.create_container()
    data = b'{"rows": 3}'
    uploaded = container.upload_blob("acme/files/batch-1.json", data, overwrite=True)
    ex = wait_for(lambda: next(iter(weft.executions()), None), 30, "the blob's execution")
    assert ex.trigger is TriggerKind.BLOB
    blob: dict[str, Any] = ex.input["blob"]
    assert blob["container"] == "incoming" and blob["name"] == "acme/files/batch-1.json"
    assert blob["size"] == len(data) and blob["etag"] == str(uploaded.get_blob_properties().etag).strip('"')
    assert blob["url"].endswith("/incoming/acme/files/batch-1.json")
    finished = weft.finished(ex.id)
    assert finished.status is ExecutionStatus.SUCCEEDED and finished.output == {
        "read": "acme/files/batch-1.json"
    }
    # The same bytes uploaded again get a new ETag (the trigger fires again) but no second execution;
    # new bytes do start one.
    container.upload_blob("acme/files/batch-1.json", data, overwrite=True)
    container.upload_blob("acme/files/batch-2.json", b'{"rows": 4}', overwrite=True)
    second = wait_for(
        lambda: next(
            (e for e in weft.executions() if e.input["blob"]["name"].endswith("batch-2.json")), None
        ),
        30,
        "the second blob's execution",
    )
    weft.finished(second.id)
    trigger = next(t for t in weft.host.host.triggers if t.spec.name == "blob_submit")  # type: ignore[union-attr]
    wait_for(lambda: trigger.fired >= 3, 30, "the re-upload to be processed")
    assert sorted(e.input["blob"]["name"] for e in weft.executions()) == [
        "acme/files/batch-1.json",
        "acme/files/batch-2.json",
    ]


def test_bus_messages_good_duplicate_and_poison(weft: Weft) -> None:
    bus = factory.get_bus()
    good = {"tenant": "acme", "workflow": "wf", "version": 1, "input": {"x": 1}}
    bus.publish(
        SUBMISSIONS_QUEUE,
        [
            OutgoingMessage.from_json("good-1", good),
            OutgoingMessage(message_id="bad-json", body=b"{not json"),
            OutgoingMessage.from_json("bad-shape", {"tenant": "acme"}),
            OutgoingMessage.from_json("no-tenant", {"tenant": "ghost", "workflow": "wf"}),
            OutgoingMessage.from_json("no-workflow", {"tenant": "acme", "workflow": "ghost"}),
        ],
    )
    rejected: dict[str, str] = {}

    def all_rejected() -> dict[str, str] | None:
        for m in bus.receive(REJECTED_QUEUE, max_messages=10, max_wait_seconds=0.5):
            rejected[m.message_id] = str(m.application_properties["DeadLetterReason"])
            bus.complete(m)
        return rejected if len(rejected) == 4 else None

    assert wait_for(all_rejected, 30, "the poison messages") == {
        "bad-json": "InvalidBody",
        "bad-shape": "InvalidBody",
        "no-tenant": "UnknownTenantOrWorkflow",
        "no-workflow": "UnknownTenantOrWorkflow",
    }
    ex = wait_for(lambda: next(iter(weft.executions()), None), 30, "the good message's execution")
    weft.finished(ex.id)
    # A redelivery of the same message (e.g. after a lost lock) is the same execution. A different
    # message id is past the bus's duplicate detection, so re-send under a new id with the old key.
    bus.publish(
        SUBMISSIONS_QUEUE,
        [
            OutgoingMessage.from_json(
                "good-1-again", good, application_properties={"weft-idempotency-key": "good-1"}
            )
        ],
    )
    sb = next(t for t in weft.host.host.triggers if t.spec.name == "servicebus_submit")  # type: ignore[union-attr]
    wait_for(lambda: sb.completed >= 6, 30, "the re-send to be handled")
    assert [e.id for e in weft.executions()] == [ex.id]
    # Poison messages were completed (not retried until the broker dead-letters them).
    assert sb.abandoned == 0
    assert bus.peek_dead_letters(SUBMISSIONS_QUEUE) == []


def test_the_cron_tick_fires_a_schedule_through_the_timer_function(weft: Weft) -> None:
    every_second = {**FILES_DAG, "schedule": {"cron": "* * * * * *", "catchUp": "skip"}}
    every_second["tasks"] = [
        {"id": "t", "handler": "noop", "params": {"result": "${{ input.schedule.occurrence }}"}}
    ]
    publish(weft.stores, every_second, workflow="cron")
    assert weft.host.host is not None
    timer = next(t for t in weft.host.host.triggers if t.spec.name == "schedule_tick")
    weft.host.run(timer._fire(False, None))  # first sight: the cursor starts now
    time.sleep(1.5)
    weft.host.run(timer._fire(False, None))  # fires the occurrences since (the real 10 s timer may too)

    def scheduled() -> list[Execution] | None:
        found = [e for e in weft.executions() if e.trigger is TriggerKind.SCHEDULE]
        return found or None

    found = wait_for(scheduled, 30, "a scheduled execution")
    occurrences = [e.input["schedule"]["occurrence"] for e in found]
    assert len(occurrences) == len(set(occurrences))
    done = weft.finished(found[0].id)
    assert done.status is ExecutionStatus.SUCCEEDED
    assert done.output == {"t": found[0].input["schedule"]["occurrence"]}
