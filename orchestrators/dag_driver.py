"""The deterministic engine shared by the execution orchestrator and its task-batch sub-orchestrations.

One generator multiplexes every in-flight piece of work of an execution (gate requests, task
attempts, their timeout timers, retry backoffs, sub-orchestrations, operator and cancel events)
through ``context.task_any`` and reacts to whichever finishes first, so a task starts as soon as its
own dependencies are done rather than when a whole "wave" is.

Two facts about the out-of-process protocol shape the code:

* The Durable extension replays the action list top-level action by top-level action and awaits
  each in turn (``OutOfProcOrchestrationShim.ProcessAsyncActionsV2``). A ``task_any`` whose new
  children are all still running would therefore hold back every action yielded after it, even
  though the Python SDK considers them scheduled. When a yield adds new work while older work is
  still outstanding, the driver adds an immediately-due timer to that yield, so its top-level
  action completes within one episode and nothing queues behind it.
* The SDK replays the whole history on every episode, so everything done per loop iteration is
  paid again on every later episode. The driver keeps per-iteration work proportional to what
  changed, computes custom status only when not replaying, and bounds history with task-batch
  sub-orchestrations for wide ready sets and ``continue_as_new`` at quiescent points.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections import Counter, deque
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum, auto
from typing import Any

import azure.durable_functions as df
from azure.durable_functions.models.Task import TaskState

from shared.dag import DagIndex, DagRun
from shared.definition import OnTaskFailure, WorkflowDefinition
from shared.errors import ErrorInfo, TaskOutcome
from shared.execution_messages import (
    AttemptTimeoutInput,
    BatchTaskResult,
    OperatorAction,
    OperatorActionKind,
    RunTaskInput,
    TaskBatchInput,
    TaskBatchResult,
    TaskWork,
    batch_instance_id,
    slot_owner,
)
from shared.gate import SlotRequest
from shared.gate_protocol import (
    GATE_ACQUIRE,
    GATE_RELEASE,
    acquire_input,
    gate_backoff_seconds,
    parse_acquire_result,
    release_input,
)
from shared.names import ActivityName, EntityName, EventName, OrchestratorName
from shared.retry import retry_seed
from shared.states import TASK_MACHINE, TaskStatus

log = logging.getLogger("weft.orchestrator")

#: A ready set larger than this is run in task-batch sub-orchestrations of ``BATCH_SIZE`` tasks.
BATCH_THRESHOLD = 24
BATCH_SIZE = 16
#: Extra lease time on a gate slot beyond the attempt's timeout, so a slot outlives a slow release.
GATE_LEASE_MARGIN_SECONDS = 60.0
#: After this many loop iterations in one generation, continue as new at the next quiescent point.
ITERATIONS_PER_GENERATION = 200
#: Far enough to never fire in practice, short enough to stay one timer (the SDK splits > 6 days).
WATCHDOG = timedelta(days=5)

Durable = Any  # an SDK task object; typed loosely because the SDK ships no type information


_PARSED_LIMIT = 256
_parsed: dict[str, tuple[WorkflowDefinition, DagIndex]] = {}
_parsed_lock = threading.Lock()


def parse_definition(raw: Any) -> tuple[WorkflowDefinition, DagIndex]:
    """The bound definition and its graph index, memoised by content.

    Every episode replays the orchestration from the start and would validate the definition and
    index its graph again; both are pure functions of the definition's JSON, so equal JSON gets the
    very same (immutable) objects back. Determinism is unaffected.
    """
    key = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    hit = _parsed.get(key)
    if hit is not None:
        return hit
    definition = WorkflowDefinition.model_validate(raw)
    parsed = (definition, DagIndex.build(definition.dependencies()))
    with _parsed_lock:
        if len(_parsed) >= _PARSED_LIMIT:
            _parsed.clear()
        _parsed[key] = parsed
    return parsed


class Kind(Enum):
    GATE = auto()
    GATE_BACKOFF = auto()
    ATTEMPT = auto()
    TIMEOUT = auto()
    TIMEOUT_RECORD = auto()
    BACKOFF = auto()
    BATCH = auto()
    CANCEL = auto()
    OPERATOR = auto()


@dataclass
class Waiting:
    kind: Kind
    tasks: tuple[str, ...] = ()
    attempt: int = 0
    partner: Durable | None = None


@dataclass
class Outcome:
    """Final word on one task attempt, whichever way it arrived."""

    task_id: str
    attempt: int
    outcome: TaskOutcome


@dataclass
class DriverState:
    statuses: dict[str, TaskStatus] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    attempt_base: dict[str, int] = field(default_factory=dict)
    params_override: dict[str, dict[str, Any]] = field(default_factory=dict)
    failure: ErrorInfo | None = None


class DagDriver:
    """Runs the tasks of one execution (or one batch of it) to a standstill.

    ``run()`` returns when every task is terminal, when the execution is cancelled, when a failure
    under ``failExecution`` has drained the running tasks, or (``allow_continue``) when the
    generation has grown long and nothing is in flight, so the caller can ``continue_as_new``.
    """

    def __init__(
        self,
        context: df.DurableOrchestrationContext,
        *,
        execution_id: str,
        tenant_id: str,
        workflow: str,
        definition: WorkflowDefinition,
        state: DriverState,
        generation: int = 1,
        only: Iterable[str] | None = None,
        is_batch: bool = False,
        allow_continue: bool = False,
        batch_ready_at: datetime | None = None,
        max_running_tasks: int | None = None,
        index: DagIndex | None = None,
    ) -> None:
        self.ctx = context
        self.execution_id = execution_id
        self.tenant_id = tenant_id
        self.workflow = workflow
        self.definition = definition
        self.specs = {t.id: t for t in definition.tasks}
        self.generation = generation
        self.is_batch = is_batch
        self.allow_continue = allow_continue
        self.state = state
        self.max_running_tasks = max_running_tasks
        self.gate_entity = df.EntityId(EntityName.TENANT_GATE, tenant_id)

        if only is None:
            # ``index``: the caller's memoised index of this very definition (parse_definition).
            index = index if index is not None else DagIndex.build(definition.dependencies())
        else:
            # A batch runs ready, mutually independent tasks: no edges among them.
            index = DagIndex.build({t: [] for t in only})
        self.run_state = DagRun(index, {t: s for t, s in state.statuses.items() if t in index.dependencies})
        self.ready_at: dict[str, datetime] = {}
        now = context.current_utc_datetime
        for t in self.run_state.ready():
            self.ready_at[t] = batch_ready_at or now

        self.pending: dict[Durable, Waiting] = {}
        self.fresh: list[Durable] = []
        #: Every timer created and possibly not yet fired (cancelled before the final actions).
        self.timers: list[Durable] = []
        self.want_slot: deque[str] = deque()
        self.in_flight = 0
        self.held_slots: set[str] = set()
        #: Every owner asked for and not yet released: granted or still queued at the gate.
        self.requested: set[str] = set()
        self.attempt_task: dict[str, Durable] = {}
        self.batches = 0
        self.iterations = 0
        self.cancelled = False
        self.halted = False
        self.operator_wait: Durable | None = None
        self.cancel_wait: Durable | None = None
        self.errors: dict[str, ErrorInfo] = {}

    # ------------------------------------------------------------------ the loop

    def run(self) -> Generator[Any, Any, None]:
        self.cancel_wait = self._track(
            self.ctx.wait_for_external_event(EventName.CANCEL), Waiting(Kind.CANCEL)
        )
        self._arm_operator_wait()  # dead letters carried over from an earlier generation
        while True:
            # Checked before new work starts: the only moment nothing is in flight.
            if self._should_continue():
                break
            if not self.cancelled:
                self._pump()
            if self._finished():
                break
            self.iterations += 1
            self._publish_status()
            waits = list(self.pending)
            if self.fresh:
                now = self.ctx.current_utc_datetime
                if self._older_outstanding():
                    # Due at once: this yield's top-level action completes within an episode.
                    waits.append(self._timer(now))
                elif self._needs_watchdog():
                    # Cancelled on the way out, so that long waits never hold back the last actions.
                    waits.append(self._timer(now + WATCHDOG))
            self.fresh = []
            winner = yield self.ctx.task_any(waits)
            self._dispatch(winner)
        self.unblock()
        self._release_all_slots()
        self._publish_status()

    def _track(self, task: Durable, waiting: Waiting) -> Durable:
        self.pending[task] = waiting
        self.fresh.append(task)
        return task

    def _timer(self, fire_at: datetime) -> Durable:
        timer = self.ctx.create_timer(fire_at)
        self.timers.append(timer)
        return timer

    def _needs_watchdog(self) -> bool:
        kinds = {self.pending[t].kind for t in self.fresh if t in self.pending}
        has_timer = kinds & {Kind.TIMEOUT, Kind.BACKOFF, Kind.GATE_BACKOFF}
        return not has_timer and bool(kinds & {Kind.BATCH, Kind.OPERATOR, Kind.CANCEL})

    def unblock(self) -> None:
        """Cancel every timer still outstanding, so every top-level action before the final ones
        (finalize, release, continue-as-new, completion) is complete when the extension replays it."""
        for timer in self.timers:
            if not timer.is_completed:
                with contextlib.suppress(ValueError):
                    timer.cancel()
        self.timers = []

    def _older_outstanding(self) -> bool:
        fresh = set(map(id, self.fresh))
        for task, waiting in self.pending.items():
            if id(task) in fresh or waiting.kind is Kind.CANCEL:
                continue
            return True
        return False

    def _finished(self) -> bool:
        if self.cancelled:
            return True
        if self.halted:
            return self.in_flight == 0
        if self.is_batch:
            # A batch hands dead letters back to the parent, which waits for the operator.
            settled = TASK_MACHINE.terminal | {TaskStatus.DEAD_LETTERED}
            return all(s in settled for s in self.run_state.statuses.values())
        return self.run_state.is_complete()

    def _should_continue(self) -> bool:
        if not self.allow_continue or self.iterations < ITERATIONS_PER_GENERATION:
            return False
        return all(w.kind in (Kind.CANCEL, Kind.OPERATOR) for w in self.pending.values())

    # ------------------------------------------------------------------ starting work

    def _capacity(self) -> int:
        return max(0, self.definition.max_parallelism - self.in_flight)

    def _pump(self) -> None:
        if self.halted:
            return
        ready = self.run_state.ready()
        budget = self._capacity()
        if budget <= 0 or not ready:
            return
        start = ready[:budget]
        for t in start:
            self.run_state.start(t)
            self.ready_at.setdefault(t, self.ctx.current_utc_datetime)
        self.in_flight += len(start)
        if not self.is_batch and len(start) > BATCH_THRESHOLD:
            for i in range(0, len(start), BATCH_SIZE):
                self._start_batch(start[i : i + BATCH_SIZE])
            return
        for t in start:
            self.state.attempts[t] = self.state.attempts.get(t, 0) + 1
        self._request_slots(start)

    def _request_slots(self, tasks: list[str], *, poll: int = 1) -> None:
        if not tasks:
            return
        for t in tasks:
            self.requested.add(slot_owner(self.execution_id, t, self.state.attempts[t]))
        requests = [
            SlotRequest(
                owner=slot_owner(self.execution_id, t, self.state.attempts[t]),
                lease_seconds=self._timeout(t) + GATE_LEASE_MARGIN_SECONDS,
            )
            for t in tasks
        ]
        call = self.ctx.call_entity(
            self.gate_entity,
            GATE_ACQUIRE,
            acquire_input(requests, self.ctx.current_utc_datetime, max_running_tasks=self.max_running_tasks),
        )
        self._track(call, Waiting(Kind.GATE, tuple(tasks), attempt=poll))

    def _start_attempt(self, task_id: str) -> None:
        attempt = self.state.attempts[task_id]
        now = self.ctx.current_utc_datetime
        timeout = self._timeout(task_id)
        deadline = now + timedelta(seconds=timeout)
        work = self._work(task_id)
        payload = RunTaskInput(
            execution_id=self.execution_id,
            tenant_id=self.tenant_id,
            workflow=self.workflow,
            task=work,
            attempt=attempt,
            on_task_failure=self.definition.on_task_failure,
            ready_at=self.ready_at.get(task_id, now),
            deadline=deadline,
        ).to_json_dict()
        call = self.ctx.call_activity(ActivityName.RUN_TASK, payload)
        timer = self._timer(deadline)
        self._track(call, Waiting(Kind.ATTEMPT, (task_id,), attempt, partner=timer))
        self._track(timer, Waiting(Kind.TIMEOUT, (task_id,), attempt, partner=call))

    def _start_batch(self, tasks: list[str]) -> None:
        self.batches += 1
        payload = TaskBatchInput(
            execution_id=self.execution_id,
            tenant_id=self.tenant_id,
            workflow=self.workflow,
            on_task_failure=self.definition.on_task_failure,
            max_parallelism=len(tasks),
            tasks=[self._work(t) for t in tasks],
            attempts={t: self.state.attempts[t] for t in tasks if t in self.state.attempts},
            ready_at=self.ctx.current_utc_datetime,
            max_running_tasks=self.max_running_tasks,
        ).to_json_dict()
        instance = batch_instance_id(self.execution_id, self.generation, self.batches)
        call = self.ctx.call_sub_orchestrator(OrchestratorName.TASK_BATCH, payload, instance)
        self._track(call, Waiting(Kind.BATCH, tuple(tasks)))

    def _work(self, task_id: str) -> TaskWork:
        spec = self.specs[task_id]
        return TaskWork(
            task_id=task_id,
            handler=spec.handler,
            params=self.state.params_override.get(task_id, spec.params),
            timeout_seconds=self._timeout(task_id),
            retry=self.definition.effective_retry(spec),
            attempt_base=self.state.attempt_base.get(task_id, 1),
        )

    def _timeout(self, task_id: str) -> float:
        return self.definition.effective_timeout_seconds(self.specs[task_id])

    # ------------------------------------------------------------------ reacting

    def _dispatch(self, winner: Durable) -> None:
        waiting = self.pending.pop(winner, None)
        if waiting is None:  # a sentinel or watchdog timer: it only kept the action list moving
            return
        kind = waiting.kind
        if kind is Kind.CANCEL:
            self.cancelled = True
            self._cancel_everything()
            return
        if kind is Kind.OPERATOR:
            self.operator_wait = None
            self._on_operator(OperatorAction.model_validate(_event_payload(winner)))
            self._arm_operator_wait()
            return
        if kind is Kind.GATE:
            self._on_gate(waiting.tasks, _result(winner), poll=waiting.attempt)
            return
        if kind is Kind.GATE_BACKOFF:
            live = [t for t in waiting.tasks if self.run_state.status(t) is TaskStatus.SCHEDULED]
            self._request_slots(live, poll=waiting.attempt + 1)
            return
        if kind is Kind.BATCH:
            self._on_batch(waiting.tasks, winner)
            return
        if kind is Kind.BACKOFF:
            (task_id,) = waiting.tasks
            if self.run_state.status(task_id) is TaskStatus.RETRYING:
                self.run_state.set_status(task_id, TaskStatus.SCHEDULED)
                self.state.attempts[task_id] = waiting.attempt + 1
                self._request_slots([task_id])
            return
        (task_id,) = waiting.tasks
        if kind is Kind.ATTEMPT:
            timer = waiting.partner
            if timer is not None and timer in self.pending:
                del self.pending[timer]
                with contextlib.suppress(ValueError):  # already fired: nothing to cancel
                    timer.cancel()
            self._release_slot(task_id, waiting.attempt)
            outcome = _outcome_of(winner, waiting.attempt)
            self._on_outcome(Outcome(task_id, waiting.attempt, outcome))
            return
        if kind is Kind.TIMEOUT:
            call = waiting.partner
            if call is not None:
                self.pending.pop(call, None)
            self._release_slot(task_id, waiting.attempt)
            record = AttemptTimeoutInput(
                execution_id=self.execution_id,
                tenant_id=self.tenant_id,
                workflow=self.workflow,
                task=self._work(task_id),
                attempt=waiting.attempt,
                on_task_failure=self.definition.on_task_failure,
                timed_out_at=self.ctx.current_utc_datetime,
            ).to_json_dict()
            self._track(
                self.ctx.call_activity(ActivityName.RECORD_TIMEOUT, record),
                Waiting(Kind.TIMEOUT_RECORD, (task_id,), waiting.attempt),
            )
            return
        if kind is Kind.TIMEOUT_RECORD:
            self._on_outcome(Outcome(task_id, waiting.attempt, _outcome_of(winner, waiting.attempt)))

    def _on_gate(self, tasks: tuple[str, ...], result: Any, *, poll: int) -> None:
        granted, retry_after = parse_acquire_result(result)
        denied: list[str] = []
        for t in tasks:
            if self.run_state.status(t) is not TaskStatus.SCHEDULED:
                # Cancelled while it waited: hand the slot straight back.
                owner = slot_owner(self.execution_id, t, self.state.attempts.get(t, 1))
                if owner in granted:
                    self.requested.discard(owner)
                    self._signal_release([owner])
                continue
            owner = slot_owner(self.execution_id, t, self.state.attempts[t])
            if owner in granted:
                self.held_slots.add(owner)
                self._start_attempt(t)
            else:
                denied.append(t)
        if denied:
            seed = f"{self.execution_id}/gate/{denied[0]}/{poll}"
            delay = max(retry_after, gate_backoff_seconds(min(poll, 20), seed))
            timer = self._timer(self.ctx.current_utc_datetime + timedelta(seconds=delay))
            self._track(timer, Waiting(Kind.GATE_BACKOFF, tuple(denied), attempt=poll))

    def _on_batch(self, tasks: tuple[str, ...], winner: Durable) -> None:
        self.in_flight -= len(tasks)
        if _failed(winner):
            error = ErrorInfo(type="weft.BatchFailed", message=str(_error_text(winner)))
            for t in tasks:
                if self.run_state.status(t) is TaskStatus.SCHEDULED:
                    self._on_final_failure(t, self.state.attempts.get(t, 1), error, counted=True)
            return
        result = TaskBatchResult.model_validate(_result(winner))
        for t in tasks:
            r = result.results.get(t)
            if r is None:
                continue
            self.state.attempts[t] = r.attempt
            status = self.run_state.status(t)
            if status is not TaskStatus.SCHEDULED:
                continue
            if r.status is TaskStatus.SUCCEEDED:
                self.run_state.set_status(t, TaskStatus.SUCCEEDED)
            elif r.status in (TaskStatus.DEAD_LETTERED, TaskStatus.FAILED):
                error = r.error or ErrorInfo(type="weft.Failed", message="the task failed")
                self._on_final_failure(t, r.attempt, error, counted=True)
            else:
                self.run_state.set_status(t, TaskStatus.CANCELLED)

    def _on_outcome(self, o: Outcome) -> None:
        if self.run_state.status(o.task_id) is not TaskStatus.SCHEDULED:
            return
        if o.outcome.succeeded:
            self.in_flight -= 1
            self.run_state.set_status(o.task_id, TaskStatus.SUCCEEDED)
            return
        error = o.outcome.error or ErrorInfo(type="weft.Failed", message="the task failed")
        work = self._work(o.task_id)
        budget_attempt = o.attempt - work.attempt_base + 1
        if work.retry.should_retry(budget_attempt, error) and not self.halted:
            # A task backing off still counts against maxParallelism: it has not finished.
            self.run_state.set_status(o.task_id, TaskStatus.RETRYING)
            delay = work.retry.next_delay(budget_attempt, retry_seed(self.execution_id, o.task_id, o.attempt))
            timer = self._timer(self.ctx.current_utc_datetime + timedelta(seconds=delay))
            self._track(timer, Waiting(Kind.BACKOFF, (o.task_id,), o.attempt))
            return
        self._on_final_failure(o.task_id, o.attempt, error)

    def _on_final_failure(
        self, task_id: str, attempt: int, error: ErrorInfo, *, counted: bool = False
    ) -> None:
        # ``counted``: a batch result, whose tasks already left ``in_flight`` together.
        if not counted:
            self.in_flight -= 1
        self.errors[task_id] = error
        if self.definition.on_task_failure is OnTaskFailure.DEAD_LETTER:
            # run_task has already stored the dead letter with the task's final state.
            self.run_state.set_status(task_id, TaskStatus.DEAD_LETTERED)
            self._arm_operator_wait()
            return
        self.run_state.set_status(task_id, TaskStatus.FAILED)
        self.state.failure = self.state.failure or error.model_copy(
            update={"details": {**error.details, "taskId": task_id, "attempt": attempt}}
        )
        self._halt()

    def _halt(self) -> None:
        """failExecution: nothing new starts; tasks not yet running are cancelled; running ones finish."""
        self.halted = True
        self.run_state.cancel_pending()
        for task, waiting in list(self.pending.items()):
            if waiting.kind in (Kind.GATE, Kind.GATE_BACKOFF, Kind.BACKOFF):
                if waiting.kind is not Kind.GATE:
                    del self.pending[task]
                for t in waiting.tasks:
                    if self.run_state.status(t) in (TaskStatus.SCHEDULED, TaskStatus.RETRYING):
                        self.run_state.set_status(t, TaskStatus.CANCELLED)
                        self.in_flight -= 1

    def _on_operator(self, action: OperatorAction) -> None:
        t = action.task_id
        if t not in self.specs or self.run_state.status(t) is not TaskStatus.DEAD_LETTERED:
            return
        if action.action is OperatorActionKind.CANCEL:
            self.cancelled = True
            self._cancel_everything()
            return
        if action.action is OperatorActionKind.SKIP:
            self.run_state.set_status(t, TaskStatus.SKIPPED)
            return
        if action.params is not None:
            self.state.params_override[t] = action.params
        self.run_state.set_status(t, TaskStatus.SCHEDULED)
        self.state.attempts[t] = self.state.attempts.get(t, 1) + 1
        self.state.attempt_base[t] = self.state.attempts[t]
        self.ready_at[t] = self.ctx.current_utc_datetime
        self.in_flight += 1
        self._request_slots([t])

    def _arm_operator_wait(self) -> None:
        if self.operator_wait is not None or self.is_batch:
            return
        if self.run_state.count([TaskStatus.DEAD_LETTERED]) == 0:
            return
        self.operator_wait = self._track(
            self.ctx.wait_for_external_event(EventName.OPERATOR_ACTION), Waiting(Kind.OPERATOR)
        )

    def _cancel_everything(self) -> None:
        unfinished = (TaskStatus.PENDING, TaskStatus.SCHEDULED, TaskStatus.RETRYING, TaskStatus.DEAD_LETTERED)
        for t in self.run_state.index.topological_order:
            # Re-read: cancelling a task also cancels its pending descendants.
            if self.run_state.status(t) in unfinished:
                self.run_state.set_status(t, TaskStatus.CANCELLED)
        self.pending.clear()
        self.in_flight = 0

    # ------------------------------------------------------------------ gate slots

    def _release_slot(self, task_id: str, attempt: int) -> None:
        owner = slot_owner(self.execution_id, task_id, attempt)
        if owner in self.held_slots:
            self.held_slots.discard(owner)
            self.requested.discard(owner)
            self._signal_release([owner])

    def _release_all_slots(self) -> None:
        """On the way out, give back held slots and leave the gate's queue (release is idempotent)."""
        if self.requested:
            owners = sorted(self.requested)
            self.requested.clear()
            self.held_slots.clear()
            self._signal_release(owners)

    def _signal_release(self, owners: list[str]) -> None:
        self.ctx.signal_entity(
            self.gate_entity, GATE_RELEASE, release_input(owners, self.ctx.current_utc_datetime)
        )

    # ------------------------------------------------------------------ status

    def _publish_status(self) -> None:
        if self.ctx.is_replaying:
            return
        counts = Counter(str(s) for s in self.run_state.statuses.values())
        self.ctx.set_custom_status(
            {
                "generation": self.generation,
                "tasks": dict(sorted(counts.items())),
                "inFlight": self.in_flight,
            }
        )

    def final_statuses(self) -> dict[str, TaskStatus]:
        return dict(self.run_state.statuses)

    def batch_result(self) -> TaskBatchResult:
        results: dict[str, BatchTaskResult] = {}
        for t, s in self.run_state.statuses.items():
            settled = TASK_MACHINE.is_terminal(s) or s is TaskStatus.DEAD_LETTERED
            results[t] = BatchTaskResult(
                status=s if settled else TaskStatus.CANCELLED,
                attempt=self.state.attempts.get(t, 0),
                error=self.errors.get(t),
            )
        return TaskBatchResult(results=results, cancelled=self.cancelled)


def _result(task: Durable) -> Any:
    return task.result


def _event_payload(task: Durable) -> Any:
    """An external event's data. The SDK client encodes event data twice (a JSON string holding
    JSON: azure-functions-durable-python#295), other clients once: accept both."""
    value = task.result
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def _failed(task: Durable) -> bool:
    return task.state is TaskState.FAILED or isinstance(task.result, BaseException)


def _error_text(task: Durable) -> str:
    value = task.result
    return str(value) if value is not None else "failed"


def _outcome_of(task: Durable, attempt: int) -> TaskOutcome:
    """An activity's TaskOutcome, or a crash of the activity itself mapped onto the taxonomy."""
    if _failed(task):
        return TaskOutcome.failure(
            ErrorInfo(type="weft.ActivityCrashed", message=_error_text(task)[:2000]), attempt=attempt
        )
    return TaskOutcome.model_validate(task.result)
