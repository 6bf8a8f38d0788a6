"""Replays an out-of-process orchestrator's action list the way the Durable extension does.

The extension (``OutOfProcOrchestrationShim.ProcessAsyncActionsV2``) turns the SDK's action list into
calls on a DTFx orchestration context and awaits each top-level action in turn, while DTFx plays the
history events one by one.  Ids come from DTFx's sequence counter in the order the calls are made, and
``call_activity_with_retry`` is driven by DTFx's RetryInterceptor.  This module is a small
deterministic model of that program: tasks complete synchronously as history events are processed,
which is what DTFx's synchronous task scheduler does.  What it yields: the decisions made in this
episode (new TaskScheduled/TimerCreated/... with their ids), and whether the orchestration finished.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from devhost.durable.history import Event, EventType, parse_ts


class NondeterminismError(Exception):
    """The orchestrator's actions no longer match the recorded history."""


class ProtocolError(Exception):
    """The orchestrator returned something the extension would reject."""


class InvalidActionError(Exception):
    """An action the extension refuses when replaying it (unknown function, bad sub-orchestration id)."""


# Action types (azure/durable_functions/models/actions/ActionType.py).
A_CALL_ACTIVITY = 0
A_CALL_ACTIVITY_WITH_RETRY = 1
A_CALL_SUB = 2
A_CALL_SUB_WITH_RETRY = 3
A_CONTINUE_AS_NEW = 4
A_CREATE_TIMER = 5
A_WAIT_FOR_EVENT = 6
A_CALL_ENTITY = 7
A_CALL_HTTP = 8
A_SIGNAL_ENTITY = 9
A_SCHEDULED_SIGNAL_ENTITY = 10
A_WHEN_ANY = 11
A_WHEN_ALL = 12


class STask:
    """A .NET Task stand-in: completes once, runs its continuations synchronously."""

    __slots__ = ("callbacks", "done", "failed")

    def __init__(self) -> None:
        self.done = False
        self.failed = False
        self.callbacks: list[Callable[[STask], None]] = []

    def complete(self, failed: bool = False) -> None:
        if self.done:
            return
        self.done = True
        self.failed = failed
        cbs, self.callbacks = self.callbacks, []
        for cb in cbs:
            cb(self)

    def then(self, cb: Callable[[STask], None]) -> None:
        if self.done:
            cb(self)
        else:
            self.callbacks.append(cb)


def _completed() -> STask:
    t = STask()
    t.done = True
    return t


@dataclass
class Decision:
    """Something DTFx would record as a new history event (and send as a message) this episode."""

    kind: str  # "activity" | "timer" | "sub" | "entity_call" | "entity_signal"
    event_id: int
    name: str = ""
    input: str | None = None
    fire_at: datetime | None = None
    instance_id: str | None = None
    operation: str | None = None
    request_id: str | None = None
    canceled: bool = False


@dataclass
class ReplayResult:
    decisions: list[Decision] = field(default_factory=list)
    finished: bool = False  # the top-level action list ran to the end
    continue_as_new: bool = False
    continue_as_new_input: str | None = None
    canceled_timer_ids: list[int] = field(default_factory=list)


def _json_input(value: Any) -> str | None:
    """Action inputs are JSON strings already (the SDK df_dumps them); other shapes are re-encoded."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)


@functools.lru_cache(maxsize=65536)
def entity_request_id(instance_id: str, execution_id: str, event_id: int) -> str:
    # Memoised: every replay asks again for every entity call in the history.
    # Stands in for the extension's deterministic context.NewGuid(): stable across replays.
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"devhost:{instance_id}:{execution_id}:{event_id}"))


def sub_instance_id(execution_id: str, event_id: int) -> str:
    # DTFx TaskOrchestrationContext: ExecutionId + ":" + id when the caller gives no instance id.
    return f"{execution_id}:{event_id}"


# (kind, name) -> whether the app defines it; kind is "activity", "orchestrator" or "entity".
FunctionCheck = Callable[[str, str], bool]


class Replayer:
    def __init__(
        self,
        instance_id: str,
        execution_id: str,
        actions: list[dict[str, Any]],
        known: FunctionCheck | None = None,
        parent_instance_id: str | None = None,
    ) -> None:
        self.instance_id = instance_id
        self.execution_id = execution_id
        self.known = known
        self.parent_instance_id = parent_instance_id
        self.actions = actions
        self.seq = 0
        self.now: datetime | None = None
        self.pending: dict[int, Decision] = {}  # made by code, not yet matched to history
        self.order: list[int] = []
        self.open: dict[int, STask] = {}
        self.waiters: dict[str, deque[STask]] = {}
        self.buffered: dict[str, deque[Event]] = {}
        self.main_index = 0
        self.main_started = False
        self.result = ReplayResult()

    # ---- DTFx context calls -------------------------------------------------------------------
    def _new_decision(self, d: Decision) -> None:
        self.pending[d.event_id] = d
        self.order.append(d.event_id)

    def _schedule(self, kind: str, **kw: Any) -> STask:
        eid = self.seq
        self.seq += 1
        t = STask()
        self.open[eid] = t
        self._new_decision(Decision(kind=kind, event_id=eid, **kw))
        return t

    def _timer(self, fire_at: datetime, canceled: bool = False) -> STask:
        t = self._schedule("timer", fire_at=fire_at, canceled=canceled)
        if canceled:
            self.result.canceled_timer_ids.append(self.seq - 1)
            # A canceled timer's task is canceled at once; the timer itself is still recorded.
            self.open.pop(self.seq - 1, None)
            t.complete(failed=True)
        return t

    def _wait_event(self, name: str) -> STask:
        t = STask()
        buf = self.buffered.get(name)
        if buf:
            buf.popleft()
            t.complete()
            return t
        self.waiters.setdefault(name, deque()).append(t)
        return t

    def _require(self, kind: str, name: str) -> None:
        # DurableOrchestrationContext.ThrowIfFunctionDoesNotExist, which fails the orchestration.
        if self.known is not None and not self.known(kind, name):
            raise InvalidActionError(
                f"The function '{name}' doesn't exist, is disabled, or is not an {kind} function."
            )

    def _sub_id(self, action: dict[str, Any]) -> str:
        iid = action.get("instanceId")
        if iid:
            iid = str(iid)
            if iid.lower() in (self.instance_id.lower(), (self.parent_instance_id or "").lower()):
                raise InvalidActionError(
                    "The instance ID of a sub-orchestration must be different than the instance ID of a "
                    "parent orchestration."
                )
            if iid.startswith("@"):
                raise InvalidActionError("Orchestration instance ids must not start with @")
            return iid
        return sub_instance_id(self.execution_id, self.seq)

    def _retry(self, action: dict[str, Any], attempt_fn: Callable[[], STask]) -> STask:
        opts = action.get("retryOptions") or {}
        first_ms = float(opts.get("firstRetryIntervalInMilliseconds", 0))
        max_attempts = int(opts.get("maxNumberOfAttempts", 1))
        backoff = float(opts.get("backoffCoefficient", 1.0))
        max_interval_ms = opts.get("maxRetryIntervalInMilliseconds")
        timeout_ms = opts.get("retryTimeoutInMilliseconds")
        outer = STask()
        state = {"count": 0}
        first_attempt = self.now

        def delay(count: int) -> timedelta:
            # DTFx RetryInterceptor.ComputeNextDelay
            now = self.now
            if (
                timeout_ms is not None
                and first_attempt is not None
                and now is not None
                and now >= first_attempt + timedelta(milliseconds=float(timeout_ms))
            ):
                return timedelta(0)
            ms = first_ms * (backoff**count)
            if max_interval_ms is not None:
                ms = min(ms, float(max_interval_ms))
            return timedelta(milliseconds=ms)

        def start_attempt() -> None:
            attempt_fn().then(on_attempt)

        def on_attempt(t: STask) -> None:
            if not t.failed:
                outer.complete()
                return
            d = delay(state["count"])
            if d <= timedelta(0) or self.now is None:
                outer.complete(failed=True)
                return
            self._timer(self.now + d).then(on_timer)

        def on_timer(_t: STask) -> None:
            state["count"] += 1
            if state["count"] < max_attempts:
                start_attempt()
            else:
                outer.complete(failed=True)

        if max_attempts <= 0:
            outer.complete(failed=True)
        else:
            start_attempt()
        return outer

    def invoke(self, action: dict[str, Any]) -> STask:
        at = action.get("actionType")
        if at in (A_CALL_ACTIVITY, A_CALL_ACTIVITY_WITH_RETRY):
            self._require("activity", str(action.get("functionName")))
        elif at in (A_CALL_SUB, A_CALL_SUB_WITH_RETRY):
            self._require("orchestrator", str(action.get("functionName")))
        elif at in (A_CALL_ENTITY, A_SIGNAL_ENTITY, A_SCHEDULED_SIGNAL_ENTITY):
            entity_name = str(action.get("instanceId", "")).split("@")
            self._require("entity", entity_name[1] if len(entity_name) > 2 else "")
        if at == A_CALL_ACTIVITY:
            inp0 = _json_input(action.get("input"))
            return self._schedule("activity", name=action["functionName"], input=inp0)
        if at == A_CALL_ACTIVITY_WITH_RETRY:
            name = action["functionName"]
            inp = _json_input(action.get("input"))
            return self._retry(action, lambda: self._schedule("activity", name=name, input=inp))
        if at in (A_CALL_SUB, A_CALL_SUB_WITH_RETRY):
            name = action["functionName"]
            inp = _json_input(action.get("input"))

            def sub() -> STask:
                return self._schedule("sub", name=name, input=inp, instance_id=self._sub_id(action))

            return self._retry(action, sub) if at == A_CALL_SUB_WITH_RETRY else sub()
        if at == A_CREATE_TIMER:
            return self._timer(parse_ts(action["fireAt"]), canceled=bool(action.get("isCanceled")))
        if at == A_WAIT_FOR_EVENT:
            return self._wait_event(action["externalEventName"])
        if at == A_CALL_ENTITY:
            eid = self.seq
            rid = entity_request_id(self.instance_id, self.execution_id, eid)
            self.seq += 1
            self._new_decision(
                Decision(
                    kind="entity_call",
                    event_id=eid,
                    instance_id=action["instanceId"],
                    operation=action.get("operation"),
                    input=_json_input(action.get("input")),
                    request_id=rid,
                )
            )
            t = STask()
            self.waiters.setdefault(rid, deque()).append(t)
            return t
        if at in (A_SIGNAL_ENTITY, A_SCHEDULED_SIGNAL_ENTITY):
            eid = self.seq
            self.seq += 1
            self._new_decision(
                Decision(
                    kind="entity_signal",
                    event_id=eid,
                    instance_id=action["instanceId"],
                    operation=action.get("operation"),
                    input=_json_input(action.get("input")),
                    request_id=entity_request_id(self.instance_id, self.execution_id, eid),
                    fire_at=parse_ts(action["fireAt"]) if action.get("fireAt") else None,
                )
            )
            return _completed()
        if at == A_CONTINUE_AS_NEW:
            self.result.continue_as_new = True
            self.result.continue_as_new_input = _json_input(action.get("input"))
            return _completed()
        if at == A_WHEN_ALL:
            return self._when([self.invoke(a) for a in action.get("compoundActions") or []], any_=False)
        if at == A_WHEN_ANY:
            return self._when([self.invoke(a) for a in action.get("compoundActions") or []], any_=True)
        if at == A_CALL_HTTP:
            raise ProtocolError("call_http is not supported by devhost")
        raise ProtocolError(f"unknown action type {at!r} in orchestrator output")

    @staticmethod
    def _when(children: list[STask], any_: bool) -> STask:
        outer = STask()
        if not children:
            # Task.WhenAll([]) completes at once; Task.WhenAny([]) throws in .NET: treat as done.
            outer.complete()
            return outer
        remaining = {"n": len(children)}

        def on_child(_t: STask) -> None:
            if any_:
                outer.complete()
                return
            remaining["n"] -= 1
            if remaining["n"] == 0:
                outer.complete()

        for c in children:
            c.then(on_child)
        return outer

    # ---- main program: await each top-level action in order ------------------------------------
    def _run_main(self, _t: STask | None = None) -> None:
        while self.main_index < len(self.actions):
            action = self.actions[self.main_index]
            self.main_index += 1
            t = self.invoke(action)
            if not t.done:
                t.then(self._run_main)
                return
        self.result.finished = True

    # ---- history playback ----------------------------------------------------------------------
    def _match(self, ev: Event, kind: str, name: str | None) -> None:
        eid = int(ev.get("EventId", -1))
        d = self.pending.get(eid)
        label = {
            "activity": "an activity task",
            "timer": "a durable timer",
            "sub": "a sub-orchestration",
            "entity": "an entity message",
        }[kind]
        desc = f" named '{name}'" if name else ""
        if d is None:
            raise NondeterminismError(
                f"Non-deterministic orchestration detected: a previous execution scheduled {label}{desc} "
                f"with sequence id {eid}, but the current replay has not (yet) scheduled it. "
                "Was the orchestrator code changed while this instance was running?"
            )
        d_kind = "entity" if d.kind.startswith("entity") else d.kind
        if d_kind != kind:
            raise NondeterminismError(
                f"Non-deterministic orchestration detected: a previous execution scheduled {label}{desc} "
                f"with sequence id {eid}, but the current replay scheduled {_describe(d)} at that position."
            )
        if kind in ("activity", "sub") and name is not None and d.name.lower() != name.lower():
            raise NondeterminismError(
                f"Non-deterministic orchestration detected: a previous execution scheduled {label} "
                f"named '{name}' with sequence id {eid}, but the current replay scheduled {_describe(d)}."
            )
        if kind == "entity" and name is not None and (d.instance_id or "") != name:
            raise NondeterminismError(
                f"Non-deterministic orchestration detected: a previous execution sent a message to "
                f"entity '{name}' with sequence id {eid}, but the current replay scheduled {_describe(d)}."
            )
        del self.pending[eid]

    def _complete_id(self, key: Any, failed: bool) -> None:
        if key is None:
            return
        t = self.open.pop(int(key), None)
        if t is not None:
            t.complete(failed=failed)

    def play(self, ev: Event) -> None:
        et = ev["EventType"]
        if et == EventType.ORCHESTRATOR_STARTED:
            self.now = parse_ts(ev["Timestamp"])
        elif et == EventType.EXECUTION_STARTED:
            if not self.main_started:
                self.main_started = True
                self._run_main()
        elif et == EventType.TASK_SCHEDULED:
            self._match(ev, "activity", ev.get("Name"))
        elif et == EventType.TIMER_CREATED:
            self._match(ev, "timer", None)
        elif et == EventType.SUB_ORCHESTRATION_INSTANCE_CREATED:
            self._match(ev, "sub", ev.get("Name"))
        elif et == EventType.EVENT_SENT:
            self._match(ev, "entity", ev.get("InstanceId"))
        elif et in (EventType.TASK_COMPLETED, EventType.SUB_ORCHESTRATION_INSTANCE_COMPLETED):
            self._complete_id(ev.get("TaskScheduledId"), failed=False)
        elif et in (EventType.TASK_FAILED, EventType.SUB_ORCHESTRATION_INSTANCE_FAILED):
            self._complete_id(ev.get("TaskScheduledId"), failed=True)
        elif et == EventType.TIMER_FIRED:
            self._complete_id(ev.get("TimerId"), failed=False)
        elif et == EventType.EVENT_RAISED:
            name = str(ev.get("Name"))
            q = self.waiters.get(name)
            if q:
                # The extension keeps waiters on a stack: the latest wait for a name gets the event.
                t = q.pop()
                if not q:
                    del self.waiters[name]
                t.complete()
            else:
                self.buffered.setdefault(name, deque()).append(ev)

    def run(self, history: list[Event]) -> ReplayResult:
        for ev in history:
            self.play(ev)
        self.result.decisions = [self.pending[i] for i in self.order if i in self.pending]
        return self.result


def _describe(d: Decision) -> str:
    if d.kind == "activity":
        return f"an activity task named '{d.name}'"
    if d.kind == "timer":
        return "a durable timer"
    if d.kind == "sub":
        return f"a sub-orchestration named '{d.name}'"
    return f"a message to entity '{d.instance_id}'"


def replay(
    instance_id: str,
    execution_id: str,
    actions: list[dict[str, Any]],
    history: list[Event],
    known: FunctionCheck | None = None,
    parent_instance_id: str | None = None,
) -> ReplayResult:
    return Replayer(instance_id, execution_id, actions, known, parent_instance_id).run(history)


def parse_orchestrator_output(raw: str) -> dict[str, Any]:
    """The orchestrator's return value (or the state embedded in its exception) as a dict."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ProtocolError("out-of-proc orchestrators must return a JSON object")
    return data


def flatten_actions(state: dict[str, Any]) -> list[dict[str, Any]]:
    actions = state.get("actions") or []
    schema = state.get("schemaVersion")
    if schema in (None, 0, "Original"):
        raise ProtocolError(
            "orchestrator returned replay schema V1; devhost speaks V2/V3 only "
            "(the context carries upperSchemaVersion=1, upperSchemaVersionNew=2)"
        )
    if len(actions) > 1:
        raise ProtocolError(f"schema {schema}: expected one inner action list, got {len(actions)}")
    return list(actions[0]) if actions else []
