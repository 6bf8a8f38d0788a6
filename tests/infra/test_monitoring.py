"""The workbook and alert queries use only telemetry names the app defines (shared/telemetry.py).

App Insights mapping (see shared/telemetry.py): metrics -> customMetrics, spans -> requests or
dependencies, events -> customEvents, attributes -> customDimensions["<key>"].
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shared.states import ExecutionStatus, TaskStatus
from shared.telemetry import Dimension, MetricName, SpanName, TelemetryEvent, all_telemetry_names
from tests.infra.terraform_model import load

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "infra" / "monitoring"

_WEFT_LITERAL = re.compile(r'"(weft\.[^"]+)"')
_DIMENSION_KEY = re.compile(r'customDimensions\s*\[\s*"([^"]+)"\s*\]|customDimensions\.([A-Za-z_][\w]*)')
_NAME_EQ = re.compile(r'\bname\s*==\s*"([^"]+)"')
_NAME_IN = re.compile(r"\bname\s+in\s*\(([^)]*)\)")
_STATUS_EQ = re.compile(r'\bstatus\s*==\s*"([^"]+)"')


def _workbook_queries(node: object) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "query" and isinstance(value, str):
                found.append(value)
            else:
                found += _workbook_queries(value)
    elif isinstance(node, list):
        for value in node:
            found += _workbook_queries(value)
    return found


def all_queries() -> dict[str, str]:
    queries = {p.name: p.read_text(encoding="utf-8") for p in sorted((MONITORING / "alerts").glob("*.kql"))}
    workbook = json.loads((MONITORING / "workbook.json").read_text(encoding="utf-8"))
    for i, query in enumerate(_workbook_queries(workbook)):
        queries[f"workbook.json#{i}"] = query
    return queries


def name_problems(query: str) -> list[str]:
    """Names a query filters on that shared/telemetry.py does not define, or in the wrong table."""
    defined = all_telemetry_names()
    problems: list[str] = []
    for literal in _WEFT_LITERAL.findall(query):
        if literal not in defined:
            problems.append(f"undefined telemetry name {literal!r}")
    for match in _DIMENSION_KEY.finditer(query):
        key = match.group(1) or match.group(2)
        if key not in defined:
            problems.append(f"undefined dimension {key!r}")
    compared = _NAME_EQ.findall(query) + [
        s for group in _NAME_IN.findall(query) for s in re.findall(r'"([^"]+)"', group)
    ]
    for name in compared:
        if name in {str(m) for m in MetricName} and "customMetrics" not in query:
            problems.append(f"metric {name} queried outside customMetrics")
        elif name in {str(s) for s in SpanName} and not re.search(r"\b(requests|dependencies)\b", query):
            problems.append(f"span {name} queried outside requests/dependencies")
        elif name in {str(e) for e in TelemetryEvent} and "customEvents" not in query:
            problems.append(f"event {name} queried outside customEvents")
    statuses = {str(s) for s in ExecutionStatus} | {str(s) for s in TaskStatus}
    for status in _STATUS_EQ.findall(query):
        if status not in statuses:
            problems.append(f"unknown status value {status!r}")
    return problems


@pytest.mark.parametrize(("source", "query"), sorted(all_queries().items()))
def test_query_uses_only_defined_names(source: str, query: str) -> None:
    assert name_problems(query) == [], source


def test_every_alert_query_file_is_deployed_and_every_deployed_alert_has_a_query() -> None:
    files = {p.stem for p in (MONITORING / "alerts").glob("*.kql")}
    declared = set(load().locals["log_alerts"])
    assert files == declared


def test_alerts_cover_the_issue() -> None:
    declared = set(load().locals["log_alerts"])
    assert declared >= {
        "dead-letters-opened",
        "failed-executions-rate",
        "scheduling-latency-p95",
        "function-errors",
    }
    metric = load().resource("azurerm_monitor_metric_alert.servicebus_dead_letters")
    criteria = metric["criteria"][0]
    assert criteria["metric_name"] == '"DeadletteredMessages"'
    assert metric["scopes"] == ["${azurerm_servicebus_namespace.this.id}"]


def test_alert_measure_columns_are_produced_by_their_queries() -> None:
    for name, alert in load().locals["log_alerts"].items():
        query = (MONITORING / "alerts" / f"{name}.kql").read_text(encoding="utf-8")
        measure = str(alert["measure"]).strip('"')
        assert re.search(rf"\b{re.escape(measure)}\s*=", query), (name, measure)


def test_workbook_shows_what_the_issue_asks_for() -> None:
    text = (MONITORING / "workbook.json").read_text(encoding="utf-8")
    workbook = json.loads(text)
    assert workbook["version"] == "Notebook/1.0"
    assert "__APP_INSIGHTS_ID__" in workbook["fallbackResourceIds"]
    queries = "\n".join(_workbook_queries(workbook))
    for needed in (
        MetricName.EXECUTIONS_COMPLETED,  # executions by status
        MetricName.TASKS_COMPLETED,  # tasks per second
        SpanName.TASK_RUN,  # scheduling latency percentiles
        MetricName.DEAD_LETTERS_OPENED,  # dead letters
        Dimension.TENANT_ID,  # per-tenant load
    ):
        assert f'"{needed}"' in queries, needed


def test_checker_flags_undefined_names() -> None:
    assert name_problems('customMetrics | where name == "weft.task.completed"') != []
    assert name_problems('customMetrics | where tostring(customDimensions["tenant"]) == "a"') != []
    assert name_problems('customEvents | where name == "weft.task.run"') != []
    assert name_problems('customMetrics | extend status = "x" | where status == "failure"') != []
    assert name_problems('customMetrics | where name == "weft.tasks.completed"') == []


APP_SOURCES = ("shared", "triggers", "activities", "orchestrators", "entities")


def _app_source() -> str:
    texts = []
    for package in APP_SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != ROOT / "shared" / "telemetry.py":
                texts.append(path.read_text(encoding="utf-8"))
    return "\n".join(texts)


def test_every_name_the_queries_read_is_emitted_by_the_app() -> None:
    """Defined is not enough: a chart over a metric nothing records stays empty forever."""
    queried = {literal for query in all_queries().values() for literal in _WEFT_LITERAL.findall(query)}
    source = _app_source()
    missing = [
        f"{enum.__name__}.{member.name}"
        for enum in (MetricName, SpanName, TelemetryEvent)
        for member in enum
        if member.value in queried and f"{enum.__name__}.{member.name}" not in source
    ]
    assert not missing, f"queried but never emitted by the app: {missing}"
