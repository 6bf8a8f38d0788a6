"""Your own task handlers go here (or in modules listed in ``WEFT_HANDLER_MODULES``).

This module is imported on the first handler lookup. A handler is a function of the task's params
and a :class:`~shared.handlers.HandlerContext`; its return value (JSON-serialisable) is the task's
output; to fail, raise :class:`~shared.errors.ApplicationError`. Handlers run at least once per
attempt: use ``ctx.idempotency_key`` for side effects. See docs/handlers.md. Example::

    from typing import Any

    from shared.errors import ApplicationError
    from shared.handlers import HandlerContext, handler


    @handler("acme.greet")
    def greet(params: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise ApplicationError("name must be a string", type="acme.BadName", non_retryable=True)
        return {"greeting": f"hello {name}"}
"""

from __future__ import annotations
