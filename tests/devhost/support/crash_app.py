# mypy: disallow-untyped-decorators=False
"""The app the crash-and-resume test runs in a subprocess (activities take real time)."""

from __future__ import annotations

import time
from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.activity_trigger(input_name="x")
def slow_double(x: int) -> int:
    time.sleep(0.02)
    return 2 * x


@app.orchestration_trigger(context_name="context")
def crash_workflow(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    n = context.get_input()
    parts = yield context.task_all([context.call_activity("slow_double", i) for i in range(5)])
    yield context.create_timer(context.current_utc_datetime + timedelta(milliseconds=300))
    child = yield context.call_sub_orchestrator("crash_child", n)
    total = yield context.call_activity("slow_double", sum(parts))
    return [n, total, child]


@app.orchestration_trigger(context_name="context")
def crash_child(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    n = context.get_input()
    a = yield context.call_activity("slow_double", n)
    b = yield context.call_activity("slow_double", a)
    return b
