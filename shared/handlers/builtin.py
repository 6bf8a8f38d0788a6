"""Weft's built-in handlers: ``noop``, ``sleep``, ``fail``, ``http``, ``servicebus.publish``, ``blob.copy``.

Each validates its params with a pydantic model (camelCase keys, unknown keys rejected), so a typo
fails the task at once with a non-retryable ``weft.InvalidParams`` instead of being ignored.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from http.client import HTTPException
from typing import Any, Literal

from pydantic import Field, field_validator

from shared.errors import ApplicationError, TaskTimeoutError, TransientError
from shared.handlers.context import HandlerContext
from shared.handlers.invoke import parse_params
from shared.handlers.registry import handler
from shared.model import WeftModel
from shared.ports import OutgoingMessage, PropertyValue

# --------------------------------------------------------------------------------------------
# noop, sleep, fail: for tests, demos and benchmarks


class NoopParams(WeftModel):
    result: Any = None


@handler("noop")
def noop(params: dict[str, Any], ctx: HandlerContext) -> Any:
    """Returns ``params.result``, or ``{}``."""
    p = parse_params(NoopParams, params)
    return {} if p.result is None else p.result


class SleepParams(WeftModel):
    seconds: float = Field(ge=0, le=24 * 3600, allow_inf_nan=False)


@handler("sleep")
def sleep(params: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
    """Sleeps ``params.seconds``, but never past the deadline (then it times out)."""
    p = parse_params(SleepParams, params)
    remaining = ctx.remaining_seconds()
    if p.seconds > remaining:
        time.sleep(max(remaining, 0.0))
        raise TaskTimeoutError(
            f"sleep of {p.seconds}s does not fit before the deadline",
            details={"seconds": p.seconds},
        )
    time.sleep(p.seconds)
    return {"sleptSeconds": p.seconds}


class FailParams(WeftModel):
    #: Fail while ``attempt <= times``; -1 fails every attempt.
    times: int = Field(default=-1, ge=-1)
    error_type: str = Field(default="TestFailure", min_length=1, max_length=200)
    retryable: bool = True
    message: str | None = Field(default=None, max_length=2000)
    #: Output once it stops failing (default ``{"attempt": n}``).
    result: Any = None


@handler("fail")
def fail(params: dict[str, Any], ctx: HandlerContext) -> Any:
    """Fails attempts 1..``times`` with ``errorType``/``retryable``, then succeeds."""
    p = parse_params(FailParams, params)
    if p.times == -1 or ctx.attempt <= p.times:
        raise ApplicationError(
            p.message or f"failing attempt {ctx.attempt} on purpose (times={p.times})",
            type=p.error_type,
            non_retryable=not p.retryable,
            details={"attempt": ctx.attempt},
        )
    return {"attempt": ctx.attempt} if p.result is None else p.result


# --------------------------------------------------------------------------------------------
# http

HTTP_STATUS_ERROR = "weft.HttpStatus"
HTTP_FORBIDDEN_DESTINATION = "weft.HttpForbiddenDestination"
#: Status codes outside 5xx that are still worth another try.
RETRYABLE_4XX = frozenset({408, 429})
_ERROR_BODY_CHARS = 1000


class HttpParams(WeftModel):
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] = "GET"
    url: str = Field(min_length=1, max_length=8192)
    headers: dict[str, str] = Field(default_factory=dict)
    #: Sent as the JSON request body (``Content-Type: application/json``) when not null.
    json_body: Any = Field(default=None, alias="json")
    timeout: float = Field(default=30.0, gt=0, le=3600, allow_inf_nan=False)
    max_response_bytes: int = Field(default=1024 * 1024, ge=0, le=64 * 1024 * 1024)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL")
        return value


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirect could lead to a destination the URL check refused (e.g. the metadata endpoint).
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _check_destination(host: str, port: int) -> None:
    """Refuse link-local addresses: that is where cloud metadata endpoints hand out credentials."""
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise TransientError(f"cannot resolve {host!r}: {exc.strerror}", details={"host": host}) from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address.is_link_local or (
            isinstance(address, ipaddress.IPv6Address)
            and address.ipv4_mapped is not None
            and address.ipv4_mapped.is_link_local
        ):
            raise ApplicationError(
                f"requests to link-local addresses are not allowed ({host})",
                type=HTTP_FORBIDDEN_DESTINATION,
                non_retryable=True,
                details={"host": host},
            )


def _decode_body(raw: bytes, headers: Message | None) -> Any:
    content_type = (headers.get("Content-Type") if headers else None) or ""
    charset = (headers.get_content_charset() if headers else None) or "utf-8"
    text = raw.decode(charset, errors="replace")
    if "json" in content_type.lower():
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _retry_after(headers: Message | None) -> float | None:
    value = headers.get("Retry-After") if headers else None
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None  # an HTTP date; the retry policy's own backoff applies


@handler("http")
def http(params: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
    """One HTTP request with an ``Idempotency-Key`` header; redirects are not followed.

    2xx -> ``{"status", "contentType", "body"}`` (JSON bodies parsed, others as text).
    408, 429, 5xx and network errors are retryable; other 4xx and 3xx are not.
    """
    p = parse_params(HttpParams, params)
    parts = urllib.parse.urlsplit(p.url)
    host = parts.hostname or ""
    timeout = min(p.timeout, ctx.remaining_seconds())
    if timeout <= 0:
        raise TaskTimeoutError("no time left before the deadline for the HTTP request")
    _check_destination(host, parts.port or (443 if parts.scheme == "https" else 80))

    headers = {"User-Agent": "weft-http-handler/1"}
    headers.update(p.headers)
    lower = {k.lower() for k in headers}
    # A key the user set wins: it may be stabler than ours (ours changes with the attempt).
    if "idempotency-key" not in lower:
        headers["Idempotency-Key"] = ctx.idempotency_key
    if ctx.traceparent and "traceparent" not in lower:
        headers["traceparent"] = ctx.traceparent
    data: bytes | None = None
    if p.json_body is not None:
        data = json.dumps(p.json_body, separators=(",", ":")).encode("utf-8")
        if "content-type" not in lower:
            headers["Content-Type"] = "application/json"

    # The scheme was checked to be http(s) by HttpParams.
    request = urllib.request.Request(p.url, data=data, method=p.method, headers=headers)  # noqa: S310
    # Never the headers, the query or the body: they are where secrets live.
    where = f"{p.method} {parts.scheme}://{host}"
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            status: int = response.status
            response_headers: Message | None = response.headers
            raw: bytes = response.read(p.max_response_bytes + 1)
    except urllib.error.HTTPError as exc:
        status, response_headers = exc.code, exc.headers
        try:
            raw = exc.read(p.max_response_bytes + 1)
        except (OSError, HTTPException):
            raw = b""
        finally:
            exc.close()
    except TimeoutError:
        raise TaskTimeoutError(f"{where}: timed out after {timeout:.3f}s") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise TaskTimeoutError(f"{where}: timed out after {timeout:.3f}s") from None
        raise TransientError(f"{where}: {exc.reason}", details={"host": host}) from None
    except (OSError, HTTPException) as exc:
        raise TransientError(f"{where}: {type(exc).__name__}: {exc}", details={"host": host}) from None

    ctx.logger.info("http handler: %s -> %d", where, status)
    if len(raw) > p.max_response_bytes:
        raise ApplicationError(
            f"{where}: response larger than maxResponseBytes={p.max_response_bytes}",
            type="weft.HttpResponseTooLarge",
            non_retryable=True,
            details={"status": status},
        )
    body = None if p.method == "HEAD" else _decode_body(raw, response_headers)
    if 200 <= status < 300:
        content_type = response_headers.get("Content-Type") if response_headers else None
        return {"status": status, "contentType": content_type, "body": body}

    details: dict[str, Any] = {
        "status": status,
        "body": body if not isinstance(body, str) else body[:_ERROR_BODY_CHARS],
    }
    retry_after = _retry_after(response_headers)
    if retry_after is not None:
        details["retryAfterSeconds"] = retry_after
    retryable = status >= 500 or status in RETRYABLE_4XX
    raise ApplicationError(
        f"{where}: HTTP {status}"
        + ("" if status < 300 or status >= 400 else " (redirects are not followed)"),
        type=HTTP_STATUS_ERROR,
        non_retryable=not retryable,
        details=details,
    )


# --------------------------------------------------------------------------------------------
# servicebus.publish and blob.copy: through the ports in ctx


class PublishParams(WeftModel):
    entity: str = Field(min_length=1, max_length=260)
    body: Any = None
    #: Default: derived from the execution, the task, the entity and the body (see below).
    message_id: str | None = Field(default=None, min_length=1, max_length=128)
    subject: str | None = Field(default=None, max_length=128)
    correlation_id: str | None = Field(default=None, max_length=128)
    application_properties: dict[str, PropertyValue] = Field(default_factory=dict)


def default_message_id(ctx: HandlerContext, entity: str, body: Any) -> str:
    """Stable across deliveries *and attempts* of the task, so the bus's duplicate detection drops
    a retry's re-publish; a retry with replacement params (another body) gets a new id."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    seed = f"{ctx.execution_id}\x1f{ctx.task_id}\x1f{entity}\x1f{canonical}"
    return "weft-" + hashlib.sha256(seed.encode("utf-8")).hexdigest()


@handler("servicebus.publish")
def servicebus_publish(params: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
    """Publishes ``params.body`` as JSON to a queue or topic through the Bus port."""
    p = parse_params(PublishParams, params)
    message_id = p.message_id or default_message_id(ctx, p.entity, p.body)
    message = OutgoingMessage.from_json(
        message_id,
        p.body,
        subject=p.subject,
        correlation_id=p.correlation_id or ctx.execution_id,
        application_properties=p.application_properties,
    )
    ctx.bus.publish(p.entity, [message])
    return {"entity": p.entity, "messageId": message_id}


class BlobCopyParams(WeftModel):
    #: A PayloadStore reference (e.g. a claim-check ``$ref``).
    source: str = Field(min_length=1, max_length=1024)
    #: Where the copy goes, inside the tenant's own prefix (``<tenantId>/<destination>``).
    destination: str | None = Field(default=None, max_length=512, pattern=r"^[A-Za-z0-9._/-]*$")
    content_type: str = Field(default="application/octet-stream", max_length=255)


@handler("blob.copy")
def blob_copy(params: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
    """Copies a payload to a new reference through the PayloadStore port."""
    p = parse_params(BlobCopyParams, params)
    store = ctx.payload_store
    data = store.get(p.source)
    prefix = ctx.tenant_id if not p.destination else f"{ctx.tenant_id}/{p.destination.strip('/')}"
    reference = store.put(data, content_type=p.content_type, prefix=prefix)
    return {"reference": reference, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
