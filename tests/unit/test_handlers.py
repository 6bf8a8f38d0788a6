"""Handlers: the registry, the error mapping of invoke_handler and every built-in."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import ApplicationError, NotFoundError, TaskOutcome
from shared.handlers import (
    HandlerContext,
    HandlerPorts,
    HandlerRegistry,
    ainvoke_handler,
    handler,
    invoke_handler,
    names,
)
from shared.handlers.builtin import default_message_id
from shared.handlers.registry import REGISTRY, handler_modules
from shared.ports import OutgoingMessage, ReceivedMessage
from shared.settings import reset_settings_cache
from tests.support.ports import free_port

# --------------------------------------------------------------------------------------------
# fakes and helpers


class FakeBus:
    def __init__(self) -> None:
        self.sent: list[tuple[str, OutgoingMessage]] = []

    def publish(self, entity: str, messages: Sequence[OutgoingMessage]) -> None:
        self.sent.extend((entity, m) for m in messages)

    def receive(
        self, entity: str, *, max_messages: int = 1, max_wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        raise NotImplementedError

    def complete(self, message: ReceivedMessage) -> None:
        raise NotImplementedError

    def abandon(self, message: ReceivedMessage) -> None:
        raise NotImplementedError

    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None:
        raise NotImplementedError

    def renew_lock(self, message: ReceivedMessage) -> datetime:
        raise NotImplementedError

    def peek_dead_letters(self, entity: str, *, max_messages: int = 10) -> list[ReceivedMessage]:
        raise NotImplementedError

    def redrive_dead_letters(self, entity: str, *, max_messages: int = 100) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class FakePayloadStore:
    def __init__(self) -> None:
        self.blobs: dict[str, tuple[bytes, str]] = {}

    def put(self, data: bytes, *, content_type: str = "application/octet-stream", prefix: str = "") -> str:
        ref = f"{prefix}/blob-{len(self.blobs)}"
        self.blobs[ref] = (data, content_type)
        return ref

    def get(self, reference: str) -> bytes:
        if reference not in self.blobs:
            raise NotFoundError(f"no payload {reference}")
        return self.blobs[reference][0]

    def delete(self, reference: str) -> None:
        self.blobs.pop(reference, None)


def make_ctx(
    *,
    attempt: int = 1,
    seconds_left: float = 30.0,
    ports: HandlerPorts | None = None,
    traceparent: str | None = None,
) -> HandlerContext:
    return HandlerContext(
        execution_id="exec-1",
        task_id="task-a",
        tenant_id="tenant-1",
        attempt=attempt,
        deadline=datetime.now(UTC) + timedelta(seconds=seconds_left),
        traceparent=traceparent,
        ports=ports or HandlerPorts(),
    )


def failed(outcome: TaskOutcome) -> tuple[str, bool]:
    assert outcome.status == "failed", outcome
    assert outcome.error is not None
    return outcome.error.type, outcome.error.non_retryable


# --------------------------------------------------------------------------------------------
# registry


def test_builtins_are_registered() -> None:
    assert {"noop", "sleep", "fail", "http", "servicebus.publish", "blob.copy"} <= set(names())


def test_duplicate_name_is_rejected() -> None:
    registry = HandlerRegistry()

    @handler("acme.one", registry=registry)
    def one(params: dict[str, Any], ctx: HandlerContext) -> Any:
        return 1

    with pytest.raises(ValueError, match="already registered"):

        @handler("acme.one", registry=registry)
        def other(params: dict[str, Any], ctx: HandlerContext) -> Any:
            return 2

    assert registry.get("acme.one") is one


@pytest.mark.parametrize("bad", ["", "Noop", "1abc", "a..b", "a b", "x" * 201])
def test_invalid_names_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid handler name"):
        HandlerRegistry().register(bad, lambda p, c: None)


def test_user_modules_from_setting_are_imported_lazily(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acme_handlers_for_test.py").write_text(
        textwrap.dedent(
            """
            from shared.handlers import handler

            @handler("acme.shout")
            def shout(params, ctx):
                return {"text": params["text"].upper()}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("WEFT_HANDLER_MODULES", " acme_handlers_for_test , ")
    reset_settings_cache()
    try:
        modules = handler_modules()
        assert modules[-1] == "acme_handlers_for_test"
        assert "acme_handlers_for_test" not in sys.modules
        HandlerRegistry(lambda: modules).load()
        outcome = invoke_handler("acme.shout", {"text": "hi"}, make_ctx())
        assert outcome.succeeded
        assert outcome.output == {"text": "HI"}
    finally:
        REGISTRY.unregister("acme.shout")
        sys.modules.pop("acme_handlers_for_test", None)
        reset_settings_cache()


def test_a_broken_user_module_fails_the_task_not_the_worker() -> None:
    def boom() -> list[str]:
        raise ImportError("acme_missing")

    outcome = invoke_handler("noop", {}, make_ctx(), registry=HandlerRegistry(boom))
    assert failed(outcome) == ("ImportError", False)


# --------------------------------------------------------------------------------------------
# invoke_handler: error mapping


def invoke_fn(
    fn: Any, ctx: HandlerContext | None = None, params: dict[str, Any] | None = None
) -> TaskOutcome:
    registry = HandlerRegistry()
    registry.register("t.fn", fn)
    return invoke_handler("t.fn", params or {}, ctx or make_ctx(), registry=registry)


def test_application_error_keeps_type_and_retryability() -> None:
    def h(params: dict[str, Any], ctx: HandlerContext) -> Any:
        raise ApplicationError("card declined", type="acme.Declined", non_retryable=True, details={"x": 1})

    outcome = invoke_fn(h)
    assert failed(outcome) == ("acme.Declined", True)
    assert outcome.error is not None
    assert outcome.error.message == "card declined"
    assert outcome.error.details == {"x": 1}


def test_timeout_error_is_a_retryable_weft_timeout() -> None:
    def h(params: dict[str, Any], ctx: HandlerContext) -> Any:
        raise TimeoutError("downstream slow")

    assert failed(invoke_fn(h)) == ("weft.Timeout", False)


def test_other_exceptions_are_retryable_with_their_class_name() -> None:
    def h(params: dict[str, Any], ctx: HandlerContext) -> Any:
        return {"a": 1}["b"]

    outcome = invoke_fn(h)
    assert failed(outcome) == ("KeyError", False)
    assert outcome.error is not None
    assert outcome.error.details["exceptionType"] == "builtins.KeyError"


_EXCEPTIONS = [ValueError, RuntimeError, KeyError, ZeroDivisionError, OSError, MemoryError, RecursionError]


@settings(max_examples=50, deadline=None)
@given(exc_type=st.sampled_from(_EXCEPTIONS), message=st.text(max_size=5000))
def test_no_exception_escapes_invoke_handler(exc_type: type[Exception], message: str) -> None:
    def h(params: dict[str, Any], ctx: HandlerContext) -> Any:
        raise exc_type(message)

    outcome = invoke_fn(h)
    error_type, non_retryable = failed(outcome)
    assert error_type == exc_type.__name__
    assert not non_retryable
    assert outcome.error is not None
    assert len(outcome.error.message) <= 2003


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
def test_process_exit_requests_propagate(exc: BaseException) -> None:
    def h(params: dict[str, Any], ctx: HandlerContext) -> Any:
        raise exc

    with pytest.raises(type(exc)):
        invoke_fn(h)


def test_unknown_handler_is_non_retryable() -> None:
    assert failed(invoke_handler("acme.nope", {}, make_ctx())) == ("weft.UnknownHandler", True)


def test_output_must_be_json_serialisable() -> None:
    outcome = invoke_fn(lambda p, c: {"when": datetime(2026, 1, 2, tzinfo=UTC), "ids": (1, 2)})
    assert outcome.output == {"when": "2026-01-02T00:00:00Z", "ids": [1, 2]}
    assert failed(invoke_fn(lambda p, c: {"x": object()})) == ("weft.InvalidOutput", True)


def test_attempt_already_past_its_deadline_does_not_run() -> None:
    ran: list[bool] = []
    outcome = invoke_fn(lambda p, c: ran.append(True), make_ctx(seconds_left=-1))
    assert failed(outcome) == ("weft.Timeout", False)
    assert ran == []


def test_sync_handler_finishing_after_the_deadline_counts_as_timed_out() -> None:
    ctx = make_ctx(seconds_left=0.05)

    def h(params: dict[str, Any], c: HandlerContext) -> Any:
        threading.Event().wait(0.2)
        return "late"

    outcome = invoke_fn(h, ctx)
    assert failed(outcome) == ("weft.Timeout", False)
    assert outcome.error is not None
    assert outcome.error.details["lateBySeconds"] > 0


def test_async_handler_runs_and_is_cancelled_at_the_deadline() -> None:
    async def quick(params: dict[str, Any], ctx: HandlerContext) -> Any:
        await asyncio.sleep(0)
        return {"key": ctx.idempotency_key}

    cancelled: list[bool] = []

    async def slow(params: dict[str, Any], ctx: HandlerContext) -> Any:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    assert invoke_fn(quick).output == {"key": "exec-1/task-a/1"}
    assert failed(invoke_fn(slow, make_ctx(seconds_left=0.1))) == ("weft.Timeout", False)
    assert cancelled == [True]


def test_ainvoke_handler_inside_a_running_loop() -> None:
    async def main() -> tuple[TaskOutcome, TaskOutcome]:
        ok = await ainvoke_handler("noop", {"result": 7}, make_ctx())
        bad = await ainvoke_handler("fail", {}, make_ctx())
        return ok, bad

    ok, bad = asyncio.run(main())
    assert ok.output == 7
    assert failed(bad) == ("TestFailure", False)


def test_invalid_params_are_non_retryable_with_paths() -> None:
    outcome = invoke_handler("sleep", {"seconds": "soon", "extra": 1}, make_ctx())
    assert failed(outcome) == ("weft.InvalidParams", True)
    assert outcome.error is not None
    paths = {e["path"] for e in outcome.error.details["errors"]}
    assert paths == {"$.params.seconds", "$.params.extra"}


def test_idempotency_key_and_outcome_attempt() -> None:
    ctx = make_ctx(attempt=3)
    assert ctx.idempotency_key == "exec-1/task-a/3"
    outcome = invoke_handler("noop", {}, ctx)
    assert outcome.attempt == 3
    assert outcome.duration_ms is not None


# --------------------------------------------------------------------------------------------
# noop, sleep, fail


def test_noop() -> None:
    assert invoke_handler("noop", {}, make_ctx()).output == {}
    assert invoke_handler("noop", {"result": {"n": [1, 2]}}, make_ctx()).output == {"n": [1, 2]}


def test_sleep_within_and_beyond_the_deadline() -> None:
    assert invoke_handler("sleep", {"seconds": 0.01}, make_ctx()).output == {"sleptSeconds": 0.01}
    outcome = invoke_handler("sleep", {"seconds": 60}, make_ctx(seconds_left=0.05))
    assert failed(outcome) == ("weft.Timeout", False)
    assert failed(invoke_handler("sleep", {"seconds": -1}, make_ctx())) == ("weft.InvalidParams", True)


def test_fail_until_times_then_succeed() -> None:
    params = {"times": 2, "errorType": "acme.Flaky", "retryable": True}
    assert failed(invoke_handler("fail", params, make_ctx(attempt=1))) == ("acme.Flaky", False)
    assert failed(invoke_handler("fail", params, make_ctx(attempt=2))) == ("acme.Flaky", False)
    assert invoke_handler("fail", params, make_ctx(attempt=3)).output == {"attempt": 3}


def test_fail_always_and_non_retryable() -> None:
    params = {"times": -1, "errorType": "acme.Fatal", "retryable": False}
    for attempt in (1, 5, 100):
        assert failed(invoke_handler("fail", params, make_ctx(attempt=attempt))) == ("acme.Fatal", True)


# --------------------------------------------------------------------------------------------
# http, against a real local server


class _Server:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.httpd: ThreadingHTTPServer | None = None

    @property
    def base(self) -> str:
        assert self.httpd is not None
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    state = _Server()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.requests.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body,
                }
            )
            parts = self.path.strip("/").split("/")
            if parts[0] == "status":
                code = int(parts[1])
                self._send(code, {"error": f"status {code}"}, extra={"Retry-After": "7"})
            elif parts[0] == "slow":
                state.release.wait(10)
                self._send(200, {"slow": True})
            elif parts[0] == "redirect":
                self._send(302, {}, extra={"Location": "/echo"})
            elif parts[0] == "text":
                data = b"plain words"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                echo = {"method": self.command, "json": json.loads(body) if body else None}
                self._send(200, echo)

        def _send(self, code: int, payload: Any, extra: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.httpd = httpd
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_http_post_json_with_idempotency_key_and_traceparent(server: _Server) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    params = {
        "method": "post",
        "url": f"{server.base}/echo",
        "headers": {"Authorization": "Bearer s3cret"},
        "json": {"amount": 5},
    }
    outcome = invoke_handler("http", params, make_ctx(attempt=2, traceparent=traceparent))
    assert outcome.succeeded, outcome
    assert outcome.output == {
        "status": 200,
        "contentType": "application/json",
        "body": {"method": "POST", "json": {"amount": 5}},
    }
    sent = server.requests[0]["headers"]
    assert sent["idempotency-key"] == "exec-1/task-a/2"
    assert sent["traceparent"] == traceparent
    assert sent["authorization"] == "Bearer s3cret"
    assert sent["content-type"] == "application/json"


def test_http_same_attempt_sends_same_key_and_user_key_wins(server: _Server) -> None:
    for _ in range(2):
        invoke_handler("http", {"url": f"{server.base}/echo"}, make_ctx(attempt=1))
    invoke_handler("http", {"url": f"{server.base}/echo", "headers": {"idempotency-key": "mine"}}, make_ctx())
    keys = [r["headers"].get("idempotency-key") for r in server.requests]
    assert keys == ["exec-1/task-a/1", "exec-1/task-a/1", "mine"]


def test_http_text_body(server: _Server) -> None:
    outcome = invoke_handler("http", {"url": f"{server.base}/text"}, make_ctx())
    assert outcome.output is not None
    assert outcome.output["body"] == "plain words"


@pytest.mark.parametrize(
    ("status", "non_retryable"),
    [
        (400, True),
        (401, True),
        (404, True),
        (409, True),
        (422, True),
        (408, False),
        (429, False),
        (500, False),
        (502, False),
        (503, False),
    ],
)
def test_http_status_mapping(server: _Server, status: int, non_retryable: bool) -> None:
    outcome = invoke_handler("http", {"url": f"{server.base}/status/{status}"}, make_ctx())
    assert failed(outcome) == ("weft.HttpStatus", non_retryable)
    assert outcome.error is not None
    assert outcome.error.details["status"] == status
    assert outcome.error.details["body"] == {"error": f"status {status}"}
    assert outcome.error.details["retryAfterSeconds"] == 7.0


def test_http_redirects_are_not_followed(server: _Server) -> None:
    outcome = invoke_handler("http", {"url": f"{server.base}/redirect"}, make_ctx())
    assert failed(outcome) == ("weft.HttpStatus", True)
    assert [r["path"] for r in server.requests] == ["/redirect"]


def test_http_timeout(server: _Server) -> None:
    outcome = invoke_handler("http", {"url": f"{server.base}/slow", "timeout": 0.2}, make_ctx())
    assert failed(outcome) == ("weft.Timeout", False)


def test_http_connection_refused_is_retryable() -> None:
    port = free_port()
    outcome = invoke_handler("http", {"url": f"http://127.0.0.1:{port}/"}, make_ctx())
    assert failed(outcome) == ("weft.Transient", False)


def test_http_refuses_link_local_metadata_endpoint() -> None:
    for url in ("http://169.254.169.254/metadata/identity", "http://[fe80::1]/"):
        outcome = invoke_handler("http", {"url": url, "headers": {"Metadata": "true"}}, make_ctx())
        assert failed(outcome) == ("weft.HttpForbiddenDestination", True)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "/relative", "http://"])
def test_http_rejects_non_http_urls(url: str) -> None:
    assert failed(invoke_handler("http", {"url": url}, make_ctx())) == ("weft.InvalidParams", True)


def test_http_never_logs_header_values(server: _Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    params = {"url": f"{server.base}/status/500?sig=querysecret", "headers": {"X-Api-Key": "hdrsecret"}}
    invoke_handler("http", params, make_ctx())
    assert caplog.text  # something was logged ...
    assert "hdrsecret" not in caplog.text  # ... but no secret
    assert "querysecret" not in caplog.text


# --------------------------------------------------------------------------------------------
# servicebus.publish and blob.copy


def test_servicebus_publish_through_the_bus_port() -> None:
    bus = FakeBus()
    ports = HandlerPorts.of(bus=bus)
    params = {"entity": "orders", "body": {"id": 1}, "subject": "order.created"}
    first = invoke_handler("servicebus.publish", params, make_ctx(attempt=1, ports=ports))
    retry = invoke_handler("servicebus.publish", params, make_ctx(attempt=2, ports=ports))
    assert first.succeeded
    assert retry.succeeded
    (e1, m1), (e2, m2) = bus.sent
    assert e1 == e2 == "orders"
    assert json.loads(m1.body) == {"id": 1}
    assert m1.subject == "order.created"
    assert m1.correlation_id == "exec-1"
    # A retry re-publishes with the same id, so the bus's duplicate detection drops it ...
    assert m1.message_id == m2.message_id == first.output["messageId"]
    # ... but other params (an operator's replacement) make another message.
    assert default_message_id(make_ctx(), "orders", {"id": 2}) != m1.message_id
    assert len(m1.message_id) <= 128


def test_servicebus_publish_explicit_message_id_and_missing_bus() -> None:
    bus = FakeBus()
    params = {"entity": "q", "body": "x", "messageId": "m-1"}
    invoke_handler("servicebus.publish", params, make_ctx(ports=HandlerPorts.of(bus=bus)))
    assert bus.sent[0][1].message_id == "m-1"
    assert failed(invoke_handler("servicebus.publish", params, make_ctx())) == (
        "weft.PortNotConfigured",
        True,
    )


def test_bus_factory_is_called_lazily_once() -> None:
    calls: list[int] = []
    bus = FakeBus()

    def factory() -> FakeBus:
        calls.append(1)
        return bus

    ports = HandlerPorts(bus=factory)
    invoke_handler("noop", {}, make_ctx(ports=ports))
    assert calls == []
    for _ in range(2):
        invoke_handler("servicebus.publish", {"entity": "q"}, make_ctx(ports=ports))
    assert calls == [1]
    assert len(bus.sent) == 2


def test_blob_copy_through_the_payload_store() -> None:
    store = FakePayloadStore()
    source = store.put(b"hello", prefix="tenant-1")
    ports = HandlerPorts.of(payload_store=store)
    outcome = invoke_handler(
        "blob.copy", {"source": source, "destination": "exports/"}, make_ctx(ports=ports)
    )
    assert outcome.succeeded, outcome
    assert outcome.output is not None
    ref = outcome.output["reference"]
    assert ref != source
    assert ref.startswith("tenant-1/exports/")
    assert store.get(ref) == b"hello"
    assert outcome.output["size"] == 5
    missing = invoke_handler("blob.copy", {"source": "nope"}, make_ctx(ports=ports))
    assert failed(missing) == ("weft.NotFound", True)
    escape = invoke_handler("blob.copy", {"source": source, "destination": "a b"}, make_ctx(ports=ports))
    assert failed(escape) == ("weft.InvalidParams", True)
