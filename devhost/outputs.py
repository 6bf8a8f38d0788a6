"""Service Bus output bindings, published through the ``shared.ports.Bus`` port.

A named output binding gets an ``azure.functions.Out``-style object (``set``/``get``); a ``$return``
binding takes the function's return value. After the function succeeds, each value that was set is
sent as one message to ``queueName`` or ``topicName`` (``%SETTING%`` resolved): ``str`` as UTF-8,
``bytes`` as is, anything else as JSON. A failed invocation sends nothing, as on the host.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from devhost.indexing import FunctionSpec

OUTPUT_TYPES = frozenset({"serviceBus"})


class Out:
    """Duck-types ``azure.functions.Out``."""

    def __init__(self) -> None:
        self._value: Any = None
        self.was_set = False

    def set(self, val: Any) -> None:
        self._value = val
        self.was_set = True

    def get(self) -> Any:
        return self._value


def _body(value: Any) -> tuple[bytes, str | None]:
    if isinstance(value, bytes | bytearray):
        return bytes(value), None
    if isinstance(value, str):
        return value.encode("utf-8"), "text/plain"
    return json.dumps(value).encode("utf-8"), "application/json"


def output_bindings(spec: FunctionSpec) -> list[dict[str, Any]]:
    return [b for b in spec.bindings if b.get("type") in OUTPUT_TYPES and str(b.get("direction")) == "OUT"]


class OutputBinder:
    def __init__(self, bus: Callable[[], Any], resolve: Callable[[str], str]) -> None:
        self._bus = bus
        self._resolve = resolve

    def entity(self, binding: dict[str, Any]) -> str:
        name = binding.get("queueName") or binding.get("topicName")
        if not name:
            raise ValueError(
                f"Service Bus output binding {binding.get('name')!r} needs queueName or topicName"
            )
        return self._resolve(str(name))

    def prepare(self, spec: FunctionSpec, kwargs: dict[str, Any]) -> dict[str, Out]:
        outs: dict[str, Out] = {}
        for b in output_bindings(spec):
            name = str(b["name"])
            if name != "$return" and name not in kwargs:
                outs[name] = kwargs[name] = Out()
        return outs

    def publish(self, spec: FunctionSpec, outs: dict[str, Out], result: Any) -> None:
        from shared.ports import OutgoingMessage

        for b in output_bindings(spec):
            name = str(b["name"])
            if name == "$return":
                value, present = result, result is not None
            else:
                out = outs.get(name)
                value, present = (out.get(), out.was_set) if out else (None, False)
            if not present or value is None:
                continue
            body, ctype = _body(value)
            msg = OutgoingMessage(message_id=uuid.uuid4().hex, body=body, content_type=ctype)
            self._bus().publish(self.entity(b), [msg])
