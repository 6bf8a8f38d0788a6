"""The workflow definition: the JSON document a user publishes, as pydantic v2 models.

The models enforce what one field can know on its own (types, ranges, the id pattern). Everything
that needs the whole document (unique ids, known dependencies, cycles, ancestry of param
references, size limits, handler names) is checked by :func:`shared.validation.validate_definition`,
which is the publish-time gate and reports every problem at once. ``docs/definition-format.md``
describes the format for users.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import Field

from shared.model import WeftModel
from shared.retry import RetryPolicy

TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_TASKS = 500
MAX_PARAMS_BYTES = 64 * 1024
# Deeper nesting is never a real config and would exhaust recursion when params are walked.
MAX_PARAMS_DEPTH = 64
DEFAULT_TIMEOUT_SECONDS = 300.0
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600.0
DEFAULT_MAX_PARALLELISM = 10
MAX_PARALLELISM_LIMIT = 1000


class OnTaskFailure(StrEnum):
    """What happens when a task has failed for good (retries exhausted or a non-retryable error).

    ``failExecution``: the task becomes ``failed``, its descendants ``cancelled``; no new task starts,
    tasks already running finish, every other pending task is cancelled and the execution fails.

    ``deadLetter``: the task becomes ``deadLettered`` and waits for an operator; its descendants
    wait with it; independent branches keep running. The operator retries it, skips it (a skip
    satisfies its dependants) or cancels it, which cancels the execution.
    """

    FAIL_EXECUTION = "failExecution"
    DEAD_LETTER = "deadLetter"


class CatchUp(StrEnum):
    """What the scheduler does with fire times it missed (e.g. while it was down)."""

    SKIP = "skip"  # forget them; fire at the next regular time
    RUN_ONCE = "runOnce"  # start one execution for all the missed times together


class Schedule(WeftModel):
    # Six NCRONTAB fields: second minute hour day-of-month month day-of-week.
    cron: str = Field(min_length=1, max_length=200)
    # An IANA zone name such as "Europe/Paris"; the cron fields are read in this zone.
    timezone: str = "UTC"
    catch_up: CatchUp = CatchUp.SKIP


class TaskDefaults(WeftModel):
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    timeout_seconds: float = Field(
        default=DEFAULT_TIMEOUT_SECONDS, gt=0, le=MAX_TIMEOUT_SECONDS, allow_inf_nan=False
    )


class TaskSpec(WeftModel):
    id: str = Field(pattern=TASK_ID_PATTERN)
    # Name of a registered handler (see shared/handlers); checked against the registry at publish.
    handler: str = Field(min_length=1, max_length=200)
    # Free JSON; string values may hold ${{ ... }} references (shared/params.py).
    params: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    # Replaces ``defaults.retry`` as a whole when given; it is not merged field by field.
    retry: RetryPolicy | None = None
    # Per attempt, not per task: a retry gets the full timeout again.
    timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_SECONDS, allow_inf_nan=False)


class WorkflowDefinition(WeftModel):
    tasks: list[TaskSpec] = Field(min_length=1)
    defaults: TaskDefaults = Field(default_factory=TaskDefaults)
    max_parallelism: int = Field(default=DEFAULT_MAX_PARALLELISM, ge=1, le=MAX_PARALLELISM_LIMIT)
    on_task_failure: OnTaskFailure = OnTaskFailure.FAIL_EXECUTION
    schedule: Schedule | None = None
    description: str = Field(default="", max_length=4000)

    @cached_property
    def tasks_by_id(self) -> dict[str, TaskSpec]:
        # First occurrence wins, as in the validator (which reports the duplicates).
        by_id: dict[str, TaskSpec] = {}
        for t in self.tasks:
            by_id.setdefault(t.id, t)
        return by_id

    def task(self, task_id: str) -> TaskSpec:
        """Raises KeyError for an unknown id."""
        return self.tasks_by_id[task_id]

    def task_ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    def dependencies(self) -> dict[str, list[str]]:
        """``task id -> the ids it depends on``, in definition order."""
        return {t.id: list(t.depends_on) for t in self.tasks}

    def effective_retry(self, task: TaskSpec) -> RetryPolicy:
        return task.retry if task.retry is not None else self.defaults.retry

    def effective_timeout_seconds(self, task: TaskSpec) -> float:
        return task.timeout_seconds if task.timeout_seconds is not None else self.defaults.timeout_seconds
