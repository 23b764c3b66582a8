"""Fixtures for the chart's offline tests: a helm binary (built once into the cache if missing) that keeps
its config and cache in a temporary folder, and ``render`` for ``helm template``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import yaml

from paralleljob.packaging.chart import chart_dir
from paralleljob.packaging.helm import ensure_helm, helm_env, run_helm
from tests.packaging.live import live_report

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment to run helm in (the binary is built first if the cache has none)."""
    ensure_helm(live_report(pytestconfig))
    return helm_env(tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def render(helm: dict[str, str]) -> Render:
    """``helm template`` the chart with ``--set``-style overrides; returns its objects."""

    def render(
        *sets: str, show_only: Sequence[str] = (), namespace: str = "pj-system", api_versions: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        args = ["template", "pj", str(chart_dir()), "--namespace", namespace]
        for api in api_versions:  # what the target cluster serves (offline, helm assumes a bare minimum)
            args += ["--api-versions", api]
        for value in sets:
            args += ["--set", value]
        for template in show_only:
            args += ["--show-only", template]
        out = run_helm(args, helm).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]

    return render
