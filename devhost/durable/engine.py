"""The durable engine: DTFx-style dispatch of orchestrations, activities, timers and entities.

SQLite is the source of truth; memory holds only what makes dispatch fast (ready queues, timers,
hot histories), and is rebuilt from SQLite on start.  Each orchestrator episode's history append,
state change, consumed messages and new work items are one transaction, so a SIGKILL at any point
leaves either the episode fully done or not at all (then it simply runs again).
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from devhost.durable import history as h
from devhost.durable.api import (
    FunctionNotFoundError,
    InstanceExistsError,
    InstanceNotFoundError,
    InstanceQuery,
    InvalidStateError,
)
from devhost.durable.clock import Clock, RealClock, VirtualClock
from devhost.durable.functions import (
    ActivityFailure,
    FunctionRegistry,
    invoke_activity,
    invoke_entity,
    invoke_orchestrator,
)
from devhost.durable.history import Event, EventType
from devhost.durable.replay import (
    Decision,
    InvalidActionError,
    NondeterminismError,
    ProtocolError,
    flatten_actions,
    parse_orchestrator_output,
    replay,
)
from devhost.durable.store import Store, dumps, host_identity

log = logging.getLogger("devhost")

TERMINAL = frozenset({"Completed", "Failed", "Terminated"})
INSERT_MSG = (
    "INSERT INTO messages(instance_id, execution_id, event, visible_at, lease_owner, lease_until) "
    "VALUES(?,?,?,?,?,?)"
)
COMPLETION_TYPES = frozenset({EventType.TASK_COMPLETED, EventType.TASK_FAILED})
COALESCE_MAX = 256
CONTROL_TYPES = frozenset(
    {EventType.EXECUTION_TERMINATED, EventType.EXECUTION_SUSPENDED, EventType.EXECUTION_RESUMED}
)


@dataclass
class Msg:
    id: int
    execution_id: str | None
    event: Event


@dataclass
class Inst:
    instance_id: str
    name: str
    execution_id: str
    status: str
    input: str | None
    output: str | None = None
    custom_status: str | None = None
    created: str = ""
    last_updated: str = ""
    created_epoch: float = 0.0
    parent_instance_id: str | None = None
    parent_execution_id: str | None = None
    parent_task_id: int | None = None
    suspended: bool = False
    history: list[Event] | None = None
    history_json: list[str] | None = None
    pending: list[Msg] = field(default_factory=list)
    running: bool = False
    queued: bool = False
    in_flight: int = 0  # activities dispatched whose completion has not been delivered yet
    pending_urgent: int = 0  # pending messages other than activity completions
    defer_deadline: float | None = None
    backoff_until: float = 0.0  # after an unexpected engine error, retry the episode later


@dataclass
class ActivityItem:
    id: int
    instance_id: str
    execution_id: str
    task_id: int
    name: str
    input: str | None
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass
class EntMsg:
    id: int
    body: dict[str, Any]


@dataclass
class Ent:
    entity_id: str
    pending: list[EntMsg] = field(default_factory=list)
    running: bool = False
    queued: bool = False


@dataclass
class InstanceStats:
    episodes: int = 0
    activity_latency_ms: list[float] = field(default_factory=list)


STATS_MAX_INSTANCES = 10_000
STATS_MAX_SAMPLES = 100_000


def _parse_json(raw: str | None) -> Any:
    """Stored payloads are JSON text; the management API shows them as JSON values."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _status_time(ts: str) -> str:
    """Management API times are second precision ISO with a Z."""
    return ts[:19] + "Z" if ts else ts


def entity_scheduler_id(name: str, key: str) -> str:
    return f"@{name.lower()}@{key}"


def split_entity_id(entity_id: str) -> tuple[str, str]:
    _, name, key = entity_id.split("@", 2)
    return name, key


class DurableEngine:
    """Implements :class:`devhost.durable.api.DurableBackend`."""

    def __init__(
        self,
        functions: Iterable[Any],
        db_path: str,
        *,
        clock: Clock | None = None,
        activity_workers: int = 10,
        orchestrator_workers: int = 10,
        task_hub: str = "TestHubName",
        lease_seconds: float = 60.0,
        coalesce_ms: float = 10.0,
    ) -> None:
        self.task_hub = task_hub
        self.registry = FunctionRegistry(functions)
        self.clock: Clock = clock or RealClock()
        self.store = Store(db_path)
        self.host_id = host_identity()
        self.activity_workers = max(1, activity_workers)
        self.orchestrator_workers = max(1, orchestrator_workers)
        self.lease_seconds = lease_seconds
        self.coalesce_s = max(0.0, coalesce_ms / 1000.0)

        # One lock, three wait queues: orchestrator workers, activity workers, everything else
        # (timers, idle and completion waiters), so a wake-up always reaches a thread that can act.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._orch_cv = threading.Condition(self._lock)
        self._act_cv = threading.Condition(self._lock)
        # Completion waiters (wait_for_completion) only: woken when an instance finishes, not on
        # every state change (fifty waiters polling the store on every episode cost more CPU than
        # the episodes themselves).
        self._done_cv = threading.Condition(self._lock)
        # The coalescing and lease threads get their own queues too: they only care about new
        # deferrals and about stopping, and waking them on every state change costs GIL hand-offs.
        self._coalesce_cv = threading.Condition(self._lock)
        self._stop_cv = threading.Condition(self._lock)
        self._insts: dict[str, Inst] = {}
        self._ents: dict[str, Ent] = {}
        self._ready: deque[tuple[str, str]] = deque()
        self._acts: deque[ActivityItem] = deque()
        self._timers: list[tuple[float, int, str, str, Any]] = []
        self._dead_timers: set[int] = set()  # ids of orchestrator timer messages deleted meanwhile
        self._running_eps = 0
        self._running_acts = 0
        self._deferred: list[tuple[float, int, str]] = []
        self._n_deferred = 0
        self._defer_seq = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._started = False
        self.stats: dict[str, InstanceStats] = {}

    # ================================================================ lifecycle
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.store.heartbeat(self.host_id, time.time())
        self._recover()
        for i in range(self.orchestrator_workers):
            self._spawn(self._orchestrator_loop, f"devhost-orch-{i}")
        for i in range(self.activity_workers):
            self._spawn(self._activity_loop, f"devhost-act-{i}")
        self._spawn(self._timer_loop, "devhost-timers")
        self._spawn(self._lease_loop, "devhost-leases")
        self._spawn(self._coalesce_loop, "devhost-coalesce")

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self, *, graceful: bool = True, timeout: float = 30.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self._orch_cv.notify_all()
            self._act_cv.notify_all()
            self._done_cv.notify_all()
            self._coalesce_cv.notify_all()
            self._stop_cv.notify_all()
        if graceful:
            deadline = time.monotonic() + timeout
            for t in self._threads:
                t.join(max(0.0, deadline - time.monotonic()))
        self._threads = []
        self._started = False
        if graceful:
            self.store.close()

    def _lease_until(self) -> float:
        return time.time() + self.lease_seconds

    def _now_epoch(self) -> float:
        return self.clock.now().timestamp()

    # ================================================================ recovery
    def _recover(self) -> None:
        self.store.adopt_orphans(self.host_id, time.time(), self._lease_until())
        self._load_owned()

    def _load_owned(self, only_ids: dict[str, list[int]] | None = None) -> None:
        """Bring rows this host owns into the in-memory queues (all of them, or just the given ids)."""

        def rows(table: str, cols: str) -> list[tuple[Any, ...]]:
            if only_ids is None:
                return self.store.query(
                    f"SELECT {cols} FROM {table} WHERE lease_owner=? ORDER BY id",  # noqa: S608
                    (self.host_id,),
                )
            ids = only_ids.get(table) or []
            out: list[tuple[Any, ...]] = []
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                out += self.store.query(
                    f"SELECT {cols} FROM {table} WHERE id IN ({marks}) ORDER BY id",  # noqa: S608
                    chunk,
                )
            return out

        now = self._now_epoch()
        msgs = rows("messages", "id, instance_id, execution_id, event, visible_at")
        acts = rows("activities", "id, instance_id, execution_id, task_id, name, input")
        ents = rows("entity_messages", "id, entity_id, body, visible_at")
        with self._cond:
            for mid, iid, eid, ev, vis in msgs:
                m = Msg(mid, eid, json.loads(ev))
                if vis > now:
                    heapq.heappush(self._timers, (vis, mid, "o", iid, m))
                else:
                    self._deliver_locked(iid, m)
            for aid, iid, eid, tid, name, inp in acts:
                self._acts.append(ActivityItem(aid, iid, eid, tid, name, inp))
                owner = self._inst_locked(iid)
                if owner is not None:
                    owner.in_flight += 1
                self._act_cv.notify()
            for mid, entid, body, vis in ents:
                em = EntMsg(mid, json.loads(body))
                if vis > now:
                    heapq.heappush(self._timers, (vis, mid, "e", entid, em))
                else:
                    self._deliver_entity_locked(entid, em)
            self._cond.notify_all()

    # ================================================================ memory helpers (hold _cond)
    def _inst_locked(self, instance_id: str) -> Inst | None:
        inst = self._insts.get(instance_id)
        if inst is not None:
            return inst
        rows = self.store.query(
            "SELECT name, execution_id, status, input, output, custom_status, created, last_updated, "
            "parent_instance_id, parent_execution_id, parent_task_id, suspended, created_epoch "
            "FROM instances WHERE instance_id=?",
            (instance_id,),
        )
        if not rows:
            return None
        r = rows[0]
        inst = Inst(
            instance_id=instance_id,
            name=r[0],
            execution_id=r[1],
            status=r[2],
            input=r[3],
            output=r[4],
            custom_status=r[5],
            created=r[6],
            last_updated=r[7],
            parent_instance_id=r[8],
            parent_execution_id=r[9],
            parent_task_id=r[10],
            suspended=bool(r[11]),
            created_epoch=r[12],
        )
        self._insts[instance_id] = inst
        return inst

    def _deliver_locked(self, instance_id: str, msg: Msg) -> None:
        inst = self._inst_locked(instance_id)
        if inst is None:
            # The instance was purged: the message is garbage.
            self._drop_messages([msg.id])
            return
        inst.pending.append(msg)
        if msg.event["EventType"] not in COMPLETION_TYPES:
            inst.pending_urgent += 1
        self._schedule_inst_locked(inst)

    def _schedule_inst_locked(self, inst: Inst, force: bool = False) -> None:
        if inst.running or inst.queued or not inst.pending:
            return
        if inst.suspended and not any(m.event["EventType"] in CONTROL_TYPES for m in inst.pending):
            return
        if not force and inst.backoff_until > time.perf_counter():
            self._defer_locked(inst, inst.backoff_until)
            return
        if (
            not force
            and self.coalesce_s > 0
            and inst.in_flight > 0
            and inst.pending_urgent == 0
            and len(inst.pending) < COALESCE_MAX
            and not self._stopping
        ):
            # More completions of a fan-out are on their way: let a few milliseconds' worth gather
            # into one episode rather than replaying a large history for each (DTFx batches too).
            self._defer_locked(inst, time.perf_counter() + self.coalesce_s)
            return
        if inst.defer_deadline is not None:
            inst.defer_deadline = None
            self._n_deferred -= 1
        inst.queued = True
        self._ready.append(("o", inst.instance_id))
        self._orch_cv.notify()

    def _defer_locked(self, inst: Inst, deadline: float) -> None:
        if inst.defer_deadline is not None:
            return
        inst.defer_deadline = deadline
        self._n_deferred += 1
        self._defer_seq += 1
        heapq.heappush(self._deferred, (deadline, self._defer_seq, inst.instance_id))
        self._coalesce_cv.notify()

    def _deliver_entity_locked(self, entity_id: str, em: EntMsg) -> None:
        ent = self._ents.get(entity_id)
        if ent is None:
            ent = self._ents[entity_id] = Ent(entity_id)
        ent.pending.append(em)
        self._schedule_ent_locked(ent)

    def _schedule_ent_locked(self, ent: Ent) -> None:
        if ent.running or ent.queued or not ent.pending:
            return
        ent.queued = True
        self._ready.append(("e", ent.entity_id))
        self._orch_cv.notify()

    def _idle_locked(self) -> bool:
        return (
            not self._ready
            and not self._acts
            and self._running_eps == 0
            and self._running_acts == 0
            and self._n_deferred == 0
        )

    def _drop_messages(self, ids: list[int]) -> None:
        if not ids:
            return
        with self.store.tx() as cur:
            cur.executemany("DELETE FROM messages WHERE id=?", [(i,) for i in ids])

    # ================================================================ worker loops
    def _orchestrator_loop(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._stopping:
                    self._orch_cv.wait()
                if self._stopping:
                    return
                kind, key = self._ready.popleft()
                target: Inst | Ent | None = self._insts.get(key) if kind == "o" else self._ents.get(key)
                if target is None or target.running or not target.queued:
                    # A stale entry (the instance was replaced, purged or is already being run).
                    continue
                target.queued = False
                target.running = True
                self._running_eps += 1
            try:
                if isinstance(target, Inst):
                    self._run_episode(target)
                elif isinstance(target, Ent):
                    self._run_entity_batch(target)
            except Exception:
                log.exception("devhost: episode for %s failed unexpectedly", key)
            finally:
                with self._cond:
                    self._running_eps -= 1
                    if isinstance(target, Inst):
                        target.running = False
                        self._schedule_inst_locked(target)
                        if (
                            target.status in TERMINAL
                            and not target.pending
                            and self._insts.get(target.instance_id) is target
                        ):
                            self._insts.pop(target.instance_id, None)
                    elif isinstance(target, Ent):
                        target.running = False
                        self._schedule_ent_locked(target)
                        if not target.pending and self._ents.get(target.entity_id) is target:
                            self._ents.pop(target.entity_id, None)
                    self._cond.notify_all()

    def _activity_loop(self) -> None:
        while True:
            with self._cond:
                while not self._acts and not self._stopping:
                    self._act_cv.wait()
                if self._stopping:
                    return
                item = self._acts.popleft()
                self._running_acts += 1
            try:
                self._run_activity(item)
            except Exception:
                log.exception("devhost: activity %s failed unexpectedly", item.name)
            finally:
                with self._cond:
                    self._running_acts -= 1
                    if self._idle_locked():
                        self._cond.notify_all()

    def _timer_loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                self._skip_dead_timers_locked()
                if not self._timers:
                    self._cond.wait()
                    continue
                due_at = self._timers[0][0]
                if isinstance(self.clock, VirtualClock):
                    if self.clock.paused:
                        self._cond.wait(0.05)
                        continue
                    if not self._idle_locked():
                        self._cond.wait()
                        continue
                    self.clock.advance_to(datetime.fromtimestamp(due_at, tz=UTC))
                now = self._now_epoch()
                if due_at > now:
                    self._cond.wait(min(due_at - now, 1.0))
                    continue
                while self._timers and self._timers[0][0] <= now:
                    _, mid, kind, target, m = heapq.heappop(self._timers)
                    if kind == "o" and mid in self._dead_timers:
                        self._dead_timers.discard(mid)
                        continue
                    if kind == "o":
                        self._deliver_locked(target, m)
                    else:
                        self._deliver_entity_locked(target, m)
                self._cond.notify_all()

    def _coalesce_loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                if not self._deferred:
                    self._coalesce_cv.wait()
                    continue
                deadline, _, iid = self._deferred[0]
                left = deadline - time.perf_counter()
                if left > 0:
                    self._coalesce_cv.wait(left)
                    continue
                heapq.heappop(self._deferred)
                inst = self._insts.get(iid)
                if inst is not None and inst.defer_deadline == deadline:
                    self._schedule_inst_locked(inst, force=True)

    def _skip_dead_timers_locked(self) -> None:
        while self._timers and self._timers[0][2] == "o" and self._timers[0][1] in self._dead_timers:
            self._dead_timers.discard(heapq.heappop(self._timers)[1])

    def _lease_loop(self) -> None:
        interval = max(0.5, self.lease_seconds / 3.0)
        due = time.monotonic() + interval
        while True:
            with self._cond:
                # The condition is notified on every state change, so wait out the whole interval
                # (a bare wait(interval) made this run on nearly every episode under load).
                while not self._stopping and (left := due - time.monotonic()) > 0:
                    self._stop_cv.wait(left)
                if self._stopping:
                    return
            due = time.monotonic() + interval
            try:
                self.store.heartbeat(self.host_id, time.time())
                self.store.renew_leases(self.host_id, self._lease_until())
                adopted = self.store.adopt_orphans(self.host_id, time.time(), self._lease_until())
                if any(adopted.values()):
                    self._load_owned(adopted)
            except Exception:
                log.exception("devhost: lease maintenance failed")

    # ================================================================ activities
    def _run_activity(self, item: ActivityItem) -> None:
        started = time.perf_counter()
        st = self._stats_for(item.instance_id)
        if len(st.activity_latency_ms) < STATS_MAX_SAMPLES:
            st.activity_latency_ms.append((started - item.queued_at) * 1000.0)
        fn = self.registry.activity(item.name)
        if fn is None:
            ev = h.task_failed(
                self.clock.now(),
                item.task_id,
                f"The activity function '{item.name}' doesn't exist, is disabled, or is not an activity "
                "function.",
                None,
            )
        else:
            try:
                result = invoke_activity(fn, item.input, item.instance_id)
                ev = h.task_completed(self.clock.now(), item.task_id, result)
            except ActivityFailure as f:
                ev = h.task_failed(self.clock.now(), item.task_id, f.reason, f.details)
        mid: int | None = None
        with self.store.tx() as cur:
            # rowcount 0: another delivery of this work item already completed it.
            if cur.execute("DELETE FROM activities WHERE id=?", (item.id,)).rowcount:
                cur.execute(
                    INSERT_MSG,
                    (item.instance_id, item.execution_id, dumps(ev), 0.0, self.host_id, self._lease_until()),
                )
                mid = cur.lastrowid
        with self._cond:
            owner = self._insts.get(item.instance_id)
            if owner is not None and owner.in_flight > 0:
                owner.in_flight -= 1
            if mid is not None:
                self._deliver_locked(item.instance_id, Msg(mid, item.execution_id, ev))
            elif owner is not None:
                self._schedule_inst_locked(owner)

    # ================================================================ orchestrator episodes
    def _load_history(self, inst: Inst) -> None:
        if inst.history is not None:
            return
        rows = self.store.query(
            "SELECT event FROM history WHERE instance_id=? ORDER BY seq", (inst.instance_id,)
        )
        inst.history_json = [r[0] for r in rows]
        inst.history = [json.loads(r[0]) for r in rows]

    def _run_episode(self, inst: Inst) -> None:
        with self._cond:
            msgs = inst.pending
            inst.pending = []
            inst.pending_urgent = 0
        try:
            self._episode(inst, msgs)
        except Exception:
            # The transaction rolled back, so SQLite still holds the messages: put them back, drop
            # the cached history, and try again a little later rather than spinning.
            with self._cond:
                inst.pending = msgs + inst.pending
                inst.pending_urgent += len(msgs)
                inst.history = None
                inst.history_json = None
                inst.backoff_until = time.perf_counter() + 1.0
            raise

    def _episode(self, inst: Inst, msgs: list[Msg]) -> None:
        now = self.clock.now()
        self._load_history(inst)
        assert inst.history is not None
        assert inst.history_json is not None
        ep = _Episode(self, inst, now)
        consumed: list[int] = []
        keep: list[Msg] = []
        live: list[Msg] = []
        for m in msgs:
            et = m.event["EventType"]
            if m.execution_id is not None and m.execution_id != inst.execution_id:
                consumed.append(m.id)  # addressed to an earlier execution (continue-as-new, restart)
            elif et == EventType.EXECUTION_STARTED and inst.history:
                consumed.append(m.id)  # a redelivered start of an execution that already began
            else:
                live.append(m)
        if inst.status in TERMINAL:
            ep.commit(consumed + [m.id for m in live])
            return
        terminate = next((m for m in live if m.event["EventType"] == EventType.EXECUTION_TERMINATED), None)
        if terminate is not None:
            ep.terminate(terminate.event.get("Input"))
            ep.commit(consumed + [m.id for m in live])
            return
        new_events: list[Event] = []
        suspended = inst.suspended
        for m in live:
            et = m.event["EventType"]
            if et == EventType.EXECUTION_SUSPENDED:
                suspended = True
                new_events.append(m.event)
                consumed.append(m.id)
            elif et == EventType.EXECUTION_RESUMED:
                suspended = False
                new_events.append(m.event)
                consumed.append(m.id)
            elif suspended:
                keep.append(m)
            else:
                new_events.append(m.event)
                consumed.append(m.id)
        ep.set_suspended(suspended)
        if keep:
            with self._cond:
                inst.pending = keep + inst.pending
                inst.pending_urgent += sum(1 for m in keep if m.event["EventType"] not in COMPLETION_TYPES)
        if suspended or not any(e["EventType"] not in CONTROL_TYPES for e in new_events):
            ep.append_control_only(new_events)
            ep.commit(consumed)
            return
        if not inst.history and not any(e["EventType"] == EventType.EXECUTION_STARTED for e in new_events):
            # Messages for an execution whose start was lost (e.g. purged meanwhile): nothing can run.
            ep.commit(consumed)
            return
        ep.run(new_events)
        ep.commit(consumed)

    # ================================================================ entities
    def _run_entity_batch(self, ent: Ent) -> None:
        with self._cond:
            batch = ent.pending
            ent.pending = []
        if not batch:
            return
        name, key = split_entity_id(ent.entity_id)
        fn = self.registry.entity(name)
        rows = self.store.query("SELECT exists_, state FROM entities WHERE entity_id=?", (ent.entity_id,))
        exists = bool(rows[0][0]) if rows else False
        state = rows[0][1] if rows else None
        now = self.clock.now()
        responses: list[tuple[str, str | None, Event]] = []
        if fn is None:
            for em in batch:
                if not em.body.get("signal") and em.body.get("parent"):
                    payload = dumps(
                        {
                            "result": json.dumps(f"The entity function '{name}' does not exist."),
                            "exceptionType": "System.ArgumentException",
                        }
                    )
                    responses.append(
                        (
                            em.body["parent"],
                            em.body.get("parentExecution"),
                            h.event_raised(now, em.body["id"], payload),
                        )
                    )
        else:
            body = {
                "self": {"name": name, "key": key},
                "exists": exists,
                "state": state if exists else None,
                "batch": [
                    {
                        "name": em.body.get("op"),
                        # Entity batch inputs are JSON-encoded twice, as the extension sends them.
                        "input": json.dumps(em.body.get("input")),
                        "isSignal": bool(em.body.get("signal")),
                    }
                    for em in batch
                ],
            }
            try:
                out = json.loads(invoke_entity(fn, dumps(body), ent.entity_id))
                results = out.get("results") or []
                exists = bool(out.get("entityExists"))
                state = out.get("entityState") if exists else None
            except Exception as exc:
                results = [{"isError": True, "result": json.dumps(str(exc))} for _ in batch]
            for em, res in zip(batch, results, strict=False):
                if em.body.get("signal") or not em.body.get("parent"):
                    continue
                payload_d: dict[str, Any] = {"result": res.get("result")}
                if res.get("isError"):
                    payload_d["exceptionType"] = "Exception"
                responses.append(
                    (
                        em.body["parent"],
                        em.body.get("parentExecution"),
                        h.event_raised(now, em.body["id"], dumps(payload_d)),
                    )
                )
        delivered: list[tuple[str, Msg]] = []
        with self.store.tx() as cur:
            cur.execute(
                "INSERT INTO entities(entity_id, name, key, exists_, state, last_modified) "
                "VALUES(?,?,?,?,?,?) "
                "ON CONFLICT(entity_id) DO UPDATE SET exists_=excluded.exists_, state=excluded.state, "
                "last_modified=excluded.last_modified",
                (ent.entity_id, name, key, int(exists), state, h.format_ts(now)),
            )
            cur.executemany("DELETE FROM entity_messages WHERE id=?", [(em.id,) for em in batch])
            for target, exec_id, ev in responses:
                cur.execute(
                    INSERT_MSG,
                    (target, exec_id, dumps(ev), 0.0, self.host_id, self._lease_until()),
                )
                assert cur.lastrowid is not None
                delivered.append((target, Msg(cur.lastrowid, exec_id, ev)))
        with self._cond:
            for target, m in delivered:
                self._deliver_locked(target, m)

    # ================================================================ DurableBackend API
    def start_instance(
        self,
        orchestrator: str,
        instance_id: str | None,
        input_json: str | None,
        *,
        parent_instance_id: str | None = None,
    ) -> str:
        fn = self.registry.orchestrator(orchestrator)
        if fn is None:
            raise FunctionNotFoundError(
                f"The function '{orchestrator}' doesn't exist, is disabled, or is not an "
                "orchestrator function."
            )
        iid = instance_id or uuid.uuid4().hex
        with self._cond:
            inst = self._inst_locked(iid)
            if inst is not None and inst.status not in TERMINAL:
                raise InstanceExistsError(f"An instance with ID '{iid}' already exists.")
            if inst is not None and inst.running:
                raise InstanceExistsError(f"An instance with ID '{iid}' is still being processed.")
        now = self.clock.now()
        with self.store.tx() as cur:
            row = cur.execute("SELECT status FROM instances WHERE instance_id=?", (iid,)).fetchone()
            if row is not None and row[0] not in TERMINAL:
                raise InstanceExistsError(f"An instance with ID '{iid}' already exists.")
            new_inst, msg = _create_instance(
                cur, self, iid, fn.name, input_json, now, parent_instance_id, None, None
            )
        with self._cond:
            self._insts[iid] = new_inst
            self._deliver_locked(iid, msg)
        return iid

    def get_status(
        self,
        instance_id: str,
        *,
        show_history: bool = False,
        show_history_output: bool = False,
        show_input: bool = True,
    ) -> dict[str, Any] | None:
        rows = self.store.query(
            "SELECT name, status, input, output, custom_status, created, last_updated FROM instances "
            "WHERE instance_id=?",
            (instance_id,),
        )
        if not rows:
            return None
        r = rows[0]
        status: dict[str, Any] = {
            "name": r[0],
            "instanceId": instance_id,
            "runtimeStatus": r[1],
            "input": _parse_json(r[2]) if show_input else None,
            "customStatus": _parse_json(r[4]),
            "output": _parse_json(r[3]),
            "createdTime": _status_time(r[5]),
            "lastUpdatedTime": _status_time(r[6]),
        }
        if show_history:
            evs = [
                json.loads(x[0])
                for x in self.store.query(
                    "SELECT event FROM history WHERE instance_id=? ORDER BY seq", (instance_id,)
                )
            ]
            status["historyEvents"] = management_history(evs, show_history_output)
        return status

    def query_instances(self, query: InstanceQuery) -> tuple[list[dict[str, Any]], str | None]:
        where: list[str] = []
        params: list[Any] = []
        if query.runtime_status:
            where.append(f"status IN ({','.join('?' * len(query.runtime_status))})")
            params += list(query.runtime_status)
        if query.created_from is not None:
            where.append("created_epoch >= ?")
            params.append(query.created_from.timestamp())
        if query.created_to is not None:
            where.append("created_epoch <= ?")
            params.append(query.created_to.timestamp())
        if query.instance_id_prefix:
            where.append("instance_id >= ? AND instance_id < ?")
            params += [query.instance_id_prefix, query.instance_id_prefix + "\U0010ffff"]
        offset = int(query.continuation_token or 0)
        top = max(1, query.top)
        sql = "SELECT instance_id FROM instances"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_epoch, instance_id LIMIT ? OFFSET ?"
        ids = [r[0] for r in self.store.query(sql, [*params, top + 1, offset])]
        more = len(ids) > top
        out = []
        for iid in ids[:top]:
            st = self.get_status(iid, show_input=query.show_input)
            if st is not None:
                out.append(st)
        return out, (str(offset + top) if more else None)

    def _send_control(self, instance_id: str, ev: Event, allow_terminal: bool = False) -> None:
        with self._cond:
            inst = self._inst_locked(instance_id)
            if inst is None:
                raise InstanceNotFoundError(f"No instance with ID '{instance_id}' was found.")
            if inst.status in TERMINAL and not allow_terminal:
                raise InvalidStateError(
                    f"The instance '{instance_id}' is in the {inst.status} state and cannot accept "
                    "this operation."
                )
        with self.store.tx() as cur:
            cur.execute(
                INSERT_MSG,
                (instance_id, None, dumps(ev), 0.0, self.host_id, self._lease_until()),
            )
            mid = cur.lastrowid
        assert mid is not None
        with self._cond:
            self._deliver_locked(instance_id, Msg(mid, None, ev))

    def raise_event(self, instance_id: str, event_name: str, data_json: str | None) -> None:
        self._send_control(instance_id, h.event_raised(self.clock.now(), event_name, data_json))

    def terminate(self, instance_id: str, reason: str | None) -> None:
        self._send_control(instance_id, h.execution_terminated(self.clock.now(), reason))

    def suspend(self, instance_id: str, reason: str | None) -> None:
        self._send_control(instance_id, h.execution_suspended(self.clock.now(), reason))

    def resume(self, instance_id: str, reason: str | None) -> None:
        self._send_control(instance_id, h.execution_resumed(self.clock.now(), reason))

    def purge(self, instance_id: str) -> bool:
        with self._cond:
            inst = self._inst_locked(instance_id)
            if inst is None:
                return False
            if inst.status not in TERMINAL:
                raise InvalidStateError(
                    f"The instance '{instance_id}' is {inst.status}; only Completed, Failed or Terminated "
                    "instances can be purged."
                )
            self._insts.pop(instance_id, None)
        with self.store.tx() as cur:
            cur.execute("DELETE FROM history WHERE instance_id=?", (instance_id,))
            cur.execute("DELETE FROM messages WHERE instance_id=?", (instance_id,))
            cur.execute("DELETE FROM activities WHERE instance_id=?", (instance_id,))
            n = cur.execute("DELETE FROM instances WHERE instance_id=?", (instance_id,)).rowcount
        self.stats.pop(instance_id, None)
        return n > 0

    def purge_many(self, query: InstanceQuery) -> int:
        statuses = tuple(s for s in (query.runtime_status or tuple(TERMINAL)) if s in TERMINAL)
        if not statuses:
            return 0
        q = InstanceQuery(
            runtime_status=statuses,
            created_from=query.created_from,
            created_to=query.created_to,
            instance_id_prefix=query.instance_id_prefix,
            top=1000,
        )
        count = 0
        while True:
            page, _ = self.query_instances(q)
            if not page:
                return count
            for st in page:
                if self.purge(st["instanceId"]):
                    count += 1

    def signal_entity(
        self, entity_name: str, entity_key: str, operation: str, input_json: str | None
    ) -> None:
        if self.registry.entity(entity_name) is None:
            raise FunctionNotFoundError(
                f"The function '{entity_name}' doesn't exist, is disabled, or is not an entity function."
            )
        eid = entity_scheduler_id(entity_name, entity_key)
        body = {
            "op": operation,
            "signal": True,
            "input": input_json,
            "id": str(uuid.uuid4()),
            "parent": None,
            "timestamp": h.format_ts(self.clock.now()),
        }
        with self.store.tx() as cur:
            cur.execute(
                "INSERT INTO entity_messages(entity_id, body, visible_at, lease_owner, lease_until) "
                "VALUES(?,?,?,?,?)",
                (eid, dumps(body), 0.0, self.host_id, self._lease_until()),
            )
            mid = cur.lastrowid
        assert mid is not None
        with self._cond:
            self._deliver_entity_locked(eid, EntMsg(mid, body))

    def read_entity(self, entity_name: str, entity_key: str) -> tuple[bool, str | None]:
        rows = self.store.query(
            "SELECT exists_, state FROM entities WHERE entity_id=?",
            (entity_scheduler_id(entity_name, entity_key),),
        )
        if not rows or not rows[0][0]:
            return False, None
        return True, rows[0][1]

    def wait_for_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                # On a running virtual clock, pending timers are work: they fire as soon as all is idle.
                timers_are_work = isinstance(self.clock, VirtualClock) and not self.clock.paused
                self._skip_dead_timers_locked()
                idle = self._idle_locked() and not (timers_are_work and self._timers)
                if idle:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))

    # ---- extras for tests and benchmarks (not part of the seam) --------------------------------
    def wait_for_completion(self, instance_id: str, timeout: float) -> dict[str, Any] | None:
        """Block until the instance is Completed, Failed or Terminated; returns its status (or None)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                inst = self._insts.get(instance_id)
                if inst is not None and inst.status not in TERMINAL and not self._stopping:
                    # Live in memory: its finishing episode notifies _done_cv (the timeout is a
                    # safety net only).
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._done_cv.wait(min(left, 0.5))
                    continue
            st = self.get_status(instance_id)
            if st is not None and st["runtimeStatus"] in TERMINAL:
                return st
            left = deadline - time.monotonic()
            if left <= 0:
                return st
            with self._cond:
                self._done_cv.wait(min(left, 0.05))
        return self.get_status(instance_id)

    def _stats_for(self, instance_id: str) -> InstanceStats:
        st = self.stats.get(instance_id)
        if st is None:
            st = self.stats[instance_id] = InstanceStats()
            while len(self.stats) > STATS_MAX_INSTANCES:
                # Oldest first (dicts keep insertion order): bounded memory on a long-running host.
                try:
                    del self.stats[next(iter(self.stats))]
                except (StopIteration, KeyError, RuntimeError):
                    break
        return st

    def instance_stats(self, instance_id: str) -> dict[str, Any]:
        st = self.stats.get(instance_id) or InstanceStats()
        return {"episodes": st.episodes, "activityLatencyMs": list(st.activity_latency_ms)}


def _create_instance(
    cur: Any,
    engine: DurableEngine,
    iid: str,
    name: str,
    input_json: str | None,
    now: datetime,
    parent_instance_id: str | None,
    parent_execution_id: str | None,
    parent_task_id: int | None,
) -> tuple[Inst, Msg]:
    exec_id = uuid.uuid4().hex
    ts = h.format_ts(now)
    cur.execute("DELETE FROM history WHERE instance_id=?", (iid,))
    cur.execute("DELETE FROM messages WHERE instance_id=?", (iid,))
    cur.execute(
        "INSERT OR REPLACE INTO instances(instance_id, name, execution_id, status, input, output, "
        "custom_status, created, last_updated, parent_instance_id, parent_execution_id, parent_task_id, "
        "suspended, created_epoch) "
        "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,0,?)",
        (
            iid,
            name,
            exec_id,
            "Pending",
            input_json,
            None,
            None,
            ts,
            ts,
            parent_instance_id,
            parent_execution_id,
            parent_task_id,
            now.timestamp(),
        ),
    )
    parent = (
        {
            "Name": None,
            "OrchestrationInstance": {"InstanceId": parent_instance_id, "ExecutionId": parent_execution_id},
        }
        if parent_instance_id
        else None
    )
    ev = h.execution_started(
        now, name=name, input_json=input_json, instance_id=iid, execution_id=exec_id, parent=parent
    )
    cur.execute(
        INSERT_MSG,
        (iid, exec_id, dumps(ev), 0.0, engine.host_id, engine._lease_until()),
    )
    mid = cur.lastrowid
    assert mid is not None
    inst = Inst(
        instance_id=iid,
        name=name,
        execution_id=exec_id,
        status="Pending",
        input=input_json,
        created=ts,
        last_updated=ts,
        created_epoch=now.timestamp(),
        parent_instance_id=parent_instance_id,
        parent_execution_id=parent_execution_id,
        parent_task_id=parent_task_id,
        history=[],
        history_json=[],
    )
    return inst, Msg(mid, exec_id, ev)


class _Episode:
    """Collects one episode's effects, then commits them in one transaction and updates memory."""

    def __init__(self, engine: DurableEngine, inst: Inst, now: datetime) -> None:
        self.e = engine
        self.inst = inst
        self.now = now
        self.events: list[Event] = []  # appended to history (IsPlayed is set when stored)
        self.reset_history = False
        self.status = inst.status
        self.output = inst.output
        self.custom_status = inst.custom_status
        self.suspended = inst.suspended
        self.execution_id = inst.execution_id
        self.input = inst.input
        self.activities: list[tuple[int, str, str | None]] = []
        self.timers: list[tuple[int, datetime]] = []
        self.subs: list[Decision] = []
        self.entity_msgs: list[tuple[str, dict[str, Any], float]] = []
        self.out_msgs: list[tuple[str, str | None, Event]] = []  # (instance, execution, event)
        self.next_start: tuple[str, str | None] | None = None  # continue-as-new (execution id, input)
        self.drop_timers = False
        self.canceled_timers: list[int] = []

    def set_suspended(self, suspended: bool) -> None:
        self.suspended = suspended
        if suspended:
            self.status = "Suspended"
        elif self.status == "Suspended":
            self.status = "Running"

    def append_control_only(self, events: list[Event]) -> None:
        if events:
            self.events += [h.orchestrator_started(self.now), *events, h.orchestrator_completed(self.now)]

    def terminate(self, reason: str | None) -> None:
        self.events += [
            h.orchestrator_started(self.now),
            h.execution_terminated(self.now, reason),
            h.execution_completed(self.now, "Terminated", reason),
            h.orchestrator_completed(self.now),
        ]
        self.status = "Terminated"
        self.output = json.dumps(reason) if reason is not None else None
        self._notify_parent(False, self.output, reason or "terminated", None)
        self.drop_timers = True

    def _notify_parent(self, ok: bool, result: str | None, reason: str, details: str | None) -> None:
        inst = self.inst
        if not inst.parent_instance_id or inst.parent_task_id is None:
            return
        ev = (
            h.sub_completed(self.now, inst.parent_task_id, result)
            if ok
            else h.sub_failed(self.now, inst.parent_task_id, reason, details)
        )
        self.out_msgs.append((inst.parent_instance_id, inst.parent_execution_id, ev))

    def _fail(self, message: str, details: str | None = None) -> None:
        self.status = "Failed"
        self.output = json.dumps(message)
        self.events.append(h.execution_completed(self.now, "Failed", self.output))
        self._notify_parent(False, None, message, details)
        self.drop_timers = True

    def run(self, new_events: list[Event]) -> None:
        inst = self.inst
        e = self.e
        assert inst.history is not None
        assert inst.history_json is not None
        e._stats_for(inst.instance_id).episodes += 1
        fn = e.registry.orchestrator(inst.name)
        started = h.orchestrator_started(self.now)
        fresh = [started, *new_events]
        self.events += fresh
        if self.status == "Pending":
            self.status = "Running"
        if fn is None:
            self._fail(f"The orchestrator function '{inst.name}' doesn't exist in this app.")
            self.events.append(h.orchestrator_completed(self.now))
            return
        body = (
            '{"history":['
            + ",".join([*inst.history_json, *(dumps(x) for x in fresh)])
            + "],"
            + dumps(
                {
                    "input": inst.input,
                    "instanceId": inst.instance_id,
                    "isReplaying": bool(inst.history),
                    "parentInstanceId": inst.parent_instance_id,
                    "upperSchemaVersion": 1,
                    "upperSchemaVersionNew": 2,
                    "maximumShortTimerDuration": "6.00:00:00",
                    "longRunningTimerIntervalDuration": "3.00:00:00",
                    "defaultHttpAsyncRequestSleepTimeMillseconds": 30000,
                }
            )[1:]
        )
        try:
            raw, _threw = invoke_orchestrator(fn, body, inst.instance_id)
            state = parse_orchestrator_output(raw)
            actions = flatten_actions(state)
            result = replay(
                inst.instance_id,
                inst.execution_id,
                actions,
                [*inst.history, *fresh],
                known=e.registry.exists,
                parent_instance_id=inst.parent_instance_id,
            )
        except NondeterminismError as exc:
            self._fail(f"Orchestrator function '{inst.name}' failed: {exc}")
            self.events.append(h.orchestrator_completed(self.now))
            return
        except InvalidActionError as exc:
            self._fail(f"Orchestrator function '{inst.name}' failed: {exc}")
            self.events.append(h.orchestrator_completed(self.now))
            return
        except (ProtocolError, ValueError, KeyError, TypeError) as exc:
            self._fail(f"Orchestrator function '{inst.name}' failed: {type(exc).__name__}: {exc}")
            self.events.append(h.orchestrator_completed(self.now))
            return
        except Exception as exc:
            self._fail(f"Orchestrator function '{inst.name}' failed: {exc}")
            self.events.append(h.orchestrator_completed(self.now))
            return
        cs = state.get("customStatus")
        if cs is not None:
            # The extension only ever sets a non-null custom status (ScheduleDurableTaskEvents).
            self.custom_status = json.dumps(cs)
        self.canceled_timers = result.canceled_timer_ids
        for d in result.decisions:
            self._decide(d)
        error = state.get("error")
        if result.finished and error:
            msg = f"Orchestrator function '{inst.name}' failed: {error}"
            self._fail(msg, error)
        elif result.finished and state.get("isDone"):
            if result.continue_as_new:
                self.events.append(
                    h.execution_completed(self.now, "ContinuedAsNew", result.continue_as_new_input)
                )
                self.reset_history = True
                self.status = "Running"
                self.execution_id = uuid.uuid4().hex
                self.input = result.continue_as_new_input
                self.next_start = (self.execution_id, result.continue_as_new_input)
                self.drop_timers = True
            else:
                out = state.get("output")
                self.output = None if out is None else json.dumps(out)
                self.status = "Completed"
                self.events.append(h.execution_completed(self.now, "Completed", self.output))
                self._notify_parent(True, self.output, "", None)
                self.drop_timers = True
        self.events.append(h.orchestrator_completed(self.now))

    def _decide(self, d: Decision) -> None:
        now = self.now
        inst = self.inst
        if d.kind == "activity":
            self.events.append(h.task_scheduled(now, d.event_id, d.name, d.input))
            self.activities.append((d.event_id, d.name, d.input))
        elif d.kind == "timer":
            assert d.fire_at is not None
            self.events.append(h.timer_created(now, d.event_id, d.fire_at))
            if not d.canceled:
                self.timers.append((d.event_id, d.fire_at))
        elif d.kind == "sub":
            assert d.instance_id is not None
            self.events.append(h.sub_created(now, d.event_id, d.name, d.instance_id, d.input))
            self.subs.append(d)
        else:
            assert d.instance_id is not None
            is_signal = d.kind == "entity_signal"
            body = {
                "op": d.operation,
                "signal": is_signal,
                "input": d.input,
                "id": d.request_id,
                "parent": inst.instance_id,
                "parentExecution": inst.execution_id,
                "timestamp": h.format_ts(now),
            }
            self.events.append(h.event_sent(now, d.event_id, d.instance_id, "op", dumps(body)))
            visible = d.fire_at.timestamp() if (is_signal and d.fire_at is not None) else 0.0
            self.entity_msgs.append((d.instance_id, body, visible))

    # ------------------------------------------------------------------------------ commit
    def commit(self, consumed: list[int]) -> None:
        e = self.e
        inst = self.inst
        lease = e._lease_until()
        owner = e.host_id
        new_msgs: list[tuple[str, Msg, float]] = []
        new_acts: list[ActivityItem] = []
        new_ents: list[tuple[str, EntMsg, float]] = []
        new_insts: list[Inst] = []
        stored = [dict(ev, IsPlayed=True) for ev in self.events]
        stored_json = [dumps(ev) for ev in stored]
        ts = h.format_ts(self.now)

        def insert_msg(cur: Any, target: str, exec_id: str | None, ev: Event, visible: float) -> None:
            cur.execute(
                INSERT_MSG,
                (target, exec_id, dumps(ev), visible, owner, lease),
            )
            new_msgs.append((target, Msg(cur.lastrowid, exec_id, ev), visible))

        with e.store.tx() as cur:
            if consumed:
                cur.executemany("DELETE FROM messages WHERE id=?", [(i,) for i in consumed])
            dead_timers: list[int] = []
            if self.drop_timers or self.reset_history:
                dead_timers += [
                    r[0]
                    for r in cur.execute(
                        "SELECT id FROM messages WHERE instance_id=? AND visible_at > 0 AND execution_id=?",
                        (inst.instance_id, inst.execution_id),
                    ).fetchall()
                ]
            base = len(inst.history_json or [])
            if self.reset_history:
                cur.execute("DELETE FROM history WHERE instance_id=?", (inst.instance_id,))
            elif stored_json:
                cur.executemany(
                    "INSERT INTO history(instance_id, seq, event) VALUES(?,?,?)",
                    [(inst.instance_id, base + i, j) for i, j in enumerate(stored_json)],
                )
            touched = bool(self.events) or self.status != inst.status or self.suspended != inst.suspended
            cur.execute(
                "UPDATE instances SET status=?, output=?, custom_status=?, last_updated=?, execution_id=?, "
                "input=?, suspended=? WHERE instance_id=?",
                (
                    self.status,
                    self.output,
                    self.custom_status,
                    ts if touched else inst.last_updated,
                    self.execution_id,
                    self.input,
                    int(self.suspended),
                    inst.instance_id,
                ),
            )
            for task_id, name, inp in self.activities:
                cur.execute(
                    "INSERT INTO activities(instance_id, execution_id, task_id, name, input, scheduled_at, "
                    "lease_owner, lease_until) VALUES(?,?,?,?,?,?,?,?)",
                    (inst.instance_id, inst.execution_id, task_id, name, inp, time.time(), owner, lease),
                )
                assert cur.lastrowid is not None
                new_acts.append(
                    ActivityItem(cur.lastrowid, inst.instance_id, inst.execution_id, task_id, name, inp)
                )
            if not self.drop_timers:
                for task_id, fire_at in self.timers:
                    insert_msg(
                        cur,
                        inst.instance_id,
                        inst.execution_id,
                        h.timer_fired(fire_at, task_id, fire_at),
                        max(fire_at.timestamp(), 1e-6),
                    )
            if self.canceled_timers and not self.drop_timers:
                # One statement for all of them: a fan-in cancels many timeout timers at once.
                marks = ",".join("?" * len(self.canceled_timers))
                dead_timers += [
                    r[0]
                    for r in cur.execute(
                        "SELECT id FROM messages WHERE instance_id=? AND execution_id=? "  # noqa: S608
                        f"AND visible_at > 0 AND json_extract(event, '$.TimerId') IN ({marks})",
                        (inst.instance_id, inst.execution_id, *self.canceled_timers),
                    ).fetchall()
                ]
            if dead_timers:
                cur.executemany("DELETE FROM messages WHERE id=?", [(i,) for i in dead_timers])
            for d in self.subs:
                assert d.instance_id is not None
                child = d.instance_id
                row = cur.execute("SELECT status FROM instances WHERE instance_id=?", (child,)).fetchone()
                fn = e.registry.orchestrator(d.name)
                if fn is None or (row is not None and row[0] not in TERMINAL):
                    reason = (
                        f"The orchestrator function '{d.name}' doesn't exist."
                        if fn is None
                        else f"An orchestration with instance ID '{child}' already exists."
                    )
                    insert_msg(
                        cur,
                        inst.instance_id,
                        inst.execution_id,
                        h.sub_failed(self.now, d.event_id, reason, None),
                        0.0,
                    )
                    continue
                child_inst, start_msg = _create_instance(
                    cur, e, child, fn.name, d.input, self.now, inst.instance_id, inst.execution_id, d.event_id
                )
                new_insts.append(child_inst)
                new_msgs.append((child, start_msg, 0.0))
            for entity_id, body, visible in self.entity_msgs:
                cur.execute(
                    "INSERT INTO entity_messages(entity_id, body, visible_at, lease_owner, lease_until) "
                    "VALUES(?,?,?,?,?)",
                    (entity_id, dumps(body), visible, owner, lease),
                )
                assert cur.lastrowid is not None
                new_ents.append((entity_id, EntMsg(cur.lastrowid, body), visible))
            for target, exec_id, ev in self.out_msgs:
                insert_msg(cur, target, exec_id, ev, 0.0)
            if self.next_start is not None:
                exec_id, inp = self.next_start
                ev = h.execution_started(
                    self.now,
                    name=inst.name,
                    input_json=inp,
                    instance_id=inst.instance_id,
                    execution_id=exec_id,
                    parent=(
                        {
                            "Name": None,
                            "OrchestrationInstance": {
                                "InstanceId": inst.parent_instance_id,
                                "ExecutionId": inst.parent_execution_id,
                            },
                        }
                        if inst.parent_instance_id
                        else None
                    ),
                )
                insert_msg(cur, inst.instance_id, exec_id, ev, 0.0)

        # ---- memory (after the commit: a crash before it leaves SQLite consistent) -------------
        with e._cond:
            inst.status = self.status
            inst.output = self.output
            inst.custom_status = self.custom_status
            inst.suspended = self.suspended
            inst.execution_id = self.execution_id
            inst.input = self.input
            if touched:
                inst.last_updated = ts
            if self.reset_history or self.status in TERMINAL:
                inst.history = [] if self.reset_history else None
                inst.history_json = [] if self.reset_history else None
            elif inst.history is not None and inst.history_json is not None:
                inst.history.extend(stored)
                inst.history_json.extend(stored_json)
            if self.status in TERMINAL:
                e._done_cv.notify_all()
            # Lazy deletion: the timer loop skips these when they reach the top of the heap.
            e._dead_timers.update(dead_timers)
            for child_inst in new_insts:
                e._insts[child_inst.instance_id] = child_inst
            for a in new_acts:
                e._acts.append(a)
                e._act_cv.notify()
            inst.in_flight += len(new_acts)
            for target, m, visible in new_msgs:
                if visible > 0:
                    heapq.heappush(e._timers, (visible, m.id, "o", target, m))
                else:
                    e._deliver_locked(target, m)
            for entity_id, em, visible in new_ents:
                if visible > 0:
                    heapq.heappush(e._timers, (visible, em.id, "e", entity_id, em))
                else:
                    e._deliver_entity_locked(entity_id, em)
            e._cond.notify_all()


def management_history(events: list[Event], show_output: bool) -> list[dict[str, Any]]:
    """History in the management API's shape: string EventType, TaskScheduled folded into completions."""
    scheduled: dict[int, Event] = {}
    out: list[dict[str, Any]] = []
    for ev in events:
        et = EventType(ev["EventType"])
        if et in (EventType.ORCHESTRATOR_STARTED, EventType.ORCHESTRATOR_COMPLETED):
            continue
        if et in (EventType.TASK_SCHEDULED, EventType.SUB_ORCHESTRATION_INSTANCE_CREATED):
            scheduled[int(ev["EventId"])] = ev
            continue
        item: dict[str, Any] = {
            "EventType": _pascal(et),
            "EventId": ev.get("EventId", -1),
            "Timestamp": ev["Timestamp"],
        }
        if et == EventType.EXECUTION_STARTED:
            item["FunctionName"] = ev.get("Name")
            if show_output:
                item["Input"] = _parse_json(ev.get("Input"))
        elif et in (
            EventType.TASK_COMPLETED,
            EventType.TASK_FAILED,
            EventType.SUB_ORCHESTRATION_INSTANCE_COMPLETED,
            EventType.SUB_ORCHESTRATION_INSTANCE_FAILED,
        ):
            sched = scheduled.get(int(ev.get("TaskScheduledId", -1)))
            if sched is not None:
                item["FunctionName"] = sched.get("Name")
                item["ScheduledTime"] = sched["Timestamp"]
                if sched.get("InstanceId"):
                    item["InstanceId"] = sched.get("InstanceId")
            item["TaskScheduledId"] = ev.get("TaskScheduledId")
            if "Reason" in ev:
                item["Reason"] = ev.get("Reason")
                item["Details"] = ev.get("Details")
            if show_output and "Result" in ev:
                item["Result"] = _parse_json(ev.get("Result"))
        elif et == EventType.EXECUTION_COMPLETED:
            item["OrchestrationStatus"] = ev.get("OrchestrationStatus")
            if show_output:
                item["Result"] = _parse_json(ev.get("Result"))
        elif et in (EventType.TIMER_CREATED, EventType.TIMER_FIRED):
            item["FireAt"] = ev.get("FireAt")
            if et == EventType.TIMER_FIRED:
                item["TimerId"] = ev.get("TimerId")
        elif et in (EventType.EVENT_RAISED, EventType.EVENT_SENT):
            item["Name"] = ev.get("Name")
            if et == EventType.EVENT_SENT:
                item["InstanceId"] = ev.get("InstanceId")
            if show_output:
                item["Input"] = _parse_json(ev.get("Input"))
        out.append(item)
    return out


def _pascal(et: EventType) -> str:
    return "".join(p.capitalize() for p in et.name.split("_"))
