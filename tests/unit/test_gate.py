"""The tenant gate: limit, FIFO, starvation freedom, lease expiry, idempotency and the entity."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from entities.tenant_gate import run_tenant_gate
from shared.errors import ValidationFailedError
from shared.gate import (
    AcquireInput,
    AcquireResult,
    GateOperation,
    GateState,
    ReleaseInput,
    SlotRequest,
    acquire,
    apply_operation,
    release,
)

GATE_ACQUIRE = GateOperation.ACQUIRE.value
GATE_RELEASE = GateOperation.RELEASE.value
GATE_SET_LIMIT = GateOperation.SET_LIMIT.value
GATE_GET = GateOperation.GET.value
T0 = datetime(2026, 1, 1, tzinfo=UTC)
LONG = 10_000.0  # a lease that outlives the test


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Gate:
    """Drives the pure functions the way the entity does: JSON state between operations."""

    def __init__(self, limit: int, *, default_limit: int = 100) -> None:
        self.default_limit = default_limit
        self.raw: dict[str, Any] = {}
        self.op(GateOperation.SET_LIMIT, {"maxRunningTasks": limit})

    def op(self, operation: str, payload: Any) -> Any:
        state, result = apply_operation(self.raw, operation, payload, default_limit=self.default_limit)
        self.raw = json.loads(json.dumps(state))  # what the entity stores
        return json.loads(json.dumps(result))

    @property
    def state(self) -> GateState:
        return GateState.model_validate(self.raw)

    def acquire(self, owner: str, now: float, lease: float = LONG, ttl: float = 60.0) -> bool:
        result = self.op(
            GateOperation.ACQUIRE,
            {
                "requests": [{"owner": owner, "leaseSeconds": lease}],
                "now": at(now).isoformat(),
                "waiterTtlSeconds": ttl,
            },
        )
        return owner in result["granted"]

    def would_grant(self, owner: str, now: float) -> bool:
        """Ask without changing anything (the functions are pure)."""
        _, result = acquire(
            self.state,
            AcquireInput(requests=(SlotRequest(owner=owner, lease_seconds=LONG),), now=at(now)),
            default_limit=self.default_limit,
        )
        return owner in result.granted

    def release(self, owner: str, now: float) -> None:
        self.op(GateOperation.RELEASE, {"owners": [owner], "now": at(now).isoformat()})

    def running(self) -> set[str]:
        return {lease.owner for lease in self.state.leases}

    def queue(self) -> list[str]:
        return [w.owner for w in self.state.waiters]


# --------------------------------------------------------------------------------------------
# basic behaviour


def test_grants_up_to_the_limit_then_queues() -> None:
    gate = Gate(limit=2)
    assert gate.acquire("a", 0)
    assert gate.acquire("b", 0)
    assert not gate.acquire("c", 0)
    assert not gate.acquire("d", 0)
    assert gate.queue() == ["c", "d"]
    gate.release("a", 1)
    # The freed slot is c's: d, behind it, is refused even though it asks first.
    assert not gate.acquire("d", 2)
    assert gate.acquire("c", 3)
    assert gate.running() == {"b", "c"}


def test_acquire_and_release_are_idempotent() -> None:
    gate = Gate(limit=1)
    assert gate.acquire("a", 0, lease=30)
    first = gate.state.leases
    assert gate.acquire("a", 5, lease=30)  # re-sent: same lease, not extended, not counted twice
    assert gate.state.leases == first
    assert gate.state.granted_total == 1
    gate.release("a", 6)
    gate.release("a", 7)
    gate.release("never-seen", 8)
    assert gate.running() == set()


def test_release_leaves_the_queue_too() -> None:
    gate = Gate(limit=1)
    gate.acquire("a", 0)
    gate.acquire("b", 0)
    gate.acquire("c", 0)
    gate.release("b", 1)  # b's orchestration was cancelled while it waited
    gate.release("a", 1)
    assert gate.acquire("c", 2)


def test_batched_acquire_is_processed_in_order() -> None:
    gate = Gate(limit=2)
    result = gate.op(
        GATE_ACQUIRE,
        {
            "requests": [{"owner": o, "leaseSeconds": 5} for o in ("x", "y", "z")],
            "now": at(0).isoformat(),
        },
    )
    assert result["granted"] == ["x", "y"]
    assert result["denied"] == [{"owner": "z", "position": 1}]
    assert result["retryAfterSeconds"] > 0
    assert (result["running"], result["limit"]) == (2, 2)


def test_limit_comes_from_acquire_or_set_limit_or_default() -> None:
    gate = Gate(limit=1)
    gate.raw = {}
    gate.default_limit = 3
    for owner in "abc":
        assert gate.acquire(owner, 0)
    assert not gate.acquire("d", 0)
    # A caller that read the tenant's limit passes it along; it sticks.
    result = gate.op(
        GATE_ACQUIRE,
        {"requests": [{"owner": "d", "leaseSeconds": 5}], "now": at(1).isoformat(), "maxRunningTasks": 4},
    )
    assert result["granted"] == ["d"]
    assert gate.state.max_running_tasks == 4
    # Lowering the limit revokes nothing but blocks new grants until below it.
    gate.op(GATE_SET_LIMIT, {"maxRunningTasks": 2})
    gate.release("a", 2)
    assert not gate.acquire("e", 2)
    gate.release("b", 3)
    gate.release("c", 3)
    assert gate.acquire("e", 4)


def test_bad_operations_fail_and_change_nothing() -> None:
    gate = Gate(limit=1)
    before = dict(gate.raw)
    for operation, payload in [
        ("explode", {}),
        (GATE_ACQUIRE, {"requests": [], "now": at(0).isoformat()}),
        (GATE_ACQUIRE, {"requests": [{"owner": "a", "leaseSeconds": -1}], "now": at(0).isoformat()}),
        (GATE_ACQUIRE, {"requests": [{"owner": "a", "leaseSeconds": 1}], "now": "2026-01-01T00:00:00"}),
        (GATE_SET_LIMIT, {"maxRunningTasks": 0}),
        (GATE_RELEASE, None),
    ]:
        with pytest.raises(ValidationFailedError):
            gate.op(operation, payload)
    assert gate.raw == before


# --------------------------------------------------------------------------------------------
# expiry


def test_expired_lease_is_reclaimed_by_the_next_operation() -> None:
    gate = Gate(limit=1)
    assert gate.acquire("crashed", 0, lease=30)  # its orchestrator dies and never releases
    assert not gate.acquire("b", 29.9)
    assert gate.acquire("b", 30)
    assert gate.running() == {"b"}
    assert gate.state.reclaimed_leases_total == 1


def test_waiter_that_stops_polling_expires() -> None:
    gate = Gate(limit=1)
    gate.acquire("holder", 0)
    assert not gate.acquire("gone", 1, ttl=10)  # enqueued, then never polls again
    assert not gate.acquire("patient", 2, ttl=10)
    gate.release("holder", 3)
    assert not gate.acquire("patient", 5)  # the slot is still reserved for "gone"
    assert gate.acquire("patient", 11)  # gone's place lapsed at 1 + 10
    assert gate.state.expired_waiters_total == 1


def test_polling_renews_a_waiters_place() -> None:
    gate = Gate(limit=1)
    gate.acquire("holder", 0)
    for t in range(1, 100, 5):
        assert not gate.acquire("w", t, ttl=10)
        assert gate.queue() == ["w"]


def test_clock_never_goes_back() -> None:
    gate = Gate(limit=1)
    assert gate.acquire("a", 100, lease=10)
    gate.release("zz", 200)  # a later caller reclaims a
    assert gate.running() == set()
    # An older time from a slower caller cannot bring the lease back or let one expire later.
    assert gate.acquire("b", 50, lease=10)
    (lease,) = gate.state.leases
    assert lease.granted_at == at(200)
    assert lease.expires_at == at(210)


@settings(max_examples=60, deadline=None)
@given(
    # Milliseconds: datetimes have microsecond resolution, so exact comparisons need round numbers.
    leases=st.lists(st.integers(1, 100_000).map(lambda ms: ms / 1000), min_size=1, max_size=8),
    checks=st.lists(st.integers(0, 200_000).map(lambda ms: ms / 1000), min_size=1, max_size=10),
)
def test_a_lease_lives_exactly_until_it_expires(leases: list[float], checks: list[float]) -> None:
    gate = Gate(limit=len(leases))
    for i, seconds in enumerate(leases):
        assert gate.acquire(f"o{i}", 0, lease=seconds)
    for t in sorted(checks):
        gate.op(GATE_GET, {"now": at(t).isoformat()})
        assert gate.running() == {f"o{i}" for i, s in enumerate(leases) if s > t}


# --------------------------------------------------------------------------------------------
# properties: limit, FIFO, no starvation

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.integers(0, 11), st.integers(1, 50)),
        st.tuples(st.just("release"), st.integers(0, 11), st.just(0)),
        st.tuples(st.just("tick"), st.just(0), st.integers(0, 30)),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(limit=st.integers(1, 4), ops=_ops)
def test_never_more_live_leases_than_the_limit(limit: int, ops: list[tuple[str, int, int]]) -> None:
    gate = Gate(limit=limit)
    now = 0
    for kind, who, value in ops:
        if kind == "tick":
            now += value
            continue  # nothing happens at the gate until someone calls it
        if kind == "acquire":
            gate.acquire(f"o{who}", now, lease=value, ttl=20)
        else:
            gate.release(f"o{who}", now)
        state = gate.state
        assert len(state.leases) <= limit
        assert all(lease.expires_at > at(now) for lease in state.leases)
        owners = [lease.owner for lease in state.leases] + [w.owner for w in state.waiters]
        assert len(owners) == len(set(owners)), "an owner is never both running and queued, nor twice"


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 3),
    n_waiters=st.integers(1, 8),
    steps=st.lists(
        st.tuples(st.sampled_from(["release", "poll", "newcomer"]), st.integers(0, 50)), max_size=120
    ),
)
def test_no_waiter_is_ever_overtaken(limit: int, n_waiters: int, steps: list[tuple[str, int]]) -> None:
    """Polls in arbitrary order: whoever gets a slot, everyone queued ahead could get one too."""
    gate = Gate(limit=limit)
    holders = [f"h{i}" for i in range(limit)]
    for h in holders:
        assert gate.acquire(h, 0)
    waiters = [f"w{i}" for i in range(n_waiters)]
    for w in waiters:
        assert not gate.acquire(w, 0)
    grant_order: list[str] = []
    running = list(holders)
    newcomers = 0
    for now, (kind, pick) in enumerate(steps, start=1):
        queued = [w for w in waiters if w not in grant_order]
        if kind == "release" and running:
            gate.release(running.pop(pick % len(running)), now)
        elif kind == "poll" and queued:
            w = queued[pick % len(queued)]
            ahead = queued[: queued.index(w)]
            if gate.acquire(w, now):
                grant_order.append(w)
                running.append(w)
                assert all(gate.would_grant(a, now) for a in ahead), f"{w} took a slot meant for {ahead}"
        elif kind == "newcomer":
            newcomers += 1
            if gate.acquire(f"n{newcomers}", now):
                running.append(f"n{newcomers}")
                assert all(gate.would_grant(a, now) for a in queued), "a newcomer jumped the queue"
            else:
                gate.release(f"n{newcomers}", now)  # gives up at once; must not linger
        # Keep every queued waiter alive (TTL 60 s, one step = 1 s) by polling; order is preserved.
        if now % 30 == 0:
            for w in [w for w in waiters if w not in grant_order]:
                if gate.acquire(w, now):
                    grant_order.append(w)
                    running.append(w)
    if limit == 1:
        assert grant_order == waiters[: len(grant_order)], "with one slot, grants follow the queue"


@settings(max_examples=100, deadline=None)
@given(
    limit=st.integers(1, 3),
    n_waiters=st.integers(1, 10),
    hold=st.integers(1, 4),
    arrivals=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_waiter_that_keeps_polling_is_granted(
    limit: int, n_waiters: int, hold: int, arrivals: int, seed: int
) -> None:
    """Holders release within ``hold`` rounds; new callers keep arriving every round and poll too;
    the original waiters poll in a random order every round. None of them starves."""
    rng = random.Random(seed)
    gate = Gate(limit=limit)
    held: dict[str, int] = {}  # owner -> round it releases
    for i in range(limit):
        assert gate.acquire(f"h{i}", 0)
        held[f"h{i}"] = rng.randint(1, hold)
    originals = [f"w{i}" for i in range(n_waiters)]
    for w in originals:
        assert not gate.acquire(w, 0)
    pending = list(originals)
    others: list[str] = []
    rounds_bound = (n_waiters // limit + 2) * (hold + 1)
    for rnd in range(1, rounds_bound + 1):
        for owner in [o for o, r in held.items() if r <= rnd]:
            gate.release(owner, rnd)
            del held[owner]
        others.extend(f"x{rnd}.{k}" for k in range(arrivals))
        pollers = pending + others
        rng.shuffle(pollers)
        for owner in pollers:
            if gate.acquire(owner, rnd):
                held[owner] = rnd + rng.randint(1, hold)
                (pending if owner in pending else others).remove(owner)
        if not pending:
            break
    assert pending == [], f"starved after {rounds_bound} rounds: {pending}"


# --------------------------------------------------------------------------------------------
# the entity function and the orchestrator's wire protocol


# The wire shapes, built the way shared.gate_protocol (the orchestrator's side) builds them.
def acquire_input(requests: list[SlotRequest], now: datetime) -> dict[str, Any]:
    return AcquireInput(requests=tuple(requests), now=now).to_json_dict()


def release_input(owners: list[str], now: datetime) -> dict[str, Any]:
    return ReleaseInput(owners=tuple(owners), now=now).to_json_dict()


def parse_acquire_result(result: Any) -> tuple[frozenset[str], float]:
    parsed = AcquireResult.model_validate(result)
    return frozenset(parsed.granted), parsed.retry_after_seconds


class FakeEntityContext:
    """Shaped like azure.durable_functions.DurableEntityContext (the parts the gate uses)."""

    def __init__(self, state: Any, operation: str, payload: Any) -> None:
        self._state = state
        self._operation = operation
        self._input = json.dumps(payload)  # the SDK keeps the input JSON-encoded
        self.result: Any = None

    @property
    def operation_name(self) -> str | None:
        return self._operation

    def get_state(self, initializer: Callable[[], Any] | None = None) -> Any:
        if self._state is None and initializer is not None:
            return initializer()
        return self._state

    def set_state(self, state: Any) -> None:
        self._state = state

    def get_input(self) -> Any:
        return json.loads(self._input)

    def set_result(self, result: Any) -> None:
        self.result = result


def call(state: Any, operation: str, payload: Any) -> tuple[Any, Any]:
    ctx = FakeEntityContext(state, operation, payload)
    run_tenant_gate(ctx)
    # Round trip through JSON as the host stores it: nothing but JSON may be in there.
    return json.loads(json.dumps(ctx.get_state())), json.loads(json.dumps(ctx.result))


def test_entity_function_speaks_the_orchestrator_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.settings import reset_settings_cache

    monkeypatch.setenv("WEFT_DEFAULT_MAX_RUNNING_TASKS", "2")
    reset_settings_cache()
    try:
        requests = [SlotRequest(owner=f"e1/t{i}/1", lease_seconds=90) for i in range(3)]
        state, result = call(None, GATE_ACQUIRE, acquire_input(requests, at(0)))
        granted, retry_after = parse_acquire_result(result)
        assert granted == {"e1/t0/1", "e1/t1/1"}
        assert retry_after > 0
        state, _ = call(state, GATE_RELEASE, release_input(["e1/t0/1"], at(1)))
        state, result = call(state, GATE_ACQUIRE, acquire_input(requests[2:], at(2)))
        assert parse_acquire_result(result)[0] == {"e1/t2/1"}
        state, snapshot = call(state, GATE_GET, None)
        assert snapshot == state
        assert {lease["owner"] for lease in state["leases"]} == {"e1/t1/1", "e1/t2/1"}
        assert state["leases"][0]["expiresAt"] == "2026-01-01T00:01:30Z"
    finally:
        reset_settings_cache()


def test_entity_through_the_durable_sdk() -> None:
    """The real SDK entity loop with our function: state survives between batches as JSON."""
    from azure.durable_functions.entity import Entity

    handle = Entity.create(run_tenant_gate)

    def batch(state: Any, ops: list[tuple[str, Any]]) -> dict[str, Any]:
        body = {
            "self": {"name": "tenant_gate", "key": "tenant-1"},
            "exists": state is not None,
            "state": json.dumps(state) if state is not None else None,
            "batch": [{"name": n, "input": json.dumps(json.dumps(i)), "isSignal": False} for n, i in ops],
        }
        out: dict[str, Any] = json.loads(handle(json.dumps(body)))
        return out

    out = batch(
        None,
        [
            (GATE_SET_LIMIT, {"maxRunningTasks": 1}),
            (GATE_ACQUIRE, acquire_input([SlotRequest(owner="a", lease_seconds=5)], at(0))),
            (GATE_ACQUIRE, acquire_input([SlotRequest(owner="b", lease_seconds=5)], at(0))),
            ("bogus", {}),
        ],
    )
    results = out["results"]
    assert [r["isError"] for r in results] == [False, False, False, True]
    assert parse_acquire_result(json.loads(results[1]["result"]))[0] == {"a"}
    assert parse_acquire_result(json.loads(results[2]["result"]))[0] == frozenset()
    state = json.loads(out["entityState"])
    out = batch(state, [(GATE_ACQUIRE, acquire_input([SlotRequest(owner="b", lease_seconds=5)], at(6)))])
    assert parse_acquire_result(json.loads(out["results"][0]["result"]))[0] == {"b"}


def test_result_model_matches_what_the_orchestrator_parses() -> None:
    state, result = acquire(
        GateState(max_running_tasks=1),
        AcquireInput(requests=(SlotRequest(owner="a", lease_seconds=1),), now=T0),
        default_limit=5,
    )
    assert parse_acquire_result(result.to_json_dict()) == (frozenset({"a"}), 0.0)
    assert AcquireResult.model_validate(result.to_json_dict()) == result
    state, released = release(state, ReleaseInput(owners=("a",), now=T0))
    assert released.released == ("a",)
    assert state.leases == ()


_mixed_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("acquire"), st.lists(st.integers(0, 9), min_size=1, max_size=4), st.integers(1, 40)
        ),
        st.tuples(st.just("release"), st.lists(st.integers(0, 9), max_size=3), st.just(0)),
        st.tuples(st.just("tick"), st.just([0]), st.integers(0, 30)),
        st.tuples(st.just("limit"), st.just([0]), st.integers(1, 5)),
        st.tuples(st.just("bogus"), st.just([0]), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=_mixed_ops, round_trip=st.booleans(), cache_key=st.sampled_from([None, "tenant-1"]))
def test_entity_state_and_results_equal_the_pure_functions(
    ops: list[tuple[str, list[int], int]], round_trip: bool, cache_key: str | None
) -> None:
    """The entity keeps a working copy of the state between operations (shared.gate._Book); whatever
    it stores and answers must be exactly what the pure functions give, with or without a JSON round
    trip between operations (a new entity batch, or the same batch), and across failed operations."""
    raw: Any = None
    reference = GateState()
    now = 0
    for kind, who, value in ops:
        if kind == "tick":
            now += value
            continue
        owners = [f"e/t{w}/1" for w in who]
        expected: Any
        if kind == "acquire":
            payload: Any = acquire_input([SlotRequest(owner=o, lease_seconds=value) for o in owners], at(now))
            reference, acquired = acquire(reference, AcquireInput.model_validate(payload), default_limit=3)
            expected = acquired.to_json_dict()
            op = GATE_ACQUIRE
        elif kind == "release":
            payload = release_input(owners, at(now))
            reference, released = release(reference, ReleaseInput.model_validate(payload))
            expected = released.to_json_dict()
            op = GATE_RELEASE
        elif kind == "limit":
            payload = {"maxRunningTasks": value}
            reference = reference.model_copy(update={"max_running_tasks": value})
            expected = reference.to_json_dict()
            op = GATE_SET_LIMIT
        else:
            with pytest.raises(ValidationFailedError):
                apply_operation(raw, GATE_ACQUIRE, {"requests": []}, default_limit=3, cache_key=cache_key)
            continue
        state, result = apply_operation(raw, op, payload, default_limit=3, cache_key=cache_key)
        assert result == expected
        assert state == reference.to_json_dict()
        assert json.dumps(state) == json.dumps(reference.to_json_dict())  # same keys, same order
        raw = json.loads(json.dumps(state)) if round_trip else state
