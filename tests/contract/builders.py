"""Record builders shared by the contract tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.errors import ErrorInfo
from shared.records import DeadLetter, Execution, OutboxKind, OutboxRecord, TaskRun
from shared.states import ExecutionStatus

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def uid(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def execution(
    tenant: str = "acme",
    *,
    id: str | None = None,
    workflow: str = "wf",
    status: ExecutionStatus = ExecutionStatus.QUEUED,
    created: float = 0,
    **kw: Any,
) -> Execution:
    return Execution(
        id=id or uid("ex-"),
        tenant_id=tenant,
        workflow=workflow,
        version=1,
        status=status,
        created_at=at(created),
        **kw,
    )


def task_run(execution_id: str, task_id: str = "a", **kw: Any) -> TaskRun:
    return TaskRun(execution_id=execution_id, task_id=task_id, **kw)


def outbox(
    execution_id: str,
    tenant: str = "acme",
    *,
    destination: str = "tasks",
    kind: OutboxKind = OutboxKind.MESSAGE,
    payload: Any = None,
    id: str | None = None,
) -> OutboxRecord:
    return OutboxRecord(
        id=id or uid("ob-"),
        tenant_id=tenant,
        execution_id=execution_id,
        kind=kind,
        destination=destination,
        payload=payload if payload is not None else {"n": 1},
        created_at=T0,
    )


def dead_letter(
    execution_id: str, tenant: str = "acme", *, created: float = 0, task: str = "a"
) -> DeadLetter:
    return DeadLetter(
        id=uid("dl-"),
        tenant_id=tenant,
        execution_id=execution_id,
        workflow="wf",
        task_id=task,
        attempts=3,
        error=ErrorInfo(type="Boom", message="it broke"),
        created_at=at(created),
    )
