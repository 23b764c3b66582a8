"""Progress that reaches the terminal while pytest captures output (for builds that take minutes)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def live_report(config: pytest.Config) -> Callable[[str], None]:
    """Print past pytest's output capture: a cold helm build is silent for minutes otherwise."""
    capture = config.pluginmanager.getplugin("capturemanager")

    def report(message: str) -> None:
        if capture is None:
            print(message, flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(f"[helm] {message}", flush=True)

    return report
