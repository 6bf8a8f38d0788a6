"""One error taxonomy for all of Weft, after Temporal's ``ApplicationError``.

Every error has a ``type`` (a stable string a retry policy or an API client can match on), a
``message``, a ``non_retryable`` flag and JSON ``details``. Activities never let a business failure
escape as an exception, because the Durable SDK flattens a failed activity into a bare string; they
return a :class:`TaskOutcome` envelope instead.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from shared.model import WeftModel


class WeftError(Exception):
    """Base of every error Weft raises on purpose."""

    default_type: ClassVar[str] = "weft.Error"
    default_non_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        type: str | None = None,
        non_retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.type = type or self.default_type
        self.non_retryable = self.default_non_retryable if non_retryable is None else non_retryable
        self.details: dict[str, Any] = dict(details or {})

    def to_info(self) -> ErrorInfo:
        return ErrorInfo(
            type=self.type, message=self.message, non_retryable=self.non_retryable, details=self.details
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(type={self.type!r}, message={self.message!r})"


class ApplicationError(WeftError):
    """Raised by task handlers for business failures; ``type`` is the handler's own."""

    default_type = "ApplicationError"


class TransientError(WeftError):
    """Infrastructure hiccup (throttling, timeouts, connection resets): worth another try."""

    default_type = "weft.Transient"


class TaskTimeoutError(WeftError):
    default_type = "weft.Timeout"


class NotFoundError(WeftError):
    default_type = "weft.NotFound"
    default_non_retryable = True


class ConflictError(WeftError):
    """The request conflicts with the current state (duplicate id, finished execution, ...)."""

    default_type = "weft.Conflict"
    default_non_retryable = True


class ConcurrencyError(WeftError):
    """An optimistic-concurrency check (ETag) failed: re-read and try again."""

    default_type = "weft.ConcurrencyConflict"


class StaleFencingTokenError(WeftError):
    """A write carried a fencing token older than the lease's current one."""

    default_type = "weft.StaleFencingToken"
    default_non_retryable = True


class LockLostError(WeftError):
    """A peek-lock expired or was taken over before the message was settled: it will be redelivered."""

    default_type = "weft.LockLost"


class IllegalTransitionError(WeftError):
    default_type = "weft.IllegalTransition"
    default_non_retryable = True


class AdmissionDeniedError(WeftError):
    """Over a tenant's limits; the caller should come back after ``retry_after_seconds``."""

    default_type = "weft.AdmissionDenied"

    def __init__(self, message: str, *, retry_after_seconds: float, details: dict[str, Any] | None = None):
        super().__init__(message, details={**(details or {}), "retryAfterSeconds": retry_after_seconds})
        self.retry_after_seconds = retry_after_seconds


class PayloadTooLargeError(WeftError):
    default_type = "weft.PayloadTooLarge"
    default_non_retryable = True


class ParamResolutionError(WeftError):
    """A ``${{ ... }}`` param reference could not be resolved at run time (missing key, bad index)."""

    default_type = "weft.ParamResolution"
    default_non_retryable = True


class Problem(WeftModel):
    """One validation problem: where (a JSON path such as ``$.tasks[3].dependsOn[0]``) and what."""

    path: str
    message: str


class ValidationFailedError(WeftError):
    """Carries every problem found, never just the first."""

    default_type = "weft.ValidationFailed"
    default_non_retryable = True

    def __init__(self, problems: list[Problem], message: str | None = None) -> None:
        super().__init__(
            message or f"{len(problems)} validation problem(s)",
            details={"errors": [p.to_json_dict() for p in problems]},
        )
        self.problems = list(problems)


class ErrorInfo(WeftModel):
    """The serialisable form of an error, as stored and as sent on the wire."""

    type: str
    message: str
    non_retryable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        if isinstance(exc, WeftError):
            return exc.to_info()
        return cls(type=type(exc).__name__, message=str(exc) or type(exc).__name__)


class TaskOutcome(WeftModel):
    """What an activity returns: success with an output, or a business failure as data."""

    status: Literal["succeeded", "failed"]
    output: Any = None
    error: ErrorInfo | None = None
    attempt: int = 1
    duration_ms: float | None = None

    @classmethod
    def success(
        cls, output: Any = None, *, attempt: int = 1, duration_ms: float | None = None
    ) -> TaskOutcome:
        return cls(status="succeeded", output=output, attempt=attempt, duration_ms=duration_ms)

    @classmethod
    def failure(cls, error: ErrorInfo, *, attempt: int = 1, duration_ms: float | None = None) -> TaskOutcome:
        return cls(status="failed", error=error, attempt=attempt, duration_ms=duration_ms)

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"
