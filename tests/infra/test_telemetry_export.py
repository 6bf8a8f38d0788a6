"""The App Insights mapping docs/deploy.md documents, checked against the pinned exporter.

Spans built with shared.telemetry go through the real OpenTelemetry SDK and the
azure-monitor-opentelemetry-exporter's own envelope conversion (no network): an INTERNAL span
becomes a dependency, a SERVER span a request, both named by the span name with the attributes
as custom dimensions; a log record carrying CUSTOM_EVENT_ATTRIBUTE becomes a custom event.
The conversion functions are private to the exporter, which is why its version is pinned.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from azure.monitor.opentelemetry.exporter.export.logs import _exporter as logs_exporter
from azure.monitor.opentelemetry.exporter.export.trace import _exporter as trace_exporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from shared import telemetry as t


def _finished_span(name: t.SpanName, kind: SpanKind) -> ReadableSpan:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer(t.INSTRUMENTATION_SCOPE)
    attrs = t.dimensions(tenant_id="acme", workflow="etl", execution_id="e1", task_id="load")
    attrs[str(t.SpanAttribute.SCHEDULING_LATENCY_MS)] = 42.0
    with tracer.start_as_current_span(str(name), kind=kind, attributes=attrs):
        pass
    (span,) = memory.get_finished_spans()
    return span


def _data(envelope: Any) -> tuple[str, Any]:
    """(base type, base data) of an exporter envelope; typed Any because the model is optional-heavy."""
    return str(envelope.data.base_type), envelope.data.base_data


def test_internal_span_becomes_a_dependency_with_custom_dimensions() -> None:
    span = _finished_span(t.SpanName.TASK_RUN, SpanKind.INTERNAL)
    base_type, base = _data(trace_exporter._convert_span_to_envelope(span))
    assert base_type == "RemoteDependencyData"
    assert base.name == "weft.task.run"
    props = base.properties
    assert props["weft.tenant_id"] == "acme"
    assert props["weft.task_id"] == "load"
    assert float(props["weft.task.scheduling_latency_ms"]) == 42.0


def test_server_span_becomes_a_request() -> None:
    span = _finished_span(t.SpanName.SUBMIT, SpanKind.SERVER)
    base_type, base = _data(trace_exporter._convert_span_to_envelope(span))
    assert base_type == "RequestData"
    assert base.name == "weft.submit"


# The SDK's LoggingHandler is what azure-monitor-opentelemetry 1.8.11 installs; its deprecation
# notice is about a future release.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_event_log_record_becomes_a_custom_event() -> None:
    provider = LoggerProvider()
    memory = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = logging.getLogger("weft.test.telemetry_export")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = LoggingHandler(logger_provider=provider)
    logger.addHandler(handler)
    try:
        extra = t.event_attributes(t.TelemetryEvent.DEAD_LETTER_OPENED, t.dimensions(tenant_id="acme"))
        logger.info("dead letter opened", extra=extra)
    finally:
        logger.removeHandler(handler)
    (record,) = memory.get_finished_logs()
    base_type, base = _data(logs_exporter._convert_log_to_envelope(record))
    assert base_type == "EventData"
    assert base.name == "weft.dead_letter.opened"
    assert base.properties["weft.tenant_id"] == "acme"
