"""Operator recovery of dead-lettered tasks: the store side of retry, retry with params, skip, cancel.

The API calls :func:`resolve_dead_letter` and, once it has committed, raises the returned
:class:`~shared.execution_messages.OperatorAction` into the execution's orchestration as the
``weft.operator`` event. Resolving first makes the action idempotent and race-free: of two
operators acting on the same dead letter, one commits and the other gets ``ConflictError`` (409)
before anything reaches the orchestration.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from shared.claimcheck import offload
from shared.errors import ConcurrencyError, ConflictError, NotFoundError
from shared.execution_messages import OperatorAction, OperatorActionKind
from shared.lifecycle import LogEvent
from shared.ports import ExecutionWrite, PayloadStore, Stores
from shared.records import DeadLetterResolution, DeadLetterStatus, Execution, NewEvent, TaskRun
from shared.states import EXECUTION_MACHINE, ExecutionStatus, TaskStatus
from shared.telemetry import Dimension, SpanName, TelemetryEvent, dimensions, event_attributes, span

MAX_CAS_ATTEMPTS = 20
log = logging.getLogger("weft.operator")

_RESOLUTION = {
    OperatorActionKind.RETRY: DeadLetterResolution.RETRY,
    OperatorActionKind.SKIP: DeadLetterResolution.SKIP,
    OperatorActionKind.CANCEL: DeadLetterResolution.CANCEL,
}


def resolve_dead_letter(
    stores: Stores,
    payloads: PayloadStore,
    tenant_id: str,
    dead_letter_id: str,
    action: OperatorActionKind,
    *,
    now: Callable[[], datetime],
    params: dict[str, Any] | None = None,
    output: Any = None,
    resolved_by: str | None = None,
    claim_check_threshold: int = 64 * 1024,
) -> OperatorAction:
    """Resolve an open dead letter; ``NotFoundError`` if unknown, ``ConflictError`` if resolved
    already or if its execution has finished."""
    attrs = dimensions(
        tenant_id=tenant_id, **{Dimension.DEAD_LETTER_ID: dead_letter_id, Dimension.ACTION: str(action)}
    )
    with span(SpanName.DEAD_LETTER_RESOLVE, attrs):
        for _ in range(MAX_CAS_ATTEMPTS):
            dl = stores.executions.get_dead_letter(tenant_id, dead_letter_id)
            if dl is None:
                raise NotFoundError(f"dead letter {dead_letter_id} not found")
            if dl.status is DeadLetterStatus.RESOLVED:
                raise ConflictError(
                    f"dead letter {dead_letter_id} is already resolved ({dl.resolution})",
                    details={"resolution": str(dl.resolution)},
                )
            ex = stores.executions.get_execution(dl.execution_id)
            if ex is None or EXECUTION_MACHINE.is_terminal(ex.status):
                raise ConflictError(f"execution {dl.execution_id} has already finished")
            at = now()
            resolved = dl.model_copy(
                update={
                    "status": DeadLetterStatus.RESOLVED,
                    "resolution": _RESOLUTION[action],
                    "resolved_at": at,
                    "resolved_by": resolved_by,
                }
            )
            task_runs: list[TaskRun] = []
            data: dict[str, Any] = {"taskId": dl.task_id, "deadLetterId": dl.id, "action": str(action)}
            if action is OperatorActionKind.SKIP:
                run = stores.executions.get_task_run(ex.id, dl.task_id) or TaskRun(
                    execution_id=ex.id, task_id=dl.task_id
                )
                stored = offload(payloads, output, claim_check_threshold, prefix=tenant_id)
                task_runs.append(
                    run.model_copy(update={"status": TaskStatus.SKIPPED, "output": stored, "finished_at": at})
                )
                event_type = LogEvent.TASK_SKIPPED
            elif action is OperatorActionKind.RETRY:
                event_type = LogEvent.TASK_RETRIED_BY_OPERATOR
                if params is not None:
                    data["paramsReplaced"] = True
            else:
                event_type = LogEvent.TASK_CANCELLED
            execution: Execution | None = None
            if (
                action is not OperatorActionKind.CANCEL
                and ex.status is ExecutionStatus.WAITING
                and not _other_dead_lettered_tasks(stores, ex.id, dl.task_id)
            ):
                execution = ex.model_copy(update={"status": ExecutionStatus.RUNNING})
            try:
                stores.executions.commit(
                    ExecutionWrite(
                        ex.id,
                        execution=execution,
                        task_runs=task_runs,
                        events=[NewEvent(type=event_type, at=at, data=data)],
                        dead_letters=[resolved],
                    )
                )
            except ConcurrencyError:
                continue
            log.info(
                "dead letter %s resolved: %s",
                dead_letter_id,
                action,
                extra=event_attributes(
                    TelemetryEvent.DEAD_LETTER_RESOLVED, {**attrs, Dimension.TASK_ID: dl.task_id}
                ),
            )
            return OperatorAction(task_id=dl.task_id, action=action, dead_letter_id=dl.id, params=params)
        raise ConcurrencyError(f"dead letter {dead_letter_id}: too many concurrent updates")


def _other_dead_lettered_tasks(stores: Stores, execution_id: str, task_id: str) -> bool:
    """Whether another task of the execution waits on an operator (read in the execution's own
    partition, so the cost follows the execution's size, not the tenant's dead-letter backlog)."""
    return any(
        r.status is TaskStatus.DEAD_LETTERED and r.task_id != task_id
        for r in stores.executions.get_task_runs(execution_id)
    )
