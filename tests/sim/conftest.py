"""Shared fixtures for the simulator tests: the real traces (skipped with a reason when absent) and tiny
clusters and traces whose results can be checked by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

# tests/sim/conftest.py -> the repository root is two levels up; shared/ sits beside the repository.
REPO_ROOT = Path(__file__).resolve().parents[2]
TRACES = REPO_ROOT.parent / "shared" / "traces"


@pytest.fixture
def traces() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"the shared traces directory is absent (looked for ../shared/traces from {REPO_ROOT.name})")
    return TRACES
