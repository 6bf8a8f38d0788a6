"""A fan-out smoke test: proves the host runs orchestrations, activities and timers end to end.

Operators use it after a deploy; devhost's own tests use it as the sample orchestration.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from orchestrators.blueprint import bp
from shared.names import ActivityName, OrchestratorName


@bp.orchestration_trigger(context_name="context", orchestration=OrchestratorName.SELFTEST_FANOUT)
def selftest_fanout(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    raw = context.get_input() or {}
    width = max(1, min(int(raw.get("width", 5)), 1000))
    tasks = [context.call_activity(ActivityName.SELFTEST_ECHO, {"i": i}) for i in range(width)]
    results = yield context.task_all(tasks)
    return {"width": width, "sum": sum(int(r["i"]) for r in results)}
