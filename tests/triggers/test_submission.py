"""submit_execution: admission, idempotency, 404/409/413/429, claim check, atomic write, fast path."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.claimcheck import is_claim_check, resolve
from shared.errors import AdmissionDeniedError, ConflictError, NotFoundError, PayloadTooLargeError
from shared.lifecycle import WORKFLOW_EVENTS_TOPIC, LifecycleEvent
from shared.names import OrchestratorName
from shared.ports import Stores
from shared.records import OutboxKind, TriggerKind
from shared.states import ExecutionStatus
from shared.submission import SubmissionDeps, start_record_id, submit_execution
from tests.triggers.support import T0, FakeStarter, add_tenant, make_deps, make_stores, publish


@pytest.fixture
def stores(tmp_path: Path) -> Stores:
    s = make_stores(tmp_path)
    add_tenant(s)
    publish(s)
    return s


def submit(deps: SubmissionDeps, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "input": {"x": 1},
        "version": None,
        "idempotency_key": None,
        "trigger": TriggerKind.HTTP,
        "now": T0,
    }
    args.update(kw)
    tenant = args.pop("tenant", "acme")
    workflow = args.pop("workflow", "wf")
    return submit_execution(deps, tenant, workflow, **args)


def nothing_written(stores: Stores) -> bool:
    return not stores.executions.list_executions("acme").items and not stores.executions.claim_outbox(
        "probe", T0 + timedelta(days=1)
    )


def test_submit_writes_queued_execution_accepted_event_and_start_record_then_starts(
    tmp_path: Path, stores: Stores
) -> None:
    starter = FakeStarter()
    res = submit(make_deps(tmp_path, stores, starter), trigger=TriggerKind.BLOB)
    ex = stores.executions.get_execution(res.execution.id)
    assert ex is not None and ex.status is ExecutionStatus.QUEUED
    assert (ex.workflow, ex.version, ex.trigger, ex.input) == ("wf", 1, TriggerKind.BLOB, {"x": 1})
    assert res.created and res.started
    assert starter.started == {
        ex.id: {
            "orchestrator": OrchestratorName.EXECUTION,
            "input": {"executionId": ex.id, "tenantId": "acme"},
        }
    }
    events = stores.executions.list_events(ex.id)
    assert [e.type for e in events] == [LifecycleEvent.EXECUTION_ACCEPTED]
    assert events[0].data == {"trigger": "blob"}
    outbox = stores.executions.claim_outbox("probe", T0)
    assert [(r.kind, r.destination) for r in outbox] == [
        (OutboxKind.EVENT, WORKFLOW_EVENTS_TOPIC),
        (OutboxKind.START_EXECUTION, None),
    ]
    assert outbox[1].id == start_record_id(ex.id)
    assert outbox[0].payload["type"] == "weft.execution.accepted"


def test_latest_version_is_used_unless_one_is_asked_for(tmp_path: Path, stores: Stores) -> None:
    v2 = publish(stores, {"tasks": [{"id": "only", "handler": "noop"}]})
    deps = make_deps(tmp_path, stores)
    assert submit(deps).execution.version == v2 == 2
    assert submit(deps, version=1).execution.version == 1


@pytest.mark.parametrize(
    ("kw", "what"),
    [
        ({"tenant": "nobody"}, "tenant"),
        ({"workflow": "missing"}, "workflow"),
        ({"version": 7}, "version 7"),
    ],
)
def test_unknown_tenant_workflow_or_version_is_not_found_and_writes_nothing(
    tmp_path: Path, stores: Stores, kw: dict[str, Any], what: str
) -> None:
    starter = FakeStarter()
    with pytest.raises(NotFoundError, match=what):
        submit(make_deps(tmp_path, stores, starter), idempotency_key="k1", **kw)
    assert nothing_written(stores) and starter.calls == 0
    assert stores.idempotency.get_submission("acme", "k1") is None


def test_failed_fast_path_is_not_an_error_and_leaves_the_start_record(tmp_path: Path, stores: Stores) -> None:
    res = submit(make_deps(tmp_path, stores, FakeStarter(fail=True)))
    assert res.created and not res.started
    kinds = [r.kind for r in stores.executions.claim_outbox("probe", T0)]
    assert OutboxKind.START_EXECUTION in kinds


def test_same_key_same_body_returns_the_same_execution(tmp_path: Path, stores: Stores) -> None:
    starter = FakeStarter()
    deps = make_deps(tmp_path, stores, starter)
    first = submit(deps, idempotency_key="order-1")
    again = submit(deps, idempotency_key="order-1", now=T0 + timedelta(seconds=5))
    assert again.execution.id == first.execution.id
    assert not again.created and not again.started
    assert len(stores.executions.list_executions("acme").items) == 1
    assert starter.calls == 1


def test_same_key_different_body_conflicts(tmp_path: Path, stores: Stores) -> None:
    deps = make_deps(tmp_path, stores)
    submit(deps, idempotency_key="order-1")
    with pytest.raises(ConflictError, match="different request"):
        submit(deps, idempotency_key="order-1", input={"x": 2})
    with pytest.raises(ConflictError):
        submit(deps, idempotency_key="order-1", version=1)
    assert len(stores.executions.list_executions("acme").items) == 1


def test_concurrent_submits_with_one_key_create_one_execution(tmp_path: Path, stores: Stores) -> None:
    starter = FakeStarter()
    deps = make_deps(tmp_path, stores, starter)
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda _i: submit(deps, idempotency_key="same"), range(32)))
    assert len({r.execution.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert len(stores.executions.list_executions("acme").items) == 1
    assert list(starter.started) == [results[0].execution.id]


def test_a_key_recorded_by_a_submit_that_died_before_its_execution_is_completed_by_the_retry(
    tmp_path: Path, stores: Stores
) -> None:
    from shared.records import SubmissionRecord
    from shared.submission import request_hash

    stores.idempotency.put_submission(
        SubmissionRecord(
            tenant_id="acme",
            key="k",
            request_hash=request_hash("wf", None, {"x": 1}),
            execution_id="exec-from-the-dead-submit",
            created_at=T0,
        )
    )
    res = submit(make_deps(tmp_path, stores, FakeStarter()), idempotency_key="k")
    assert res.execution.id == "exec-from-the-dead-submit" and res.created


def test_input_over_the_maximum_is_too_large_and_writes_nothing(tmp_path: Path, stores: Stores) -> None:
    deps = make_deps(tmp_path, stores, FakeStarter(), max_input_bytes=2048)
    with pytest.raises(PayloadTooLargeError) as err:
        submit(deps, input={"blob": "x" * 3000})
    assert err.value.details["maxInputBytes"] == 2048
    assert nothing_written(stores)
    assert not any((tmp_path / "payloads").rglob("*.*"))


def test_input_over_the_threshold_is_claim_checked(tmp_path: Path, stores: Stores) -> None:
    deps = make_deps(tmp_path, stores, claim_check_threshold_bytes=1024)
    big = {"rows": ["y" * 100] * 50}
    res = submit(deps, input=big)
    stored = stores.executions.get_execution(res.execution.id)
    assert stored is not None and is_claim_check(stored.input)
    assert resolve(deps.payloads, stored.input) == big
    small = submit(deps, input={"x": 1})
    assert small.execution.input == {"x": 1}


def test_over_max_active_executions_is_denied_and_writes_nothing(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores, max_active_executions=2)
    publish(stores)
    deps = make_deps(tmp_path, stores, FakeStarter())
    ids = [submit(deps, now=T0 + timedelta(seconds=i)).execution.id for i in range(2)]
    with pytest.raises(AdmissionDeniedError) as err:
        submit(deps, now=T0 + timedelta(seconds=3), idempotency_key="k")
    assert err.value.retry_after_seconds > 0
    assert {e.id for e in stores.executions.list_executions("acme").items} == set(ids)
    assert stores.idempotency.get_submission("acme", "k") is None


def test_rate_limit_admits_a_burst_then_the_rate_and_says_when_to_come_back(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores, submits_per_second=4)
    publish(stores)
    deps = make_deps(tmp_path, stores)
    for _ in range(4):  # the burst: ceil(4 * 1 s)
        submit(deps, now=T0)
    with pytest.raises(AdmissionDeniedError) as err:
        submit(deps, now=T0 + timedelta(milliseconds=100))
    assert err.value.retry_after_seconds == pytest.approx(0.15)
    assert err.value.details["limit"] == "submitsPerSecond"
    assert len(stores.executions.list_executions("acme").items) == 4
    # Then one every 1/r seconds.
    submit(deps, now=T0 + timedelta(milliseconds=250))
    with pytest.raises(AdmissionDeniedError):
        submit(deps, now=T0 + timedelta(milliseconds=300))
    submit(deps, now=T0 + timedelta(milliseconds=500))
    # Unused rate refills the burst, never beyond it.
    for _ in range(4):
        submit(deps, now=T0 + timedelta(seconds=10))
    with pytest.raises(AdmissionDeniedError):
        submit(deps, now=T0 + timedelta(seconds=10))


def test_a_slow_rate_widens_the_window(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores, submits_per_second=0.5)
    publish(stores)
    deps = make_deps(tmp_path, stores)
    submit(deps, now=T0)
    with pytest.raises(AdmissionDeniedError) as err:
        submit(deps, now=T0 + timedelta(seconds=1.5))
    assert err.value.retry_after_seconds == pytest.approx(0.5)
    submit(deps, now=T0 + timedelta(seconds=2))


def test_an_idempotent_replay_is_not_refused_by_the_limits(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores, max_active_executions=1)
    publish(stores)
    deps = make_deps(tmp_path, stores)
    first = submit(deps, idempotency_key="k")
    assert submit(deps, idempotency_key="k").execution.id == first.execution.id


def test_a_given_execution_id_makes_a_duplicate_submit_harmless(tmp_path: Path, stores: Stores) -> None:
    starter = FakeStarter()
    deps = make_deps(tmp_path, stores, starter)
    a = submit(deps, execution_id="fixed-id", trigger=TriggerKind.SCHEDULE)
    b = submit(deps, execution_id="fixed-id", trigger=TriggerKind.SCHEDULE)
    assert a.execution.id == b.execution.id == "fixed-id"
    assert a.created and not b.created
    assert len(stores.executions.list_executions("acme").items) == 1


def test_a_submit_that_queued_in_the_process_is_judged_when_it_reaches_the_bucket(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    add_tenant(stores, submits_per_second=1)
    publish(stores)
    deps = make_deps(tmp_path, stores)
    submit(deps, now=T0 + timedelta(seconds=5))
    # Arrived at T0 (its ``now``), reached the bucket at T0 + 6 s: one second after the last.
    late = dataclasses.replace(deps, clock=lambda: T0 + timedelta(seconds=6))
    assert submit(late, now=T0).created
    with pytest.raises(AdmissionDeniedError):
        submit(deps, now=T0 + timedelta(seconds=6))
