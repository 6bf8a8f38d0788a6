"""Index a v2-programming-model app the way the Python worker reports it to the host.

Each Function becomes a :class:`FunctionSpec` holding its ``function.json``-style binding list (the
same JSON the worker sends in its metadata response), its trigger and the callable to invoke.
Anything devhost cannot serve faithfully fails here, at startup, with a message naming the function.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRIGGER_TYPES = frozenset(
    {
        "httpTrigger",
        "timerTrigger",
        "blobTrigger",
        "serviceBusTrigger",
        "orchestrationTrigger",
        "activityTrigger",
        "entityTrigger",
    }
)
DURABLE_TRIGGERS = frozenset({"orchestrationTrigger", "activityTrigger", "entityTrigger"})
# Non-trigger bindings devhost supplies itself; any other binding would silently do nothing.
SUPPORTED_BINDINGS = frozenset({"http", "durableClient"})
# Output bindings devhost publishes itself (devhost/outputs.py).
OUTPUT_BINDINGS = frozenset({"serviceBus"})


class IndexingError(Exception):
    pass


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    trigger_type: str
    trigger: dict[str, Any]
    bindings: tuple[dict[str, Any], ...]
    func: Callable[..., Any]
    is_async: bool
    params: tuple[str, ...]
    function_json: dict[str, Any] = field(compare=False)
    source: Any = field(default=None, compare=False, repr=False)  # the azure.functions Function

    @property
    def durable_name(self) -> str:
        """The name an orchestration/activity/entity is called by (binding property overrides)."""
        key = {
            "orchestrationTrigger": "orchestration",
            "activityTrigger": "activity",
            "entityTrigger": "entityName",
        }.get(self.trigger_type)
        value = self.trigger.get(key) if key else None
        return str(value) if value else self.name

    def binding_of_type(self, binding_type: str) -> dict[str, Any] | None:
        return next((b for b in self.bindings if b.get("type") == binding_type), None)


def load_app(target: str) -> Any:
    """``module:attr`` -> the FunctionApp object. The app's directory goes first on sys.path."""
    module_name, _, attr = target.partition(":")
    attr = attr or "app"
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise IndexingError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise IndexingError(f"module {module_name!r} has no attribute {attr!r}") from exc


def get_functions(app: Any) -> list[Any]:
    # get_functions() rebuilds the binding registry and raises on the names it saw last time.
    if hasattr(app, "functions_bindings"):
        app.functions_bindings = {}
    try:
        return list(app.get_functions())
    except ValueError as exc:
        raise IndexingError(f"the app's functions are invalid: {exc}") from exc


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    return getattr(fn, "client_function", fn)


def index_app(app: Any) -> list[FunctionSpec]:
    specs: list[FunctionSpec] = []
    seen: dict[str, str] = {}
    for f in get_functions(app):
        name = str(f.get_function_name())
        doc = json.loads(f.get_function_json())
        bindings = tuple(doc.get("bindings", []))
        triggers = [b for b in bindings if str(b.get("type", "")).endswith("Trigger")]
        if len(triggers) != 1:
            raise IndexingError(f"function {name!r} must have exactly one trigger, found {len(triggers)}")
        trigger = triggers[0]
        ttype = str(trigger["type"])
        if ttype not in TRIGGER_TYPES:
            raise IndexingError(
                f"function {name!r}: trigger type {ttype!r} is not supported by devhost "
                f"(supported: {', '.join(sorted(TRIGGER_TYPES))})"
            )
        for b in bindings:
            btype = str(b.get("type", ""))
            if btype in OUTPUT_BINDINGS and str(b.get("direction")) == "OUT":
                continue
            if b is not trigger and btype not in SUPPORTED_BINDINGS:
                raise IndexingError(
                    f"function {name!r}: binding {b.get('name')!r} of type {btype!r} is not supported "
                    f"by devhost (supported: {', '.join(sorted(SUPPORTED_BINDINGS | OUTPUT_BINDINGS))})"
                )
        fn = f.get_user_function()
        sig_fn = _unwrap(fn)
        try:
            params = tuple(inspect.signature(sig_fn).parameters)
        except (TypeError, ValueError):
            params = ()
        names = {str(b.get("name")) for b in bindings if b.get("name") != "$return"}
        # Orchestrators and entities are SDK handles taking `context`; their name rule is checked below.
        if params and ttype not in ("orchestrationTrigger", "entityTrigger"):
            # The Python worker refuses these mismatches when it loads the function.
            extra = [p for p in params if p not in names and p != "context"]
            missing = sorted(n for n in names if n not in params)
            if extra:
                raise IndexingError(
                    f"function {name!r}: parameters {extra} are declared in Python but not as bindings"
                )
            if missing:
                raise IndexingError(
                    f"function {name!r}: bindings {missing} are declared but not parameters of the function"
                )
        spec = FunctionSpec(
            name=name,
            trigger_type=ttype,
            trigger=trigger,
            bindings=bindings,
            func=fn,
            is_async=inspect.iscoroutinefunction(fn),
            params=params,
            function_json=doc,
            source=f,
        )
        lowered = name.lower()
        # The host treats function names case-insensitively.
        if lowered in seen:
            raise IndexingError(f"duplicate function name {name!r} (also registered as {seen[lowered]!r})")
        seen[lowered] = name
        if ttype == "orchestrationTrigger" and trigger.get("name") != "context":
            raise IndexingError(
                f"orchestrator {name!r}: its trigger parameter must be named 'context' "
                f"(found {trigger.get('name')!r}); the Python SDK requires it"
            )
        specs.append(spec)
    durable: dict[tuple[str, str], str] = {}
    for s in specs:
        if s.trigger_type in DURABLE_TRIGGERS:
            key = (s.trigger_type, s.durable_name.lower())
            if key in durable:
                raise IndexingError(
                    f"duplicate {s.trigger_type} name {s.durable_name!r} "
                    f"(functions {durable[key]!r} and {s.name!r})"
                )
            durable[key] = s.name
    return specs


def connection_settings(specs: list[FunctionSpec]) -> dict[str, set[str]]:
    """Setting names referenced by ``connection`` properties -> function names using them."""
    found: dict[str, set[str]] = {}
    for s in specs:
        for b in s.bindings:
            conn = b.get("connection")
            if conn:
                found.setdefault(str(conn).strip("%"), set()).add(s.name)
    return found
