# mypy: disallow-untyped-decorators=False
"""Small Durable Functions apps for devhost engine tests (not the Weft app)."""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func

ATTEMPTS: dict[str, int] = {}


def build_app() -> df.DFApp:
    app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.activity_trigger(input_name="name")
    def hello(name: str) -> str:
        return f"Hello {name}!"

    @app.activity_trigger(input_name="x", activity="Double")
    def double_it(x: int) -> int:
        return x * 2

    @app.activity_trigger(input_name="payload")
    def noop(payload: Any) -> Any:
        return payload

    @app.activity_trigger(input_name="key")
    def flaky(key: str) -> str:
        # Fails the first two attempts for a key, then succeeds.
        n = ATTEMPTS.get(key, 0) + 1
        ATTEMPTS[key] = n
        if n < 3:
            raise ValueError(f"attempt {n} failed")
        return f"ok after {n}"

    @app.activity_trigger(input_name="msg")
    def always_fails(msg: str) -> str:
        raise RuntimeError(msg)

    @app.orchestration_trigger(context_name="context")
    def sequence(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        out = []
        for city in ["Tokyo", "Seattle", "London"]:
            out.append((yield context.call_activity("hello", city)))
        return out

    @app.orchestration_trigger(context_name="context")
    def fan_out(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        n = context.get_input()
        results = yield context.task_all([context.call_activity("Double", i) for i in range(n)])
        return sum(results)

    @app.orchestration_trigger(context_name="context")
    def noop_fan_out(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        n = context.get_input()
        results = yield context.task_all([context.call_activity("noop", i) for i in range(n)])
        return len(results)

    @app.orchestration_trigger(context_name="context")
    def retrying(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        opts = df.RetryOptions(first_retry_interval_in_milliseconds=5000, max_number_of_attempts=3)
        return (yield context.call_activity_with_retry("flaky", opts, context.get_input()))

    @app.orchestration_trigger(context_name="context")
    def retry_exhausted(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        opts = df.RetryOptions(first_retry_interval_in_milliseconds=1000, max_number_of_attempts=2)
        try:
            yield context.call_activity_with_retry("always_fails", opts, "boom")
        except Exception as exc:
            return f"caught: {'boom' in str(exc)}"
        return "unreachable"

    @app.orchestration_trigger(context_name="context")
    def approval(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        deadline = context.current_utc_datetime + timedelta(hours=1)
        timeout = context.create_timer(deadline)
        event = context.wait_for_external_event("Approve")
        winner = yield context.task_any([event, timeout])
        if winner == event:
            timeout.cancel()
            return {"approved": event.result}
        return {"timedOut": True, "at": context.current_utc_datetime.isoformat()}

    @app.orchestration_trigger(context_name="context")
    def wait_two_events(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        a = yield context.wait_for_external_event("A")
        b = yield context.wait_for_external_event("B")
        return [a, b]

    @app.orchestration_trigger(context_name="context")
    def timers(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        stamps = [context.current_utc_datetime.isoformat()]
        for minutes in (5, 10):
            yield context.create_timer(context.current_utc_datetime + timedelta(minutes=minutes))
            stamps.append(context.current_utc_datetime.isoformat())
        return stamps

    @app.orchestration_trigger(context_name="context")
    def long_timer(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        start = context.current_utc_datetime
        yield context.create_timer(start + timedelta(days=10))
        return (context.current_utc_datetime - start).days

    @app.orchestration_trigger(context_name="context")
    def parent(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        a = yield context.call_sub_orchestrator("fan_out", 4)
        b = yield context.call_sub_orchestrator("sequence", None, f"{context.instance_id}-child")
        return {"a": a, "b": b}

    @app.orchestration_trigger(context_name="context")
    def failing_child_parent(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        try:
            yield context.call_sub_orchestrator("thrower", "x")
        except Exception as exc:
            return f"child failed: {'kaboom' in str(exc)}"
        return "no"

    @app.orchestration_trigger(context_name="context")
    def thrower(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        yield context.call_activity("hello", "x")
        raise ValueError("kaboom")

    @app.orchestration_trigger(context_name="context")
    def counter_loop(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        n = context.get_input() or 0
        yield context.call_activity("Double", n)
        if n < 3:
            context.continue_as_new(n + 1)
            return None
        return n

    @app.orchestration_trigger(context_name="context")
    def entity_user(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        eid = df.EntityId("Counter", context.get_input())
        context.signal_entity(eid, "add", 5)
        yield context.call_entity(eid, "add", 10)
        value = yield context.call_entity(eid, "get")
        context.set_custom_status({"value": value})
        return value

    @app.orchestration_trigger(context_name="context")
    def status_setter(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        context.set_custom_status("step1")
        yield context.wait_for_external_event("go")
        context.set_custom_status({"step": 2})
        return "done"

    @app.orchestration_trigger(context_name="context")
    def entity_failure(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        try:
            yield context.call_entity(df.EntityId("Counter", "bad"), "fail")
        except Exception as exc:
            return f"entity failed: {'entity op failed' in str(exc)}"
        return "no"

    @app.orchestration_trigger(context_name="context")
    def parallel_retry(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        opts = df.RetryOptions(first_retry_interval_in_milliseconds=1000, max_number_of_attempts=3)
        flaky = context.call_activity_with_retry("flaky", opts, context.get_input())
        plain = context.call_activity("hello", "B")
        results = yield context.task_all([flaky, plain])
        after = yield context.call_activity("hello", "C")
        return [*results, after]

    @app.orchestration_trigger(context_name="context")
    def calls_missing(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        return (yield context.call_activity("no_such_activity", 1))

    @app.entity_trigger(context_name="context", entity_name="Counter")
    def counter(context: df.DurableEntityContext) -> None:
        value = context.get_state(lambda: 0)
        op = context.operation_name
        if op == "add":
            value += context.get_input()
            context.set_state(value)
        elif op == "reset":
            context.set_state(0)
        elif op == "fail":
            raise ValueError("entity op failed")
        context.set_result(value)

    return app


def app_functions(app: df.DFApp | None = None) -> list[Any]:
    app = app or build_app()
    app.functions_bindings = {}
    return list(app.get_functions())


def build_evolving_app(version: int) -> df.DFApp:
    """The same orchestrator name with code that changes between versions (for nondeterminism)."""
    app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.activity_trigger(input_name="name")
    def hello(name: str) -> str:
        return f"Hello {name}!"

    @app.activity_trigger(input_name="x", activity="Double")
    def double_it(x: int) -> int:
        return x * 2

    @app.orchestration_trigger(context_name="context", orchestration="evolving")
    def evolving(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        if version == 1:
            first = yield context.call_activity("hello", "v1")
        else:
            first = yield context.call_activity("Double", 21)
        go = yield context.wait_for_external_event("go")
        return [first, go]

    return app
