"""What only the Cosmos DB adapter has: TTL on dispatched outbox records, the change feed, throttling,
the batch size limit, settings-driven construction; and the local server's patched behaviours the
adapter relies on (they run unchanged against a real account when WEFT_TEST_COSMOS_ENDPOINT is set).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, PartitionKey, exceptions

from shared.adapters import factory
from shared.adapters.cosmos_store import CosmosStore
from shared.adapters.cosmos_support import RetryBudget, get_client, with_retries
from shared.errors import TransientError
from shared.ports import ExecutionWrite
from shared.records import NewEvent
from shared.settings import reset_settings_cache
from tests.contract.builders import T0, at, execution, outbox, task_run
from tests.support.cosmos import CosmosTarget, cosmos_database

pytestmark = pytest.mark.integration


@pytest.fixture
def store(cosmos_endpoint: CosmosTarget) -> Iterator[CosmosStore]:
    with cosmos_database(cosmos_endpoint) as (store, _name):
        yield store


@pytest.fixture
def raw(cosmos_endpoint: CosmosTarget) -> Iterator[ContainerProxy]:
    """A bare container (pk /pk, TTL on) for the server behaviours the adapter builds on."""
    client = get_client(cosmos_endpoint.endpoint, cosmos_endpoint.key)
    name = f"weft-test-{uuid.uuid4().hex[:12]}"
    db = client.create_database(name)
    try:
        yield db.create_container("c", partition_key=PartitionKey("/pk"), default_ttl=-1)
    finally:
        client.delete_database(name)


def _wait_until_gone(read: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if read() is None:
            return True
        time.sleep(0.25)
    return False


# ------------------------------------------------------------------------------ the adapter


def test_dispatched_outbox_records_expire_by_ttl_and_pending_ones_do_not(store: CosmosStore) -> None:
    store.outbox_ttl_seconds = 1
    ex = execution()
    store.commit(ExecutionWrite(execution_id=ex.id, execution=ex, outbox=[outbox(ex.id), outbox(ex.id)]))
    first, second = store.claim_outbox("relay", at(0))
    store.mark_dispatched([first], at(1))

    assert _wait_until_gone(lambda: store.get_outbox_record(ex.id, first.id))
    assert store.get_outbox_record(ex.id, second.id) is not None
    assert store.get_execution(ex.id) is not None  # TTL is per document: nothing else expires


def test_commit_of_more_than_a_batch_is_refused_before_anything_is_written(store: CosmosStore) -> None:
    ex = execution()
    write = ExecutionWrite(
        execution_id=ex.id, execution=ex, task_runs=[task_run(ex.id, f"t{i:03d}") for i in range(100)]
    )
    with pytest.raises(ValueError, match="at most 100"):
        store.commit(write)
    assert store.get_execution(ex.id) is None


def test_concurrent_commits_to_one_execution_never_reuse_a_sequence_number(store: CosmosStore) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ex = execution()
    store.commit(ExecutionWrite(execution_id=ex.id, execution=ex))

    def append(i: int) -> None:
        store.commit(
            ExecutionWrite(execution_id=ex.id, events=[NewEvent(type=f"e{i}", at=T0)], outbox=[outbox(ex.id)])
        )

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(append, range(12)))
    seqs = [e.seq for e in store.list_events(ex.id)]
    seqs += [r.seq for r in store.claim_outbox("relay", at(0), limit=100)]
    assert sorted(seqs) == list(range(1, 25))


def test_settings_select_the_cosmos_store(
    monkeypatch: pytest.MonkeyPatch, cosmos_endpoint: CosmosTarget
) -> None:
    with cosmos_database(cosmos_endpoint) as (_store, name):
        monkeypatch.setenv("WEFT_STORE", "cosmos")
        monkeypatch.setenv("WEFT_COSMOS_ENDPOINT", cosmos_endpoint.endpoint)
        if cosmos_endpoint.key:
            monkeypatch.setenv("WEFT_COSMOS_KEY", cosmos_endpoint.key)
        monkeypatch.setenv("WEFT_COSMOS_DATABASE", name)
        reset_settings_cache()
        factory.reset_for_tests()
        try:
            stores = factory.get_stores()
            assert isinstance(stores.executions, CosmosStore)
            ex = execution()
            stores.executions.commit(ExecutionWrite(execution_id=ex.id, execution=ex))
            assert stores.executions.get_execution(ex.id) is not None
        finally:
            factory.reset_for_tests()
            reset_settings_cache()


def test_cosmos_store_without_an_endpoint_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEFT_STORE", "cosmos")
    monkeypatch.delenv("WEFT_COSMOS_ENDPOINT", raising=False)
    monkeypatch.delenv("WEFT_COSMOS_KEY", raising=False)
    reset_settings_cache()
    factory.reset_for_tests()
    try:
        with pytest.raises(ValueError, match="WEFT_COSMOS_ENDPOINT"):
            factory.get_stores()
    finally:
        factory.reset_for_tests()
        reset_settings_cache()


# ------------------------------------------------------------------------------ throttling


def _throttled(retry_after_ms: str) -> exceptions.CosmosHttpResponseError:
    exc = exceptions.CosmosHttpResponseError(status_code=429, message="Request rate is large")  # type: ignore[no-untyped-call]
    exc.headers = {"x-ms-retry-after-ms": retry_after_ms}
    return exc


def test_429_waits_what_the_service_asks_then_succeeds() -> None:
    waits: list[float] = []
    calls: Iterator[Exception | str] = iter([_throttled("120"), _throttled("40"), "ok"])

    def op() -> str:
        outcome = next(calls)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert with_retries(op, RetryBudget(sleep=waits.append)) == "ok"
    assert waits == [0.12, 0.04]


def test_429_beyond_the_budget_becomes_a_transient_error() -> None:
    waits: list[float] = []

    def op() -> None:
        raise _throttled("4000")

    with pytest.raises(TransientError) as info:
        with_retries(op, RetryBudget(max_total_seconds=10, sleep=waits.append))
    assert waits == [4.0, 4.0]  # a third wait would exceed the 10 s budget
    assert info.value.details["retryAfterSeconds"] == 4.0


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def op() -> None:
        calls.append(1)
        raise exceptions.CosmosHttpResponseError(status_code=400, message="bad query")  # type: ignore[no-untyped-call]

    with pytest.raises(exceptions.CosmosHttpResponseError):
        with_retries(op, RetryBudget(sleep=lambda _s: None))
    assert calls == [1]


# ----------------------------------------------------- server behaviours the adapter relies on


def test_batch_takes_the_partition_key_from_the_request_and_rolls_back(raw: ContainerProxy) -> None:
    raw.create_item({"id": "a", "pk": "p", "v": 1})
    ok = raw.execute_item_batch(
        [("create", ({"id": "b", "pk": "p"},)), ("upsert", ({"id": "a", "pk": "p", "v": 2},))],
        partition_key="p",
    )
    assert [r["statusCode"] for r in ok] == [201, 200]

    with pytest.raises(exceptions.CosmosBatchOperationError) as info:
        raw.execute_item_batch(
            [
                ("create", ({"id": "c", "pk": "p"},)),
                ("delete", ("b",)),
                ("replace", ("a", {"id": "a", "pk": "p", "v": 3}), {"if_match_etag": '"stale"'}),
            ],
            partition_key="p",
        )
    assert info.value.error_index == 2
    assert info.value.status_code == 412
    assert [r["statusCode"] for r in info.value.operation_responses] == [424, 424, 412]
    ids = sorted(d["id"] for d in raw.query_items("SELECT * FROM c", partition_key="p"))
    assert ids == ["a", "b"]  # "c" created and "b" deleted were both undone
    assert raw.read_item("a", partition_key="p")["v"] == 2


def test_reading_a_missing_item_is_404(raw: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        raw.read_item("nope", partition_key="p")


def test_queries_with_a_partition_key_see_only_that_partition(raw: ContainerProxy) -> None:
    raw.create_item({"id": "x", "pk": "p1"})
    raw.create_item({"id": "x", "pk": "p2"})
    raw.create_item({"id": "y", "pk": "p2"})
    found = list(raw.query_items("SELECT c.id, c.pk FROM c", partition_key="p2"))
    assert sorted((d["pk"], d["id"]) for d in found) == [("p2", "x"), ("p2", "y")]


def test_change_feed_continues_from_where_it_stopped(raw: ContainerProxy) -> None:
    raw.create_item({"id": "a", "pk": "p"})
    pages: Any = raw.query_items_change_feed(start_time="Beginning").by_page()
    assert [d["id"] for page in pages for d in page] == ["a"]
    token = pages.continuation_token

    raw.create_item({"id": "b", "pk": "q"})
    raw.upsert_item({"id": "a", "pk": "p", "v": 2})
    changes = list(raw.query_items_change_feed(continuation=token))
    assert [d["id"] for d in changes] == ["b", "a"]


def test_item_ttl_is_enforced(raw: ContainerProxy) -> None:
    raw.create_item({"id": "short", "pk": "p", "ttl": 1})
    raw.create_item({"id": "kept", "pk": "p"})

    def read() -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = raw.read_item("short", partition_key="p")
        except exceptions.CosmosResourceNotFoundError:
            return None
        return doc

    assert _wait_until_gone(read)
    assert raw.read_item("kept", partition_key="p")["id"] == "kept"


# ------------------------------------------------------------------------------ the layout


def test_container_layout_is_the_documented_one() -> None:
    """What ensure_containers creates locally is what docs/data-model.md (and so Terraform) says."""
    import json
    import re
    from pathlib import Path

    from shared.adapters.cosmos_support import CONTAINERS

    text = (Path(__file__).resolve().parents[2] / "docs" / "data-model.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^###\s+`([a-z]+)`\s+—\s+partition key\s+`(/[A-Za-z]+)`", text, re.M))
    assert {c.id: c.partition_key for c in CONTAINERS} == documented
    section = text[text.index("### Indexing policy of `executions`") :]
    start = section.index("```json") + len("```json")
    policy = json.loads(section[start : section.index("```", start)])
    ours = next(c for c in CONTAINERS if c.id == "executions").indexing_policy
    assert ours is not None
    assert ours["includedPaths"] == policy["includedPaths"]
    assert ours["excludedPaths"] == policy["excludedPaths"]
    assert ours["compositeIndexes"] == policy["compositeIndexes"]
    assert {c.id: c.default_ttl for c in CONTAINERS if c.default_ttl is not None} == {
        "executions": -1,
        "idempotency": -1,
    }
