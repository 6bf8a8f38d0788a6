"""Calls user functions the way the Python worker does, and logs one line per invocation.

Async functions run on the host's event loop; sync functions run on a thread pool (the worker's
``PYTHON_THREADPOOL_THREAD_COUNT``). Arguments are passed by binding name. A parameter named
``context`` that is not a binding receives a :class:`InvocationContext` (``azure.functions.Context``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from devhost.indexing import FunctionSpec
from devhost.outputs import OutputBinder, output_bindings

log = logging.getLogger("devhost.invocation")


@dataclass
class TraceContext:
    trace_parent: str = ""
    trace_state: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass
class InvocationContext:
    """Duck-types ``azure.functions.Context``."""

    invocation_id: str
    function_name: str
    function_directory: str = "."
    trace_context: TraceContext = field(default_factory=TraceContext)
    retry_context: Any = None
    thread_local_storage: threading.local = field(default_factory=threading.local)


def log_invocation(
    invocation_id: str,
    name: str,
    duration_ms: float,
    status: str,
    *,
    instance_id: str | None = None,
    trigger: str | None = None,
    error: str | None = None,
) -> None:
    """The structured line every invocation produces; the engine uses it for durable functions too."""
    rec: dict[str, Any] = {
        "evt": "invocation",
        "invocationId": invocation_id,
        "function": name,
        "instanceId": instance_id,
        "trigger": trigger,
        "durationMs": round(duration_ms, 2),
        "status": status,
    }
    if error:
        rec["error"] = error
    (log.warning if status != "Succeeded" else log.info)(json.dumps(rec))


class Invoker:
    def __init__(
        self,
        executor: Executor,
        *,
        client_binding: Callable[[], str] | None = None,
        outputs: OutputBinder | None = None,
    ) -> None:
        self.executor = executor
        self.outputs = outputs
        # Any trigger may take a durable client input binding (the host supplies it to timer, blob
        # and Service Bus functions too); HTTP triggers pass theirs explicitly.
        self.client_binding = client_binding

    async def invoke(
        self,
        spec: FunctionSpec,
        kwargs: dict[str, Any],
        *,
        instance_id: str | None = None,
    ) -> Any:
        invocation_id = str(uuid.uuid4())
        client = spec.binding_of_type("durableClient")
        if client is not None and self.client_binding is not None and str(client["name"]) not in kwargs:
            kwargs[str(client["name"])] = self.client_binding()
        if "context" in spec.params and "context" not in kwargs:
            kwargs["context"] = InvocationContext(invocation_id, spec.name)
        outs = self.outputs.prepare(spec, kwargs) if self.outputs and output_bindings(spec) else None
        started = time.perf_counter()
        status, err = "Succeeded", None
        loop = asyncio.get_running_loop()
        try:
            if spec.is_async:
                result = await spec.func(**kwargs)
            else:
                result = await loop.run_in_executor(self.executor, lambda: spec.func(**kwargs))
            if outs is not None and self.outputs is not None:
                binder = self.outputs
                await loop.run_in_executor(self.executor, lambda: binder.publish(spec, outs, result))
            return result
        except BaseException as exc:
            status, err = "Failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            log_invocation(
                invocation_id,
                spec.name,
                (time.perf_counter() - started) * 1000,
                status,
                instance_id=instance_id,
                trigger=spec.trigger_type,
                error=err,
            )
