"""Installing the dashboard tests' Debian packages: nothing is run when the binaries are there, and a machine
that cannot install them gets a reason (what the e2e modules print when they skip) instead of an error."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from paralleljob.devtools import systools


def test_present_binaries_need_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(systools, "_install", lambda packages: pytest.fail(f"tried to install {packages}"))
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert systools.ensure(systools.BROWSER) is None


def test_without_apt_the_reason_names_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(systools, "_tried", {})
    reason = systools.ensure(systools.PROMETHEUS)
    assert reason is not None and "prometheus" in reason and "apt-get" in reason


def test_a_failed_install_says_which_command_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    class Done:
        returncode, stdout, stderr = 100, "", "E: Unable to locate package chromium-driver"

    def run(argv: list[str], **_: Any) -> Done:
        calls.append(argv)
        return Done()

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None)
    monkeypatch.setattr(systools.os, "geteuid", lambda: 0)
    monkeypatch.setattr(systools.subprocess, "run", run)
    monkeypatch.setattr(systools, "_tried", {})
    reason = systools.ensure(systools.BROWSER)
    assert calls == [["/usr/bin/apt-get", "update", "-q"]]
    assert reason is not None and "Unable to locate package chromium-driver" in reason
