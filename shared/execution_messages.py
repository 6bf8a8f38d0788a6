"""The JSON contracts between the execution orchestrator, its sub-orchestrations and activities.

Everything the orchestrator sends or receives crosses the Durable boundary as plain JSON produced by
``to_json_dict()`` and read back with ``model_validate``; no SDK object is passed.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from shared.definition import OnTaskFailure
from shared.errors import ErrorInfo
from shared.model import WeftModel
from shared.retry import RetryPolicy
from shared.states import ExecutionStatus, TaskStatus


class CarryState(WeftModel):
    """What one orchestration generation hands to the next through ``continue_as_new``.

    Only statuses and counters: task outputs stay in the ExecutionStore, where ``run_task`` reads
    them to resolve references, so the carried state stays small whatever the tasks produce.
    """

    generation: int = Field(ge=1)
    statuses: dict[str, TaskStatus] = Field(default_factory=dict)
    attempts: dict[str, int] = Field(default_factory=dict)
    #: Attempt numbers at which an operator's retry restarted the retry budget.
    attempt_base: dict[str, int] = Field(default_factory=dict)
    params_override: dict[str, dict[str, Any]] = Field(default_factory=dict)
    failure: ErrorInfo | None = None


class ExecutionInput(WeftModel):
    execution_id: str
    tenant_id: str
    carry: CarryState | None = None


class StartExecutionInput(WeftModel):
    execution_id: str
    tenant_id: str
    generation: int = 1


class StartExecutionResult(WeftModel):
    """What ``start_execution`` read: the bound definition and the execution's stored progress."""

    status: ExecutionStatus
    workflow: str
    version: int
    definition: dict[str, Any]
    #: Tasks already past ``pending`` in the store (a rerun's reused successes, or progress
    #: recorded before a crash of an earlier generation).
    statuses: dict[str, TaskStatus] = Field(default_factory=dict)
    attempts: dict[str, int] = Field(default_factory=dict)
    #: The tenant's limit from the TenantStore (None: the gate's default from settings).
    max_running_tasks: int | None = None


class TaskWork(WeftModel):
    """Everything needed to run one task: built by the orchestrator, so activities never re-read it."""

    task_id: str
    handler: str
    params: dict[str, Any]
    timeout_seconds: float
    retry: RetryPolicy
    #: The attempt at which the current retry budget started (1, or the attempt after an
    #: operator's retry).
    attempt_base: int = 1


class RunTaskInput(WeftModel):
    execution_id: str
    tenant_id: str
    workflow: str
    task: TaskWork
    attempt: int = Field(ge=1)
    on_task_failure: OnTaskFailure
    #: Orchestration time at which the task's dependencies were satisfied (scheduling latency).
    ready_at: datetime
    deadline: datetime
    traceparent: str | None = None


class AttemptTimeoutInput(WeftModel):
    execution_id: str
    tenant_id: str
    workflow: str
    task: TaskWork
    attempt: int = Field(ge=1)
    on_task_failure: OnTaskFailure
    timed_out_at: datetime


class TaskBatchInput(WeftModel):
    """A sub-orchestration running independent, ready tasks of one execution (bounds history)."""

    execution_id: str
    tenant_id: str
    workflow: str
    on_task_failure: OnTaskFailure
    max_parallelism: int = Field(ge=1)
    tasks: list[TaskWork]
    attempts: dict[str, int] = Field(default_factory=dict)
    ready_at: datetime
    max_running_tasks: int | None = None


class BatchTaskResult(WeftModel):
    status: TaskStatus
    attempt: int
    error: ErrorInfo | None = None


class TaskBatchResult(WeftModel):
    results: dict[str, BatchTaskResult]
    cancelled: bool = False


class FinalizeInput(WeftModel):
    execution_id: str
    tenant_id: str
    status: ExecutionStatus
    error: ErrorInfo | None = None
    #: Final statuses the orchestrator decided (cancelled, skipped...) that no activity recorded.
    statuses: dict[str, TaskStatus] = Field(default_factory=dict)


class OperatorActionKind(StrEnum):
    RETRY = "retry"
    SKIP = "skip"
    CANCEL = "cancel"


class OperatorAction(WeftModel):
    """Raised into an execution as ``weft.operator`` once the API has resolved a dead letter."""

    task_id: str
    action: OperatorActionKind
    dead_letter_id: str | None = None
    #: retry: replacement params (None keeps the task's own).
    params: dict[str, Any] | None = None


def slot_owner(execution_id: str, task_id: str, attempt: int) -> str:
    return f"{execution_id}/{task_id}/{attempt}"


def batch_instance_id(execution_id: str, generation: int, batch: int) -> str:
    """Sub-orchestration ids share the execution id as a prefix, so a cancel can find them."""
    return f"{execution_id}::g{generation}b{batch}"
