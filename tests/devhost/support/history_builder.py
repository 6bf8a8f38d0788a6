"""Hand-built orchestration histories for single replay steps (our own; never the SDK's test utils)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from devhost.durable import history as h
from devhost.durable.history import Event


class HistoryBuilder:
    """Builds a DTFx history episode by episode; each ``episode()`` advances time by ``step``."""

    def __init__(self, start: datetime | None = None, step: timedelta = timedelta(seconds=1)) -> None:
        self.now = start or datetime(2030, 1, 1, tzinfo=UTC)
        self.step = step
        self.events: list[Event] = []

    def _add(self, ev: Event) -> HistoryBuilder:
        self.events.append(ev)
        return self

    def episode(self, at: datetime | None = None) -> HistoryBuilder:
        if self.events:
            self._add(h.orchestrator_completed(self.now))
        self.now = at or (self.now + self.step if self.events else self.now)
        return self._add(h.orchestrator_started(self.now))

    def started(self, name: str, input_value: Any = None, instance_id: str = "inst") -> HistoryBuilder:
        return self._add(
            h.execution_started(
                self.now,
                name=name,
                input_json=json.dumps(input_value),
                instance_id=instance_id,
                execution_id="x",
            )
        )

    def scheduled(self, event_id: int, name: str, input_value: Any = None) -> HistoryBuilder:
        return self._add(h.task_scheduled(self.now, event_id, name, json.dumps(input_value)))

    def completed(self, event_id: int, result: Any) -> HistoryBuilder:
        return self._add(h.task_completed(self.now, event_id, json.dumps(result)))

    def failed(self, event_id: int, reason: str, details: str = "") -> HistoryBuilder:
        return self._add(h.task_failed(self.now, event_id, reason, details))

    def timer_created(self, event_id: int, fire_at: datetime) -> HistoryBuilder:
        return self._add(h.timer_created(self.now, event_id, fire_at))

    def timer_fired(self, event_id: int, fire_at: datetime) -> HistoryBuilder:
        return self._add(h.timer_fired(self.now, event_id, fire_at))

    def raised(self, name: str, value: Any) -> HistoryBuilder:
        return self._add(h.event_raised(self.now, name, json.dumps(value)))

    def sub_created(
        self, event_id: int, name: str, instance_id: str, input_value: Any = None
    ) -> HistoryBuilder:
        return self._add(h.sub_created(self.now, event_id, name, instance_id, json.dumps(input_value)))

    def sub_completed(self, event_id: int, result: Any) -> HistoryBuilder:
        return self._add(h.sub_completed(self.now, event_id, json.dumps(result)))

    def sub_failed(self, event_id: int, reason: str) -> HistoryBuilder:
        return self._add(h.sub_failed(self.now, event_id, reason, ""))

    def event_sent(self, event_id: int, entity_id: str, request_id: str, op: str) -> HistoryBuilder:
        body = {"op": op, "signal": False, "id": request_id, "parent": "inst"}
        return self._add(h.event_sent(self.now, event_id, entity_id, "op", json.dumps(body)))

    def entity_response(self, request_id: str, result: Any) -> HistoryBuilder:
        return self._add(h.event_raised(self.now, request_id, json.dumps({"result": json.dumps(result)})))

    def history(self) -> list[Event]:
        """Events before the last OrchestratorStarted are marked played, as the extension sends them."""
        last = max(i for i, e in enumerate(self.events) if e["EventType"] == h.EventType.ORCHESTRATOR_STARTED)
        return [dict(e, IsPlayed=i < last) for i, e in enumerate(self.events)]

    def context_body(self, input_value: Any = None, instance_id: str = "inst") -> str:
        return json.dumps(
            {
                "history": self.history(),
                "input": json.dumps(input_value),
                "instanceId": instance_id,
                "isReplaying": False,
                "parentInstanceId": None,
                "upperSchemaVersion": 1,
                "upperSchemaVersionNew": 2,
                "maximumShortTimerDuration": "6.00:00:00",
                "longRunningTimerIntervalDuration": "3.00:00:00",
            }
        )
