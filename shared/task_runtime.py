"""What the execution activities do, as plain functions over the ports (clients are injected).

``activities/`` only decodes the Durable input, calls one of these with the configured adapters and
encodes the result, so everything here is tested without a Functions host.

Delivery is at least once. Every function here is idempotent: a redelivered ``run_task`` for an
attempt whose outcome is already recorded returns that outcome without running the handler again;
``IdempotencyStore.record_attempt`` decides, once, which outcome an attempt has (the handler's, or
the orchestrator's timeout), and the task-run state is brought in line with it idempotently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from shared.claimcheck import offload, resolve
from shared.dag import DagIndex
from shared.definition import OnTaskFailure, WorkflowDefinition
from shared.errors import (
    ConcurrencyError,
    ErrorInfo,
    NotFoundError,
    TaskOutcome,
    WeftError,
)
from shared.execution_messages import (
    AttemptTimeoutInput,
    FinalizeInput,
    RunTaskInput,
    StartExecutionInput,
    StartExecutionResult,
    TaskWork,
)
from shared.handlers.context import HandlerContext, HandlerPorts
from shared.handlers.invoke import invoke_handler
from shared.lifecycle import LifecycleEvent, LogEvent, lifecycle
from shared.params import find_references, referenced_task_ids, resolve_params
from shared.ports import ExecutionWrite, PayloadStore, Stores
from shared.records import (
    AttemptRecord,
    DeadLetter,
    Execution,
    NewEvent,
    OutboxRecord,
    TaskRun,
)
from shared.states import EXECUTION_MACHINE, TASK_MACHINE, ExecutionStatus, TaskStatus
from shared.telemetry import (
    Dimension,
    MetricName,
    SpanAttribute,
    SpanName,
    TelemetryEvent,
    count,
    current_traceparent,
    dimensions,
    event_attributes,
    record,
    span,
)

log = logging.getLogger("weft.tasks")

Clock = Callable[[], datetime]
#: Cosmos DB transactional batches hold at most 100 operations; stay below with room for the rest.
MAX_TASK_RUNS_PER_WRITE = 90
#: Optimistic-concurrency retries before a write is given up as a transient failure.
MAX_CAS_ATTEMPTS = 20


def utc_now() -> datetime:
    return datetime.now(UTC)


def dead_letter_id(execution_id: str, task_id: str, attempt: int) -> str:
    return f"{execution_id}.{task_id}.{attempt}"


# ---------------------------------------------------------------------------- start


def start_execution(
    stores: Stores, inp: StartExecutionInput, *, now: Clock = utc_now
) -> StartExecutionResult:
    """Mark a queued execution running and return its bound definition and stored progress."""
    for _ in range(MAX_CAS_ATTEMPTS):
        ex = stores.executions.get_execution(inp.execution_id)
        if ex is None:
            raise NotFoundError(f"execution {inp.execution_id} does not exist")
        version = stores.definitions.get_version(ex.tenant_id, ex.workflow, ex.version)
        if version is None:
            raise NotFoundError(f"workflow {ex.workflow} version {ex.version} does not exist")
        if ex.status is ExecutionStatus.QUEUED:
            at = now()
            running = ex.model_copy(update={"status": ExecutionStatus.RUNNING, "started_at": at})
            event, outbox = lifecycle(running, LifecycleEvent.EXECUTION_STARTED, at)
            try:
                stores.executions.commit(
                    ExecutionWrite(ex.id, execution=running, events=[event], outbox=[outbox])
                )
            except ConcurrencyError:
                continue
            ex = running
        statuses: dict[str, TaskStatus] = {}
        attempts: dict[str, int] = {}
        for run in stores.executions.get_task_runs(ex.id):
            attempts[run.task_id] = run.attempts
            # Only settled work is trusted: an in-flight attempt of a crashed generation runs again.
            if run.status in (TaskStatus.SUCCEEDED, TaskStatus.SKIPPED):
                statuses[run.task_id] = run.status
        tenant = stores.tenants.get_tenant(ex.tenant_id)
        return StartExecutionResult(
            max_running_tasks=tenant.limits.max_running_tasks if tenant is not None else None,
            status=ex.status,
            workflow=ex.workflow,
            version=ex.version,
            definition=version.definition,
            statuses=statuses,
            attempts=attempts,
        )
    raise ConcurrencyError(f"execution {inp.execution_id}: too many concurrent updates")


# ---------------------------------------------------------------------------- run_task


def run_task(
    stores: Stores,
    payloads: PayloadStore,
    inp: RunTaskInput,
    *,
    handler_ports: HandlerPorts | None = None,
    now: Clock = utc_now,
    claim_check_threshold: int = 64 * 1024,
    traceparent: str | None = None,
) -> TaskOutcome:
    """Run one attempt of one task; business failures come back as a failed ``TaskOutcome``."""
    attrs = dimensions(
        tenant_id=inp.tenant_id,
        workflow=inp.workflow,
        execution_id=inp.execution_id,
        task_id=inp.task.task_id,
        **{Dimension.ATTEMPT: inp.attempt},
    )
    with span(SpanName.TASK_RUN, attrs, traceparent=traceparent or inp.traceparent) as current:
        outcome = _run_task(stores, payloads, inp, handler_ports, now, claim_check_threshold)
        current.set_attribute(str(Dimension.STATUS), outcome.status)
        if outcome.error is not None:
            current.set_attribute(str(Dimension.ERROR_TYPE), outcome.error.type)
    metric_attrs = dimensions(
        tenant_id=inp.tenant_id, workflow=inp.workflow, **{Dimension.STATUS: outcome.status}
    )
    count(MetricName.TASKS_COMPLETED, metric_attrs)
    if outcome.duration_ms is not None:
        record(MetricName.TASK_DURATION_MS, outcome.duration_ms, metric_attrs)
    return outcome


def _run_task(
    stores: Stores,
    payloads: PayloadStore,
    inp: RunTaskInput,
    handler_ports: HandlerPorts | None,
    now: Clock,
    claim_check_threshold: int,
) -> TaskOutcome:
    recorded = stores.idempotency.get_attempt(inp.execution_id, inp.task.task_id, inp.attempt)
    if recorded is not None:
        outcome = TaskOutcome.model_validate(recorded.outcome)
        _apply_outcome(stores, inp.execution_id, inp.task, inp.attempt, inp.on_task_failure, outcome, now)
        return outcome

    ex = stores.executions.get_execution(inp.execution_id)
    if ex is None:
        return TaskOutcome.failure(
            ErrorInfo(type="weft.NotFound", message="execution not found", non_retryable=True),
            attempt=inp.attempt,
        )
    latency_ms = _mark_running(stores, ex, inp, now)
    if latency_ms is not None:
        record(
            MetricName.TASK_SCHEDULING_LATENCY_MS,
            latency_ms,
            dimensions(tenant_id=inp.tenant_id, workflow=inp.workflow),
        )
        trace.get_current_span().set_attribute(str(SpanAttribute.SCHEDULING_LATENCY_MS), latency_ms)

    try:
        params = _resolve_params(stores, payloads, ex, inp.task)
    except WeftError as exc:
        outcome = TaskOutcome.failure(exc.to_info(), attempt=inp.attempt)
    else:
        ctx = HandlerContext(
            execution_id=inp.execution_id,
            task_id=inp.task.task_id,
            tenant_id=inp.tenant_id,
            attempt=inp.attempt,
            deadline=inp.deadline,
            logger=logging.LoggerAdapter(
                logging.getLogger("weft.handlers"),
                {"executionId": inp.execution_id, "taskId": inp.task.task_id, "attempt": inp.attempt},
            ),
            traceparent=current_traceparent() or inp.traceparent,
            ports=handler_ports or HandlerPorts.of(payload_store=payloads),
        )
        outcome = invoke_handler(inp.task.handler, params, ctx)
    if outcome.succeeded and outcome.output is not None:
        stored_output = offload(payloads, outcome.output, claim_check_threshold, prefix=inp.tenant_id)
        outcome = outcome.model_copy(update={"output": stored_output})
    return record_outcome(stores, inp.execution_id, inp.task, inp.attempt, inp.on_task_failure, outcome, now)


def record_timeout(stores: Stores, inp: AttemptTimeoutInput, *, now: Clock = utc_now) -> TaskOutcome:
    """The orchestrator's timer won the race: record the attempt as timed out, unless the
    handler's own outcome was recorded first (then that one stands and is returned)."""
    outcome = TaskOutcome.failure(
        ErrorInfo(
            type="weft.Timeout",
            message=f"attempt {inp.attempt} did not finish within {inp.task.timeout_seconds:g}s",
            details={"timedOutAt": inp.timed_out_at.isoformat()},
        ),
        attempt=inp.attempt,
    )
    return record_outcome(stores, inp.execution_id, inp.task, inp.attempt, inp.on_task_failure, outcome, now)


def record_outcome(
    stores: Stores,
    execution_id: str,
    task: TaskWork,
    attempt: int,
    on_failure: OnTaskFailure,
    outcome: TaskOutcome,
    now: Clock,
) -> TaskOutcome:
    stored, _created = stores.idempotency.record_attempt(
        AttemptRecord(
            execution_id=execution_id,
            task_id=task.task_id,
            attempt=attempt,
            outcome=outcome.to_json_dict(),
            recorded_at=now(),
        )
    )
    final = TaskOutcome.model_validate(stored.outcome)
    _apply_outcome(stores, execution_id, task, attempt, on_failure, final, now)
    return final


def disposition(task: TaskWork, attempt: int, on_failure: OnTaskFailure, outcome: TaskOutcome) -> TaskStatus:
    """The task state an attempt's outcome leads to: the orchestrator decides the same way."""
    if outcome.succeeded:
        return TaskStatus.SUCCEEDED
    error = outcome.error or ErrorInfo(type="weft.Failed", message="failed")
    if task.retry.should_retry(attempt - task.attempt_base + 1, error):
        return TaskStatus.RETRYING
    return TaskStatus.DEAD_LETTERED if on_failure is OnTaskFailure.DEAD_LETTER else TaskStatus.FAILED


def _mark_running(stores: Stores, ex: Execution, inp: RunTaskInput, now: Clock) -> float | None:
    """Record the attempt as running; returns its scheduling latency (None if already past it)."""
    at = now()
    for _ in range(MAX_CAS_ATTEMPTS):
        current = stores.executions.get_task_run(ex.id, inp.task.task_id)
        if current is not None and (
            current.attempts > inp.attempt or TASK_MACHINE.is_terminal(current.status)
        ):
            return None
        run = (current or TaskRun(execution_id=ex.id, task_id=inp.task.task_id)).model_copy(
            update={
                "status": TaskStatus.RUNNING,
                "attempts": inp.attempt,
                "started_at": at,
                "finished_at": None,
                "error": None,
            }
        )
        latency_ms = max(0.0, (at - inp.ready_at).total_seconds() * 1000.0)
        event = NewEvent(
            type=LogEvent.TASK_STARTED,
            at=at,
            data={
                "taskId": inp.task.task_id,
                "attempt": inp.attempt,
                "schedulingLatencyMs": round(latency_ms, 3),
            },
        )
        try:
            stores.executions.commit(ExecutionWrite(ex.id, task_runs=[run], events=[event]))
            return latency_ms
        except ConcurrencyError:
            continue
    raise ConcurrencyError(f"task {inp.task.task_id}: too many concurrent updates")


def _resolve_params(stores: Stores, payloads: PayloadStore, ex: Execution, task: TaskWork) -> dict[str, Any]:
    upstream = referenced_task_ids(task.params)
    outputs: dict[str, Any] = {}
    skipped: set[str] = set()
    if upstream:
        for run in stores.executions.get_task_runs(ex.id):
            if run.task_id not in upstream:
                continue
            if run.status is TaskStatus.SKIPPED and run.output is None:
                skipped.add(run.task_id)
            elif run.status in (TaskStatus.SUCCEEDED, TaskStatus.SKIPPED):
                # An operator's skip may supply the output the task would have produced.
                outputs[run.task_id] = resolve(payloads, run.output)
    needs_input = any(
        f.reference is not None and f.reference.source == "input" for f in find_references(task.params)
    )
    execution_input = resolve(payloads, ex.input) if needs_input else None
    return resolve_params(task.params, execution_input, outputs, skipped)


def _apply_outcome(
    stores: Stores,
    execution_id: str,
    task: TaskWork,
    attempt: int,
    on_failure: OnTaskFailure,
    outcome: TaskOutcome,
    now: Clock,
) -> None:
    """Bring the task run (and, for a dead letter, the execution) in line with a recorded outcome.

    Idempotent: a later attempt, or this attempt's settled state, already being stored means done.
    """
    target = disposition(task, attempt, on_failure, outcome)
    for _ in range(MAX_CAS_ATTEMPTS):
        ex = stores.executions.get_execution(execution_id)
        if ex is None or EXECUTION_MACHINE.is_terminal(ex.status):
            return
        current = stores.executions.get_task_run(execution_id, task.task_id) or TaskRun(
            execution_id=execution_id, task_id=task.task_id, attempts=attempt
        )
        if current.attempts > attempt or (
            current.attempts == attempt
            and current.status is not TaskStatus.RUNNING
            and current.status is not TaskStatus.PENDING
        ):
            return
        at = now()
        run = current.model_copy(
            update={
                "status": target,
                "attempts": attempt,
                "finished_at": at,
                "output": outcome.output if outcome.succeeded else None,
                "error": None if outcome.succeeded else outcome.error,
            }
        )
        data: dict[str, Any] = {"taskId": task.task_id, "attempt": attempt}
        if outcome.error is not None:
            data["error"] = outcome.error.to_json_dict()
        events: list[NewEvent] = []
        outbox: list[OutboxRecord] = []
        dead_letters: list[DeadLetter] = []
        execution: Execution | None = None
        if target is TaskStatus.SUCCEEDED:
            events.append(NewEvent(type=LogEvent.TASK_SUCCEEDED, at=at, data=data))
        elif target is TaskStatus.RETRYING:
            events.append(NewEvent(type=LogEvent.TASK_RETRYING, at=at, data=data))
        elif target is TaskStatus.FAILED:
            events.append(NewEvent(type=LogEvent.TASK_FAILED, at=at, data=data))
        else:
            dl = DeadLetter(
                id=dead_letter_id(execution_id, task.task_id, attempt),
                tenant_id=ex.tenant_id,
                execution_id=execution_id,
                workflow=ex.workflow,
                task_id=task.task_id,
                attempts=attempt,
                error=outcome.error or ErrorInfo(type="weft.Failed", message="failed"),
                created_at=at,
            )
            dead_letters.append(dl)
            if ex.status is ExecutionStatus.RUNNING:
                execution = ex.model_copy(update={"status": ExecutionStatus.WAITING})
            event, record = lifecycle(
                ex,
                LifecycleEvent.TASK_DEAD_LETTERED,
                at,
                {**data, "deadLetterId": dl.id},
                discriminator=f"{task.task_id}:{attempt}",
            )
            events.append(event)
            outbox.append(record)
        try:
            stores.executions.commit(
                ExecutionWrite(
                    execution_id,
                    execution=execution,
                    task_runs=[run],
                    events=events,
                    outbox=outbox,
                    dead_letters=dead_letters,
                )
            )
        except ConcurrencyError:
            continue
        if dead_letters:
            attrs = dimensions(tenant_id=ex.tenant_id, workflow=ex.workflow)
            count(MetricName.DEAD_LETTERS_OPENED, attrs)
            log.warning(
                "dead letter %s opened for task %s",
                dead_letters[0].id,
                task.task_id,
                extra=event_attributes(
                    TelemetryEvent.DEAD_LETTER_OPENED,
                    dimensions(
                        tenant_id=ex.tenant_id,
                        workflow=ex.workflow,
                        execution_id=execution_id,
                        task_id=task.task_id,
                        **{Dimension.ERROR_TYPE: dead_letters[0].error.type},
                    ),
                ),
            )
        return
    raise ConcurrencyError(f"task {task.task_id}: too many concurrent updates")


# ---------------------------------------------------------------------------- finalize


_FINAL_EVENT = {
    ExecutionStatus.SUCCEEDED: LifecycleEvent.EXECUTION_SUCCEEDED,
    ExecutionStatus.FAILED: LifecycleEvent.EXECUTION_FAILED,
    ExecutionStatus.CANCELLED: LifecycleEvent.EXECUTION_CANCELLED,
}


def finalize_execution(
    stores: Stores,
    payloads: PayloadStore,
    inp: FinalizeInput,
    *,
    now: Clock = utc_now,
    claim_check_threshold: int = 64 * 1024,
) -> None:
    """Write the terminal state, the output (the outputs of the DAG's leaves), and the final event."""
    ex = stores.executions.get_execution(inp.execution_id)
    if ex is None or EXECUTION_MACHINE.is_terminal(ex.status):
        return
    at = now()
    runs = {r.task_id: r for r in stores.executions.get_task_runs(ex.id)}
    settle: list[TaskRun] = []
    for task_id, status in inp.statuses.items():
        if status not in (TaskStatus.CANCELLED, TaskStatus.SKIPPED):
            continue
        current = runs.get(task_id)
        if current is not None and TASK_MACHINE.is_terminal(current.status):
            continue
        base = current or TaskRun(execution_id=ex.id, task_id=task_id)
        settle.append(base.model_copy(update={"status": status, "finished_at": at}))
    for chunk in _chunks(settle, MAX_TASK_RUNS_PER_WRITE):
        events = [
            NewEvent(
                type=LogEvent.TASK_CANCELLED if r.status is TaskStatus.CANCELLED else LogEvent.TASK_SKIPPED,
                at=at,
                data={"taskId": r.task_id},
            )
            for r in chunk
        ]
        stores.executions.commit(ExecutionWrite(ex.id, task_runs=chunk, events=events))

    output: Any = None
    if inp.status is ExecutionStatus.SUCCEEDED:
        version = stores.definitions.get_version(ex.tenant_id, ex.workflow, ex.version)
        if version is not None:
            definition = WorkflowDefinition.model_validate(version.definition)
            leaves = DagIndex.build(definition.dependencies()).leaves
            output = {
                t: resolve(payloads, runs[t].output)
                for t in leaves
                if t in runs and runs[t].status is TaskStatus.SUCCEEDED
            }
            output = offload(payloads, output, claim_check_threshold, prefix=ex.tenant_id)
    for _ in range(MAX_CAS_ATTEMPTS):
        current_ex = stores.executions.get_execution(inp.execution_id)
        if current_ex is None or EXECUTION_MACHINE.is_terminal(current_ex.status):
            return
        final = current_ex.model_copy(
            update={"status": inp.status, "finished_at": at, "output": output, "error": inp.error}
        )
        data: dict[str, Any] = {"status": str(inp.status)}
        if inp.error is not None:
            data["error"] = inp.error.to_json_dict()
        event, outbox = lifecycle(final, _FINAL_EVENT[inp.status], at, data)
        try:
            stores.executions.commit(ExecutionWrite(ex.id, execution=final, events=[event], outbox=[outbox]))
        except ConcurrencyError:
            continue
        attrs = dimensions(
            tenant_id=ex.tenant_id, workflow=ex.workflow, **{Dimension.STATUS: str(inp.status)}
        )
        count(MetricName.EXECUTIONS_COMPLETED, attrs)
        log.info(
            "execution %s finished %s",
            ex.id,
            inp.status,
            extra=event_attributes(
                TelemetryEvent.EXECUTION_FINISHED,
                {**attrs, str(Dimension.EXECUTION_ID): ex.id},
            ),
        )
        return
    raise ConcurrencyError(f"execution {inp.execution_id}: too many concurrent updates")


def _chunks(items: Sequence[TaskRun], size: int) -> list[list[TaskRun]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
