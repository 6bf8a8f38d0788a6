"""Request and response bodies of the API (camelCase JSON), the source of the OpenAPI schemas."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import ErrorInfo
from shared.model import WeftModel
from shared.records import DeadLetterResolution, DeadLetterStatus, TriggerKind
from shared.states import ExecutionStatus, TaskStatus

TENANT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
WORKFLOW_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
EVENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


# ------------------------------------------------------------------------------------ errors


class ProblemItem(WeftModel):
    path: str
    message: str


class ProblemDetails(BaseModel):
    """RFC 9457 problem details; extension members may be added."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    code: str | None = Field(default=None, description="The Weft error type, e.g. weft.NotFound")
    errors: list[ProblemItem] | None = Field(default=None, description="Every validation problem")
    incident: str | None = Field(default=None, description="Id of a logged unexpected error")


# ------------------------------------------------------------------------------------ platform


class Health(WeftModel):
    status: Literal["ok"] = "ok"


class LimitsIn(WeftModel):
    max_running_tasks: int | None = Field(default=None, ge=1, le=1_000_000)
    max_active_executions: int | None = Field(default=None, ge=1, le=10_000_000)
    submits_per_second: float | None = Field(default=None, gt=0, le=1_000_000, allow_inf_nan=False)


class CreateTenant(WeftModel):
    id: str = Field(min_length=1, max_length=64, pattern=TENANT_ID_PATTERN)
    display_name: str | None = Field(default=None, max_length=200)
    limits: LimitsIn | None = None


class Limits(WeftModel):
    max_running_tasks: int
    max_active_executions: int
    submits_per_second: float


class TenantOut(WeftModel):
    id: str
    display_name: str
    limits: Limits
    created_at: datetime


class CreateApiKey(WeftModel):
    name: str = Field(default="", max_length=200)


class ApiKeyOut(WeftModel):
    """An API key's record: never the key itself, which is shown once at creation."""

    key_id: str
    tenant_id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None = None


class ApiKeyCreated(WeftModel):
    key: str = Field(description="The key itself: shown once, only its hash is stored")
    key_id: str
    tenant_id: str
    name: str
    created_at: datetime


# ------------------------------------------------------------------------------------ workflows


class DraftSaved(WeftModel):
    tenant_id: str
    workflow: str
    updated_at: datetime


class Published(WeftModel):
    workflow: str
    version: int
    digest: str
    published_at: datetime


class WorkflowItem(WeftModel):
    workflow: str
    latest_version: int | None = None
    latest_digest: str | None = None
    has_draft: bool
    updated_at: datetime


class WorkflowList(WeftModel):
    items: list[WorkflowItem]
    continuation_token: str | None = None


class VersionOut(WeftModel):
    workflow: str
    version: int
    digest: str
    definition: dict[str, Any]
    published_at: datetime


# ------------------------------------------------------------------------------------ executions


class SubmitBody(WeftModel):
    input: Any = None
    version: int | None = Field(default=None, ge=1, le=2**31)


class RerunBody(WeftModel):
    version: int | None = Field(default=None, ge=1, le=2**31)


class Links(WeftModel):
    self: str


class ExecutionAccepted(WeftModel):
    id: str
    status: ExecutionStatus
    workflow: str
    version: int
    links: Links


class TaskOut(WeftModel):
    id: str
    status: TaskStatus
    attempts: int
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: ErrorInfo | None = None


class ExecutionOut(WeftModel):
    id: str
    workflow: str
    version: int
    status: ExecutionStatus
    trigger: TriggerKind
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    input: Any = Field(default=None, description="Inline JSON (claim-checked inputs are resolved)")
    output: Any = Field(default=None, description="{leafTaskId: output} of the succeeded leaves")
    error: ErrorInfo | None = None
    rerun_of: str | None = None
    tasks: list[TaskOut]


class ExecutionItem(WeftModel):
    id: str
    workflow: str
    version: int
    status: ExecutionStatus
    trigger: TriggerKind
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: ErrorInfo | None = None
    rerun_of: str | None = None


class ExecutionList(WeftModel):
    items: list[ExecutionItem]
    continuation_token: str | None = None


class CancelAccepted(WeftModel):
    id: str
    status: ExecutionStatus


class EventAccepted(WeftModel):
    execution_id: str
    name: str


# ------------------------------------------------------------------------------------ dead letters


class DeadLetterOut(WeftModel):
    id: str
    execution_id: str
    workflow: str
    task_id: str
    attempts: int
    error: ErrorInfo
    status: DeadLetterStatus
    created_at: datetime
    resolved_at: datetime | None = None
    resolution: DeadLetterResolution | None = None


class DeadLetterList(WeftModel):
    items: list[DeadLetterOut]
    continuation_token: str | None = None


class RetryBody(WeftModel):
    params: dict[str, Any] | None = Field(
        default=None, description="Replacement params of the task for this retry (default: its own)"
    )


class SkipBody(WeftModel):
    output: Any = Field(default=None, description="The output recorded for the skipped task")


class ActionAccepted(WeftModel):
    id: str
    execution_id: str
    task_id: str
    action: DeadLetterResolution
