from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import IllegalTransitionError
from shared.states import (
    EXECUTION_MACHINE,
    TASK_MACHINE,
    ExecutionStatus,
    StateMachine,
    TaskStatus,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machines.md"
MACHINES: list[Any] = [TASK_MACHINE, EXECUTION_MACHINE]


def _walk(machine: StateMachine[Any], targets: list[Any]) -> list[Any]:
    """Apply every legal transition in ``targets`` (ignoring illegal ones); return the states visited."""
    state = machine.initial
    visited = [state]
    for target in targets:
        if machine.can(state, target):
            state = machine.check(state, target)
            visited.append(state)
    return visited


@settings(max_examples=200, deadline=None)
@given(targets=st.lists(st.sampled_from(list(TaskStatus)), max_size=40))
def test_no_legal_task_transition_leaves_a_terminal_state(targets: list[TaskStatus]) -> None:
    visited = _walk(TASK_MACHINE, targets)
    first_terminal = next((i for i, s in enumerate(visited) if TASK_MACHINE.is_terminal(s)), None)
    if first_terminal is not None:
        assert visited[first_terminal:] == [visited[first_terminal]]


@settings(max_examples=200, deadline=None)
@given(targets=st.lists(st.sampled_from(list(ExecutionStatus)), max_size=40))
def test_no_legal_execution_transition_leaves_a_terminal_state(targets: list[ExecutionStatus]) -> None:
    visited = _walk(EXECUTION_MACHINE, targets)
    first_terminal = next((i for i, s in enumerate(visited) if EXECUTION_MACHINE.is_terminal(s)), None)
    if first_terminal is not None:
        assert visited[first_terminal:] == [visited[first_terminal]]


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_every_terminal_state_refuses_every_target_with_a_typed_error(machine: StateMachine[Any]) -> None:
    for state in machine.terminal:
        for target in machine.states:
            with pytest.raises(IllegalTransitionError) as info:
                machine.check(state, target)
            assert info.value.type == "weft.IllegalTransition"
            assert info.value.non_retryable
            assert info.value.details == {"machine": machine.name, "from": str(state), "to": str(target)}


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_every_state_is_reachable_and_every_non_terminal_can_end(machine: StateMachine[Any]) -> None:
    reached = {machine.initial}
    frontier = [machine.initial]
    while frontier:
        for nxt in machine.transitions[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == set(machine.states)
    for state in machine.states:
        if not machine.is_terminal(state):
            assert machine.transitions[state], f"{state} is a dead end that is not terminal"


def test_machines_cover_their_enums() -> None:
    assert set(TASK_MACHINE.states) == set(TaskStatus)
    assert set(EXECUTION_MACHINE.states) == set(ExecutionStatus)
    assert {s.value for s in TaskStatus} >= {
        "pending", "scheduled", "running", "retrying", "succeeded",
        "failed", "deadLettered", "skipped", "cancelled",
    }  # fmt: skip


def test_required_task_paths_are_legal() -> None:
    t = TaskStatus
    happy = [t.SCHEDULED, t.RUNNING, t.RETRYING, t.SCHEDULED, t.RUNNING, t.SUCCEEDED]
    assert _walk(TASK_MACHINE, happy)[-1] is t.SUCCEEDED
    assert TASK_MACHINE.can(t.RUNNING, t.DEAD_LETTERED)
    assert TASK_MACHINE.can(t.DEAD_LETTERED, t.SKIPPED)
    assert TASK_MACHINE.can(t.PENDING, t.CANCELLED)
    assert not TASK_MACHINE.is_terminal(t.DEAD_LETTERED)
    assert not TASK_MACHINE.can(t.PENDING, t.RUNNING)


def test_required_execution_paths_are_legal() -> None:
    e = ExecutionStatus
    assert _walk(EXECUTION_MACHINE, [e.RUNNING, e.WAITING, e.RUNNING, e.SUCCEEDED])[-1] is e.SUCCEEDED
    assert not EXECUTION_MACHINE.can(e.QUEUED, e.SUCCEEDED)


def test_inconsistent_machine_data_is_refused() -> None:
    class Light(StrEnum):
        ON = "on"
        OFF = "off"

    with pytest.raises(ValueError, match="terminal"):
        StateMachine(
            name="bad",
            initial=Light.ON,
            transitions={Light.ON: frozenset({Light.OFF}), Light.OFF: frozenset({Light.ON})},
            terminal=frozenset({Light.OFF}),
        )


def _parse_doc_section(text: str, heading: str) -> tuple[str, dict[str, tuple[bool, set[str]]]]:
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    initial = re.search(r"Initial state: `([^`]+)`", section)
    assert initial is not None, f"no initial state in section {heading}"
    rows: dict[str, tuple[bool, set[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        state = cells[0].strip("`")
        assert cells[1] in {"yes", "no"}, line
        targets = set(re.findall(r"`([^`]+)`", cells[2]))
        rows[state] = (cells[1] == "yes", targets)
    return initial.group(1), rows


@pytest.mark.parametrize(("machine", "heading"), [(TASK_MACHINE, "Task"), (EXECUTION_MACHINE, "Execution")])
def test_docs_tables_equal_the_machines(machine: StateMachine[Any], heading: str) -> None:
    initial, rows = _parse_doc_section(DOC.read_text(encoding="utf-8"), heading)
    assert initial == machine.initial.value
    expected = {
        s.value: (machine.is_terminal(s), {t.value for t in machine.transitions[s]}) for s in machine.states
    }
    assert rows == expected
