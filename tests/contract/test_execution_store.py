"""ExecutionStore contract: atomic writes, ETags, paging, events, outbox claims, dead letters."""

from __future__ import annotations

import pytest

from shared.errors import ConcurrencyError, ConflictError, NotFoundError
from shared.ports import MAX_WRITE_ITEMS, ExecutionStore, ExecutionWrite
from shared.records import DeadLetterResolution, DeadLetterStatus, NewEvent, OutboxKind
from shared.states import ExecutionStatus, TaskStatus
from tests.contract.backends import StoreHarness
from tests.contract.builders import T0, at, dead_letter, execution, outbox, task_run, uid


class InjectedFault(Exception):
    pass


def _create(store: ExecutionStore, **kw: object) -> tuple[str, ExecutionWrite]:
    ex = execution(**kw)  # type: ignore[arg-type]
    write = ExecutionWrite(
        execution_id=ex.id,
        execution=ex,
        task_runs=[task_run(ex.id, "a"), task_run(ex.id, "b")],
        events=[NewEvent(type="submitted", at=T0, data={"by": "test"})],
        outbox=[outbox(ex.id, kind=OutboxKind.START_EXECUTION, destination="")],
    )
    store.commit(write)
    return ex.id, write


def _assert_nothing_of(store: ExecutionStore, execution_id: str) -> None:
    assert store.get_execution(execution_id) is None
    assert store.get_task_runs(execution_id) == []
    assert store.list_events(execution_id) == []
    assert store.claim_outbox("probe", at(0), limit=1000) == []
    assert store.list_dead_letters("acme").items == []


# ------------------------------------------------------------------------------- atomicity


def test_commit_writes_everything_and_returns_new_etags(execution_store: ExecutionStore) -> None:
    ex = execution()
    result = execution_store.commit(
        ExecutionWrite(
            execution_id=ex.id,
            execution=ex,
            task_runs=[task_run(ex.id, "a")],
            events=[NewEvent(type="submitted", at=T0), NewEvent(type="started", at=at(1))],
            outbox=[outbox(ex.id)],
            dead_letters=[dead_letter(ex.id)],
        )
    )
    assert result.execution is not None
    assert result.execution.etag
    stored = execution_store.get_execution(ex.id)
    assert stored == result.execution
    assert execution_store.get_task_run(ex.id, "a") == result.task_runs["a"]
    assert [e.seq for e in result.events] == [1, 2]
    assert [(e.seq, e.type) for e in execution_store.list_events(ex.id)] == [(1, "submitted"), (2, "started")]
    assert result.outbox[0].seq == 3  # one counter orders events and outbox records
    assert execution_store.get_outbox_record(ex.id, result.outbox[0].id) is not None
    assert execution_store.list_dead_letters("acme").items == result.dead_letters


def test_stale_etag_on_the_last_item_leaves_nothing_behind(execution_store: ExecutionStore) -> None:
    ex_id, _ = _create(execution_store)
    runs = {r.task_id: r for r in execution_store.get_task_runs(ex_id)}
    current = execution_store.get_execution(ex_id)
    assert current is not None
    write = ExecutionWrite(
        execution_id=ex_id,
        execution=current.model_copy(update={"status": ExecutionStatus.RUNNING}),
        task_runs=[
            runs["a"].model_copy(update={"status": TaskStatus.SCHEDULED}),
            runs["b"].model_copy(update={"status": TaskStatus.SCHEDULED, "etag": "stale"}),
        ],
        events=[NewEvent(type="started", at=at(1))],
        outbox=[outbox(ex_id)],
    )
    with pytest.raises(ConcurrencyError):
        execution_store.commit(write)
    assert execution_store.get_execution(ex_id) == current
    assert {r.task_id: r for r in execution_store.get_task_runs(ex_id)} == runs
    assert [e.type for e in execution_store.list_events(ex_id)] == ["submitted"]
    claimed = execution_store.claim_outbox("r", at(0))
    assert [r.kind for r in claimed] == [OutboxKind.START_EXECUTION]


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4, 5])
def test_failure_injected_mid_write_leaves_nothing_behind(
    store_backend: StoreHarness, execution_store: ExecutionStore, fail_at: int
) -> None:
    steps: list[str] = []

    def hook(step: str) -> None:
        steps.append(step)
        if len(steps) == fail_at:
            raise InjectedFault(step)

    ex = execution()
    write = ExecutionWrite(
        execution_id=ex.id,
        execution=ex,
        task_runs=[task_run(ex.id, "a")],
        events=[NewEvent(type="submitted", at=T0)],
        outbox=[outbox(ex.id)],
        dead_letters=[dead_letter(ex.id)],
    )
    store_backend.set_fault_hook(hook)
    with pytest.raises(InjectedFault):
        execution_store.commit(write)
    store_backend.set_fault_hook(None)
    _assert_nothing_of(execution_store, ex.id)
    # ...and the same write succeeds afterwards: the failure left no half-claimed ids behind.
    execution_store.commit(write)
    assert execution_store.get_execution(ex.id) is not None


def test_items_of_another_execution_are_refused(execution_store: ExecutionStore) -> None:
    ex = execution()
    with pytest.raises(ValueError, match="belong"):
        execution_store.commit(
            ExecutionWrite(execution_id=ex.id, execution=ex, task_runs=[task_run("other", "a")])
        )
    assert execution_store.get_execution(ex.id) is None


def test_a_write_of_max_items_commits_and_one_more_is_refused(execution_store: ExecutionStore) -> None:
    ex = execution()
    events = [NewEvent(type="submitted", at=T0)]
    fits = MAX_WRITE_ITEMS - 3  # execution + event + sequence counter
    runs = [task_run(ex.id, f"t{i:03}") for i in range(fits + 1)]
    too_big = ExecutionWrite(execution_id=ex.id, execution=ex, task_runs=runs, events=events)
    assert too_big.item_count() == MAX_WRITE_ITEMS + 1
    with pytest.raises(ValueError, match="at most"):
        execution_store.commit(too_big)
    assert execution_store.get_execution(ex.id) is None
    result = execution_store.commit(
        ExecutionWrite(execution_id=ex.id, execution=ex, task_runs=runs[:fits], events=events)
    )
    assert len(result.task_runs) == fits
    assert len(execution_store.get_task_runs(ex.id)) == fits


# ----------------------------------------------------------------------------------- etags


def test_creating_an_existing_execution_is_a_conflict(execution_store: ExecutionStore) -> None:
    ex_id, write = _create(execution_store)
    assert write.execution is not None
    with pytest.raises(ConflictError):
        execution_store.commit(ExecutionWrite(execution_id=ex_id, execution=write.execution))


def test_etag_conflict_on_execution_update(execution_store: ExecutionStore) -> None:
    ex_id, _ = _create(execution_store)
    read = execution_store.get_execution(ex_id)
    assert read is not None
    assert read.etag
    first = execution_store.commit(
        ExecutionWrite(
            execution_id=ex_id, execution=read.model_copy(update={"status": ExecutionStatus.RUNNING})
        )
    )
    assert first.execution is not None
    assert first.execution.etag != read.etag
    with pytest.raises(ConcurrencyError):
        execution_store.commit(
            ExecutionWrite(
                execution_id=ex_id, execution=read.model_copy(update={"status": ExecutionStatus.CANCELLED})
            )
        )
    final = execution_store.get_execution(ex_id)
    assert final is not None
    assert final.status == ExecutionStatus.RUNNING
    # The etag returned by commit is good for the next write.
    execution_store.commit(
        ExecutionWrite(
            execution_id=ex_id,
            execution=first.execution.model_copy(update={"status": ExecutionStatus.SUCCEEDED}),
        )
    )


def test_task_run_create_twice_and_stale_update_conflict(execution_store: ExecutionStore) -> None:
    ex_id, _ = _create(execution_store)
    with pytest.raises(ConcurrencyError):
        execution_store.commit(ExecutionWrite(execution_id=ex_id, task_runs=[task_run(ex_id, "a")]))
    run = execution_store.get_task_run(ex_id, "a")
    assert run is not None
    execution_store.commit(
        ExecutionWrite(
            execution_id=ex_id, task_runs=[run.model_copy(update={"status": TaskStatus.SCHEDULED})]
        )
    )
    with pytest.raises(ConcurrencyError):
        execution_store.commit(
            ExecutionWrite(
                execution_id=ex_id, task_runs=[run.model_copy(update={"status": TaskStatus.SKIPPED})]
            )
        )


def test_updating_a_missing_execution_is_not_found(execution_store: ExecutionStore) -> None:
    ex = execution().model_copy(update={"etag": "whatever"})
    with pytest.raises(NotFoundError):
        execution_store.commit(ExecutionWrite(execution_id=ex.id, execution=ex))


# ---------------------------------------------------------------------------------- events


def test_events_append_in_order_across_writes(execution_store: ExecutionStore) -> None:
    ex_id, _ = _create(execution_store)
    for i in range(3):
        execution_store.commit(ExecutionWrite(execution_id=ex_id, events=[NewEvent(type=f"e{i}", at=at(i))]))
    events = execution_store.list_events(ex_id)
    # seq 2 went to the startExecution outbox record of the creating write
    assert [(e.seq, e.type) for e in events] == [(1, "submitted"), (3, "e0"), (4, "e1"), (5, "e2")]
    assert [e.type for e in execution_store.list_events(ex_id, after_seq=3)] == ["e1", "e2"]
    assert [e.type for e in execution_store.list_events(ex_id, after_seq=0, limit=2)] == ["submitted", "e0"]


# ---------------------------------------------------------------------------------- paging


def test_list_by_tenant_newest_first_with_continuation(execution_store: ExecutionStore) -> None:
    ids = [_create(execution_store, created=i)[0] for i in range(7)]
    _create(execution_store, tenant="other", created=100)
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = execution_store.list_executions("acme", limit=3, continuation=token)
        assert len(page.items) <= 3
        seen += [e.id for e in page.items]
        pages += 1
        token = page.continuation
        if token is None:
            break
    assert seen == list(reversed(ids))
    assert pages == 3


def test_list_filters_by_status_and_workflow(execution_store: ExecutionStore) -> None:
    a = _create(execution_store, workflow="w1", created=1)[0]
    b = _create(execution_store, workflow="w2", created=2)[0]
    c = _create(execution_store, workflow="w1", created=3, status=ExecutionStatus.SUCCEEDED)[0]
    assert [e.id for e in execution_store.list_executions("acme", workflow="w1").items] == [c, a]
    queued = execution_store.list_executions("acme", status=ExecutionStatus.QUEUED)
    assert [e.id for e in queued.items] == [b, a]
    both = execution_store.list_executions("acme", workflow="w1", status=ExecutionStatus.SUCCEEDED)
    assert [e.id for e in both.items] == [c]
    assert execution_store.count_active_executions("acme") == 2
    assert execution_store.count_active_executions("nobody") == 0


def test_status_change_moves_an_execution_between_filtered_lists(execution_store: ExecutionStore) -> None:
    ex_id, _ = _create(execution_store)
    cur = execution_store.get_execution(ex_id)
    assert cur is not None
    execution_store.commit(
        ExecutionWrite(
            execution_id=ex_id, execution=cur.model_copy(update={"status": ExecutionStatus.FAILED})
        )
    )
    assert execution_store.list_executions("acme", status=ExecutionStatus.QUEUED).items == []
    assert [e.id for e in execution_store.list_executions("acme", status=ExecutionStatus.FAILED).items] == [
        ex_id
    ]
    assert execution_store.count_active_executions("acme") == 0


# ---------------------------------------------------------------------------------- outbox


def _write_outbox(store: ExecutionStore, ex_id: str, n: int) -> list[str]:
    recs = [outbox(ex_id, payload={"i": i}) for i in range(n)]
    store.commit(ExecutionWrite(execution_id=ex_id, outbox=recs))
    return [r.id for r in recs]


def test_claim_is_exclusive_until_the_lease_expires(execution_store: ExecutionStore) -> None:
    ex = uid("ex-")
    ids = _write_outbox(execution_store, ex, 3)
    first = execution_store.claim_outbox("r1", at(0), lease_seconds=30)
    assert [r.id for r in first] == ids
    assert all(r.claimed_by == "r1" for r in first)
    assert execution_store.claim_outbox("r2", at(10), lease_seconds=30) == []
    # r1 crashed: after its lease the records come back, in the same order.
    again = execution_store.claim_outbox("r2", at(31), lease_seconds=30)
    assert [r.id for r in again] == ids


def test_claim_keeps_per_execution_order(execution_store: ExecutionStore) -> None:
    ex = uid("ex-")
    ids = _write_outbox(execution_store, ex, 2)
    ids += _write_outbox(execution_store, ex, 2)
    first = execution_store.claim_outbox("r1", at(0), limit=1)
    assert [r.id for r in first] == ids[:1]
    # r2 must not overtake r1 within the same execution.
    assert execution_store.claim_outbox("r2", at(1)) == []
    rest = execution_store.claim_outbox("r1", at(1))
    assert [r.id for r in rest] == ids  # its own claims are returned again with the rest
    assert [r.seq for r in rest] == sorted(r.seq for r in rest)


def test_mark_dispatched_and_release(execution_store: ExecutionStore) -> None:
    ex = uid("ex-")
    _write_outbox(execution_store, ex, 3)
    claimed = execution_store.claim_outbox("r1", at(0))
    execution_store.mark_dispatched(claimed[:1], at(1))
    execution_store.mark_dispatched(claimed[:1], at(2))  # idempotent
    execution_store.release_outbox(claimed[1:], "r1")
    again = execution_store.claim_outbox("r2", at(2))
    assert [r.id for r in again] == [r.id for r in claimed[1:]]
    done = execution_store.get_outbox_record(ex, claimed[0].id)
    assert done is not None
    assert done.dispatched_at == at(1)


def test_claim_limit_and_other_executions_not_blocked(execution_store: ExecutionStore) -> None:
    by_execution = {
        ex: _write_outbox(execution_store, ex, 1)[0] for ex in (uid("ex-"), uid("ex-"), uid("ex-"))
    }
    first = execution_store.claim_outbox("r1", at(0), limit=1)
    assert len(first) == 1
    other = execution_store.claim_outbox("r2", at(0))
    # r1's claim holds back nothing of the other executions, and no record has two owners.
    assert sorted(r.id for r in other) == sorted(i for i in by_execution.values() if i != first[0].id)


def test_purge_dispatched(execution_store: ExecutionStore) -> None:
    ex = uid("ex-")
    _write_outbox(execution_store, ex, 2)
    claimed = execution_store.claim_outbox("r1", at(0))
    execution_store.mark_dispatched(claimed[:1], at(1))
    execution_store.purge_dispatched(at(100))
    # Whether purged now (SQLite) or by TTL later (Cosmos), an undispatched record is never purged.
    assert execution_store.get_outbox_record(ex, claimed[1].id) is not None


# ----------------------------------------------------------------------------- dead letters


def test_dead_letters_list_page_and_resolve(execution_store: ExecutionStore) -> None:
    made = []
    for i in range(5):
        ex_id = uid("ex-")
        dl = dead_letter(ex_id, created=i)
        execution_store.commit(ExecutionWrite(execution_id=ex_id, dead_letters=[dl]))
        made.append(dl.id)
    execution_store.commit(
        ExecutionWrite(execution_id="x-other", dead_letters=[dead_letter("x-other", tenant="other")])
    )
    page1 = execution_store.list_dead_letters("acme", limit=2)
    page2 = execution_store.list_dead_letters("acme", limit=2, continuation=page1.continuation)
    page3 = execution_store.list_dead_letters("acme", limit=2, continuation=page2.continuation)
    assert [d.id for d in page1.items + page2.items + page3.items] == list(reversed(made))
    assert page3.continuation is None

    target = execution_store.get_dead_letter("acme", made[0])
    assert target is not None
    assert target.etag
    assert target.status == DeadLetterStatus.OPEN
    assert execution_store.get_dead_letter("other", made[0]) is None  # tenant isolation
    resolved = execution_store.resolve_dead_letter(
        "acme",
        made[0],
        resolution=DeadLetterResolution.SKIP,
        if_match=target.etag,
        now=at(50),
        resolved_by="op",
    )
    assert resolved.status == DeadLetterStatus.RESOLVED
    assert resolved.resolution == DeadLetterResolution.SKIP
    with pytest.raises(ConcurrencyError):
        execution_store.resolve_dead_letter(
            "acme", made[0], resolution=DeadLetterResolution.RETRY, if_match=target.etag, now=at(51)
        )
    assert resolved.etag is not None
    with pytest.raises(ConflictError):
        execution_store.resolve_dead_letter(
            "acme", made[0], resolution=DeadLetterResolution.RETRY, if_match=resolved.etag, now=at(51)
        )
    with pytest.raises(NotFoundError):
        execution_store.resolve_dead_letter(
            "acme", "nope", resolution=DeadLetterResolution.RETRY, if_match="x", now=at(51)
        )
    open_ = execution_store.list_dead_letters("acme", status=DeadLetterStatus.OPEN)
    assert [d.id for d in open_.items] == list(reversed(made[1:]))
    done = execution_store.list_dead_letters("acme", status=DeadLetterStatus.RESOLVED)
    assert [d.id for d in done.items] == [made[0]]


@pytest.mark.parametrize("token", ["not a token", "W10=", "bm9wZQ"])
def test_a_garbage_continuation_token_is_refused(execution_store: ExecutionStore, token: str) -> None:
    _create(execution_store)
    # ValueError, never a wrong page: the API turns it into a 400 for the client.
    with pytest.raises(ValueError):  # noqa: PT011
        execution_store.list_executions("acme", continuation=token)
    with pytest.raises(ValueError):  # noqa: PT011
        execution_store.list_dead_letters("acme", continuation=token)
