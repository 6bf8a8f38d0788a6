"""An in-memory DurableBackend for testing devhost's HTTP layer without the engine.

It keeps instances and entities the way the seam describes (JSON strings in, management-API dicts out)
and records every call, so tests can check what the HTTP layer asked of the engine.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime
from typing import Any

from devhost.durable.api import (
    InstanceExistsError,
    InstanceNotFoundError,
    InstanceQuery,
    InvalidStateError,
)

TERMINAL = {"Completed", "Failed", "Terminated", "Canceled"}


def _iso(d: datetime) -> str:
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeBackend:
    def __init__(self, task_hub: str = "testhub") -> None:
        self.task_hub = task_hub
        self.instances: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str | None]] = []
        self.signals: list[tuple[str, str, str, str | None]] = []
        self.entities: dict[tuple[str, str], str] = {}
        self.calls: list[str] = []
        self.started = False
        self.stopped = False
        self._lock = threading.Lock()

    def start(self) -> None:
        self.started = True

    def stop(self, *, graceful: bool = True, timeout: float = 30.0) -> None:
        self.stopped = True

    def start_instance(
        self,
        orchestrator: str,
        instance_id: str | None,
        input_json: str | None,
        *,
        parent_instance_id: str | None = None,
    ) -> str:
        iid = instance_id or uuid.uuid4().hex
        with self._lock:
            existing = self.instances.get(iid)
            if existing and existing["runtimeStatus"] not in TERMINAL:
                raise InstanceExistsError(f"An instance with ID '{iid}' already exists.")
            now = datetime.now(UTC)
            self.instances[iid] = {
                "name": orchestrator,
                "instanceId": iid,
                "runtimeStatus": "Pending",
                # As the extension reports it: the JSON text the orchestrator reads, as a string.
                "input": input_json,
                "customStatus": None,
                "output": None,
                "createdTime": _iso(now),
                "lastUpdatedTime": _iso(now),
                "_created": now,
            }
        self.calls.append(f"start:{orchestrator}:{iid}")
        return iid

    def set_status(self, iid: str, status: str, output: Any = None) -> None:
        self.instances[iid]["runtimeStatus"] = status
        self.instances[iid]["output"] = output

    def _public(self, inst: dict[str, Any], show_input: bool) -> dict[str, Any]:
        out = {k: v for k, v in inst.items() if not k.startswith("_")}
        if not show_input:
            out["input"] = None
        return out

    def get_status(
        self,
        instance_id: str,
        *,
        show_history: bool = False,
        show_history_output: bool = False,
        show_input: bool = True,
    ) -> dict[str, Any] | None:
        inst = self.instances.get(instance_id)
        if inst is None:
            return None
        out = self._public(inst, show_input)
        if show_history:
            out["historyEvents"] = [{"EventType": "ExecutionStarted", "FunctionName": inst["name"]}]
        return out

    def query_instances(self, query: InstanceQuery) -> tuple[list[dict[str, Any]], str | None]:
        rows = sorted(self.instances.values(), key=lambda i: (i["_created"], i["instanceId"]))
        rows = [
            r
            for r in rows
            if (not query.runtime_status or r["runtimeStatus"] in query.runtime_status)
            and (query.created_from is None or r["_created"] >= query.created_from)
            and (query.created_to is None or r["_created"] <= query.created_to)
            and (query.instance_id_prefix is None or r["instanceId"].startswith(query.instance_id_prefix))
        ]
        start = int(query.continuation_token or 0)
        page = rows[start : start + query.top]
        token = str(start + query.top) if start + query.top < len(rows) else None
        return [self._public(r, query.show_input) for r in page], token

    def _get(self, iid: str) -> dict[str, Any]:
        inst = self.instances.get(iid)
        if inst is None:
            raise InstanceNotFoundError(iid)
        return inst

    def raise_event(self, instance_id: str, event_name: str, data_json: str | None) -> None:
        inst = self._get(instance_id)
        if inst["runtimeStatus"] in TERMINAL:
            raise InvalidStateError(instance_id)
        self.events.append((instance_id, event_name, data_json))

    def terminate(self, instance_id: str, reason: str | None) -> None:
        inst = self._get(instance_id)
        if inst["runtimeStatus"] in TERMINAL:
            raise InvalidStateError(instance_id)
        inst["runtimeStatus"] = "Terminated"
        inst["output"] = reason

    def suspend(self, instance_id: str, reason: str | None) -> None:
        self._get(instance_id)["runtimeStatus"] = "Suspended"

    def resume(self, instance_id: str, reason: str | None) -> None:
        self._get(instance_id)["runtimeStatus"] = "Running"

    def purge(self, instance_id: str) -> bool:
        return self.instances.pop(instance_id, None) is not None

    def purge_many(self, query: InstanceQuery) -> int:
        rows, _ = self.query_instances(
            InstanceQuery(
                runtime_status=query.runtime_status,
                created_from=query.created_from,
                created_to=query.created_to,
                top=10**9,
            )
        )
        for r in rows:
            self.instances.pop(r["instanceId"], None)
        return len(rows)

    def signal_entity(
        self, entity_name: str, entity_key: str, operation: str, input_json: str | None
    ) -> None:
        self.signals.append((entity_name, entity_key, operation, input_json))

    def read_entity(self, entity_name: str, entity_key: str) -> tuple[bool, str | None]:
        state = self.entities.get((entity_name, entity_key))
        return (state is not None, state)

    def wait_for_idle(self, timeout: float) -> bool:
        return True
