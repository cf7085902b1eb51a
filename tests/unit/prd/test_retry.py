"""The retry policy: seed defaults, the delay schedule, validation, retryable kinds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from jidocode.services.prd.retry import MAX_DELAY_S, MAX_RETRIES, RetryPolicy


def test_seed_defaults() -> None:
    policy = RetryPolicy()
    assert policy.max_retries == 3
    assert policy.retry_delays_s == [0.0, 5.0, 15.0]
    assert [policy.delay_before(n) for n in (1, 2, 3, 4)] == [0.0, 5.0, 15.0, None]


def test_beyond_the_list_reuses_the_last_delay() -> None:
    policy = RetryPolicy(max_retries=5, retry_delays_s=[1, 2])
    assert [policy.delay_before(n) for n in range(1, 7)] == [1, 2, 2, 2, 2, None]


def test_empty_delays_and_no_retries() -> None:
    assert RetryPolicy(max_retries=2, retry_delays_s=[]).delay_before(2) == 0.0
    assert RetryPolicy(max_retries=0).delay_before(1) is None


def test_retry_numbers_start_at_one() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        RetryPolicy().delay_before(0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_retries": -1},
        {"max_retries": MAX_RETRIES + 1},
        {"retry_delays_s": [-1.0]},
        {"retry_delays_s": [MAX_DELAY_S + 1]},
        {"retry_delays_s": [float("nan")]},
        {"retry_delays_s": [float("inf")]},
        {"retry_delays_s": [0.0] * (MAX_RETRIES + 1)},
        {"retries": 3},
    ],
)
def test_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_limits_themselves_are_allowed() -> None:
    policy = RetryPolicy(max_retries=MAX_RETRIES, retry_delays_s=[MAX_DELAY_S])
    assert policy.delay_before(MAX_RETRIES) == MAX_DELAY_S


@pytest.mark.parametrize(
    ("kind", "retried"),
    [("transient", True), ("checks", True), ("config", False), ("fatal", False), ("cancelled", False)],
)
def test_retryable_kinds(kind: str, retried: bool) -> None:
    assert RetryPolicy().retryable(kind) is retried


@given(
    st.integers(0, MAX_RETRIES),
    st.lists(st.floats(0, MAX_DELAY_S), max_size=MAX_RETRIES),
    st.integers(1, 50),
)
def test_schedule_is_bounded(max_retries: int, delays: list[float], retry: int) -> None:
    policy = RetryPolicy(max_retries=max_retries, retry_delays_s=delays)
    delay = policy.delay_before(retry)
    if retry > max_retries:
        assert delay is None
    else:
        assert delay is not None and 0.0 <= delay <= MAX_DELAY_S
        assert delay in ([*delays] or [0.0])
