"""How orchestrators talk to the tenant gate entity (shared/gate.py holds the entity's side).

Orchestrators ask for several slots in one ``acquire`` call (every task that became ready in the
same step), so a fan-out of ten tasks costs one entity round trip, not ten. The entity answers
with the owners it granted; the others stay queued in FIFO order and the orchestrator polls
again after :func:`gate_backoff_seconds` (Python entities cannot wake an orchestration).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from shared.gate import AcquireInput, AcquireResult, GateOperation, ReleaseInput, SlotRequest
from shared.retry import uniform_from_seed

GATE_ACQUIRE = GateOperation.ACQUIRE.value
GATE_RELEASE = GateOperation.RELEASE.value

#: Polling backoff for a denied caller: 100 ms doubling to 5 s, with "equal" jitter so a poll
#: never comes back at once and callers that were denied together spread out.
_POLL_BASE_SECONDS = 0.1
_POLL_CAP_SECONDS = 5.0


def acquire_input(
    requests: Sequence[SlotRequest], now: datetime, *, max_running_tasks: int | None = None
) -> dict[str, Any]:
    return AcquireInput(requests=tuple(requests), now=now, max_running_tasks=max_running_tasks).to_json_dict()


def release_input(owners: Iterable[str], now: datetime) -> dict[str, Any]:
    return ReleaseInput(owners=tuple(owners), now=now).to_json_dict()


def parse_acquire_result(result: Any) -> tuple[frozenset[str], float]:
    """``(granted owners, retry-after hint in seconds)`` from the entity's answer."""
    parsed = AcquireResult.model_validate(result)
    return frozenset(parsed.granted), parsed.retry_after_seconds


def gate_backoff_seconds(poll: int, seed: str) -> float:
    """Delay before poll number ``poll + 1`` (``poll`` counts from 1); deterministic per seed."""
    ceiling = min(_POLL_CAP_SECONDS, _POLL_BASE_SECONDS * float(2 ** max(0, poll - 1)))
    return ceiling / 2 + (ceiling / 2) * uniform_from_seed(seed, poll)
