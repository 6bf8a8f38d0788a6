"""The ``tenant_gate`` entity: one instance per tenant (key = tenant id), see docs/tenant-gate.md.

Thin: it decodes the operation, lets :func:`shared.gate.apply_operation` compute the new state and
the result, and stores both. Errors in the input fail the caller's ``call_entity`` and change
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import azure.durable_functions as df

from entities.blueprint import bp
from shared.gate import apply_operation
from shared.names import EntityName
from shared.settings import get_settings


class EntityContext(Protocol):
    """The part of ``azure.durable_functions.DurableEntityContext`` the gate uses."""

    @property
    def operation_name(self) -> str | None: ...

    def get_state(self, initializer: Callable[[], Any] | None = None) -> Any: ...

    def set_state(self, state: Any) -> None: ...

    def get_input(self) -> Any: ...

    def set_result(self, result: Any) -> None: ...


def run_tenant_gate(context: EntityContext) -> None:
    state, result = apply_operation(
        context.get_state(dict),
        context.operation_name,
        context.get_input(),
        default_limit=get_settings().default_max_running_tasks,
        # The entity key names the gate, so its working copy of the state survives between operations.
        cache_key=getattr(context, "entity_key", None),
    )
    context.set_state(state)
    context.set_result(result)


@bp.entity_trigger(context_name="context", entity_name=EntityName.TENANT_GATE)
def tenant_gate(context: df.DurableEntityContext) -> None:
    run_tenant_gate(context)
