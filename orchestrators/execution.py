"""The execution orchestrator (one instance per execution, instance id = execution id) and the
task-batch sub-orchestrator that keeps wide DAGs' histories bounded."""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from orchestrators.blueprint import bp
from orchestrators.dag_driver import DagDriver, DriverState, parse_definition
from shared.definition import TaskSpec, WorkflowDefinition
from shared.errors import ErrorInfo
from shared.execution_messages import (
    CarryState,
    ExecutionInput,
    FinalizeInput,
    StartExecutionInput,
    StartExecutionResult,
    TaskBatchInput,
)
from shared.names import ActivityName, OrchestratorName
from shared.states import EXECUTION_MACHINE, ExecutionStatus, TaskStatus

log = logging.getLogger("weft.orchestrator")


@bp.function_name(OrchestratorName.EXECUTION)
@bp.orchestration_trigger(context_name="context", orchestration=OrchestratorName.EXECUTION)
def weft_execution(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    return (yield from run_guarded(context))


@bp.function_name(OrchestratorName.TASK_BATCH)
@bp.orchestration_trigger(context_name="context", orchestration=OrchestratorName.TASK_BATCH)
def weft_task_batch(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    return (yield from run_task_batch(context))


def run_guarded(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    """:func:`run_execution`, but an orchestration that fails leaves its execution ``failed`` in the
    store (with ``weft.OrchestrationFailed``) instead of ``running`` forever, then fails itself."""
    drivers: list[DagDriver] = []
    try:
        return (yield from run_execution(context, drivers))
    except Exception as exc:
        for driver in drivers:
            driver.unblock()
        inp = ExecutionInput.model_validate(context.get_input())
        if not context.is_replaying:
            log.error("execution %s: orchestration failed: %s", inp.execution_id, exc)
        yield context.call_activity(
            ActivityName.FINALIZE_EXECUTION,
            FinalizeInput(
                execution_id=inp.execution_id,
                tenant_id=inp.tenant_id,
                status=ExecutionStatus.FAILED,
                error=ErrorInfo(type="weft.OrchestrationFailed", message=str(exc)[:2000]),
            ).to_json_dict(),
        )
        raise


def run_execution(
    context: df.DurableOrchestrationContext, drivers: list[DagDriver] | None = None
) -> Generator[Any, Any, dict[str, Any]]:
    inp = ExecutionInput.model_validate(context.get_input())
    carry = inp.carry
    generation = carry.generation if carry else 1
    raw = yield context.call_activity(
        ActivityName.START_EXECUTION,
        StartExecutionInput(
            execution_id=inp.execution_id, tenant_id=inp.tenant_id, generation=generation
        ).to_json_dict(),
    )
    start = StartExecutionResult.model_validate(raw)
    if EXECUTION_MACHINE.is_terminal(start.status):
        # Cancelled (or finished) before this orchestration got to run: nothing to do.
        return {"status": str(start.status), "generation": generation}

    definition, index = parse_definition(start.definition)
    if carry is not None:
        state = DriverState(
            statuses=dict(carry.statuses),
            attempts=dict(carry.attempts),
            attempt_base=dict(carry.attempt_base),
            params_override=dict(carry.params_override),
            failure=carry.failure,
        )
    else:
        state = DriverState(statuses=dict(start.statuses), attempts=dict(start.attempts))
    if not context.is_replaying:
        log.info("execution %s generation %d: %d tasks", inp.execution_id, generation, len(definition.tasks))

    driver = DagDriver(
        context,
        execution_id=inp.execution_id,
        tenant_id=inp.tenant_id,
        workflow=start.workflow,
        definition=definition,
        state=state,
        generation=generation,
        allow_continue=True,
        max_running_tasks=start.max_running_tasks,
        index=index,
    )
    if drivers is not None:
        drivers.append(driver)
    yield from driver.run()

    statuses = driver.final_statuses()
    if not driver.cancelled and not driver.halted and not driver.run_state.is_complete():
        # A long generation reached a quiescent point: start afresh with a short history.
        next_carry = CarryState(
            generation=generation + 1,
            statuses={t: s for t, s in statuses.items() if s is not TaskStatus.PENDING},
            attempts=state.attempts,
            attempt_base=state.attempt_base,
            params_override=state.params_override,
            failure=state.failure,
        )
        context.continue_as_new(
            ExecutionInput(
                execution_id=inp.execution_id, tenant_id=inp.tenant_id, carry=next_carry
            ).to_json_dict()
        )
        return {"status": "continuedAsNew", "generation": generation}

    status, error = _verdict(driver, state)
    yield context.call_activity(
        ActivityName.FINALIZE_EXECUTION,
        FinalizeInput(
            execution_id=inp.execution_id,
            tenant_id=inp.tenant_id,
            status=status,
            error=error,
            statuses=statuses,
        ).to_json_dict(),
    )
    counts: dict[str, int] = {}
    for s in statuses.values():
        counts[str(s)] = counts.get(str(s), 0) + 1
    return {"status": str(status), "generation": generation, "tasks": dict(sorted(counts.items()))}


def _verdict(driver: DagDriver, state: DriverState) -> tuple[ExecutionStatus, ErrorInfo | None]:
    if driver.cancelled:
        return ExecutionStatus.CANCELLED, None
    if state.failure is not None or driver.halted:
        return ExecutionStatus.FAILED, state.failure
    return ExecutionStatus.SUCCEEDED, None


def run_task_batch(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    inp = TaskBatchInput.model_validate(context.get_input())
    definition = WorkflowDefinition(
        tasks=[
            TaskSpec(
                id=w.task_id,
                handler=w.handler,
                params=w.params,
                retry=w.retry,
                timeout_seconds=w.timeout_seconds,
            )
            for w in inp.tasks
        ],
        max_parallelism=inp.max_parallelism,
        on_task_failure=inp.on_task_failure,
    )
    state = DriverState(
        attempts=dict(inp.attempts),
        attempt_base={w.task_id: w.attempt_base for w in inp.tasks},
    )
    driver = DagDriver(
        context,
        execution_id=inp.execution_id,
        tenant_id=inp.tenant_id,
        workflow=inp.workflow,
        definition=definition,
        state=state,
        only=[w.task_id for w in inp.tasks],
        is_batch=True,
        batch_ready_at=inp.ready_at,
        max_running_tasks=inp.max_running_tasks,
    )
    yield from driver.run()
    return driver.batch_result().to_json_dict()
