from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.dag import DagIndex, DagRun, Delta, GraphError, find_cycles, propagate_failure, ready_set
from shared.errors import IllegalTransitionError
from shared.states import TaskStatus
from tests.support.dags import acyclic_graphs, cyclic_graphs, is_cycle_in

S = TaskStatus

# extract_a, extract_b -> transform -> load; report depends on load; audit is independent.
ETL = {
    "extract_a": [],
    "extract_b": [],
    "transform": ["extract_a", "extract_b"],
    "load": ["transform"],
    "report": ["load"],
    "audit": [],
}


def test_topological_order_depth_roots_and_leaves() -> None:
    index = DagIndex.build(ETL)
    assert index.topological_order == ("extract_a", "extract_b", "audit", "transform", "load", "report")
    assert dict(index.depth) == {
        "extract_a": 0, "extract_b": 0, "audit": 0, "transform": 1, "load": 2, "report": 3,
    }  # fmt: skip
    assert index.roots == ("extract_a", "extract_b", "audit")
    assert index.leaves == ("report", "audit")
    assert index.levels() == [["extract_a", "extract_b", "audit"], ["transform"], ["load"], ["report"]]
    assert index.dependants["transform"] == ("load",)
    assert index.ancestors("load") == {"transform", "extract_a", "extract_b"}
    assert index.descendants("extract_b") == {"transform", "load", "report"}


def test_depth_is_the_longest_chain() -> None:
    index = DagIndex.build({"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]})
    assert index.depth["d"] == 3


def test_build_refuses_unknown_dependency_and_cycle() -> None:
    with pytest.raises(GraphError, match="unknown task 'zz'"):
        DagIndex.build({"a": ["zz"]})
    with pytest.raises(GraphError, match="cycle: a -> b -> a") as info:
        DagIndex.build({"a": ["b"], "b": ["a"]})
    assert info.value.details["cycles"] == [["a", "b", "a"]]


def test_repeated_dependency_is_one_edge() -> None:
    index = DagIndex.build({"a": [], "b": ["a", "a"]})
    assert index.dependencies["b"] == ("a",)
    run = DagRun(index)
    run.start("a")
    assert run.set_status("a", S.SUCCEEDED).ready == ("b",)


def test_find_cycles_reports_self_loops_and_each_component() -> None:
    cycles = find_cycles({"a": ["a"], "b": ["c"], "c": ["b"], "d": ["e"], "e": ["f"], "f": ["d"], "g": []})
    assert cycles == [["a", "a"], ["b", "c", "b"], ["d", "e", "f", "d"]]
    assert find_cycles(ETL) == []


def test_ready_set_counts_skips_as_satisfied() -> None:
    index = DagIndex.build(ETL)
    assert ready_set(index, {}) == ["extract_a", "extract_b", "audit"]
    statuses = {"extract_a": S.SUCCEEDED, "extract_b": S.SKIPPED, "audit": S.RUNNING}
    assert ready_set(index, statuses) == ["transform"]
    assert ready_set(index, {**statuses, "extract_b": S.FAILED}) == []
    assert ready_set(index, {**statuses, "extract_b": S.DEAD_LETTERED}) == []


def test_failure_cancels_every_pending_descendant_only() -> None:
    index = DagIndex.build(ETL)
    assert propagate_failure(index, "extract_a", {"extract_b": S.RUNNING}) == ["transform", "load", "report"]
    run = DagRun(index)
    for t in ("extract_a", "extract_b", "audit"):
        run.start(t)
    delta = run.set_status("extract_a", S.FAILED)
    assert delta.cancelled == ("transform", "load", "report")
    assert run.status("audit") is S.SCHEDULED  # independent branch untouched
    assert run.set_status("extract_b", S.SUCCEEDED).ready == ()  # transform stays cancelled
    assert run.status("transform") is S.CANCELLED
    assert run.pending_failures() == []


def test_dead_letter_blocks_then_skip_releases_dependants() -> None:
    run = DagRun(DagIndex.build(ETL))
    run.start("extract_a")
    run.start("extract_b")
    run.set_status("extract_a", S.SUCCEEDED)
    run.set_status("extract_b", S.RUNNING)
    assert run.set_status("extract_b", S.DEAD_LETTERED) == Delta()
    assert run.set_status("audit", S.SKIPPED) == Delta()  # an operator skips it before it runs
    assert run.ready() == []
    assert run.set_status("extract_b", S.SKIPPED).ready == ("transform",)


def test_dead_letter_cancel_cancels_dependants() -> None:
    run = DagRun(DagIndex.build({"a": [], "b": ["a"], "c": ["b"]}))
    run.start("a")
    run.set_status("a", S.DEAD_LETTERED)
    assert run.set_status("a", S.CANCELLED).cancelled == ("b", "c")
    assert run.is_complete()


def test_cancel_pending_for_fail_fast() -> None:
    run = DagRun(DagIndex.build(ETL))
    run.start("extract_a")
    assert run.cancel_pending() == ["extract_b", "audit", "transform", "load", "report"]
    assert run.ready() == []
    assert run.active() == ["extract_a"]


def test_illegal_moves_raise_typed_errors() -> None:
    run = DagRun(DagIndex.build(ETL))
    with pytest.raises(IllegalTransitionError):
        run.start("transform")  # not ready
    with pytest.raises(IllegalTransitionError):
        run.set_status("transform", S.SCHEDULED)  # dependencies unmet
    with pytest.raises(IllegalTransitionError):
        run.set_status("extract_a", S.SUCCEEDED)  # pending -> succeeded is not a transition


def test_restoring_from_stored_statuses() -> None:
    index = DagIndex.build(ETL)
    run = DagRun(index, {"extract_a": S.SUCCEEDED, "extract_b": S.SKIPPED, "audit": S.RUNNING})
    assert run.ready() == ["transform"]
    with pytest.raises(GraphError):
        DagRun(index, {"nope": S.SUCCEEDED})


@settings(max_examples=150, deadline=None)
@given(graph=acyclic_graphs())
def test_topological_order_respects_every_edge(graph: dict[str, list[str]]) -> None:
    index = DagIndex.build(graph)
    assert sorted(index.topological_order) == sorted(graph)
    position = {t: i for i, t in enumerate(index.topological_order)}
    for task, deps in graph.items():
        for dep in deps:
            assert position[dep] < position[task]
            assert index.depth[task] > index.depth[dep]
    assert find_cycles(graph) == []


@settings(max_examples=150, deadline=None)
@given(graph=cyclic_graphs())
def test_reported_cycles_are_real(graph: dict[str, list[str]]) -> None:
    cycles = find_cycles(graph)
    assert cycles
    for cycle in cycles:
        assert is_cycle_in(cycle, graph), cycle
    with pytest.raises(GraphError):
        DagIndex.build(graph)


@settings(max_examples=150, deadline=None)
@given(graph=acyclic_graphs(), data=st.data())
def test_incremental_run_matches_the_stateless_ready_set(
    graph: dict[str, list[str]], data: st.DataObject
) -> None:
    """Drive a run with random completions and failures; it agrees with ready_set at every step
    and ends with every task terminal, no task run before its dependencies, none left stranded."""
    index = DagIndex.build(graph)
    run = DagRun(index)
    finished_order: list[str] = []
    in_flight: list[str] = []
    while True:
        assert set(run.ready()) == set(ready_set(index, run.statuses))
        for task in run.ready():
            run.start(task)
            in_flight.append(task)
        if not in_flight:
            break
        task = in_flight.pop(data.draw(st.integers(0, len(in_flight) - 1)))
        outcome = data.draw(st.sampled_from([S.SUCCEEDED, S.SUCCEEDED, S.SKIPPED, S.FAILED, S.CANCELLED]))
        before = dict(run.statuses)
        if outcome in (S.SKIPPED, S.CANCELLED):
            # An operator skips or cancels a dead-lettered task; dead-lettering itself changes nothing.
            assert run.set_status(task, S.DEAD_LETTERED) == Delta()
        delta = run.set_status(task, outcome)
        finished_order.append(task)
        if outcome in (S.FAILED, S.CANCELLED):
            expected = {d for d in index.descendants(task) if before[d] is S.PENDING}
            assert set(delta.cancelled) == expected
        for t in delta.ready:
            assert all(run.status(d) in (S.SUCCEEDED, S.SKIPPED) for d in index.dependencies[t])
    assert run.is_complete()
    assert run.pending_failures() == []
    done_at = {t: i for i, t in enumerate(finished_order)}
    for task in finished_order:
        for dep in index.dependencies[task]:
            assert done_at[dep] < done_at[task]
    for task in graph:
        if run.status(task) is S.CANCELLED:
            assert task in finished_order or any(
                run.status(a) in (S.FAILED, S.CANCELLED) and a in finished_order
                for a in index.ancestors(task)
            )
