"""Task and execution state machines, written once as data.

Each machine lists its states, its legal transitions and its terminal states. ``docs/state-machines.md``
renders the same tables; a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from shared.errors import IllegalTransitionError


class TaskStatus(StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD_LETTERED = "deadLettered"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class ExecutionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


S = TypeVar("S", bound=StrEnum)


@dataclass(frozen=True)
class StateMachine(Generic[S]):
    name: str
    initial: S
    transitions: Mapping[S, frozenset[S]]
    terminal: frozenset[S]

    def __post_init__(self) -> None:
        # The machine is data; refuse inconsistent data at import rather than at some odd run time.
        states = set(self.transitions)
        for source, targets in self.transitions.items():
            if not targets <= states:
                raise ValueError(f"{self.name}: {source} leads to unknown states {set(targets - states)}")
        if self.initial not in states or not self.terminal <= states:
            raise ValueError(f"{self.name}: initial or terminal state missing from the transitions")
        for state in self.terminal:
            if self.transitions[state]:
                raise ValueError(f"{self.name}: terminal state {state} has outgoing transitions")

    @property
    def states(self) -> tuple[S, ...]:
        return tuple(self.transitions)

    def can(self, current: S, target: S) -> bool:
        return target in self.transitions.get(current, frozenset())

    def check(self, current: S, target: S) -> S:
        """Return ``target`` if ``current -> target`` is legal, else raise ``IllegalTransitionError``."""
        if not self.can(current, target):
            raise IllegalTransitionError(
                f"{self.name}: illegal transition {current} -> {target}",
                details={"machine": self.name, "from": str(current), "to": str(target)},
            )
        return target

    def is_terminal(self, state: S) -> bool:
        return state in self.terminal


_T = TaskStatus
TASK_MACHINE: StateMachine[TaskStatus] = StateMachine(
    name="task",
    initial=_T.PENDING,
    transitions={
        # pending -> skipped/cancelled: an upstream failure propagates, or the execution is cancelled.
        _T.PENDING: frozenset({_T.SCHEDULED, _T.SKIPPED, _T.CANCELLED}),
        # scheduled -> succeeded: a rerun reuses a recorded output without running the handler.
        _T.SCHEDULED: frozenset(
            {_T.RUNNING, _T.SUCCEEDED, _T.RETRYING, _T.FAILED, _T.DEAD_LETTERED, _T.CANCELLED}
        ),
        _T.RUNNING: frozenset({_T.SUCCEEDED, _T.RETRYING, _T.FAILED, _T.DEAD_LETTERED, _T.CANCELLED}),
        _T.RETRYING: frozenset({_T.SCHEDULED, _T.FAILED, _T.DEAD_LETTERED, _T.CANCELLED}),
        # An operator resolves a dead letter: retry (scheduled), skip, or cancel the execution.
        _T.DEAD_LETTERED: frozenset({_T.SCHEDULED, _T.SKIPPED, _T.CANCELLED}),
        _T.SUCCEEDED: frozenset(),
        _T.FAILED: frozenset(),
        _T.SKIPPED: frozenset(),
        _T.CANCELLED: frozenset(),
    },
    terminal=frozenset({_T.SUCCEEDED, _T.FAILED, _T.SKIPPED, _T.CANCELLED}),
)

_E = ExecutionStatus
EXECUTION_MACHINE: StateMachine[ExecutionStatus] = StateMachine(
    name="execution",
    initial=_E.QUEUED,
    transitions={
        _E.QUEUED: frozenset({_E.RUNNING, _E.FAILED, _E.CANCELLED}),
        _E.RUNNING: frozenset({_E.WAITING, _E.SUCCEEDED, _E.FAILED, _E.CANCELLED}),
        _E.WAITING: frozenset({_E.RUNNING, _E.FAILED, _E.CANCELLED}),
        _E.SUCCEEDED: frozenset(),
        _E.FAILED: frozenset(),
        _E.CANCELLED: frozenset(),
    },
    terminal=frozenset({_E.SUCCEEDED, _E.FAILED, _E.CANCELLED}),
)
