"""The execution path emits the spans, metrics and events the workbook and alerts query."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared import telemetry
from shared.adapters.factory import get_payload_store
from shared.errors import AdmissionDeniedError
from shared.records import DeadLetterStatus, TriggerKind
from shared.submission import SubmissionDeps, submit_execution
from tests.execution.harness import Harness, run_harness


@pytest.fixture
def exporters(monkeypatch: pytest.MonkeyPatch) -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    instruments = telemetry._Instruments(meter_provider.get_meter(telemetry.INSTRUMENTATION_SCOPE))
    # The OTel API lets a process set its global providers once; the tests use their own instead.
    monkeypatch.setattr(
        telemetry, "tracer", lambda: tracer_provider.get_tracer(telemetry.INSTRUMENTATION_SCOPE)
    )
    monkeypatch.setattr(telemetry, "_instruments", lambda: instruments)
    return spans, reader


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with run_harness(tmp_path, monkeypatch) as harness:
        yield harness


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points


def test_task_spans_and_metrics_carry_the_dimensions(
    h: Harness, exporters: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    spans, reader = exporters
    definition = {
        "tasks": [
            {"id": "a", "handler": "noop"},
            {
                "id": "b",
                "handler": "fail",
                "params": {"times": -1},
                "dependsOn": ["a"],
                "retry": {"maxAttempts": 1},
            },
        ],
        "onTaskFailure": "deadLetter",
    }
    execution_id = h.submit(definition, workflow="etl")

    def settled() -> bool:
        # The dead letter is committed inside b's span; the span and the metrics close after it.
        finished = [s for s in spans.get_finished_spans() if s.name == telemetry.SpanName.TASK_RUN]
        completed = metric_points(reader).get(telemetry.MetricName.TASKS_COMPLETED, [])
        return len(finished) == 2 and sum(p.value for p in completed) == 2

    for _ in range(1000):
        if settled():
            break
        time.sleep(0.01)
    assert settled()
    page = h.stores.executions.list_dead_letters("acme", status=DeadLetterStatus.OPEN)
    assert [d.task_id for d in page.items if d.execution_id == execution_id] == ["b"]

    task_spans = [s for s in spans.get_finished_spans() if s.name == telemetry.SpanName.TASK_RUN]
    assert {s.attributes[telemetry.Dimension.TASK_ID] for s in task_spans} == {"a", "b"}
    for s in task_spans:
        assert s.attributes[telemetry.Dimension.TENANT_ID] == "acme"
        assert s.attributes[telemetry.Dimension.WORKFLOW] == "etl"
        assert s.attributes[telemetry.Dimension.EXECUTION_ID] == execution_id
        assert telemetry.SpanAttribute.SCHEDULING_LATENCY_MS in s.attributes
    statuses = {
        s.attributes[telemetry.Dimension.TASK_ID]: s.attributes[telemetry.Dimension.STATUS]
        for s in task_spans
    }
    assert statuses == {"a": "succeeded", "b": "failed"}

    points = metric_points(reader)
    completed = {
        p.attributes[telemetry.Dimension.STATUS]: p.value
        for p in points[telemetry.MetricName.TASKS_COMPLETED]
    }
    assert completed == {"succeeded": 1, "failed": 1}
    assert sum(p.value for p in points[telemetry.MetricName.DEAD_LETTERS_OPENED]) == 1
    assert sum(p.count for p in points[telemetry.MetricName.TASK_SCHEDULING_LATENCY_MS]) == 2


def test_a_finished_execution_is_counted_with_its_status(
    h: Harness, exporters: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    _, reader = exporters
    h.wait(h.submit({"tasks": [{"id": "only", "handler": "noop"}]}, workflow="etl"))
    points = metric_points(reader)[telemetry.MetricName.EXECUTIONS_COMPLETED]
    assert [(p.attributes[telemetry.Dimension.STATUS], p.value) for p in points] == [("succeeded", 1)]
    assert points[0].attributes[telemetry.Dimension.WORKFLOW] == "etl"


def test_submissions_are_traced_and_counted_and_refusals_carry_a_reason(
    h: Harness, exporters: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    spans, reader = exporters
    h.tenant("acme", max_running_tasks=10)
    tenant = h.stores.tenants.get_tenant("acme")
    assert tenant is not None
    h.stores.tenants.update_tenant(
        tenant.model_copy(update={"limits": tenant.limits.model_copy(update={"max_active_executions": 1})})
    )
    h.publish({"tasks": [{"id": "only", "handler": "noop"}]}, workflow="etl")
    deps = SubmissionDeps(stores=h.stores, payloads=get_payload_store())
    accepted = submit_execution(
        deps,
        "acme",
        "etl",
        input=None,
        version=None,
        idempotency_key=None,
        trigger=TriggerKind.HTTP,
        now=h.now(),
    )
    with pytest.raises(AdmissionDeniedError):
        submit_execution(
            deps,
            "acme",
            "etl",
            input=None,
            version=None,
            idempotency_key=None,
            trigger=TriggerKind.BLOB,
            now=h.now(),
        )
    submit_spans = [s for s in spans.get_finished_spans() if s.name == telemetry.SpanName.SUBMIT]
    assert [s.attributes[telemetry.Dimension.TRIGGER] for s in submit_spans] == ["http", "blob"]
    assert submit_spans[0].attributes[telemetry.Dimension.EXECUTION_ID] == accepted.execution.id
    points = metric_points(reader)
    assert sum(p.value for p in points[telemetry.MetricName.EXECUTIONS_SUBMITTED]) == 1
    (rejected,) = points[telemetry.MetricName.SUBMISSIONS_REJECTED]
    assert rejected.attributes[telemetry.Dimension.REASON] == "max_active_executions"
    assert rejected.attributes[telemetry.Dimension.TENANT_ID] == "acme"


def test_task_spans_of_one_execution_join_the_hosts_trace(
    h: Harness, exporters: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    spans, _ = exporters
    first = h.submit(
        {"tasks": [{"id": "a", "handler": "noop"}, {"id": "b", "handler": "noop", "dependsOn": ["a"]}]}
    )
    second = h.submit({"tasks": [{"id": "a", "handler": "noop"}]})
    h.wait(first)
    h.wait(second)
    by_execution: dict[str, set[int]] = {}
    for s in spans.get_finished_spans():
        if s.name != telemetry.SpanName.TASK_RUN:
            continue
        # A child of the invocation's trace context, as the worker hands it to the activity.
        assert s.parent is not None
        assert s.parent.is_remote
        by_execution.setdefault(str(s.attributes[telemetry.Dimension.EXECUTION_ID]), set()).add(
            s.context.trace_id
        )
    assert len(by_execution[first]) == 1
    assert len(by_execution[second]) == 1
    assert by_execution[first] != by_execution[second]
