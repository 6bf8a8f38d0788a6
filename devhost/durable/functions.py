"""Indexes the app's durable functions and invokes them the way the Python worker would."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib
import inspect
import json
import logging
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from azure.functions import _durable_functions as afd
from azure.functions import meta
from azure.functions.durable_functions import ActivityTriggerConverter

log = logging.getLogger("devhost")

ORCHESTRATION_TRIGGER = "orchestrationTrigger"
ACTIVITY_TRIGGER = "activityTrigger"
ENTITY_TRIGGER = "entityTrigger"


class FunctionIndexError(Exception):
    pass


@dataclass(frozen=True)
class DurableFunction:
    name: str  # the name the Durable extension knows it by (binding override or function name)
    function_name: str
    kind: str
    param: str
    call: Callable[..., Any]
    is_async: bool
    #: The user function has a ``context`` parameter that is not its trigger: the Python worker
    #: passes an ``azure.functions.Context`` there (invocation id, trace context).
    wants_context: bool = False


class ActivityFailure(Exception):
    def __init__(self, reason: str, details: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details


_loop_local = threading.local()


def _install_timestamp_cache() -> None:
    """Memoise the SDK's dateutil parse of history timestamps.

    The SDK parses every event's Timestamp with dateutil on every replay, which dominates replay cost
    for large fan-outs (all events of an episode share one timestamp).  The cache returns the very
    same (immutable) datetimes dateutil would, so the SDK's behaviour is unchanged.
    """
    mod = importlib.import_module("azure.durable_functions.models.history.HistoryEvent")
    parse = getattr(mod, "dt_parse", None)
    if parse is not None and not hasattr(parse, "cache_info"):
        setattr(mod, "dt_parse", functools.lru_cache(maxsize=65536)(_fast_timestamp_parser(parse)))  # noqa: B010


def _fast_timestamp_parser(parse: Callable[[str], datetime]) -> Callable[[str], datetime]:
    """dateutil's parse, short-cut for the one format the engine writes (``history.format_ts``).

    Every new event's timestamp misses the cache, and dateutil takes ~30 us for one. For
    ``YYYY-MM-DDTHH:MM:SS.ffffff0Z`` the result is built directly: the same fields, and the very
    tzinfo dateutil gives for ``Z`` on this machine (``tzlocal()`` when local time is UTC, else
    ``tzutc()``), taken from a sample parse. Anything else still goes to dateutil.
    """
    utc_tz = parse("2000-01-01T00:00:00.0000000Z").tzinfo

    def fast(text: str) -> datetime:
        if len(text) == 28 and text[19] == "." and text[26] == "0" and text[27] == "Z":
            try:
                return datetime.fromisoformat(text[:26]).replace(tzinfo=utc_tz)
            except ValueError:
                pass
        return parse(text)

    return fast


_install_timestamp_cache()


def _install_fast_strict_mode_check() -> None:
    """The same answer as ``azure.functions._durable_functions._is_strict_mode``, read faster.

    The codec asks ``os.environ.get(AZURE_FUNCTIONS_DURABLE_STRICT_TYPING)`` on every
    serialisation (every action input, every history result, every replay): ~5% of an episode.
    ``os.environ._data`` is the mapping ``os.environ`` decodes from (bytes on POSIX), so a lookup
    there sees every change made through ``os.environ`` at once. Only installed where that holds.
    """
    mod = afd
    name = getattr(mod, "_STRICT_ENV_VAR", None)
    truthy = getattr(mod, "_TRUTHY", None)
    data = getattr(os.environ, "_data", None)
    if not isinstance(name, str) or truthy is None or not isinstance(data, dict) or os.name != "posix":
        return
    key = os.fsencode(name)

    def is_strict_mode() -> bool:
        raw = data.get(key)
        return raw is not None and os.fsdecode(raw).strip().lower() in truthy

    if getattr(mod, "_is_strict_mode", None) is not None:
        setattr(mod, "_is_strict_mode", is_strict_mode)  # noqa: B010


_install_fast_strict_mode_check()


def _run_coroutine(coro: Any) -> Any:
    loop = getattr(_loop_local, "loop", None)
    if loop is None:
        loop = asyncio.new_event_loop()
        _loop_local.loop = loop
    return loop.run_until_complete(coro)


class FunctionRegistry:
    def __init__(self, functions: Iterable[Any]) -> None:
        self.orchestrators: dict[str, DurableFunction] = {}
        self.activities: dict[str, DurableFunction] = {}
        self.entities: dict[str, DurableFunction] = {}
        for fn in functions:
            self._add(fn)

    def _add(self, fn: Any) -> None:
        bindings = fn.get_dict_repr().get("bindings", [])
        trig = next((b for b in bindings if str(b.get("type", "")).endswith("Trigger")), None)
        if trig is None:
            return
        ttype = trig.get("type")
        table: dict[str, DurableFunction]
        if ttype == ORCHESTRATION_TRIGGER:
            table, override = self.orchestrators, trig.get("orchestration")
        elif ttype == ACTIVITY_TRIGGER:
            table, override = self.activities, trig.get("activity")
        elif ttype == ENTITY_TRIGGER:
            table, override = self.entities, trig.get("entityName")
        else:
            return
        fname = fn.get_function_name()
        name = override or fname
        user = fn.get_user_function()
        if ttype == ORCHESTRATION_TRIGGER and trig.get("name") != "context":
            raise FunctionIndexError(
                f"orchestrator function '{fname}': the orchestration trigger parameter must be named "
                f"'context' (got '{trig.get('name')}'), as the Python worker requires"
            )
        key = name.lower()
        if key in table:
            raise FunctionIndexError(f"two {ttype} functions share the name '{name}'")
        table[key] = DurableFunction(
            name=name,
            function_name=fname,
            kind=ttype,
            param=str(trig.get("name")),
            call=user,
            is_async=inspect.iscoroutinefunction(user),
            wants_context=trig.get("name") != "context" and "context" in inspect.signature(user).parameters,
        )

    def orchestrator(self, name: str) -> DurableFunction | None:
        return self.orchestrators.get(name.lower())

    def activity(self, name: str) -> DurableFunction | None:
        return self.activities.get(name.lower())

    def entity(self, name: str) -> DurableFunction | None:
        return self.entities.get(name.lower())

    def exists(self, kind: str, name: str) -> bool:
        table = {"activity": self.activities, "orchestrator": self.orchestrators, "entity": self.entities}[
            kind
        ]
        return name.lower() in table


def _log_invocation(
    fn: DurableFunction,
    invocation_id: str,
    instance_id: str,
    started: float,
    status: str,
    error: str | None = None,
) -> None:
    """One structured line per invocation, in the same shape as devhost.invoker.log_invocation."""
    level = logging.INFO if status == "Succeeded" else logging.WARNING
    if not log.isEnabledFor(level):
        return
    rec: dict[str, Any] = {
        "evt": "invocation",
        "invocationId": invocation_id,
        "function": fn.name,
        "instanceId": instance_id,
        "trigger": fn.kind,
        "durationMs": round((time.perf_counter() - started) * 1000.0, 2),
        "status": status,
    }
    if error:
        rec["error"] = error
    log.log(level, json.dumps(rec))


def _activity_context(fn: DurableFunction, invocation_id: str, instance_id: str) -> Any:
    """The ``azure.functions.Context`` of an activity invocation. Its W3C trace context carries a
    trace id derived from the orchestration instance, so every activity of one orchestration is in
    one trace, as the host's distributed tracing puts them under the orchestration's operation."""
    from devhost.invoker import InvocationContext, TraceContext

    trace_id = hashlib.sha256(instance_id.encode("utf-8")).hexdigest()[:32]
    span_id = uuid.uuid4().hex[:16]
    return InvocationContext(
        invocation_id,
        fn.function_name,
        trace_context=TraceContext(trace_parent=f"00-{trace_id}-{span_id}-01"),
    )


def _call(fn: DurableFunction, arg: Any, **extra: Any) -> Any:
    result = fn.call(**{fn.param: arg}, **extra)
    if fn.is_async or inspect.isawaitable(result):
        result = _run_coroutine(result)
    return result


def invoke_orchestrator(fn: DurableFunction, body: str, instance_id: str) -> tuple[str, bool]:
    """Run one episode. Returns (state JSON, threw). When the SDK throws, the state is in the message."""
    started = time.perf_counter()
    inv = str(uuid.uuid4())
    try:
        out = _call(fn, afd.OrchestrationContext(body))
    except Exception as exc:
        msg = str(exc)
        _log_invocation(fn, inv, instance_id, started, "Failed", msg.partition("\n\n$OutOfProcData$")[0])
        marker = "$OutOfProcData$:"
        idx = msg.find(marker)
        if idx < 0:
            raise
        return msg[idx + len(marker) :], True
    _log_invocation(fn, inv, instance_id, started, "Succeeded")
    if not isinstance(out, str):
        out = str(out)
    return out, False


def invoke_activity(fn: DurableFunction, input_json: str | None, instance_id: str) -> str:
    """Returns the result JSON; raises ActivityFailure with the extension's reason/details."""
    started = time.perf_counter()
    inv = str(uuid.uuid4())
    try:
        value = ActivityTriggerConverter.decode(
            meta.Datum(type="json", value=input_json if input_json is not None else "null"),
            trigger_metadata=None,
        )
        if fn.wants_context:
            result = _call(fn, value, context=_activity_context(fn, inv, instance_id))
        else:
            result = _call(fn, value)
        datum = ActivityTriggerConverter.encode(result, expected_type=None)
    except Exception as exc:
        _log_invocation(fn, inv, instance_id, started, "Failed", f"{type(exc).__name__}: {exc}")
        reason = f"Activity function '{fn.name}' failed: {type(exc).__name__}: {exc}"
        raise ActivityFailure(reason, "".join(traceback.format_exception(exc))) from exc
    _log_invocation(fn, inv, instance_id, started, "Succeeded")
    return str(datum.value)


def invoke_entity(fn: DurableFunction, body: str, entity_id: str) -> str:
    started = time.perf_counter()
    inv = str(uuid.uuid4())
    try:
        out = _call(fn, afd.EntityContext(body))
    except Exception as exc:
        _log_invocation(fn, inv, entity_id, started, "Failed", f"{type(exc).__name__}: {exc}")
        raise
    _log_invocation(fn, inv, entity_id, started, "Succeeded")
    return out if isinstance(out, str) else str(out)
