"""Polling with a deadline, for the dev tools and the tests that drive a cluster from outside."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(what: str, check: Callable[[], Any], timeout_s: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")
