"""DAG analysis: topological order, depth, ancestry, the ready set and failure propagation.

Edges run from a dependency to its dependant (``b`` in ``a.dependsOn`` gives ``b -> a``).

Propagation policy (also in docs/definition-format.md):

* ``succeeded`` and ``skipped`` satisfy a dependant. A skipped task's output reads as ``null``.
* ``failed`` and ``cancelled`` never satisfy: every pending transitive dependant becomes
  ``cancelled`` at once (cancelled, not skipped, because a skip would satisfy *its* dependants
  and let them run on inputs that were never produced).
* ``deadLettered`` blocks its dependants until an operator resolves it: retry (back to
  ``scheduled``), skip (dependants may run) or cancel (dependants are cancelled).

:class:`DagIndex` is built once per definition in O(V+E). :class:`DagRun` tracks one execution
incrementally: marking a task done costs O(out-degree), cancelling costs O(cancelled subgraph).
Everything is deterministic (definition order breaks ties), so an orchestrator may rebuild it on
every replay.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.errors import IllegalTransitionError, WeftError
from shared.states import TASK_MACHINE, TaskStatus

SATISFIED: frozenset[TaskStatus] = frozenset({TaskStatus.SUCCEEDED, TaskStatus.SKIPPED})
UNSATISFIABLE: frozenset[TaskStatus] = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED})


class GraphError(WeftError):
    """The dependency graph is not a DAG over known tasks (validation should have caught it)."""

    default_type = "weft.InvalidGraph"
    default_non_retryable = True


def find_cycles(dependencies: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """One cycle per strongly connected component that has one, as ``[a, b, ..., a]``.

    Read ``a -> b`` as "a depends on b". Self-dependencies are reported as ``[a, a]``. Unknown
    dependencies are ignored. Iterative Tarjan, O(V+E); the order follows ``dependencies``.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0

    edges = {n: [d for d in deps if d in dependencies] for n, deps in dependencies.items()}

    def successors(node: str) -> list[str]:
        return edges[node]

    for root in dependencies:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, i = work[-1]
            succ = successors(node)
            if i < len(succ):
                work[-1] = (node, i + 1)
                nxt = succ[i]
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)

    order = {name: i for i, name in enumerate(dependencies)}
    cycles: list[list[str]] = []
    for component in sorted(components, key=lambda c: min(order[n] for n in c)):
        members = set(component)
        start = min(component, key=order.__getitem__)
        if len(component) == 1:
            if start in dependencies.get(start, ()):
                cycles.append([start, start])
            continue
        cycles.append(_cycle_through(start, members, successors))
    return cycles


def _cycle_through(start: str, members: set[str], successors: Callable[[str], list[str]]) -> list[str]:
    """A simple cycle through ``start`` inside one strongly connected component (BFS back to it)."""
    parent: dict[str, str] = {}
    queue: deque[str] = deque([start])
    seen = {start}
    while queue:
        node = queue.popleft()
        for nxt in successors(node):
            if nxt not in members:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                path.reverse()
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError("a strongly connected component always has a cycle through each member")


@dataclass(frozen=True)
class DagIndex:
    """The immutable shape of one definition's graph, computed once in O(V+E)."""

    ids: tuple[str, ...]
    dependencies: Mapping[str, tuple[str, ...]]
    dependants: Mapping[str, tuple[str, ...]]
    topological_order: tuple[str, ...]
    # Length of the longest dependency chain above a task: 0 for a root.
    depth: Mapping[str, int]
    position: Mapping[str, int] = field(repr=False)

    @classmethod
    def build(cls, dependencies: Mapping[str, Sequence[str]]) -> DagIndex:
        """Raises :class:`GraphError` on an unknown dependency or a cycle."""
        ids = tuple(dependencies)
        deps: dict[str, tuple[str, ...]] = {}
        dependants: dict[str, list[str]] = {t: [] for t in ids}
        for task in ids:
            # A repeated dependency is one edge.
            unique = tuple(dict.fromkeys(dependencies[task]))
            for d in unique:
                if d not in dependants:
                    raise GraphError(f"task '{task}' depends on unknown task '{d}'")
                dependants[d].append(task)
            deps[task] = unique

        indegree = {t: len(deps[t]) for t in ids}
        depth = dict.fromkeys(ids, 0)
        queue: deque[str] = deque(t for t in ids if indegree[t] == 0)
        order: list[str] = []
        while queue:
            node = queue.popleft()
            order.append(node)
            for child in dependants[node]:
                depth[child] = max(depth[child], depth[node] + 1)
                indegree[child] -= 1
                if indegree[child] == 0:
                    queue.append(child)
        if len(order) != len(ids):
            cycles = find_cycles(deps)
            shown = " -> ".join(cycles[0]) if cycles else "?"
            raise GraphError(f"dependency cycle: {shown}", details={"cycles": cycles})
        position = {t: i for i, t in enumerate(order)}
        return cls(
            ids=ids,
            dependencies=deps,
            dependants={t: tuple(c) for t, c in dependants.items()},
            topological_order=tuple(order),
            depth=depth,
            position=position,
        )

    @property
    def roots(self) -> tuple[str, ...]:
        return tuple(t for t in self.ids if not self.dependencies[t])

    @property
    def leaves(self) -> tuple[str, ...]:
        return tuple(t for t in self.ids if not self.dependants[t])

    def ancestors(self, task: str) -> frozenset[str]:
        return frozenset(_reach(task, self.dependencies))

    def descendants(self, task: str) -> frozenset[str]:
        return frozenset(_reach(task, self.dependants))

    def levels(self) -> list[list[str]]:
        """Tasks grouped by depth: everything in one level can run side by side."""
        out: list[list[str]] = [[] for _ in range(max(self.depth.values(), default=-1) + 1)]
        for t in self.topological_order:
            out[self.depth[t]].append(t)
        return out


def _reach(start: str, edges: Mapping[str, Sequence[str]]) -> list[str]:
    seen: dict[str, None] = {}
    queue: deque[str] = deque(edges[start])
    while queue:
        node = queue.popleft()
        if node in seen:
            continue
        seen[node] = None
        queue.extend(edges[node])
    return list(seen)


def ready_set(index: DagIndex, statuses: Mapping[str, TaskStatus]) -> list[str]:
    """Pending tasks whose dependencies are all satisfied, in topological order.

    A task missing from ``statuses`` counts as pending. Stateless, O(V+E); use :class:`DagRun`
    for the incremental form.
    """

    def status(t: str) -> TaskStatus:
        return statuses.get(t, TaskStatus.PENDING)

    return [
        t
        for t in index.topological_order
        if status(t) is TaskStatus.PENDING and all(status(d) in SATISFIED for d in index.dependencies[t])
    ]


def propagate_failure(index: DagIndex, task: str, statuses: Mapping[str, TaskStatus]) -> list[str]:
    """The pending descendants of ``task`` that become ``cancelled`` because it failed or was cancelled."""
    return [
        d
        for d in sorted(index.descendants(task), key=index.position.__getitem__)
        if statuses.get(d, TaskStatus.PENDING) is TaskStatus.PENDING
    ]


@dataclass(frozen=True)
class Delta:
    """What one status change set in motion."""

    ready: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()


class DagRun:
    """The mutable progress of one execution over a :class:`DagIndex`.

    Every change goes through the task state machine, so an illegal transition raises
    :class:`~shared.errors.IllegalTransitionError`. Usage per completion::

        delta = run.set_status("extract", TaskStatus.SUCCEEDED)
        for task in delta.ready: schedule(task)          # O(out-degree)
    """

    def __init__(self, index: DagIndex, statuses: Mapping[str, TaskStatus] | None = None) -> None:
        """``statuses`` restores a run from stored state (missing tasks are pending); O(V+E)."""
        self.index = index
        self._status: dict[str, TaskStatus] = dict.fromkeys(index.ids, TaskStatus.PENDING)
        for t, s in (statuses or {}).items():
            if t not in self._status:
                raise GraphError(f"status given for unknown task '{t}'")
            self._status[t] = s
        self._unmet = {
            t: sum(1 for d in index.dependencies[t] if self._status[d] not in SATISFIED) for t in index.ids
        }
        # Insertion-ordered set of pending tasks with nothing unmet: the ready set.
        self._ready: dict[str, None] = {}
        for t in index.topological_order:
            if self._status[t] is TaskStatus.PENDING and self._unmet[t] == 0:
                self._ready[t] = None

    def status(self, task: str) -> TaskStatus:
        return self._status[task]

    @property
    def statuses(self) -> Mapping[str, TaskStatus]:
        return dict(self._status)

    def ready(self) -> list[str]:
        """Pending tasks whose dependencies are all satisfied, in the order they became ready."""
        return list(self._ready)

    def pending_failures(self) -> list[str]:
        """Pending tasks that can never run (an unsatisfiable dependency): should be empty."""
        return [
            t
            for t in self.index.ids
            if self._status[t] is TaskStatus.PENDING
            and any(self._status[d] in UNSATISFIABLE for d in self.index.dependencies[t])
        ]

    def set_status(self, task: str, status: TaskStatus) -> Delta:
        """Apply one transition and its consequences; returns newly ready and cancelled tasks."""
        current = self._status[task]
        TASK_MACHINE.check(current, status)
        # Only a skip or a cancel may overtake unfinished dependencies.
        if (
            current is TaskStatus.PENDING
            and status not in (TaskStatus.CANCELLED, TaskStatus.SKIPPED)
            and self._unmet[task]
        ):
            raise IllegalTransitionError(
                f"task '{task}' cannot become {status}: a dependency is not satisfied",
                details={"task": task, "to": str(status)},
            )
        self._status[task] = status
        self._ready.pop(task, None)
        if status in SATISFIED:
            return Delta(ready=self._release(task))
        if status in UNSATISFIABLE:
            return Delta(cancelled=self._cancel_descendants(task))
        return Delta()

    def start(self, task: str) -> None:
        """pending -> scheduled for a ready task."""
        if task not in self._ready:
            raise IllegalTransitionError(
                f"task '{task}' is not ready (status {self._status[task]})", details={"task": task}
            )
        self.set_status(task, TaskStatus.SCHEDULED)

    def cancel_pending(self) -> list[str]:
        """Cancel every pending task (failExecution after a failure, or a cancelled execution)."""
        cancelled = [t for t in self.index.topological_order if self._status[t] is TaskStatus.PENDING]
        for t in cancelled:
            self._status[t] = TaskStatus.CANCELLED
        self._ready.clear()
        return cancelled

    def active(self) -> list[str]:
        """Tasks started but not finished: scheduled, running or retrying."""
        live = {TaskStatus.SCHEDULED, TaskStatus.RUNNING, TaskStatus.RETRYING}
        return [t for t in self.index.ids if self._status[t] in live]

    def is_complete(self) -> bool:
        return all(TASK_MACHINE.is_terminal(s) for s in self._status.values())

    def count(self, statuses: Iterable[TaskStatus]) -> int:
        wanted = set(statuses)
        return sum(1 for s in self._status.values() if s in wanted)

    def _release(self, task: str) -> tuple[str, ...]:
        newly: list[str] = []
        for child in self.index.dependants[task]:
            self._unmet[child] -= 1
            if self._unmet[child] == 0 and self._status[child] is TaskStatus.PENDING:
                self._ready[child] = None
                newly.append(child)
        return tuple(newly)

    def _cancel_descendants(self, task: str) -> tuple[str, ...]:
        cancelled: list[str] = []
        queue: deque[str] = deque(self.index.dependants[task])
        while queue:
            node = queue.popleft()
            if self._status[node] is not TaskStatus.PENDING:
                continue
            self._status[node] = TaskStatus.CANCELLED
            self._ready.pop(node, None)
            cancelled.append(node)
            queue.extend(self.index.dependants[node])
        return tuple(cancelled)
