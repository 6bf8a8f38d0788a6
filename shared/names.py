"""Every Function, orchestrator, activity, entity and event name, in one place.

A test checks that ``function_app.app`` registers exactly the function names listed here,
so a rename cannot silently orphan a binding or an in-flight orchestration.
"""

from __future__ import annotations

from enum import StrEnum


class OrchestratorName(StrEnum):
    SELFTEST_FANOUT = "selftest_fanout"
    EXECUTION = "weft_execution"
    TASK_BATCH = "weft_task_batch"


class ActivityName(StrEnum):
    SELFTEST_ECHO = "selftest_echo"
    START_EXECUTION = "start_execution"
    RUN_TASK = "run_task"
    RECORD_TIMEOUT = "record_attempt_timeout"
    FINALIZE_EXECUTION = "finalize_execution"


class EntityName(StrEnum):
    #: Per-tenant running-task slots (shared/gate.py); the entity key is the tenant id.
    TENANT_GATE = "tenant_gate"


class TriggerName(StrEnum):
    """HTTP, timer, blob and Service Bus functions (names as the host indexes them)."""

    SELFTEST_START = "selftest_start"
    # Non-HTTP triggers of the submission path (triggers/outbox.py, schedules.py, blob.py, servicebus.py).
    OUTBOX_RELAY = "outbox_relay"
    SCHEDULE_TICK = "schedule_tick"
    BLOB_SUBMIT = "blob_submit"
    SERVICEBUS_SUBMIT = "servicebus_submit"
    # The HTTP API, one function per route (shared/api/routes.py, triggers/api.py).
    API_HEALTH = "api_health"
    API_OPENAPI = "api_openapi"
    API_CREATE_TENANT = "api_create_tenant"
    API_CREATE_API_KEY = "api_create_api_key"
    API_REVOKE_API_KEY = "api_revoke_api_key"
    API_GET_TENANT = "api_get_tenant"
    API_PUT_WORKFLOW = "api_put_workflow"
    API_PUBLISH_WORKFLOW = "api_publish_workflow"
    API_LIST_WORKFLOWS = "api_list_workflows"
    API_GET_VERSION = "api_get_version"
    API_SUBMIT_EXECUTION = "api_submit_execution"
    API_GET_EXECUTION = "api_get_execution"
    API_LIST_EXECUTIONS = "api_list_executions"
    API_CANCEL_EXECUTION = "api_cancel_execution"
    API_RAISE_EVENT = "api_raise_event"
    API_RERUN_EXECUTION = "api_rerun_execution"
    API_LIST_DEAD_LETTERS = "api_list_dead_letters"
    API_RETRY_DEAD_LETTER = "api_retry_dead_letter"
    API_SKIP_DEAD_LETTER = "api_skip_dead_letter"


class EventName(StrEnum):
    """External events raised into orchestrations."""

    CANCEL = "weft.cancel"
    #: An operator resolved a dead-lettered task (payload: shared.execution_messages.OperatorAction).
    OPERATOR_ACTION = "weft.operator"


def all_function_names() -> frozenset[str]:
    return frozenset(
        str(n) for enum in (OrchestratorName, ActivityName, EntityName, TriggerName) for n in enum
    )
