"""IdempotencyStore contract: put-if-absent submission keys and once-only attempt outcomes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from shared.ports import IdempotencyStore
from shared.records import AttemptRecord, SubmissionRecord
from tests.contract.builders import at


def _sub(
    key: str = "k1", execution_id: str = "ex-1", request_hash: str = "h1", tenant: str = "acme"
) -> SubmissionRecord:
    return SubmissionRecord(
        tenant_id=tenant, key=key, request_hash=request_hash, execution_id=execution_id, created_at=at(0)
    )


def test_submission_key_put_if_absent(idempotency_store: IdempotencyStore) -> None:
    first, created = idempotency_store.put_submission(_sub())
    assert created
    second, created2 = idempotency_store.put_submission(_sub(execution_id="ex-2", request_hash="h2"))
    assert not created2
    assert second == first  # the original run and request hash, not the newcomer's
    assert idempotency_store.get_submission("acme", "k1") == first
    # Keys are per tenant.
    _, other_created = idempotency_store.put_submission(_sub(tenant="other", execution_id="ex-3"))
    assert other_created
    assert idempotency_store.get_submission("acme", "missing") is None


def test_concurrent_submissions_with_one_key_get_one_winner(idempotency_store: IdempotencyStore) -> None:
    def put(i: int) -> tuple[SubmissionRecord, bool]:
        return idempotency_store.put_submission(_sub(key="race", execution_id=f"ex-{i}"))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(put, range(16)))
    winners = [r for r, created in results if created]
    assert len(winners) == 1
    assert {r.execution_id for r, _ in results} == {winners[0].execution_id}


def test_attempt_outcome_is_recorded_once(idempotency_store: IdempotencyStore) -> None:
    rec = AttemptRecord(
        execution_id="ex-1",
        task_id="a",
        attempt=1,
        outcome={"status": "succeeded", "output": 1},
        recorded_at=at(1),
    )
    stored, created = idempotency_store.record_attempt(rec)
    assert created
    assert stored == rec
    later = rec.model_copy(update={"outcome": {"status": "failed"}, "recorded_at": at(2)})
    again, created2 = idempotency_store.record_attempt(later)
    assert not created2
    assert again == rec
    assert idempotency_store.get_attempt("ex-1", "a", 1) == rec
    assert idempotency_store.get_attempt("ex-1", "a", 2) is None
    _, created3 = idempotency_store.record_attempt(rec.model_copy(update={"attempt": 2}))
    assert created3
