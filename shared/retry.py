"""Retry policy and its backoff maths.

``next_delay`` is a pure function of the policy, the attempt number and a seed string, so an
orchestrator can compute it again on every replay and get the same answer. Jitter follows the AWS
"Exponential Backoff and Jitter" article: with ``full`` jitter the delay after attempt *n* is
``uniform(0, min(maxIntervalSeconds, initialIntervalSeconds * backoffCoefficient ** (n - 1)))``.
The uniform draw comes from a hash of the seed and the attempt instead of a random generator.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

from pydantic import Field

from shared.errors import ErrorInfo
from shared.model import WeftModel

MAX_ATTEMPTS_LIMIT = 1000


class Jitter(StrEnum):
    NONE = "none"
    FULL = "full"


class RetryPolicy(WeftModel):
    """How often and how patiently a task is retried. ``attempt`` counts from 1 (the first run)."""

    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS_LIMIT)
    initial_interval_seconds: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    backoff_coefficient: float = Field(default=2.0, ge=1, le=100, allow_inf_nan=False)
    max_interval_seconds: float = Field(default=300.0, ge=0, allow_inf_nan=False)
    jitter: Jitter = Jitter.FULL
    # Error ``type`` values that are never retried, matched exactly (see shared.errors.ErrorInfo).
    non_retryable_errors: tuple[str, ...] = ()

    def backoff_ceiling(self, attempt: int) -> float:
        """The un-jittered delay after ``attempt`` failed: exponential growth, capped."""
        if attempt < 1:
            raise ValueError(f"attempt counts from 1, got {attempt}")
        if self.initial_interval_seconds == 0:
            return 0.0
        try:
            raw = self.initial_interval_seconds * self.backoff_coefficient ** (attempt - 1)
        except OverflowError:
            # A huge exponent overflows a float long after it has passed any sensible cap.
            return self.max_interval_seconds
        return min(self.max_interval_seconds, raw)

    def next_delay(self, attempt: int, seed: str) -> float:
        """Seconds to wait after attempt ``attempt`` failed, before attempt ``attempt + 1``.

        Deterministic: equal (policy, attempt, seed) give an equal delay, which keeps an
        orchestrator replay-safe. Never more than ``max_interval_seconds``.
        """
        ceiling = self.backoff_ceiling(attempt)
        if self.jitter is Jitter.NONE:
            return ceiling
        return ceiling * uniform_from_seed(seed, attempt)

    def should_retry(self, attempt: int, error: ErrorInfo) -> bool:
        """Whether a failure of attempt ``attempt`` deserves another attempt."""
        if attempt >= self.max_attempts:
            return False
        if error.non_retryable:
            return False
        return error.type not in self.non_retryable_errors


def uniform_from_seed(seed: str, attempt: int) -> float:
    """A number in [0, 1) derived from ``seed`` and ``attempt`` by BLAKE2b; stable across processes."""
    digest = hashlib.blake2b(f"{seed}\x1f{attempt}".encode(), digest_size=8).digest()
    # 53 bits, because a float cannot hold more: (2**64 - 1) / 2**64 would round up to 1.0.
    return (int.from_bytes(digest, "big") >> 11) / float(1 << 53)


def retry_seed(execution_id: str, task_id: str, attempt: int) -> str:
    """The jitter seed for one attempt of one task in one execution."""
    return f"{execution_id}/{task_id}/{attempt}"
