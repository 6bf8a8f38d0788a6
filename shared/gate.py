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
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import AwareDatetime, Field, ValidationError

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


def apply_operation(
    raw_state: Any, operation: str | None, raw_input: Any, *, default_limit: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Apply one entity operation; returns ``(new state, result)`` as JSON dicts.

    Raises :class:`ValidationFailedError` for an unknown operation or a malformed input, which
    fails the caller's ``call_entity`` and leaves the state unchanged.
    """
    state = load_state(raw_state)
    try:
        op = GateOperation(operation or "")
    except ValueError:
        raise ValidationFailedError(
            [Problem(path="$.operation", message=f"unknown gate operation {operation!r}")]
        ) from None
    if op is GateOperation.ACQUIRE:
        state, acquired = acquire(state, _parse(AcquireInput, raw_input), default_limit=default_limit)
        return state.to_json_dict(), acquired.to_json_dict()
    if op is GateOperation.RELEASE:
        state, released = release(state, _parse(ReleaseInput, raw_input))
        return state.to_json_dict(), released.to_json_dict()
    if op is GateOperation.SET_LIMIT:
        state = set_limit(state, _parse(SetLimitInput, raw_input))
        return state.to_json_dict(), state.to_json_dict()
    get_input = _parse(GetInput, raw_input if raw_input is not None else {})
    if get_input.now is not None:
        state = reclaim(state, get_input.now)
    return state.to_json_dict(), state.to_json_dict()


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
