from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings

from shared.dag import DagIndex
from shared.definition import WorkflowDefinition
from shared.errors import Problem, ValidationFailedError
from shared.validation import find_problems, json_path, validate_definition
from tests.support.dags import acyclic_graphs, cyclic_graphs, is_cycle_in

HANDLERS = {"noop", "etl.extract", "etl.load"}


def task(task_id: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "handler": "noop", "dependsOn": list(deps), **extra}


def problems_of(doc: Any, handlers: set[str] | None = HANDLERS) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in find_problems(doc, handlers)]


def paths_of(doc: Any, handlers: set[str] | None = HANDLERS) -> list[str]:
    return [path for path, _ in problems_of(doc, handlers)]


def doc_of(graph: dict[str, list[str]]) -> dict[str, Any]:
    return {"tasks": [task(t, *deps) for t, deps in graph.items()]}


def test_a_valid_definition_validates_and_parses() -> None:
    doc = {"tasks": [task("a"), task("b", "a", params={"x": "${{ tasks.a.output.rows }}"})]}
    defn = validate_definition(doc, HANDLERS)
    assert isinstance(defn, WorkflowDefinition)
    assert defn.task("b").depends_on == ["a"]
    assert validate_definition(defn, HANDLERS) is defn


def test_duplicate_id() -> None:
    doc = {"tasks": [task("a"), task("b"), task("a")]}
    assert problems_of(doc) == [("$.tasks[2].id", "duplicate task id 'a' (first used at $.tasks[0].id)")]


def test_dependency_on_unknown_task() -> None:
    doc = {"tasks": [task("a"), task("b", "a", "ghost")]}
    assert problems_of(doc) == [("$.tasks[1].dependsOn[1]", "depends on unknown task 'ghost'")]


def test_dependency_listed_twice() -> None:
    assert paths_of({"tasks": [task("a"), task("b", "a", "a")]}) == ["$.tasks[1].dependsOn[1]"]


def test_self_dependency() -> None:
    doc = {"tasks": [task("a"), task("b", "a", "b")]}
    assert problems_of(doc) == [("$.tasks[1].dependsOn[1]", "task 'b' depends on itself")]


def test_cycle_is_reported_with_its_path() -> None:
    doc = {"tasks": [task("start"), task("a", "start", "c"), task("b", "a"), task("c", "b")]}
    assert problems_of(doc) == [
        ("$.tasks[1].dependsOn[1]", "dependency cycle: a -> c -> b -> a (each task depends on the next)")
    ]


def test_two_separate_cycles_are_both_reported() -> None:
    doc = {"tasks": [task("a", "b"), task("b", "a"), task("c", "d"), task("d", "c")]}
    assert paths_of(doc) == ["$.tasks[0].dependsOn[0]", "$.tasks[2].dependsOn[0]"]


def test_more_than_500_tasks() -> None:
    assert problems_of({"tasks": [task(f"t{i}") for i in range(500)]}) == []
    assert problems_of({"tasks": [task(f"t{i}") for i in range(501)]}) == [
        ("$.tasks", "501 tasks; a workflow has at most 500")
    ]


@pytest.mark.parametrize("bad_id", ["", "-a", "_a", ".a", "a b", "a/b", "é", "a" * 65, "a$", "a\n"])
def test_id_not_matching_the_pattern(bad_id: str) -> None:
    (problem,) = problems_of({"tasks": [task(bad_id)]})
    assert problem[0] == "$.tasks[0].id"
    assert "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$" in problem[1]


@pytest.mark.parametrize("good_id", ["a", "A1", "9", "extract.v2", "load-x_y", "a" * 64])
def test_id_matching_the_pattern(good_id: str) -> None:
    assert problems_of({"tasks": [task(good_id)]}) == []


def test_unknown_handler_with_a_hint() -> None:
    doc = {"tasks": [task("a", handler="etl.extrct"), task("b", handler="zzz")]}
    assert problems_of(doc) == [
        ("$.tasks[0].handler", "unknown handler 'etl.extrct'; did you mean 'etl.extract'?"),
        ("$.tasks[1].handler", "unknown handler 'zzz'"),
    ]


def test_handler_check_is_skipped_without_a_registry() -> None:
    assert problems_of({"tasks": [task("a", handler="anything")]}, handlers=None) == []


def test_param_reference_to_a_task_that_is_not_an_ancestor() -> None:
    doc = {
        "tasks": [
            task("a"),
            task("b", "a", params={"ok": "${{ tasks.a.output }}", "bad": ["${{ tasks.c.output.x }}"]}),
            task("c", "a"),
            task("d", "b", params={"transitive": "${{ tasks.a.output.y }}", "self": "${{ tasks.d.output }}"}),
        ]
    }
    problems = problems_of(doc)
    assert [p for p, _ in problems] == ["$.tasks[1].params.bad[0]", "$.tasks[3].params.self"]
    assert "which is not upstream of 'b'" in problems[0][1]


def test_param_reference_to_an_unknown_task_and_bad_syntax() -> None:
    doc = {"tasks": [task("a", params={"x": "${{ tasks.nope.output }}", "y": "${{ env.HOME }}"})]}
    assert problems_of(doc) == [
        ("$.tasks[0].params.x", "${{ tasks.nope.output }} refers to unknown task 'nope'"),
        (
            "$.tasks[0].params.y",
            "invalid reference: 'env.HOME' must start with 'input' or 'tasks.<id>.output'",
        ),
    ]


def test_input_references_are_always_allowed() -> None:
    assert problems_of({"tasks": [task("a", params={"d": "day=${{ input.date }}"})]}) == []


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"backoffCoefficient": 0.5}, "backoffCoefficient"),
        ({"maxAttempts": 0}, "maxAttempts"),
        ({"initialIntervalSeconds": -1}, "initialIntervalSeconds"),
        ({"maxIntervalSeconds": -5}, "maxIntervalSeconds"),
        ({"jitter": "some"}, "jitter"),
        ({"maxAttempts": "3x"}, "maxAttempts"),
    ],
)
def test_bad_retry_values(retry: dict[str, Any], field: str) -> None:
    doc = {"tasks": [task("a", retry=retry)], "defaults": {"retry": retry}}
    assert sorted(paths_of(doc)) == [f"$.defaults.retry.{field}", f"$.tasks[0].retry.{field}"]


def test_bad_retry_message_names_the_value() -> None:
    ((path, message),) = problems_of({"tasks": [task("a", retry={"backoffCoefficient": 0.5})]})
    assert path == "$.tasks[0].retry.backoffCoefficient"
    assert "greater than or equal to 1" in message
    assert "0.5" in message


def test_params_larger_than_64_kb() -> None:
    fits = "x" * (64 * 1024 - len('{"blob":""}'))
    assert problems_of({"tasks": [task("a", params={"blob": fits})]}) == []
    ((path, message),) = problems_of({"tasks": [task("a", params={"blob": fits + "x"})]})
    assert path == "$.tasks[0].params"
    assert "65537 bytes" in message


def test_params_size_counts_utf8_bytes() -> None:
    ((path, _),) = problems_of({"tasks": [task("a", params={"s": "é" * 33_000})]})
    assert path == "$.tasks[0].params"


def test_params_nested_too_deep() -> None:
    def nested(levels: int) -> Any:
        value: Any = "${{ input }}"
        for _ in range(levels - 1):  # levels - 1 lists around the string
            value = [value]
        return value

    # The params object is level 1, each list one more; the string inside adds none.
    assert problems_of({"tasks": [task("a", params={"x": nested(64)})]}) == []
    assert paths_of({"tasks": [task("a", params={"x": nested(65)})]}) == ["$.tasks[0].params"]
    assert problems_of({"tasks": [task("a", params={"x": nested(900)})]}) == [
        ("$.tasks[0].params", "params are nested 900 levels deep; the limit is 64")
    ]


def test_invalid_cron_and_timezone() -> None:
    doc = {"tasks": [task("a")], "schedule": {"cron": "*/5 * * * *", "timezone": "Mars/Olympus"}}
    problems = problems_of(doc)
    assert [p for p, _ in problems] == ["$.schedule.timezone", "$.schedule.cron"]
    assert "6 fields" in problems[1][1]
    assert paths_of({"tasks": [task("a")], "schedule": {"cron": "0 0 25 * * *"}}) == ["$.schedule.cron"]
    assert paths_of({"tasks": [task("a")], "schedule": {"cron": "0 0 0 30 2 *"}}) == ["$.schedule.cron"]


def test_valid_schedule() -> None:
    doc = {
        "tasks": [task("a")],
        "schedule": {"cron": "0 */5 9-17 * * MON-FRI", "timezone": "America/New_York"},
    }
    assert problems_of(doc) == []


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"tasks": []}, "$.tasks"),
        ({}, "$.tasks"),
        ({"tasks": [task("a")], "maxParallelism": 0}, "$.maxParallelism"),
        ({"tasks": [task("a")], "onTaskFailure": "ignore"}, "$.onTaskFailure"),
        ({"tasks": [task("a", timeoutSeconds=0)]}, "$.tasks[0].timeoutSeconds"),
        ({"tasks": [task("a")], "defaults": {"timeoutSeconds": -1}}, "$.defaults.timeoutSeconds"),
        ({"tasks": [task("a")], "schedule": {"cron": "0 0 * * * *", "catchUp": "all"}}, "$.schedule.catchUp"),
        ({"tasks": [task("a", params=[1])]}, "$.tasks[0].params"),
        # The wire form is camelCase only: a snake_case key would dodge the graph rules.
        ({"tasks": [{"id": "a", "handler": "noop", "depends_on": ["x"]}]}, "$.tasks[0].depends_on"),
        ({"tasks": [task("a")], "max_parallelism": 5}, "$.max_parallelism"),
        ({"tasks": [task("a")], "name": "x"}, "$.name"),
        ({"tasks": [{"id": "a"}]}, "$.tasks[0].handler"),
    ],
)
def test_field_level_problems_have_json_paths(doc: dict[str, Any], path: str) -> None:
    assert path in paths_of(doc)


def test_not_an_object() -> None:
    assert problems_of([1, 2]) == [("$", "a workflow definition must be a JSON object")]


def test_every_problem_is_reported_at_once() -> None:
    doc = {
        "maxParallelism": 0,
        "tasks": [
            task("a", "c"),
            task("b", "a", "ghost", "b", handler="nope", retry={"maxAttempts": 0}),
            task("c", "b", params={"x": "${{ tasks.zz.output }}"}),
            task("c"),
            task("bad id"),
        ],
        "schedule": {"cron": "nope"},
    }
    with pytest.raises(ValidationFailedError) as info:
        validate_definition(doc, HANDLERS)
    paths = {p.path for p in info.value.problems}
    assert paths == {
        "$.maxParallelism",
        "$.tasks[0].dependsOn[0]",  # the cycle a -> c -> b -> a
        "$.tasks[1].dependsOn[1]",  # unknown
        "$.tasks[1].dependsOn[2]",  # self
        "$.tasks[1].handler",
        "$.tasks[1].retry.maxAttempts",
        "$.tasks[2].params.x",
        "$.tasks[3].id",  # duplicate
        "$.tasks[4].id",  # pattern
        "$.schedule.cron",
    }
    error = info.value
    assert error.type == "weft.ValidationFailed"
    assert error.non_retryable
    assert len(error.details["errors"]) == len(error.problems) == 10
    assert all(set(e) == {"path", "message"} for e in error.details["errors"])


def test_json_path_quotes_odd_keys() -> None:
    assert json_path(("tasks", 3, "dependsOn", 0)) == "$.tasks[3].dependsOn[0]"
    assert json_path(("params", "odd key", "it's")) == "$.params['odd key']['it\\'s']"


def test_problem_is_plain_json() -> None:
    assert Problem(path="$.x", message="m").to_json_dict() == {"path": "$.x", "message": "m"}


@settings(max_examples=150, deadline=None)
@given(graph=acyclic_graphs())
def test_every_generated_dag_validates(graph: dict[str, list[str]]) -> None:
    # Each task also reads the output of every direct dependency, which must be allowed.
    doc = {
        "tasks": [
            task(t, *deps, params={f"from_{d}": f"${{{{ tasks.{d}.output.value }}}}" for d in deps})
            for t, deps in graph.items()
        ]
    }
    defn = validate_definition(doc, HANDLERS)
    assert defn.task_ids() == list(graph)
    order = DagIndex.build(defn.dependencies()).topological_order
    position = {t: i for i, t in enumerate(order)}
    assert len(position) == len(graph)
    for task_id, deps in graph.items():
        assert all(position[d] < position[task_id] for d in deps)


@settings(max_examples=150, deadline=None)
@given(graph=cyclic_graphs())
def test_every_generated_cyclic_graph_is_rejected_with_a_real_cycle(graph: dict[str, list[str]]) -> None:
    with pytest.raises(ValidationFailedError) as info:
        validate_definition(doc_of(graph), HANDLERS)
    cycles = []
    for problem in info.value.problems:
        m = re.fullmatch(r"dependency cycle: (.+) \(each task depends on the next\)", problem.message)
        if m:
            cycle = m.group(1).split(" -> ")
            cycles.append(cycle)
            assert is_cycle_in(cycle, graph), cycle
            # The path points at the first edge of the cycle.
            i = list(graph).index(cycle[0])
            assert problem.path == f"$.tasks[{i}].dependsOn[{graph[cycle[0]].index(cycle[1])}]"
    assert cycles
