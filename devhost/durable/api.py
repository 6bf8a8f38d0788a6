"""The seam between devhost's front end (HTTP, triggers, management API) and its durable engine.

``devhost.durable`` implements :class:`DurableBackend`; ``devhost.host`` and the management HTTP API
call only these methods. Status dicts use the Durable extension's management-API JSON shape
(``name``, ``instanceId``, ``runtimeStatus``, ``input``, ``customStatus``, ``output``, ``createdTime``,
``lastUpdatedTime``, and ``historyEvents`` when asked), so the HTTP layer can return them as they are.
All JSON payloads cross this seam as JSON *strings* (or None), exactly as the extension stores them;
the one exception is the status dicts, whose ``input``, ``output`` and ``customStatus`` (and history
``Input``/``Result``) are decoded JSON values, as the management API shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


class InstanceExistsError(Exception):
    """start_instance with an id whose instance is still running (Pending, Running, Suspended)."""


class InstanceNotFoundError(Exception):
    pass


class InvalidStateError(Exception):
    """E.g. raising an event into, or terminating, an instance that has already finished."""


class FunctionNotFoundError(ValueError):
    """start_instance / signal_entity named an orchestrator or entity the app does not define (HTTP 400)."""


@dataclass(frozen=True)
class InstanceQuery:
    runtime_status: tuple[str, ...] = ()
    created_from: datetime | None = None
    created_to: datetime | None = None
    instance_id_prefix: str | None = None
    top: int = 100
    continuation_token: str | None = None
    show_input: bool = False


class DurableBackend(Protocol):
    task_hub: str

    def start(self) -> None:
        """Start the dispatch loops (orchestrator, activity and entity workers, timers)."""

    def stop(self, *, graceful: bool = True, timeout: float = 30.0) -> None: ...

    def start_instance(
        self,
        orchestrator: str,
        instance_id: str | None,
        input_json: str | None,
        *,
        parent_instance_id: str | None = None,
    ) -> str: ...

    def get_status(
        self,
        instance_id: str,
        *,
        show_history: bool = False,
        show_history_output: bool = False,
        show_input: bool = True,
    ) -> dict[str, Any] | None: ...

    def query_instances(self, query: InstanceQuery) -> tuple[list[dict[str, Any]], str | None]: ...

    def raise_event(self, instance_id: str, event_name: str, data_json: str | None) -> None: ...

    def terminate(self, instance_id: str, reason: str | None) -> None: ...

    def suspend(self, instance_id: str, reason: str | None) -> None: ...

    def resume(self, instance_id: str, reason: str | None) -> None: ...

    def purge(self, instance_id: str) -> bool: ...

    def purge_many(self, query: InstanceQuery) -> int: ...

    def signal_entity(
        self, entity_name: str, entity_key: str, operation: str, input_json: str | None
    ) -> None: ...

    def read_entity(self, entity_name: str, entity_key: str) -> tuple[bool, str | None]:
        """(exists, state as a JSON string)."""
        ...

    def wait_for_idle(self, timeout: float) -> bool:
        """For tests and benchmarks: True once no work item is pending or running (timers excepted)."""
        ...
