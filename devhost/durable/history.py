"""DTFx history events as the Durable extension serialises them for out-of-process SDKs."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

Event = dict[str, Any]


class EventType(IntEnum):
    EXECUTION_STARTED = 0
    EXECUTION_COMPLETED = 1
    EXECUTION_FAILED = 2
    EXECUTION_TERMINATED = 3
    TASK_SCHEDULED = 4
    TASK_COMPLETED = 5
    TASK_FAILED = 6
    SUB_ORCHESTRATION_INSTANCE_CREATED = 7
    SUB_ORCHESTRATION_INSTANCE_COMPLETED = 8
    SUB_ORCHESTRATION_INSTANCE_FAILED = 9
    TIMER_CREATED = 10
    TIMER_FIRED = 11
    ORCHESTRATOR_STARTED = 12
    ORCHESTRATOR_COMPLETED = 13
    EVENT_SENT = 14
    EVENT_RAISED = 15
    CONTINUE_AS_NEW = 16
    GENERIC_EVENT = 17
    HISTORY_STATE = 18
    EXECUTION_SUSPENDED = 19
    EXECUTION_RESUMED = 20


def format_ts(dt: datetime) -> str:
    """.NET round-trip format: 7 fractional digits and a Z, which the SDK's dateutil parser accepts."""
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}0Z"


def parse_ts(text: str) -> datetime:
    """Parse ISO timestamps with up to 7 fractional digits (Python only keeps microseconds)."""
    s = text.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    if "." in s:
        head, rest = s.split(".", 1)
        frac = ""
        i = 0
        while i < len(rest) and rest[i].isdigit():
            frac += rest[i]
            i += 1
        tail = rest[i:]
        s = f"{head}.{(frac + '000000')[:6]}{tail}"
    dt = datetime.fromisoformat(s)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def event(event_type: EventType, ts: datetime, event_id: int = -1, **fields: Any) -> Event:
    e: Event = {
        "EventType": int(event_type),
        "EventId": event_id,
        "IsPlayed": False,
        "Timestamp": format_ts(ts),
    }
    e.update(fields)
    return e


def orchestrator_started(ts: datetime) -> Event:
    return event(EventType.ORCHESTRATOR_STARTED, ts)


def orchestrator_completed(ts: datetime) -> Event:
    return event(EventType.ORCHESTRATOR_COMPLETED, ts)


def execution_started(
    ts: datetime,
    *,
    name: str,
    input_json: str | None,
    instance_id: str,
    execution_id: str,
    parent: dict[str, Any] | None = None,
) -> Event:
    return event(
        EventType.EXECUTION_STARTED,
        ts,
        Name=name,
        Version="",
        Input=input_json,
        OrchestrationInstance={"InstanceId": instance_id, "ExecutionId": execution_id},
        ParentInstance=parent,
    )


def execution_completed(ts: datetime, status: str, result: str | None) -> Event:
    return event(EventType.EXECUTION_COMPLETED, ts, OrchestrationStatus=status, Result=result)


def task_scheduled(ts: datetime, event_id: int, name: str, input_json: str | None) -> Event:
    return event(EventType.TASK_SCHEDULED, ts, event_id, Name=name, Version="", Input=input_json)


def task_completed(ts: datetime, scheduled_id: int, result: str | None) -> Event:
    return event(EventType.TASK_COMPLETED, ts, TaskScheduledId=scheduled_id, Result=result)


def task_failed(ts: datetime, scheduled_id: int, reason: str, details: str | None) -> Event:
    return event(EventType.TASK_FAILED, ts, TaskScheduledId=scheduled_id, Reason=reason, Details=details)


def timer_created(ts: datetime, event_id: int, fire_at: datetime) -> Event:
    return event(EventType.TIMER_CREATED, ts, event_id, FireAt=format_ts(fire_at))


def timer_fired(ts: datetime, timer_id: int, fire_at: datetime) -> Event:
    return event(EventType.TIMER_FIRED, ts, TimerId=timer_id, FireAt=format_ts(fire_at))


def sub_created(ts: datetime, event_id: int, name: str, instance_id: str, input_json: str | None) -> Event:
    return event(
        EventType.SUB_ORCHESTRATION_INSTANCE_CREATED,
        ts,
        event_id,
        Name=name,
        Version="",
        InstanceId=instance_id,
        Input=input_json,
    )


def sub_completed(ts: datetime, scheduled_id: int, result: str | None) -> Event:
    return event(
        EventType.SUB_ORCHESTRATION_INSTANCE_COMPLETED, ts, TaskScheduledId=scheduled_id, Result=result
    )


def sub_failed(ts: datetime, scheduled_id: int, reason: str, details: str | None) -> Event:
    return event(
        EventType.SUB_ORCHESTRATION_INSTANCE_FAILED,
        ts,
        TaskScheduledId=scheduled_id,
        Reason=reason,
        Details=details,
    )


def event_sent(ts: datetime, event_id: int, instance_id: str, name: str, input_json: str) -> Event:
    return event(EventType.EVENT_SENT, ts, event_id, InstanceId=instance_id, Name=name, Input=input_json)


def event_raised(ts: datetime, name: str, input_json: str | None) -> Event:
    return event(EventType.EVENT_RAISED, ts, Name=name, Input=input_json)


def execution_terminated(ts: datetime, reason: str | None) -> Event:
    return event(EventType.EXECUTION_TERMINATED, ts, Input=reason)


def execution_suspended(ts: datetime, reason: str | None) -> Event:
    return event(EventType.EXECUTION_SUSPENDED, ts, Reason=reason)


def execution_resumed(ts: datetime, reason: str | None) -> Event:
    return event(EventType.EXECUTION_RESUMED, ts, Reason=reason)


def continue_as_new(ts: datetime, result: str | None) -> Event:
    return event(EventType.CONTINUE_AS_NEW, ts, Result=result)
