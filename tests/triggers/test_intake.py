"""Blob and Service Bus submissions as plain functions: keys, routing of poison and deferred messages."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.embedded_bus import EmbeddedBus
from shared.errors import NotFoundError
from shared.intake import (
    IDEMPOTENCY_PROPERTY,
    REJECTED_QUEUE,
    SUBMISSIONS_QUEUE,
    BlobInfo,
    InboundMessage,
    handle_submission_message,
    submit_blob,
)
from shared.ports import Stores
from shared.records import TriggerKind
from shared.submission import SubmissionDeps
from tests.triggers.support import T0, FakeStarter, add_tenant, make_deps, make_stores, publish


@pytest.fixture
def stores(tmp_path: Path) -> Stores:
    s = make_stores(tmp_path)
    add_tenant(s)
    publish(s)
    return s


@pytest.fixture
def deps(tmp_path: Path, stores: Stores) -> SubmissionDeps:
    return make_deps(tmp_path, stores, FakeStarter())


@pytest.fixture
def bus(tmp_path: Path) -> EmbeddedBus:
    return EmbeddedBus(tmp_path / "bus.sqlite3", clock=lambda: T0)


def blob(name: str = "acme/wf/orders.csv", etag: str = "0x1", sha: str = "aa") -> BlobInfo:
    return BlobInfo("incoming", name, 12, etag, f"http://127.0.0.1/incoming/{name}", sha)


def test_blob_starts_one_execution_with_its_description(deps: SubmissionDeps, stores: Stores) -> None:
    res = submit_blob(deps, blob(), T0)
    assert res.execution.trigger is TriggerKind.BLOB
    assert res.execution.input == {
        "blob": {
            "container": "incoming",
            "name": "acme/wf/orders.csv",
            "size": 12,
            "etag": "0x1",
            "url": "http://127.0.0.1/incoming/acme/wf/orders.csv",
        }
    }
    # The same version again, or the same bytes re-uploaded (new etag): the same execution.
    assert submit_blob(deps, blob(), T0).execution.id == res.execution.id
    assert not submit_blob(deps, blob(etag="0x2"), T0).created
    # New content under the same name, or the same content under another name: a new execution.
    assert submit_blob(deps, blob(sha="bb", etag="0x3"), T0).created
    assert submit_blob(deps, blob(name="acme/wf/other.csv"), T0).created
    assert len(stores.executions.list_executions("acme").items) == 3


@pytest.mark.parametrize("name", ["acme/orders.csv", "nobody/wf/x.csv", "acme/nowf/x.csv"])
def test_blob_for_an_unknown_place_is_not_found(deps: SubmissionDeps, name: str) -> None:
    with pytest.raises(NotFoundError):
        submit_blob(deps, blob(name=name), T0)


def message(body: Any, message_id: str = "m-1", **props: Any) -> InboundMessage:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return InboundMessage(message_id=message_id, body=raw, application_properties=props)


def test_message_submits_with_its_id_as_idempotency_key(
    deps: SubmissionDeps, bus: EmbeddedBus, stores: Stores
) -> None:
    body = {"tenant": "acme", "workflow": "wf", "version": 1, "input": {"x": 3}}
    first = handle_submission_message(deps, bus, message(body), T0)
    again = handle_submission_message(deps, bus, message(body), T0)
    assert first.action == again.action == "accepted"
    assert first.execution_id == again.execution_id
    ex = stores.executions.get_execution(str(first.execution_id))
    assert ex is not None and ex.trigger is TriggerKind.SERVICEBUS and ex.input == {"x": 3}
    assert handle_submission_message(deps, bus, message(body, "m-2"), T0).execution_id != first.execution_id


@pytest.mark.parametrize(
    ("body", "reason", "detail"),
    [
        (b"not json", "InvalidBody", "Invalid JSON"),
        ({"tenant": "acme"}, "InvalidBody", "workflow: Field required"),
        ({"tenant": "acme", "workflow": "wf", "extra": 1}, "InvalidBody", "extra: Extra inputs"),
        ({"tenant": "acme", "workflow": "wf", "version": 0}, "InvalidBody", "version"),
        ({"tenant": "nobody", "workflow": "wf"}, "UnknownTenantOrWorkflow", "tenant 'nobody'"),
        ({"tenant": "acme", "workflow": "nope"}, "UnknownTenantOrWorkflow", "workflow 'nope'"),
        ({"tenant": "acme", "workflow": "wf", "version": 9}, "UnknownTenantOrWorkflow", "version 9"),
    ],
)
def test_poison_messages_go_to_the_rejected_queue_with_a_reason(
    deps: SubmissionDeps, bus: EmbeddedBus, stores: Stores, body: Any, reason: str, detail: str
) -> None:
    msg = message(body, "poison-1", origin="crm")
    out = handle_submission_message(deps, bus, msg, T0)
    assert out.action == "rejected" and out.reason == reason
    [copy] = bus.receive(REJECTED_QUEUE, max_messages=10)
    assert copy.message_id == "poison-1" and copy.body == msg.body
    props = copy.application_properties
    assert props["DeadLetterReason"] == reason and detail in str(props["DeadLetterErrorDescription"])
    assert props["origin"] == "crm" and props["weft-original-message-id"] == "poison-1"
    assert not stores.executions.list_executions("acme").items


def test_a_message_id_reused_with_another_body_is_rejected(deps: SubmissionDeps, bus: EmbeddedBus) -> None:
    handle_submission_message(deps, bus, message({"tenant": "acme", "workflow": "wf", "input": 1}), T0)
    out = handle_submission_message(deps, bus, message({"tenant": "acme", "workflow": "wf", "input": 2}), T0)
    assert out.action == "rejected" and out.reason == "IdempotencyConflict"


def test_over_the_limits_a_message_is_deferred_with_its_key_and_accepted_later(
    tmp_path: Path, bus: EmbeddedBus
) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores, submits_per_second=1)
    publish(stores)
    deps = make_deps(tmp_path, stores)
    body = {"tenant": "acme", "workflow": "wf"}
    assert handle_submission_message(deps, bus, message(body, "a"), T0).action == "accepted"
    out = handle_submission_message(deps, bus, message(body, "b"), T0 + timedelta(milliseconds=200))
    assert out.action == "deferred"
    assert bus.receive(SUBMISSIONS_QUEUE, max_messages=5) == []  # scheduled for later
    later = EmbeddedBus(tmp_path / "bus.sqlite3", clock=lambda: T0 + timedelta(seconds=1))
    [copy] = later.receive(SUBMISSIONS_QUEUE, max_messages=5)
    assert copy.application_properties[IDEMPOTENCY_PROPERTY] == "b"
    inbound = InboundMessage(
        copy.message_id, copy.body, application_properties=dict(copy.application_properties)
    )
    done = handle_submission_message(deps, later, inbound, T0 + timedelta(seconds=1))
    assert done.action == "accepted"
    ex = stores.executions.get_execution(str(done.execution_id))
    assert ex is not None and ex.idempotency_key == "sb:b"


def test_a_blob_over_the_limits_waits_instead_of_failing(tmp_path: Path) -> None:
    from shared.errors import AdmissionDeniedError
    from shared.intake import submit_blob_patiently

    stores = make_stores(tmp_path)
    add_tenant(stores, submits_per_second=1)
    publish(stores)
    deps = make_deps(tmp_path, stores)
    clock = [T0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += timedelta(seconds=s)

    submit_blob(deps, blob(name="acme/wf/1"), T0)
    res = submit_blob_patiently(deps, blob(name="acme/wf/2"), lambda: clock[0], sleep)
    assert res.created and slept == [pytest.approx(1.0)]
    with pytest.raises(AdmissionDeniedError):
        submit_blob_patiently(
            deps, blob(name="acme/wf/3"), lambda: clock[0], lambda _s: None, max_wait_seconds=0.5
        )
