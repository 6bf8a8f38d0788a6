"""RFC 9457 problem details: every API error is ``application/problem+json``.

``{type, title, status, detail}``, plus ``errors: [{path, message}]`` for validation problems and
``code`` (the :mod:`shared.errors` type, stable for clients to match on). :func:`from_exception`
maps the error taxonomy to statuses; anything unexpected is a 500 whose body says nothing about
the internals (the log has the exception, under the ``incident`` id the body carries).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from shared.api.types import ApiResponse
from shared.errors import (
    AdmissionDeniedError,
    ConcurrencyError,
    ConflictError,
    IllegalTransitionError,
    NotFoundError,
    PayloadTooLargeError,
    Problem,
    TransientError,
    ValidationFailedError,
    WeftError,
)

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:weft:problem:"

#: status -> the slug of its problem ``type``.
SLUGS: dict[int, str] = {
    400: "validation-failed",
    401: "unauthenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    429: "too-many-requests",
    500: "internal",
    503: "unavailable",
}


def problem(
    status: int,
    detail: str,
    *,
    code: str | None = None,
    errors: Sequence[Problem] | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> ApiResponse:
    body: dict[str, Any] = {
        "type": TYPE_PREFIX + SLUGS.get(status, str(status)),
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if code is not None:
        body["code"] = code
    if errors is not None:
        body["errors"] = [{"path": p.path, "message": p.message} for p in errors]
    if extra:
        body.update(extra)
    return ApiResponse(status=status, body=body, headers=dict(headers or {}), content_type=PROBLEM_JSON)


def validation(errors: Sequence[Problem], detail: str | None = None) -> ApiResponse:
    return problem(
        400,
        detail or f"{len(errors)} validation problem(s)",
        code=ValidationFailedError.default_type,
        errors=errors,
    )


def retry_after(seconds: float) -> str:
    # Retry-After is whole seconds; rounding down would invite an immediate second refusal.
    return str(max(1, math.ceil(seconds)))


def from_exception(exc: BaseException) -> ApiResponse:
    if isinstance(exc, ValidationFailedError):
        return validation(exc.problems, exc.message)
    if isinstance(exc, WeftError):
        status, headers = _status_of(exc)
        if status is not None:
            return problem(status, exc.message, code=exc.type, headers=headers)
    incident = uuid.uuid4().hex
    log.error("unexpected error (incident %s)", incident, exc_info=exc)
    return problem(500, "an unexpected error occurred; it has been logged", extra={"incident": incident})


def _status_of(exc: WeftError) -> tuple[int | None, dict[str, str]]:
    if isinstance(exc, NotFoundError):
        return 404, {}
    if isinstance(exc, AdmissionDeniedError):
        return 429, {"Retry-After": retry_after(exc.retry_after_seconds)}
    if isinstance(exc, PayloadTooLargeError):
        return 413, {}
    if isinstance(exc, ConflictError | IllegalTransitionError):
        return 409, {}
    if isinstance(exc, ConcurrencyError):
        # Lost an optimistic-concurrency race even after the handler's own retries: try again.
        return 409, {"Retry-After": "1"}
    if isinstance(exc, TransientError):
        return 503, {"Retry-After": "1"}
    return None, {}
