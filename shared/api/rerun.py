"""Rerun: a new execution of the same workflow and input that reuses the old run's successes.

The new execution (new id, ``rerunOf`` = the old id, the given version or the old one, the old
input as stored) is written in one ExecutionWrite together with a ``succeeded`` TaskRun carrying
the recorded output of every task that succeeded in the old run and still exists in the new
version; the orchestrator treats those tasks as done. Admission, the ``accepted`` lifecycle event,
the start outbox record and the fast start are those of the submission path.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from shared.errors import NotFoundError
from shared.execution_messages import ExecutionInput
from shared.lifecycle import LifecycleEvent, lifecycle
from shared.ports import ExecutionWrite
from shared.records import Execution, OutboxKind, OutboxRecord, TaskRun, TriggerKind
from shared.states import ExecutionStatus, TaskStatus
from shared.submission import SubmissionDeps, _admit, _fast_start, start_record_id


def rerun_execution(deps: SubmissionDeps, old: Execution, *, version: int | None, now: datetime) -> Execution:
    stores = deps.stores
    tenant = stores.tenants.get_tenant(old.tenant_id)
    if tenant is None:
        raise NotFoundError(f"tenant {old.tenant_id!r} does not exist")
    number = version if version is not None else old.version
    wv = stores.definitions.get_version(old.tenant_id, old.workflow, number)
    if wv is None:
        raise NotFoundError(f"workflow {old.workflow!r} version {number} does not exist")
    _admit(deps, tenant, now)
    new_id = uuid.uuid4().hex
    task_ids = {t.get("id") for t in wv.definition.get("tasks", []) if isinstance(t, dict)}
    reused = [
        TaskRun(
            execution_id=new_id,
            task_id=r.task_id,
            status=TaskStatus.SUCCEEDED,
            attempts=r.attempts,
            started_at=r.started_at,
            finished_at=r.finished_at,
            output=r.output,
        )
        for r in stores.executions.get_task_runs(old.id)
        if r.status is TaskStatus.SUCCEEDED and r.task_id in task_ids
    ]
    execution = Execution(
        id=new_id,
        tenant_id=old.tenant_id,
        workflow=old.workflow,
        version=wv.version,
        status=ExecutionStatus.QUEUED,
        trigger=TriggerKind.HTTP,
        input=old.input,
        created_at=now,
        rerun_of=old.id,
    )
    event, accepted = lifecycle(
        execution,
        LifecycleEvent.EXECUTION_ACCEPTED,
        now,
        {
            "trigger": str(TriggerKind.HTTP),
            "rerunOf": old.id,
            "reusedTasks": sorted(r.task_id for r in reused),
        },
    )
    start = OutboxRecord(
        id=start_record_id(new_id),
        tenant_id=old.tenant_id,
        execution_id=new_id,
        kind=OutboxKind.START_EXECUTION,
        payload=ExecutionInput(execution_id=new_id, tenant_id=old.tenant_id).to_json_dict(),
        created_at=now,
    )
    result = stores.executions.commit(
        ExecutionWrite(
            new_id, execution=execution, task_runs=reused, events=[event], outbox=[accepted, start]
        )
    )
    stored = result.execution or execution
    _fast_start(deps.starter, stored)
    return stored
