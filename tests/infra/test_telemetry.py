"""shared/telemetry.py and shared/adapters/telemetry.py: names, attribute helpers, lazy wiring."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared import telemetry as t
from shared.adapters import telemetry as adapter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_adapter() -> Iterator[None]:
    adapter.reset_for_tests()
    yield
    adapter.reset_for_tests()


def test_names_are_unique_and_prefixed() -> None:
    names = [str(n) for enum in (t.SpanName, t.MetricName, t.TelemetryEvent) for n in enum]
    assert len(names) == len(set(names))
    assert all(n.startswith("weft.") for n in names)
    assert set(t.METRIC_UNITS) == set(t.MetricName)


def test_the_names_other_code_relies_on() -> None:
    assert str(t.SpanName.SUBMIT) == "weft.submit"
    assert str(t.SpanName.TASK_RUN) == "weft.task.run"
    assert str(t.MetricName.TASKS_COMPLETED) == "weft.tasks.completed"
    assert str(t.MetricName.TASK_SCHEDULING_LATENCY_MS) == "weft.task.scheduling_latency_ms"
    assert str(t.MetricName.EXECUTIONS_COMPLETED) == "weft.executions.completed"
    assert str(t.MetricName.DEAD_LETTERS_OPENED) == "weft.dead_letters.opened"
    assert str(t.Dimension.STATUS) == "status"
    assert {t.Dimension.TENANT_ID, t.Dimension.WORKFLOW, t.Dimension.EXECUTION_ID, t.Dimension.TASK_ID} == {
        "weft.tenant_id",
        "weft.workflow",
        "weft.execution_id",
        "weft.task_id",
    }


def test_dimensions_drop_none_and_use_canonical_keys() -> None:
    attrs = t.dimensions(
        tenant_id="acme", workflow="etl", execution_id=None, **{t.Dimension.STATUS: "failed"}
    )
    assert attrs == {"weft.tenant_id": "acme", "weft.workflow": "etl", "status": "failed"}


def test_event_attributes_route_to_custom_events() -> None:
    extra = t.event_attributes(t.TelemetryEvent.DEAD_LETTER_OPENED, {"weft.task_id": "a"})
    assert extra == {"microsoft.custom_event.name": "weft.dead_letter.opened", "weft.task_id": "a"}


def test_instruments_work_without_a_provider() -> None:
    # No exporter configured (devhost, tests): calls must be cheap no-ops, not errors.
    t.count(t.MetricName.TASKS_COMPLETED, t.dimensions(tenant_id="acme"))
    t.record(t.MetricName.TASK_SCHEDULING_LATENCY_MS, 12.5, t.dimensions(tenant_id="acme"))
    with t.tracer().start_as_current_span(t.SpanName.TASK_RUN) as span:
        span.set_attribute(t.SpanAttribute.SCHEDULING_LATENCY_MS, 12.5)
    with pytest.raises(KeyError):
        t.count(t.MetricName.TASK_SCHEDULING_LATENCY_MS, {})


def test_parent_context_joins_the_hosts_trace() -> None:
    from opentelemetry import trace

    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ctx = t.parent_context(traceparent)
    assert ctx is not None
    parent = trace.get_current_span(ctx).get_span_context()
    assert format(parent.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert format(parent.span_id, "016x") == "b7ad6b7169203331"
    assert t.parent_context(None) is None
    assert t.parent_context("") is None


def test_span_helper_runs_without_a_provider() -> None:
    with t.span(t.SpanName.SUBMIT, t.dimensions(tenant_id="acme"), traceparent=None) as current:
        current.set_attribute(str(t.Dimension.EXECUTION_ID), "e1")


def test_configure_is_a_noop_without_connection_string() -> None:
    calls: list[dict[str, Any]] = []
    assert adapter.configure_telemetry({}, configure=lambda **kw: calls.append(kw)) is False
    assert calls == []


def test_configure_runs_once_with_the_connection_string() -> None:
    calls: list[dict[str, Any]] = []
    env = {"APPLICATIONINSIGHTS_CONNECTION_STRING": "InstrumentationKey=00000000-0000-0000-0000-000000000000"}
    assert adapter.configure_telemetry(env, configure=lambda **kw: calls.append(kw)) is True
    assert adapter.configure_telemetry(env, configure=lambda **kw: calls.append(kw)) is True
    assert len(calls) == 1
    assert calls[0]["connection_string"] == env["APPLICATIONINSIGHTS_CONNECTION_STRING"]
    assert calls[0]["logger_name"] == "weft"


def test_importing_does_not_load_azure_monitor() -> None:
    code = (
        "import sys, shared.telemetry, shared.adapters.telemetry; "
        "print(any(m.startswith('azure.monitor') for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_shared_telemetry_is_pure() -> None:
    source = (ROOT / "shared" / "telemetry.py").read_text(encoding="utf-8")
    assert "import azure" not in source
    assert "from azure" not in source
