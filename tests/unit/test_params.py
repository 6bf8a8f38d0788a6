from __future__ import annotations

from typing import Any

import pytest

from shared.errors import ParamResolutionError
from shared.params import (
    Reference,
    ReferenceSyntaxError,
    find_references,
    parse_reference,
    referenced_task_ids,
    resolve_params,
)

INPUT = {"date": "2026-11-29", "limit": 5, "regions": ["eu", "us"], "odd key": {"x": True}}
OUTPUTS: dict[str, Any] = {
    "extract": {"rows": [{"id": 1}, {"id": 2}], "count": 2, "path": "s3://b/raw"},
    "load.v2": {"ok": True},
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("input", Reference("input", None, (), "input")),
        ("input.date", Reference("input", None, ("date",), "input.date")),
        (" input.regions[1] ", Reference("input", None, ("regions", 1), "input.regions[1]")),
        ("input['odd key'].x", Reference("input", None, ("odd key", "x"), "input['odd key'].x")),
        ("tasks.extract.output", Reference("task", "extract", (), "tasks.extract.output")),
        (
            "tasks.extract.output.rows[0].id",
            Reference("task", "extract", ("rows", 0, "id"), "tasks.extract.output.rows[0].id"),
        ),
        ("tasks.load.v2.output.ok", Reference("task", "load.v2", ("ok",), "tasks.load.v2.output.ok")),
    ],
)
def test_parse_reference(expression: str, expected: Reference) -> None:
    assert parse_reference(expression) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "env.HOME",
        "tasks.extract",
        "tasks..output",
        "tasks.extract.outputs",
        "input.",
        "input.a[x]",
        "inputs",
    ],
)
def test_bad_reference_syntax(expression: str) -> None:
    with pytest.raises(ReferenceSyntaxError):
        parse_reference(expression)


def test_whole_string_reference_keeps_the_json_type() -> None:
    params = {
        "rows": "${{ tasks.extract.output.rows }}",
        "count": "${{tasks.extract.output.count}}",
        "limit": "${{ input.limit }}",
        "flag": "${{ input['odd key'].x }}",
        "everything": "${{ input }}",
    }
    out = resolve_params(params, INPUT, OUTPUTS)
    assert out == {
        "rows": [{"id": 1}, {"id": 2}],
        "count": 2,
        "limit": 5,
        "flag": True,
        "everything": INPUT,
    }


def test_embedded_references_are_interpolated() -> None:
    params = {
        "target": "${{ tasks.extract.output.path }}/${{ input.date }}/part-${{ input.limit }}",
        "note": "flag=${{ input['odd key'].x }} regions=${{ input.regions }}",
    }
    out = resolve_params(params, INPUT, OUTPUTS)
    assert out["target"] == "s3://b/raw/2026-11-29/part-5"
    assert out["note"] == 'flag=true regions=["eu","us"]'


def test_references_are_resolved_deep_inside_params_but_not_in_keys() -> None:
    params = {"a": [{"b": "${{ input.regions.0 }}"}, 3, None], "${{ input.date }}": "k"}
    out = resolve_params(params, INPUT, OUTPUTS)
    assert out == {"a": [{"b": "eu"}, 3, None], "${{ input.date }}": "k"}


def test_dollar_escape_is_a_literal() -> None:
    out = resolve_params({"x": "$${{ input.date }}", "y": "a $${{ b }} ${{ input.limit }}"}, INPUT, OUTPUTS)
    assert out == {"x": "${{ input.date }}", "y": "a ${{ b }} 5"}


def test_skipped_task_output_reads_as_null() -> None:
    out = resolve_params(
        {"a": "${{ tasks.gone.output.rows[3] }}", "b": "x${{ tasks.gone.output }}"}, INPUT, {}, {"gone"}
    )
    assert out == {"a": None, "b": "xnull"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("${{ input.missing }}", "has no 'missing'"),
        ("${{ input.regions[5] }}", "out of range"),
        ("${{ input.date.year }}", "found a string"),
        ("${{ tasks.other.output }}", "no output recorded for task 'other'"),
        ("${{ nonsense }}", "must start with"),
    ],
)
def test_unresolvable_reference_is_a_typed_non_retryable_error(value: str, message: str) -> None:
    with pytest.raises(ParamResolutionError, match=message) as info:
        resolve_params({"p": value}, INPUT, OUTPUTS)
    assert info.value.non_retryable
    assert info.value.type == "weft.ParamResolution"


def test_params_without_references_are_returned_unchanged() -> None:
    params = {"a": 1, "b": "plain $ {{ text }}", "c": [True, None, {"d": 1.5}]}
    assert resolve_params(params, INPUT, OUTPUTS) == params


def test_find_references_reports_paths_and_errors() -> None:
    params = {
        "a": "${{ tasks.x.output.y }}",
        "list": ["ok", "${{ input.z }} and ${{ bogus }}"],
        "odd key": "${{ tasks.w.output }}",
        "open": "${{ input.date",
    }
    found = [(f.path, f.reference.task_id if f.reference else None, f.error is not None)
             for f in find_references(params, "$.p")]  # fmt: skip
    assert found == [
        ("$.p.a", "x", False),
        ("$.p.list[1]", None, False),
        ("$.p.list[1]", None, True),
        ("$.p['odd key']", "w", False),
        ("$.p.open", None, True),
    ]
    assert referenced_task_ids(params) == {"x", "w"}
