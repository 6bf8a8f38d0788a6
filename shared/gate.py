"""The tenant gate: per-tenant running-task slots, as pure state transitions (docs/tenant-gate.md).

The Durable entity ``tenant_gate`` (``entities/tenant_gate.py``, one instance per tenant id) keeps
a :class:`GateState` and applies the operations below to it. Everything here is a function of the
state and the operation's input, the caller's orchestration time included: the entity never reads
a clock, so equal inputs give equal results.

* **Leases.** A granted caller holds a lease named by its owner (``<executionId>/<taskId>/<attempt>``)
  until it releases it or the lease expires (``expiresAt`` = the caller's time + the task's timeout
  + a margin, all in ``leaseSeconds``), so a crashed or terminated orchestration cannot leak slots.
* **Reclaim.** Every operation first advances the gate's clock to ``max(clock, now)`` and drops
  leases and waiters whose ``expiresAt`` is not after it.
* **FIFO.** A denied caller is queued. Slots are reserved for the queue in order: a caller is
  granted only when the free slots outnumber the live waiters queued ahead of it. So a waiter never
  loses a slot to a waiter behind it or to a newcomer, and with one slot free grants follow the
  queue order exactly. When several slots are free, the waiters they are reserved for may take
  them in any order (whichever polls first) instead of idling until the head polls.
* **No starvation.** A waiter's position only ever improves while it keeps polling (each poll
  renews it for ``waiterTtlSeconds``); a waiter that stops polling expires, so it cannot block the
  queue for longer than its TTL.
"""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import AwareDatetime, Field, TypeAdapter, ValidationError

from shared.errors import Problem, ValidationFailedError
from shared.model import WeftModel

M = TypeVar("M", bound=WeftModel)

#: How long a denied caller keeps its place in the queue without polling again. Callers poll
#: every few seconds at most (``shared.gate_protocol``), so this is many missed polls.
DEFAULT_WAITER_TTL_SECONDS = 60.0
#: Upper bound for leases: a week, longer than any task timeout Weft accepts.
MAX_LEASE_SECONDS = 7 * 24 * 3600.0
MAX_OWNER_CHARS = 1024

# retryAfterSeconds hint: a short poll interval per "band" of `limit` waiters ahead of the caller.
_HINT_STEP_SECONDS = 0.1
_HINT_CAP_SECONDS = 5.0


class GateOperation(StrEnum):
    ACQUIRE = "acquire"
    RELEASE = "release"
    SET_LIMIT = "setLimit"
    GET = "get"


# --------------------------------------------------------------------------------------------
# State


class GateLease(WeftModel):
    owner: str
    granted_at: datetime
    expires_at: datetime


class GateWaiter(WeftModel):
    owner: str
    enqueued_at: datetime
    #: Renewed on every poll; past it the waiter has given up and loses its place.
    expires_at: datetime


class GateState(WeftModel):
    """The entity's stored state (JSON, camelCase)."""

    #: ``None`` until a limit is set; then the default from settings applies.
    max_running_tasks: int | None = Field(default=None, ge=1)
    leases: tuple[GateLease, ...] = ()
    #: FIFO: enqueue order.
    waiters: tuple[GateWaiter, ...] = ()
    #: The latest caller time seen; the gate's notion of "now" never goes back.
    clock: datetime | None = None
    granted_total: int = 0
    reclaimed_leases_total: int = 0
    expired_waiters_total: int = 0

    def limit(self, default_limit: int) -> int:
        return self.max_running_tasks if self.max_running_tasks is not None else default_limit

    def lease_of(self, owner: str) -> GateLease | None:
        return next((lease for lease in self.leases if lease.owner == owner), None)

    def position_of(self, owner: str) -> int | None:
        """0-based place in the queue, or ``None`` if not queued."""
        return next((i for i, w in enumerate(self.waiters) if w.owner == owner), None)


# --------------------------------------------------------------------------------------------
# Operation inputs and results (the wire shapes of shared.gate_protocol)


class SlotRequest(WeftModel):
    owner: str = Field(min_length=1, max_length=MAX_OWNER_CHARS)
    lease_seconds: float = Field(gt=0, le=MAX_LEASE_SECONDS, allow_inf_nan=False)


class AcquireInput(WeftModel):
    """Ask for one slot per request, in order. A request for an owner that already holds a lease
    returns that lease unchanged (a re-sent acquire is harmless)."""

    requests: tuple[SlotRequest, ...] = Field(min_length=1, max_length=10_000)
    now: AwareDatetime
    #: The tenant's limit as the caller read it (TenantStore); when given it becomes the gate's.
    max_running_tasks: int | None = Field(default=None, ge=1)
    waiter_ttl_seconds: float = Field(
        default=DEFAULT_WAITER_TTL_SECONDS, gt=0, le=MAX_LEASE_SECONDS, allow_inf_nan=False
    )


class Denied(WeftModel):
    owner: str
    #: 1-based place in the queue.
    position: int


class AcquireResult(WeftModel):
    granted: tuple[str, ...] = ()
    denied: tuple[Denied, ...] = ()
    #: When a denied caller should ask again at the earliest (a hint; the caller adds backoff).
    retry_after_seconds: float = 0.0
    running: int
    limit: int


class ReleaseInput(WeftModel):
    """Give back leases and leave the queue. Unknown owners are ignored (release is idempotent)."""

    owners: tuple[str, ...] = Field(max_length=10_000)
    now: AwareDatetime


class ReleaseResult(WeftModel):
    released: tuple[str, ...] = ()
    dequeued: tuple[str, ...] = ()
    running: int


class SetLimitInput(WeftModel):
    max_running_tasks: int = Field(ge=1)


class GetInput(WeftModel):
    #: When given, expired leases and waiters are reclaimed first.
    now: AwareDatetime | None = None


# --------------------------------------------------------------------------------------------
# Transitions


def reclaim(state: GateState, now: datetime) -> GateState:
    """Advance the clock to ``max(clock, now)`` and drop what has expired by then."""
    clock = now if state.clock is None or now > state.clock else state.clock
    leases = tuple(lease for lease in state.leases if lease.expires_at > clock)
    waiters = tuple(w for w in state.waiters if w.expires_at > clock)
    return state.model_copy(
        update={
            "clock": clock,
            "leases": leases,
            "waiters": waiters,
            "reclaimed_leases_total": state.reclaimed_leases_total + len(state.leases) - len(leases),
            "expired_waiters_total": state.expired_waiters_total + len(state.waiters) - len(waiters),
        }
    )


def acquire(
    state: GateState, request: AcquireInput, *, default_limit: int
) -> tuple[GateState, AcquireResult]:
    state = reclaim(state, request.now)
    if request.max_running_tasks is not None:
        state = state.model_copy(update={"max_running_tasks": request.max_running_tasks})
    assert state.clock is not None
    clock = state.clock
    limit = state.limit(default_limit)
    leases = list(state.leases)
    waiters = list(state.waiters)
    held = {lease.owner for lease in leases}
    granted: list[str] = []
    denied: list[Denied] = []
    ttl = timedelta(seconds=request.waiter_ttl_seconds)
    for req in request.requests:
        if req.owner in held:
            if req.owner not in granted:
                granted.append(req.owner)
            continue
        index = next((i for i, w in enumerate(waiters) if w.owner == req.owner), None)
        ahead = len(waiters) if index is None else index
        if limit - len(leases) > ahead:
            leases.append(
                GateLease(
                    owner=req.owner,
                    granted_at=clock,
                    expires_at=clock + timedelta(seconds=req.lease_seconds),
                )
            )
            held.add(req.owner)
            granted.append(req.owner)
            if index is not None:
                del waiters[index]
            continue
        if index is None:
            waiters.append(GateWaiter(owner=req.owner, enqueued_at=clock, expires_at=clock + ttl))
        else:
            waiters[index] = waiters[index].model_copy(update={"expires_at": clock + ttl})
        denied.append(Denied(owner=req.owner, position=ahead + 1))
    new_state = state.model_copy(
        update={
            "leases": tuple(leases),
            "waiters": tuple(waiters),
            "granted_total": state.granted_total + len(leases) - len(state.leases),
        }
    )
    hint = 0.0
    if denied:
        bands = math.ceil(min(d.position for d in denied) / limit)
        hint = min(_HINT_CAP_SECONDS, _HINT_STEP_SECONDS * bands)
    result = AcquireResult(
        granted=tuple(granted),
        denied=tuple(denied),
        retry_after_seconds=hint,
        running=len(leases),
        limit=limit,
    )
    return new_state, result


def release(state: GateState, request: ReleaseInput) -> tuple[GateState, ReleaseResult]:
    state = reclaim(state, request.now)
    owners = set(request.owners)
    released = tuple(lease.owner for lease in state.leases if lease.owner in owners)
    dequeued = tuple(w.owner for w in state.waiters if w.owner in owners)
    new_state = state.model_copy(
        update={
            "leases": tuple(lease for lease in state.leases if lease.owner not in owners),
            "waiters": tuple(w for w in state.waiters if w.owner not in owners),
        }
    )
    return new_state, ReleaseResult(released=released, dequeued=dequeued, running=len(new_state.leases))


def set_limit(state: GateState, request: SetLimitInput) -> GateState:
    """Lowering the limit below the running count revokes nothing: new grants wait until below."""
    return state.model_copy(update={"max_running_tasks": request.max_running_tasks})


# --------------------------------------------------------------------------------------------
# The entity's one entry point: JSON in, JSON out


def load_state(raw: Any) -> GateState:
    if raw is None or raw == {}:
        return GateState()
    return GateState.model_validate(raw)


_DATETIME = TypeAdapter(datetime)


def _json_time(value: datetime) -> str:
    dumped: str = _DATETIME.dump_python(value, mode="json")
    return dumped


class _Book:
    """A working copy of a :class:`GateState` in its stored JSON form, for the entity's hot path.

    The pure functions above rebuild the whole state on every operation, which costs time in
    proportion to the number of leases; with hundreds of running tasks per tenant that dominated
    the gate. The book applies the same transitions in place and keeps each lease and waiter as the
    JSON dict it is stored as, so an operation costs time in proportion to what it changes (plus a
    C-speed list copy). ``tests/unit/test_gate.py`` drives the entity through this path and checks
    it against the pure functions.
    """

    __slots__ = (
        "clock",
        "clock_json",
        "expired_waiters_total",
        "granted_total",
        "leases",
        "max_running_tasks",
        "min_lease_expiry",
        "min_waiter_expiry",
        "reclaimed_leases_total",
        "waiter_owners",
        "waiters",
    )

    def __init__(self, state: GateState) -> None:
        self.max_running_tasks = state.max_running_tasks
        #: owner -> (expiresAt, stored JSON), in grant order.
        self.leases: dict[str, tuple[datetime, dict[str, Any]]] = {}
        for lease in state.leases:
            self.leases[lease.owner] = (lease.expires_at, lease.to_json_dict())
        #: FIFO order of the queue; ``waiters`` holds each one's expiry and stored JSON.
        self.waiter_owners: list[str] = [w.owner for w in state.waiters]
        self.waiters: dict[str, tuple[datetime, dict[str, Any]]] = {
            w.owner: (w.expires_at, w.to_json_dict()) for w in state.waiters
        }
        self.clock = state.clock
        self.clock_json = _json_time(state.clock) if state.clock is not None else None
        self.granted_total = state.granted_total
        self.reclaimed_leases_total = state.reclaimed_leases_total
        self.expired_waiters_total = state.expired_waiters_total
        #: Lower bounds of the earliest expiry: no scan is needed before the clock reaches them.
        self.min_lease_expiry = min((e for e, _ in self.leases.values()), default=None)
        self.min_waiter_expiry = min((e for e, _ in self.waiters.values()), default=None)

    def to_json(self) -> dict[str, Any]:
        """The same dict ``GateState.to_json_dict()`` gives (keys in field order, ``None`` left out)."""
        out: dict[str, Any] = {}
        if self.max_running_tasks is not None:
            out["maxRunningTasks"] = self.max_running_tasks
        out["leases"] = [j for _, j in self.leases.values()]
        out["waiters"] = [self.waiters[o][1] for o in self.waiter_owners]
        if self.clock_json is not None:
            out["clock"] = self.clock_json
        out["grantedTotal"] = self.granted_total
        out["reclaimedLeasesTotal"] = self.reclaimed_leases_total
        out["expiredWaitersTotal"] = self.expired_waiters_total
        return out

    def limit(self, default_limit: int) -> int:
        return self.max_running_tasks if self.max_running_tasks is not None else default_limit

    def reclaim(self, now: datetime) -> datetime:
        if self.clock is None or now > self.clock:
            self.clock = now
            self.clock_json = _json_time(now)
        clock = self.clock
        if self.min_lease_expiry is not None and self.min_lease_expiry <= clock:
            live = {o: v for o, v in self.leases.items() if v[0] > clock}
            self.reclaimed_leases_total += len(self.leases) - len(live)
            self.leases = live
            self.min_lease_expiry = min((e for e, _ in live.values()), default=None)
        if self.min_waiter_expiry is not None and self.min_waiter_expiry <= clock:
            kept = [o for o in self.waiter_owners if self.waiters[o][0] > clock]
            self.expired_waiters_total += len(self.waiter_owners) - len(kept)
            self.waiters = {o: self.waiters[o] for o in kept}
            self.waiter_owners = kept
            self.min_waiter_expiry = min((e for e, _ in self.waiters.values()), default=None)
        return clock

    def acquire(self, request: AcquireInput, default_limit: int) -> AcquireResult:
        clock = self.reclaim(request.now)
        if request.max_running_tasks is not None:
            self.max_running_tasks = request.max_running_tasks
        limit = self.limit(default_limit)
        granted: list[str] = []
        denied: list[Denied] = []
        ttl = timedelta(seconds=request.waiter_ttl_seconds)
        for req in request.requests:
            owner = req.owner
            if owner in self.leases:
                if owner not in granted:
                    granted.append(owner)
                continue
            queued = owner in self.waiters
            ahead = self.waiter_owners.index(owner) if queued else len(self.waiter_owners)
            if limit - len(self.leases) > ahead:
                lease = GateLease(
                    owner=owner, granted_at=clock, expires_at=clock + timedelta(seconds=req.lease_seconds)
                )
                self.leases[owner] = (lease.expires_at, lease.to_json_dict())
                if self.min_lease_expiry is None or lease.expires_at < self.min_lease_expiry:
                    self.min_lease_expiry = lease.expires_at
                self.granted_total += 1
                granted.append(owner)
                if queued:
                    del self.waiters[owner]
                    del self.waiter_owners[ahead]
                continue
            if queued:
                waiter = GateWaiter.model_validate(self.waiters[owner][1]).model_copy(
                    update={"expires_at": clock + ttl}
                )
            else:
                waiter = GateWaiter(owner=owner, enqueued_at=clock, expires_at=clock + ttl)
                self.waiter_owners.append(owner)
            self.waiters[owner] = (waiter.expires_at, waiter.to_json_dict())
            if self.min_waiter_expiry is None or waiter.expires_at < self.min_waiter_expiry:
                self.min_waiter_expiry = waiter.expires_at
            denied.append(Denied(owner=owner, position=ahead + 1))
        hint = 0.0
        if denied:
            bands = math.ceil(min(d.position for d in denied) / limit)
            hint = min(_HINT_CAP_SECONDS, _HINT_STEP_SECONDS * bands)
        return AcquireResult(
            granted=tuple(granted),
            denied=tuple(denied),
            retry_after_seconds=hint,
            running=len(self.leases),
            limit=limit,
        )

    def release(self, request: ReleaseInput) -> ReleaseResult:
        self.reclaim(request.now)
        owners = set(request.owners)
        released = tuple(o for o in self.leases if o in owners)
        dequeued = tuple(o for o in self.waiter_owners if o in owners)
        for o in released:
            del self.leases[o]
        if dequeued:
            for o in dequeued:
                del self.waiters[o]
            self.waiter_owners = [o for o in self.waiter_owners if o not in owners]
        return ReleaseResult(released=released, dequeued=dequeued, running=len(self.leases))


#: The last state each gate stored, with its book, keyed by entity key. A hit needs the stored
#: state to equal what the book produced (the same object within an entity batch, an equal one in
#: the next batch), so a stale or foreign state is simply parsed again.
_BOOKS: dict[str | None, tuple[dict[str, Any], _Book]] = {}
_BOOKS_LOCK = threading.Lock()
_MAX_BOOKS = 256


def _book_for(raw_state: Any, key: str | None) -> _Book:
    with _BOOKS_LOCK:
        # Taken out while in use: an operation that failed half-way leaves nothing cached.
        cached = _BOOKS.pop(key, None)
    if cached is not None and (cached[0] is raw_state or cached[0] == raw_state):
        return cached[1]
    return _Book(load_state(raw_state))


def _remember(key: str | None, stored: dict[str, Any], book: _Book) -> None:
    with _BOOKS_LOCK:
        if len(_BOOKS) >= _MAX_BOOKS and key not in _BOOKS:
            _BOOKS.clear()
        _BOOKS[key] = (stored, book)


def apply_operation(
    raw_state: Any,
    operation: str | None,
    raw_input: Any,
    *,
    default_limit: int,
    cache_key: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Apply one entity operation; returns ``(new state, result)`` as JSON dicts.

    Raises :class:`ValidationFailedError` for an unknown operation or a malformed input, which
    fails the caller's ``call_entity`` and leaves the state unchanged. ``cache_key`` (the entity
    key) lets consecutive operations on one gate reuse their working copy of the state; the
    results are the same with or without it. The returned state dict must not be mutated.
    """
    try:
        op = GateOperation(operation or "")
    except ValueError:
        raise ValidationFailedError(
            [Problem(path="$.operation", message=f"unknown gate operation {operation!r}")]
        ) from None
    # Inputs are parsed before the book is touched: a bad input leaves the state unchanged.
    result: dict[str, Any]
    if op is GateOperation.ACQUIRE:
        acquire_in = _parse(AcquireInput, raw_input)
        book = _book_for(raw_state, cache_key)
        result = book.acquire(acquire_in, default_limit).to_json_dict()
    elif op is GateOperation.RELEASE:
        release_in = _parse(ReleaseInput, raw_input)
        book = _book_for(raw_state, cache_key)
        result = book.release(release_in).to_json_dict()
    elif op is GateOperation.SET_LIMIT:
        limit_in = _parse(SetLimitInput, raw_input)
        book = _book_for(raw_state, cache_key)
        book.max_running_tasks = limit_in.max_running_tasks
        result = book.to_json()
    else:
        get_input = _parse(GetInput, raw_input if raw_input is not None else {})
        book = _book_for(raw_state, cache_key)
        if get_input.now is not None:
            book.reclaim(get_input.now)
        result = book.to_json()
    stored = book.to_json()
    _remember(cache_key, stored, book)
    return stored, result


def _parse(model: type[M], raw: Any) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = [
            Problem(
                path="$.input" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]),
                message=e["msg"],
            )
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise ValidationFailedError(problems, f"invalid {model.__name__}") from None
