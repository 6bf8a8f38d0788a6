"""The publish-time validator: every problem in a workflow definition, each with a JSON path.

It never stops at the first problem. Field-level problems come from the pydantic models
(shared/definition.py) and are translated to JSON paths; the whole-document rules below run on the
raw document as far as its shape allows, so a bad retry value in one task does not hide a cycle
elsewhere. Rules (docs/definition-format.md lists them for users):

* at most 500 tasks; each id matches ``^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`` and is unique;
* every ``dependsOn`` entry names another existing task, once; no task depends on itself;
* no dependency cycle (reported with the cycle's path, e.g. ``a -> b -> a``);
* every handler is registered (when ``known_handlers`` is given);
* ``params`` is at most 64 KB as compact JSON and 64 levels deep; every ``${{ ... }}`` reference parses, and a
  ``tasks.<id>`` reference names an ancestor (a direct or transitive dependency);
* retry values are sane (``maxAttempts >= 1``, ``backoffCoefficient >= 1``, intervals >= 0);
* a schedule's cron is a valid 6-field NCRONTAB expression and its timezone an IANA name.
"""

from __future__ import annotations

import difflib
import json
from collections import deque
from collections.abc import Collection, Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from shared import cron
from shared.dag import find_cycles
from shared.definition import MAX_PARAMS_BYTES, MAX_PARAMS_DEPTH, MAX_TASKS, WorkflowDefinition
from shared.errors import Problem, ValidationFailedError
from shared.params import find_references, json_path_member


def validate_definition(
    document: Mapping[str, Any] | WorkflowDefinition, known_handlers: Collection[str] | None = None
) -> WorkflowDefinition:
    """The parsed definition, or :class:`ValidationFailedError` carrying every problem found.

    ``known_handlers`` is the handler registry's names; ``None`` skips the handler check.
    """
    problems = find_problems(document, known_handlers)
    if problems:
        raise ValidationFailedError(problems, f"the workflow definition has {len(problems)} problem(s)")
    if isinstance(document, WorkflowDefinition):
        return document
    return _parse(document)


def _parse(document: Any) -> WorkflowDefinition:
    # camelCase only: the graph rules read the camelCase keys, so a snake_case spelling that the
    # model would also accept ("depends_on") must not slip past them.
    return WorkflowDefinition.model_validate(document, by_alias=True, by_name=False)


def find_problems(
    document: Any | WorkflowDefinition, known_handlers: Collection[str] | None = None
) -> list[Problem]:
    if isinstance(document, WorkflowDefinition):
        document = document.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not isinstance(document, Mapping):
        return [Problem(path="$", message="a workflow definition must be a JSON object")]
    problems: list[Problem] = []
    try:
        _parse(document)
    except ValidationError as exc:
        problems.extend(_from_pydantic(exc))
    tasks = document.get("tasks")
    if isinstance(tasks, list):
        problems.extend(_check_tasks(tasks, known_handlers))
    schedule = document.get("schedule")
    if isinstance(schedule, Mapping):
        problems.extend(_check_schedule(schedule))
    # The same fact can surface twice (e.g. a pydantic rule and ours); say it once.
    unique = dict.fromkeys((p.path, p.message) for p in problems)
    return [Problem(path=path, message=message) for path, message in unique]


def json_path(loc: tuple[int | str, ...]) -> str:
    out = "$"
    for step in loc:
        out += f"[{step}]" if isinstance(step, int) else json_path_member(step)
    return out


def _from_pydantic(exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        message = err["msg"]
        if err["type"] == "string_pattern_mismatch" and loc[-1:] == ("id",):
            message = (
                "a task id is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit "
                f"(pattern ^[A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}$); got {err['input']!r}"
            )
        elif err["type"] == "extra_forbidden":
            message = f"unknown field '{loc[-1]}'"
        elif isinstance(err.get("input"), bool | int | float | str) and loc:
            message = f"{message}; got {err['input']!r}"
        problems.append(Problem(path=json_path(loc), message=message))
    return problems


def _check_tasks(tasks: list[Any], known_handlers: Collection[str] | None) -> list[Problem]:
    problems: list[Problem] = []
    if len(tasks) > MAX_TASKS:
        problems.append(
            Problem(path="$.tasks", message=f"{len(tasks)} tasks; a workflow has at most {MAX_TASKS}")
        )

    # First occurrence of each id wins; later duplicates are reported and left out of the graph.
    index_of: dict[str, int] = {}
    for i, task in enumerate(tasks):
        task_id = task.get("id") if isinstance(task, Mapping) else None
        if not isinstance(task_id, str):
            continue
        if task_id in index_of:
            problems.append(
                Problem(
                    path=f"$.tasks[{i}].id",
                    message=f"duplicate task id '{task_id}' (first used at $.tasks[{index_of[task_id]}].id)",
                )
            )
        else:
            index_of[task_id] = i

    graph: dict[str, list[str]] = {}
    for task_id, i in index_of.items():
        deps = tasks[i].get("dependsOn")
        edges: list[str] = []
        if isinstance(deps, list):
            seen: set[str] = set()
            for j, dep in enumerate(deps):
                if not isinstance(dep, str):
                    continue
                path = f"$.tasks[{i}].dependsOn[{j}]"
                if dep == task_id:
                    problems.append(Problem(path=path, message=f"task '{task_id}' depends on itself"))
                elif dep not in index_of:
                    problems.append(Problem(path=path, message=f"depends on unknown task '{dep}'"))
                elif dep in seen:
                    problems.append(Problem(path=path, message=f"'{dep}' is listed twice in dependsOn"))
                else:
                    edges.append(dep)
                seen.add(dep)
        graph[task_id] = edges

    for cycle in find_cycles(graph):
        first, second = cycle[0], cycle[1]
        i = index_of[first]
        j = tasks[i]["dependsOn"].index(second)
        problems.append(
            Problem(
                path=f"$.tasks[{i}].dependsOn[{j}]",
                message=f"dependency cycle: {' -> '.join(cycle)} (each task depends on the next)",
            )
        )

    ancestors_cache: dict[str, set[str]] = {}

    def ancestors(task_id: str) -> set[str]:
        if task_id not in ancestors_cache:
            seen: set[str] = set()
            queue = deque(graph.get(task_id, ()))
            while queue:
                node = queue.popleft()
                if node not in seen:
                    seen.add(node)
                    queue.extend(graph.get(node, ()))
            ancestors_cache[task_id] = seen
        return ancestors_cache[task_id]

    for i, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            continue
        own_id = task.get("id")
        handler = task.get("handler")
        if (
            known_handlers is not None
            and isinstance(handler, str)
            and handler
            and handler not in known_handlers
        ):
            hint = difflib.get_close_matches(handler, list(known_handlers), n=1)
            problems.append(
                Problem(
                    path=f"$.tasks[{i}].handler",
                    message=f"unknown handler '{handler}'" + (f"; did you mean '{hint[0]}'?" if hint else ""),
                )
            )
        params = task.get("params")
        if not isinstance(params, Mapping):
            continue
        size = _serialised_size(params)
        if size > MAX_PARAMS_BYTES:
            problems.append(
                Problem(
                    path=f"$.tasks[{i}].params",
                    message=f"params are {size} bytes as JSON; the limit is {MAX_PARAMS_BYTES} (64 KB)",
                )
            )
        depth = _nesting_depth(params)
        if depth > MAX_PARAMS_DEPTH:
            message = f"params are nested {depth} levels deep; the limit is {MAX_PARAMS_DEPTH}"
            problems.append(Problem(path=f"$.tasks[{i}].params", message=message))
            continue
        for found in find_references(params, f"$.tasks[{i}].params"):
            if found.error is not None:
                problems.append(Problem(path=found.path, message=f"invalid reference: {found.error}"))
                continue
            ref = found.reference
            if ref is None or ref.task_id is None:
                continue
            if ref.task_id not in index_of:
                problems.append(
                    Problem(path=found.path, message=f"{ref} refers to unknown task '{ref.task_id}'")
                )
            elif not isinstance(own_id, str) or index_of.get(own_id) != i:
                continue  # a duplicate or missing id has no place in the graph; already reported
            elif ref.task_id not in ancestors(own_id):
                problems.append(
                    Problem(
                        path=found.path,
                        message=(
                            f"{ref} refers to task '{ref.task_id}', which is not upstream of '{own_id}'; "
                            "a task can only read the output of a direct or transitive dependency"
                        ),
                    )
                )
    return problems


def _nesting_depth(value: Any) -> int:
    """Levels of objects and arrays, counted without recursion (the input may be hostile)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _serialised_size(params: Mapping[str, Any]) -> int:
    try:
        text = json.dumps(params, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return 0  # not JSON at all: pydantic or the caller reports that
    return len(text.encode("utf-8"))


def _check_schedule(schedule: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    zone = ZoneInfo("UTC")
    timezone = schedule.get("timezone", "UTC")
    if isinstance(timezone, str):
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(
                Problem(
                    path="$.schedule.timezone", message=f"unknown time zone '{timezone}' (use an IANA name)"
                )
            )
    expr = schedule.get("cron")
    if isinstance(expr, str) and expr:
        try:
            cron.parse(expr, zone)
        except ValueError as exc:
            problems.append(Problem(path="$.schedule.cron", message=str(exc)))
    return problems
