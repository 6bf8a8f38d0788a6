"""The execution activities. Each decodes its input, calls a plain function from
``shared.task_runtime`` with the configured adapters, and encodes the result."""

from __future__ import annotations

from typing import Any

import azure.functions as func

from activities.blueprint import bp
from shared.adapters.factory import get_bus, get_payload_store, get_stores
from shared.adapters.telemetry import configure_telemetry
from shared.execution_messages import (
    AttemptTimeoutInput,
    FinalizeInput,
    RunTaskInput,
    StartExecutionInput,
)
from shared.handlers.context import HandlerPorts
from shared.names import ActivityName
from shared.settings import get_settings
from shared.task_runtime import finalize_execution, record_timeout, run_task, start_execution


@bp.function_name(ActivityName.START_EXECUTION)
@bp.activity_trigger(input_name="payload", activity=ActivityName.START_EXECUTION)
def start_execution_activity(payload: dict[str, Any]) -> dict[str, Any]:
    configure_telemetry()
    inp = StartExecutionInput.model_validate(payload)
    return start_execution(get_stores(), inp).to_json_dict()


@bp.function_name(ActivityName.RUN_TASK)
@bp.activity_trigger(input_name="payload", activity=ActivityName.RUN_TASK)
def run_task_activity(payload: dict[str, Any], context: func.Context) -> dict[str, Any]:
    configure_telemetry()
    inp = RunTaskInput.model_validate(payload)
    outcome = run_task(
        get_stores(),
        get_payload_store(),
        inp,
        # The host's trace for this invocation: task spans join the orchestration's operation.
        traceparent=context.trace_context.trace_parent or None,
        handler_ports=HandlerPorts(bus=get_bus, payload_store=get_payload_store),
        claim_check_threshold=get_settings().claim_check_threshold_bytes,
    )
    return outcome.to_json_dict()


@bp.function_name(ActivityName.RECORD_TIMEOUT)
@bp.activity_trigger(input_name="payload", activity=ActivityName.RECORD_TIMEOUT)
def record_attempt_timeout_activity(payload: dict[str, Any]) -> dict[str, Any]:
    configure_telemetry()
    inp = AttemptTimeoutInput.model_validate(payload)
    return record_timeout(get_stores(), inp).to_json_dict()


@bp.function_name(ActivityName.FINALIZE_EXECUTION)
@bp.activity_trigger(input_name="payload", activity=ActivityName.FINALIZE_EXECUTION)
def finalize_execution_activity(payload: dict[str, Any]) -> dict[str, Any]:
    configure_telemetry()
    inp = FinalizeInput.model_validate(payload)
    finalize_execution(
        get_stores(),
        get_payload_store(),
        inp,
        claim_check_threshold=get_settings().claim_check_threshold_bytes,
    )
    return {"status": str(inp.status)}
