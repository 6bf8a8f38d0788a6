from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from shared.dag import DagIndex
from shared.definition import CatchUp, OnTaskFailure, WorkflowDefinition
from shared.params import referenced_task_ids
from shared.retry import Jitter, RetryPolicy
from shared.validation import validate_definition
from shared.versioning import definition_digest, definition_document

ROOT = Path(__file__).resolve().parents[2]
ETL_EXAMPLE = ROOT / "docs" / "examples" / "etl-12.json"
# The handlers the example's team registers, plus the built-ins it uses.
ETL_HANDLERS = {
    "http",
    "servicebus.publish",
    "etl.extract",
    "etl.validate",
    "etl.clean",
    "etl.join",
    "etl.aggregate",
    "etl.load",
    "etl.quality-check",
}


def test_defaults_of_a_minimal_definition() -> None:
    defn = WorkflowDefinition.model_validate({"tasks": [{"id": "a", "handler": "noop"}]})
    task = defn.task("a")
    assert task.params == {}
    assert task.depends_on == []
    assert defn.max_parallelism == 10
    assert defn.on_task_failure is OnTaskFailure.FAIL_EXECUTION
    assert defn.schedule is None
    assert defn.description == ""
    assert defn.effective_retry(task) == RetryPolicy()
    assert defn.effective_retry(task).jitter is Jitter.FULL
    assert defn.effective_timeout_seconds(task) == 300


def test_task_retry_replaces_the_default_as_a_whole() -> None:
    defn = WorkflowDefinition.model_validate(
        {
            "defaults": {"retry": {"maxAttempts": 7, "initialIntervalSeconds": 9}, "timeoutSeconds": 60},
            "tasks": [
                {"id": "a", "handler": "noop"},
                {"id": "b", "handler": "noop", "retry": {"maxAttempts": 2}, "timeoutSeconds": 5},
            ],
        }
    )
    assert defn.effective_retry(defn.task("a")).max_attempts == 7
    assert defn.effective_retry(defn.task("a")).initial_interval_seconds == 9
    b_retry = defn.effective_retry(defn.task("b"))
    assert b_retry.max_attempts == 2
    assert b_retry.initial_interval_seconds == RetryPolicy().initial_interval_seconds  # not merged
    assert defn.effective_timeout_seconds(defn.task("a")) == 60
    assert defn.effective_timeout_seconds(defn.task("b")) == 5


def test_task_lookup() -> None:
    defn = WorkflowDefinition.model_validate(
        {"tasks": [{"id": "a", "handler": "noop"}, {"id": "b", "handler": "h", "dependsOn": ["a"]}]}
    )
    assert defn.task("b").handler == "h"
    assert defn.task_ids() == ["a", "b"]
    assert defn.dependencies() == {"a": [], "b": ["a"]}
    with pytest.raises(KeyError):
        defn.task("zz")
    assert "tasksById" not in defn.to_json_dict()


def test_schedule_defaults() -> None:
    defn = WorkflowDefinition.model_validate(
        {"tasks": [{"id": "a", "handler": "noop"}], "schedule": {"cron": "0 0 * * * *"}}
    )
    assert defn.schedule is not None
    assert defn.schedule.timezone == "UTC"
    assert defn.schedule.catch_up is CatchUp.SKIP


def test_wire_form_is_camel_case_and_round_trips() -> None:
    doc = json.loads(ETL_EXAMPLE.read_text(encoding="utf-8"))
    defn = WorkflowDefinition.model_validate(doc)
    wire = definition_document(defn)
    assert {"maxParallelism", "onTaskFailure", "defaults", "schedule", "tasks"} <= set(wire)
    assert wire["schedule"]["catchUp"] == "runOnce"
    assert "dependsOn" in wire["tasks"][3]
    assert "timeoutSeconds" in wire["tasks"][0]
    assert "timeoutSeconds" not in wire["tasks"][1]  # unset stays unset: the default applies
    again = WorkflowDefinition.model_validate(json.loads(json.dumps(wire)))
    assert again == defn
    assert definition_digest(again) == definition_digest(defn)


def test_definition_is_frozen() -> None:
    defn = WorkflowDefinition.model_validate({"tasks": [{"id": "a", "handler": "noop"}]})
    with pytest.raises(ValidationError):
        defn.max_parallelism = 3  # type: ignore[misc]


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError, match="Extra inputs"):
        WorkflowDefinition.model_validate({"tasks": [{"id": "a", "handler": "noop", "dependOn": []}]})


def test_the_12_task_etl_example_validates() -> None:
    doc: dict[str, Any] = json.loads(ETL_EXAMPLE.read_text(encoding="utf-8"))
    defn = validate_definition(doc, ETL_HANDLERS)
    assert len(defn.tasks) == 12
    index = DagIndex.build(defn.dependencies())
    assert index.roots == ("extract_orders", "extract_customers", "extract_products")
    assert index.leaves == ("notify",)
    assert max(index.depth.values()) == 6
    # It exercises the reference syntax, including a reference to a transitive ancestor.
    assert "validate_orders" in referenced_task_ids(defn.task("quality_check").params)
    assert "validate_orders" not in defn.task("quality_check").depends_on
    assert defn.on_task_failure is OnTaskFailure.DEAD_LETTER


def test_the_docs_show_the_same_example() -> None:
    """docs/definition-format.md embeds the example file verbatim, so the two cannot drift."""
    text = (ROOT / "docs" / "definition-format.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, re.DOTALL)
    examples = [json.loads(b) for b in blocks if '"extract_orders"' in b]
    assert examples == [json.loads(ETL_EXAMPLE.read_text(encoding="utf-8"))]


def test_every_valid_docs_snippet_parses() -> None:
    """Every ```json block in the format doc that is a whole definition is valid."""
    text = (ROOT / "docs" / "definition-format.md").read_text(encoding="utf-8")
    for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL):
        doc = json.loads(block)
        if isinstance(doc, dict) and "tasks" in doc:
            validate_definition(doc)
