"""Param references: ``${{ input.<path> }}`` and ``${{ tasks.<id>.output.<path> }}``.

A string value anywhere inside a task's ``params`` may hold references. At run time:

* a string that is exactly one reference (``"${{ tasks.extract.output.rows }}"``) is replaced by the
  referenced JSON value with its type kept (a list stays a list, a number a number);
* a reference embedded in a longer string (``"s3://bucket/${{ input.date }}/part"``) is interpolated:
  strings go in as they are, any other value as compact JSON (``3``, ``true``, ``null``,
  ``{"a":1}``);
* ``$${{`` is an escape for a literal ``${{``.

A path is a chain of ``.key``, ``[index]`` or ``['any key']`` steps; ``.0`` on a list also indexes it.
``tasks.<id>`` takes the shortest id followed by ``.output``, so an id containing ``.output`` cannot
be referenced. The output of a ``skipped`` task is ``null``, whatever path follows it. Keys of
objects are never resolved, only values. See docs/definition-format.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shared.errors import ParamResolutionError

# ``$?`` catches the ``$${{`` escape; the expression is everything up to the first ``}}``.
_REF = re.compile(r"(\$?)\$\{\{(.*?)\}\}", re.DOTALL)
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KEY = re.compile(r"[A-Za-z0-9_-]+")
_INDEX = re.compile(r"\[(\d+)\]")
_QUOTED = re.compile(r"""\[(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\]""")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

PathStep = str | int


class ReferenceSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class Reference:
    source: Literal["input", "task"]
    task_id: str | None
    path: tuple[PathStep, ...]
    expression: str

    def __str__(self) -> str:
        return "${{ " + self.expression + " }}"


@dataclass(frozen=True)
class FoundReference:
    """A reference (or a syntax error) found at ``path`` inside a params value."""

    path: str
    reference: Reference | None
    error: str | None = None


def parse_reference(expression: str) -> Reference:
    """Parse the text between ``${{`` and ``}}``. Raises :class:`ReferenceSyntaxError`."""
    expr = expression.strip()
    if expr == "input" or expr.startswith(("input.", "input[")):
        return Reference("input", None, _parse_path(expr[len("input") :], expr), expr)
    if expr.startswith("tasks."):
        rest = expr[len("tasks.") :]
        for m in re.finditer(r"\.output(?=$|[.\[])", rest):
            task_id = rest[: m.start()]
            if _TASK_ID.fullmatch(task_id):
                return Reference("task", task_id, _parse_path(rest[m.end() :], expr), expr)
        raise ReferenceSyntaxError(f"'{expr}' is not of the form tasks.<id>.output[.path]")
    raise ReferenceSyntaxError(f"'{expr}' must start with 'input' or 'tasks.<id>.output'")


def _parse_path(text: str, expr: str) -> tuple[PathStep, ...]:
    steps: list[PathStep] = []
    pos = 0
    while pos < len(text):
        if text[pos] == ".":
            m = _KEY.match(text, pos + 1)
            if m is None:
                raise ReferenceSyntaxError(f"'{expr}': expected a key after '.' at offset {pos}")
            steps.append(m.group(0))
            pos = m.end()
            continue
        if text[pos] == "[":
            if (m := _INDEX.match(text, pos)) is not None:
                steps.append(int(m.group(1)))
                pos = m.end()
                continue
            if (m := _QUOTED.match(text, pos)) is not None:
                raw = m.group(1) if m.group(1) is not None else m.group(2)
                steps.append(re.sub(r"\\(.)", r"\1", raw))
                pos = m.end()
                continue
        raise ReferenceSyntaxError(f"'{expr}': unexpected '{text[pos]}' in path at offset {pos}")
    return tuple(steps)


def json_path_member(key: str) -> str:
    """The JSON-path step for an object member: ``.name`` or ``['odd key']``."""
    if _IDENTIFIER.fullmatch(key):
        return "." + key
    return "['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']"


def references_in_string(text: str) -> Iterator[Reference | ReferenceSyntaxError]:
    for m in _REF.finditer(text):
        if m.group(1):
            continue  # $${{ ... }} is a literal
        try:
            yield parse_reference(m.group(2))
        except ReferenceSyntaxError as exc:
            yield exc


def find_references(value: Any, path: str = "") -> Iterator[FoundReference]:
    """Every reference inside a JSON value, with the JSON path (relative to ``path``) of its string."""
    if isinstance(value, str):
        if "${{" not in value:
            return
        for ref in references_in_string(value):
            if isinstance(ref, ReferenceSyntaxError):
                yield FoundReference(path, None, str(ref))
            else:
                yield FoundReference(path, ref)
        # An opening without a closing is almost certainly a typo, not literal text.
        stripped = _REF.sub("", value)
        if "${{" in stripped:
            yield FoundReference(path, None, "'${{' without a matching '}}'")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from find_references(v, path + json_path_member(str(k)))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from find_references(v, f"{path}[{i}]")


def referenced_task_ids(value: Any) -> set[str]:
    return {
        f.reference.task_id
        for f in find_references(value)
        if f.reference is not None and f.reference.task_id is not None
    }


def resolve_params(
    params: Mapping[str, Any],
    execution_input: Any,
    outputs: Mapping[str, Any],
    skipped: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Any]:
    """Replace every reference in ``params`` with its value. Raises :class:`ParamResolutionError`.

    ``outputs`` maps an upstream task id to its (materialised) output; ``skipped`` names upstream
    tasks that were skipped, whose output reads as ``null``.
    """
    resolved = _resolve_value(dict(params), execution_input, outputs, frozenset(skipped))
    assert isinstance(resolved, dict)
    return resolved


def _resolve_value(value: Any, inp: Any, outputs: Mapping[str, Any], skipped: frozenset[str]) -> Any:
    if isinstance(value, str):
        return _resolve_string(value, inp, outputs, skipped)
    if isinstance(value, Mapping):
        return {k: _resolve_value(v, inp, outputs, skipped) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_resolve_value(v, inp, outputs, skipped) for v in value]
    return value


def _resolve_string(text: str, inp: Any, outputs: Mapping[str, Any], skipped: frozenset[str]) -> Any:
    if "${{" not in text:
        return text
    matches = list(_REF.finditer(text))
    if len(matches) == 1 and not matches[0].group(1) and matches[0].span() == (0, len(text)):
        return lookup(_parse(matches[0].group(2)), inp, outputs, skipped)

    def substitute(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(0)[1:]
        found = lookup(_parse(m.group(2)), inp, outputs, skipped)
        if isinstance(found, str):
            return found
        return json.dumps(found, separators=(",", ":"), ensure_ascii=False)

    return _REF.sub(substitute, text)


def _parse(expression: str) -> Reference:
    try:
        return parse_reference(expression)
    except ReferenceSyntaxError as exc:
        raise ParamResolutionError(str(exc)) from exc


def lookup(ref: Reference, inp: Any, outputs: Mapping[str, Any], skipped: frozenset[str]) -> Any:
    """The value ``ref`` points at. Raises :class:`ParamResolutionError` if it does not exist."""
    if ref.source == "input":
        current, where = inp, "input"
    else:
        assert ref.task_id is not None
        if ref.task_id in skipped:
            return None
        if ref.task_id not in outputs:
            raise ParamResolutionError(
                f"{ref}: no output recorded for task '{ref.task_id}'", details={"reference": str(ref)}
            )
        current, where = outputs[ref.task_id], f"tasks.{ref.task_id}.output"
    for step in ref.path:
        if isinstance(current, Mapping) and isinstance(step, str) and step in current:
            current = current[step]
        elif isinstance(current, list) and _as_index(step) is not None:
            index = _as_index(step)
            assert index is not None
            if index >= len(current):
                raise ParamResolutionError(
                    f"{ref}: index {index} out of range at {where} (length {len(current)})",
                    details={"reference": str(ref)},
                )
            current = current[index]
        else:
            raise ParamResolutionError(
                f"{ref}: {where} has no {step!r} (found {_json_type(current)})",
                details={"reference": str(ref)},
            )
        where += f"[{step}]" if isinstance(step, int) else json_path_member(step)
    return current


def _as_index(step: PathStep) -> int | None:
    if isinstance(step, int):
        return step
    return int(step) if step.isdigit() else None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object without that key"
    return type(value).__name__
