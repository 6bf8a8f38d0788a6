"""The telemetry names Weft emits: spans, metrics, events and their dimensions, in one place.

The Azure Monitor workbook and alert queries in ``infra/monitoring/`` filter on exactly these
strings, and ``tests/infra/test_monitoring.py`` fails if a query names something not defined here.
Emit telemetry only through these constants; a renamed metric would silently empty a chart.

How the names land in Application Insights (azure-monitor-opentelemetry exporter):

* a metric instrument -> ``customMetrics``: ``name`` is the instrument name, attributes become
  ``customDimensions[...]``; each row is one export interval (60 s) with ``value``/``valueSum``/
  ``valueCount``/``valueMin``/``valueMax``. Histograms keep no buckets there, so percentiles are
  computed from span attributes instead (see :class:`SpanAttribute`).
* a span of kind SERVER or CONSUMER -> ``requests``; INTERNAL, CLIENT or PRODUCER ->
  ``dependencies``. ``name`` is the span name, attributes become ``customDimensions[...]``.
* an event (:func:`event_attributes` passed as ``extra`` to a ``logging`` call) -> ``customEvents``.

This module is pure: it imports ``opentelemetry-api`` only (no ``azure.*``), whose no-op
providers are used until :func:`shared.adapters.telemetry.configure_telemetry` installs real ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from functools import lru_cache
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

INSTRUMENTATION_SCOPE: Final = "weft"


class SpanName(StrEnum):
    SUBMIT = "weft.submit"
    EXECUTION_RUN = "weft.execution.run"
    TASK_RUN = "weft.task.run"
    OUTBOX_RELAY = "weft.outbox.relay"
    SCHEDULE_TICK = "weft.schedule.tick"
    DEAD_LETTER_RESOLVE = "weft.dead_letter.resolve"


class MetricName(StrEnum):
    # Counters (unit "1"); status carries the outcome, see Dimension.STATUS.
    EXECUTIONS_SUBMITTED = "weft.executions.submitted"
    EXECUTIONS_COMPLETED = "weft.executions.completed"
    TASKS_COMPLETED = "weft.tasks.completed"
    DEAD_LETTERS_OPENED = "weft.dead_letters.opened"
    SUBMISSIONS_REJECTED = "weft.submissions.rejected"
    # Histograms (unit "ms").
    TASK_SCHEDULING_LATENCY_MS = "weft.task.scheduling_latency_ms"
    TASK_DURATION_MS = "weft.task.duration_ms"
    SUBMIT_LATENCY_MS = "weft.submit.latency_ms"


class TelemetryEvent(StrEnum):
    """Custom events (``customEvents`` table): rare, operator-relevant facts."""

    DEAD_LETTER_OPENED = "weft.dead_letter.opened"
    DEAD_LETTER_RESOLVED = "weft.dead_letter.resolved"
    EXECUTION_FINISHED = "weft.execution.finished"


class Dimension(StrEnum):
    """Attribute keys on metrics, spans and events (``customDimensions`` keys in App Insights)."""

    TENANT_ID = "weft.tenant_id"
    WORKFLOW = "weft.workflow"
    WORKFLOW_VERSION = "weft.workflow_version"
    EXECUTION_ID = "weft.execution_id"
    TASK_ID = "weft.task_id"
    ATTEMPT = "weft.attempt"
    TRIGGER = "weft.trigger"
    # Outcome on completion counters and events: an ExecutionStatus or TaskStatus value.
    STATUS = "status"
    # Why a submission was refused (e.g. "rate_limited", "max_active_executions").
    REASON = "weft.reason"
    ERROR_TYPE = "weft.error_type"
    DEAD_LETTER_ID = "weft.dead_letter_id"
    # An operator's action on a dead letter: retry, skip or cancel.
    ACTION = "weft.action"


class SpanAttribute(StrEnum):
    """Span-only numeric attributes, so KQL can take exact percentiles from requests/dependencies."""

    SCHEDULING_LATENCY_MS = "weft.task.scheduling_latency_ms"
    # Per outbox-relay tick (span weft.outbox.relay).
    RELAY_CLAIMED = "weft.relay.claimed"
    RELAY_PUBLISHED = "weft.relay.published"
    RELAY_STARTED = "weft.relay.started"
    RELAY_FAILED = "weft.relay.failed"
    RELAY_DEFERRED = "weft.relay.deferred"
    # Per scheduler tick (span weft.schedule.tick).
    SCHEDULE_FIRED = "weft.schedule.fired"
    SCHEDULE_LOST_LEASE = "weft.schedule.lost_lease"


# The attribute the Azure Monitor log exporter reads to route a log record to customEvents.
CUSTOM_EVENT_ATTRIBUTE: Final = "microsoft.custom_event.name"

# Metric units, by name, so every emitter creates the instrument the same way.
METRIC_UNITS: Final[Mapping[MetricName, str]] = {
    MetricName.EXECUTIONS_SUBMITTED: "1",
    MetricName.EXECUTIONS_COMPLETED: "1",
    MetricName.TASKS_COMPLETED: "1",
    MetricName.DEAD_LETTERS_OPENED: "1",
    MetricName.SUBMISSIONS_REJECTED: "1",
    MetricName.TASK_SCHEDULING_LATENCY_MS: "ms",
    MetricName.TASK_DURATION_MS: "ms",
    MetricName.SUBMIT_LATENCY_MS: "ms",
}

HISTOGRAMS: Final = frozenset(
    {MetricName.TASK_SCHEDULING_LATENCY_MS, MetricName.TASK_DURATION_MS, MetricName.SUBMIT_LATENCY_MS}
)


def all_telemetry_names() -> frozenset[str]:
    """Every string a query may legitimately filter on (names and dimension keys)."""
    return frozenset(
        str(n) for enum in (SpanName, MetricName, TelemetryEvent, Dimension, SpanAttribute) for n in enum
    )


def dimensions(
    *,
    tenant_id: str | None = None,
    workflow: str | None = None,
    execution_id: str | None = None,
    task_id: str | None = None,
    **extra: str | int | float | bool,
) -> dict[str, str | int | float | bool]:
    """Attributes with the canonical keys; ``None`` values are dropped (OTel rejects them)."""
    attrs: dict[str, str | int | float | bool] = {}
    for key, value in (
        (Dimension.TENANT_ID, tenant_id),
        (Dimension.WORKFLOW, workflow),
        (Dimension.EXECUTION_ID, execution_id),
        (Dimension.TASK_ID, task_id),
    ):
        if value is not None:
            attrs[str(key)] = value
    attrs.update(extra)
    return attrs


def event_attributes(
    name: TelemetryEvent, attrs: Mapping[str, str | int | float | bool]
) -> dict[str, object]:
    """``extra=`` for ``logger.info(...)`` so the record lands in customEvents under ``name``."""
    return {CUSTOM_EVENT_ATTRIBUTE: str(name), **attrs}


def tracer() -> trace.Tracer:
    """The Weft tracer. Looked up on each call so a provider installed later is picked up."""
    return trace.get_tracer(INSTRUMENTATION_SCOPE)


def parent_context(traceparent: str | None, tracestate: str | None = None) -> otel_context.Context | None:
    """The OTel context of a W3C ``traceparent`` (e.g. ``func.Context.trace_context.trace_parent``).

    Spans started under it join the trace the Functions host opened for the invocation, so the
    whole execution is one operation in Application Insights. None when there is no parent.
    """
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return TraceContextTextMapPropagator().extract(carrier)


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, to hand to downstream calls (None if not traced)."""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def span(
    name: SpanName,
    attrs: Mapping[str, str | int | float | bool] | None = None,
    *,
    traceparent: str | None = None,
    tracestate: str | None = None,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
) -> Iterator[trace.Span]:
    """Start a Weft span (INTERNAL kind: lands in ``dependencies``), current for the block."""
    with tracer().start_as_current_span(
        str(name),
        context=parent_context(traceparent, tracestate),
        kind=kind,
        attributes=dict(attrs or {}),
    ) as current:
        yield current


class _Instruments:
    def __init__(self, meter: metrics.Meter) -> None:
        self.counters: dict[MetricName, metrics.Counter] = {}
        self.histograms: dict[MetricName, metrics.Histogram] = {}
        for name, unit in METRIC_UNITS.items():
            if name in HISTOGRAMS:
                self.histograms[name] = meter.create_histogram(str(name), unit=unit)
            else:
                self.counters[name] = meter.create_counter(str(name), unit=unit)


@lru_cache(maxsize=1)
def _instruments() -> _Instruments:
    # The OTel API's proxy meter forwards to the real provider once one is set, so caching is safe.
    return _Instruments(metrics.get_meter(INSTRUMENTATION_SCOPE))


def count(name: MetricName, attrs: Mapping[str, str | int | float | bool], amount: int = 1) -> None:
    """Add to a counter metric. Raises KeyError for a histogram name (a programming error)."""
    _instruments().counters[name].add(amount, attributes=dict(attrs))


def record(name: MetricName, value: float, attrs: Mapping[str, str | int | float | bool]) -> None:
    """Record a histogram value. Raises KeyError for a counter name (a programming error)."""
    _instruments().histograms[name].record(value, attributes=dict(attrs))
