from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shared.errors import ErrorInfo
from shared.retry import Jitter, RetryPolicy, retry_seed, uniform_from_seed

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 50),
    initial_interval_seconds=st.floats(0, 3600, allow_nan=False),
    backoff_coefficient=st.floats(1, 10, allow_nan=False),
    max_interval_seconds=st.floats(0, 86400, allow_nan=False),
    jitter=st.sampled_from(list(Jitter)),
)


@settings(max_examples=200, deadline=None)
@given(policy=policies, attempt=st.integers(1, 2000), seed=st.text(max_size=40))
def test_next_delay_is_bounded_by_max_interval_and_deterministic(
    policy: RetryPolicy, attempt: int, seed: str
) -> None:
    delay = policy.next_delay(attempt, seed)
    assert 0 <= delay <= policy.max_interval_seconds
    assert delay == policy.next_delay(attempt, seed)
    # A fresh but equal policy (as after a replay that re-parsed the definition) agrees too.
    assert delay == RetryPolicy.model_validate(policy.to_json_dict()).next_delay(attempt, seed)


@settings(max_examples=100, deadline=None)
@given(seed=st.text(max_size=40), attempt=st.integers(1, 10_000))
def test_uniform_from_seed_is_in_unit_interval(seed: str, attempt: int) -> None:
    assert 0 <= uniform_from_seed(seed, attempt) < 1


def test_no_jitter_is_exponential_and_capped() -> None:
    policy = RetryPolicy(
        initial_interval_seconds=2, backoff_coefficient=3, max_interval_seconds=50, jitter=Jitter.NONE
    )
    assert [policy.next_delay(n, "s") for n in range(1, 6)] == [2, 6, 18, 50, 50]


def test_full_jitter_draws_below_the_exponential_ceiling() -> None:
    policy = RetryPolicy(initial_interval_seconds=1, backoff_coefficient=2, max_interval_seconds=1000)
    delays = [policy.next_delay(5, f"seed-{i}") for i in range(200)]
    assert all(0 <= d <= 16 for d in delays)
    # Jitter actually spreads retries out (the point of it): many distinct values, both halves used.
    assert len(set(delays)) > 190
    assert any(d < 8 for d in delays)
    assert any(d > 8 for d in delays)


def test_different_seeds_give_different_delays() -> None:
    policy = RetryPolicy(initial_interval_seconds=10)
    assert policy.next_delay(3, retry_seed("e1", "t", 3)) != policy.next_delay(3, retry_seed("e2", "t", 3))


def test_huge_attempt_does_not_overflow() -> None:
    policy = RetryPolicy(backoff_coefficient=100, max_interval_seconds=60, jitter=Jitter.NONE)
    assert policy.next_delay(10_000, "s") == 60


def test_zero_initial_interval_means_no_wait() -> None:
    assert RetryPolicy(initial_interval_seconds=0).next_delay(7, "x") == 0


def test_attempt_counts_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        RetryPolicy().next_delay(0, "s")


def test_should_retry_respects_attempts_and_error_kinds() -> None:
    policy = RetryPolicy(max_attempts=3, non_retryable_errors=("billing.CardDeclined",))
    transient = ErrorInfo(type="weft.Transient", message="throttled")
    assert policy.should_retry(1, transient)
    assert policy.should_retry(2, transient)
    assert not policy.should_retry(3, transient)
    assert not policy.should_retry(1, ErrorInfo(type="billing.CardDeclined", message="no"))
    assert not policy.should_retry(1, ErrorInfo(type="x", message="bad input", non_retryable=True))


def test_single_attempt_never_retries() -> None:
    assert not RetryPolicy(max_attempts=1).should_retry(1, ErrorInfo(type="x", message="y"))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("maxAttempts", 0),
        ("backoffCoefficient", 0.9),
        ("initialIntervalSeconds", -1),
        ("maxIntervalSeconds", -0.5),
        ("initialIntervalSeconds", float("inf")),
        ("jitter", "partial"),
    ],
)
def test_bad_retry_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy.model_validate({field: value})


def test_wire_form_is_camel_case_and_round_trips() -> None:
    policy = RetryPolicy(max_attempts=5, non_retryable_errors=("a",))
    wire = policy.to_json_dict()
    assert wire["maxAttempts"] == 5
    assert wire["nonRetryableErrors"] == ["a"]
    assert wire["jitter"] == "full"
    assert RetryPolicy.model_validate(wire) == policy


def test_retry_seed_names_execution_task_and_attempt() -> None:
    assert retry_seed("e", "t", 2) != retry_seed("e", "t", 3)
    assert retry_seed("e", "t", 2) == retry_seed("e", "t", 2)
