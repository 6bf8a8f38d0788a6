"""Run a handler and turn whatever happens into a :class:`~shared.errors.TaskOutcome`.

The mapping onto the error taxonomy:

* a :class:`~shared.errors.WeftError` (``ApplicationError`` and friends) keeps its ``type``,
  ``message``, ``non_retryable`` flag and ``details``;
* ``TimeoutError`` (and ``asyncio.TimeoutError``, the same class) -> ``weft.Timeout``, retryable;
* any other ``Exception`` -> ``type`` = the exception's class name, retryable;
* ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``,
  ``GeneratorExit``) is a request to stop the process: it propagates, and Durable redelivers the
  activity elsewhere (at least once).

So a handler can fail its task but never crash the worker.

Deadlines: an ``async def`` handler is cancelled at the deadline. A sync handler cannot be stopped
from outside (Python has no thread kill), so sync handlers read ``ctx.remaining_seconds()`` and
bound their own waits (the built-ins do); a sync handler that returns after the deadline is
reported as ``weft.Timeout`` because the orchestrator has already treated the attempt as timed
out and may have started the next one.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from shared.errors import ApplicationError, ErrorInfo, Problem, TaskOutcome, WeftError
from shared.handlers.context import HandlerContext
from shared.handlers.registry import REGISTRY, HandlerFn, HandlerRegistry

M = TypeVar("M", bound=BaseModel)

#: Longest error message kept in an outcome; the rest is cut (messages may quote payloads).
MAX_MESSAGE_CHARS = 2000

INVALID_PARAMS = "weft.InvalidParams"
INVALID_OUTPUT = "weft.InvalidOutput"
TIMEOUT = "weft.Timeout"


def parse_params(model: type[M], params: Any) -> M:
    """Validate ``params`` against ``model``; bad params are a non-retryable ``weft.InvalidParams``."""
    try:
        return model.model_validate(params if params is not None else {})
    except ValidationError as exc:
        problems = [
            Problem(
                path="$.params" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]),
                message=err["msg"],
            )
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise ApplicationError(
            f"invalid params: {'; '.join(f'{p.path}: {p.message}' for p in problems)}",
            type=INVALID_PARAMS,
            non_retryable=True,
            details={"errors": [p.to_json_dict() for p in problems]},
        ) from None


def error_from_exception(exc: Exception) -> ErrorInfo:
    """Map an exception a handler raised onto the error taxonomy (see the module docstring)."""
    if isinstance(exc, WeftError):
        info = exc.to_info()
    elif isinstance(exc, TimeoutError):
        info = ErrorInfo(type=TIMEOUT, message=str(exc) or "handler timed out", non_retryable=False)
    else:
        info = ErrorInfo(
            type=type(exc).__name__,
            message=str(exc) or type(exc).__name__,
            non_retryable=False,
            details={"exceptionType": f"{type(exc).__module__}.{type(exc).__qualname__}"},
        )
    if len(info.message) > MAX_MESSAGE_CHARS:
        info = info.model_copy(update={"message": info.message[:MAX_MESSAGE_CHARS] + "..."})
    return info


def _timeout_outcome(ctx: HandlerContext, started: float, **details: Any) -> TaskOutcome:
    error = ErrorInfo(
        type=TIMEOUT,
        message=f"attempt {ctx.attempt} of task {ctx.task_id!r} passed its deadline",
        non_retryable=False,
        details=details,
    )
    return TaskOutcome.failure(error, attempt=ctx.attempt, duration_ms=_ms_since(started))


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 3)


def _finish(output: Any, ctx: HandlerContext, started: float) -> TaskOutcome:
    remaining = ctx.remaining_seconds()
    if remaining < 0:
        return _timeout_outcome(ctx, started, lateBySeconds=round(-remaining, 3))
    try:
        jsonable = to_jsonable_python(output)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        error = ErrorInfo(
            type=INVALID_OUTPUT,
            message=f"handler output is not JSON-serialisable: {exc}"[:MAX_MESSAGE_CHARS],
            non_retryable=True,
        )
        return TaskOutcome.failure(error, attempt=ctx.attempt, duration_ms=_ms_since(started))
    return TaskOutcome.success(jsonable, attempt=ctx.attempt, duration_ms=_ms_since(started))


def _failed(exc: Exception, ctx: HandlerContext, started: float, name: str) -> TaskOutcome:
    info = error_from_exception(exc)
    # Message and type only: the traceback may quote params (secrets) and goes to logs elsewhere.
    ctx.logger.warning(
        "handler %s failed on attempt %d: %s (%s)", name, ctx.attempt, info.type, type(exc).__name__
    )
    return TaskOutcome.failure(info, attempt=ctx.attempt, duration_ms=_ms_since(started))


def invoke_handler(
    name: str, params: dict[str, Any], ctx: HandlerContext, *, registry: HandlerRegistry | None = None
) -> TaskOutcome:
    """Run handler ``name`` once. Never raises for anything the handler does (see module doc)."""
    started = time.perf_counter()
    try:
        fn = (registry or REGISTRY).get(name)
    except Exception as exc:  # also an import error in a user handler module
        return _failed(exc, ctx, started, name)
    if ctx.remaining_seconds() <= 0:
        return _timeout_outcome(ctx, started, startedAfterDeadline=True)
    try:
        if inspect.iscoroutinefunction(fn):
            output = _run_coroutine(_with_deadline(fn, params, ctx))
        else:
            output = fn(params, ctx)
            if inspect.isawaitable(output):
                output = _run_coroutine(_await_with_deadline(output, ctx))
    except Exception as exc:
        return _failed(exc, ctx, started, name)
    return _finish(output, ctx, started)


async def ainvoke_handler(
    name: str, params: dict[str, Any], ctx: HandlerContext, *, registry: HandlerRegistry | None = None
) -> TaskOutcome:
    """:func:`invoke_handler` for callers already inside an event loop.

    A sync handler runs in a worker thread so it cannot block the loop.
    """
    started = time.perf_counter()
    try:
        fn = (registry or REGISTRY).get(name)
    except Exception as exc:
        return _failed(exc, ctx, started, name)
    if ctx.remaining_seconds() <= 0:
        return _timeout_outcome(ctx, started, startedAfterDeadline=True)
    try:
        if inspect.iscoroutinefunction(fn):
            output = await _with_deadline(fn, params, ctx)
        else:
            output = await asyncio.to_thread(fn, params, ctx)
            if inspect.isawaitable(output):
                output = await _await_with_deadline(output, ctx)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return _failed(exc, ctx, started, name)
    return _finish(output, ctx, started)


async def _with_deadline(fn: HandlerFn, params: dict[str, Any], ctx: HandlerContext) -> Any:
    return await _await_with_deadline(cast(Awaitable[Any], fn(params, ctx)), ctx)


async def _await_with_deadline(awaitable: Awaitable[Any], ctx: HandlerContext) -> Any:
    return await asyncio.wait_for(awaitable, timeout=max(ctx.remaining_seconds(), 0.0))


def _run_coroutine(coro: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run`` even when this thread already runs a loop (then in a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="weft-handler", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")
