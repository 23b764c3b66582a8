"""runtime.api.retrying: transient API errors are retried (tenacity), a server's Retry-After is honoured
(API priority and fairness answers 429 with one), permanent errors and exhausted attempts are raised."""

from __future__ import annotations

import asyncio

import pytest

from paralleljob.k8s.runtime.api import MAX_RETRY_AFTER_SECONDS, ApiError, _decode, retrying


def _run(errors: list[ApiError], attempts: int = 5) -> tuple[str | ApiError, list[float], int]:
    waits: list[float] = []
    calls = 0

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def call() -> str:
        nonlocal calls
        calls += 1
        if errors:
            raise errors.pop(0)
        return "ok"

    async def scenario() -> str | ApiError:
        try:
            return await retrying(call, attempts=attempts, sleep=sleep)
        except ApiError as exc:
            return exc

    return asyncio.run(scenario()), waits, calls


def test_a_429_waits_as_long_as_its_retry_after_says() -> None:
    result, waits, calls = _run([ApiError(429, "too many requests", retry_after=3.0), ApiError(503, "busy")])
    assert result == "ok" and calls == 3
    assert waits[0] == 3.0  # the server's word
    assert 0 <= waits[1] <= 5.0  # no Retry-After: exponential backoff with jitter, capped


def test_a_retry_after_beyond_the_cap_is_cut_to_it() -> None:
    _, waits, _ = _run([ApiError(429, "slow down", retry_after=3600.0)])
    assert waits == [MAX_RETRY_AFTER_SECONDS]


def test_permanent_errors_are_not_retried_and_attempts_are_bounded() -> None:
    result, waits, calls = _run([ApiError(409, "conflict")])
    assert isinstance(result, ApiError) and result.status == 409 and calls == 1 and waits == []
    result, waits, calls = _run([ApiError(500, "boom") for _ in range(5)], attempts=3)
    assert isinstance(result, ApiError) and result.status == 500 and calls == 3 and len(waits) == 2


def test_the_retry_after_header_reaches_the_error() -> None:
    with pytest.raises(ApiError) as raised:
        _decode(429, b'{"message": "too many requests", "reason": "TooManyRequests"}', "GET", "/api/v1/pods", 2.0)
    assert raised.value.retry_after == 2.0 and raised.value.retryable
