"""Debian packages the dashboard's tests and benchmark run against: Chromium with its WebDriver, and
Prometheus with promtool. Installed with apt-get where missing (``make dashboard-tools``, and the tests'
fixtures call the same function), never downloaded as loose binaries.

``python -m paralleljob.devtools.systools`` installs what is missing and says what it found; a machine
where apt-get cannot run (not root, not Debian) gets a one-line reason instead, which the tests print
when they skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable

# binary -> the Debian package that ships it
PACKAGES = {
    "chromium": "chromium",
    "chromedriver": "chromium-driver",
    "prometheus": "prometheus",
    "promtool": "prometheus",
}
BROWSER = ("chromium", "chromedriver")
PROMETHEUS = ("prometheus", "promtool")
_tried: dict[tuple[str, ...], str | None] = {}


def missing(binaries: Iterable[str]) -> list[str]:
    return [b for b in binaries if shutil.which(b) is None]


def ensure(binaries: Iterable[str]) -> str | None:
    """Install the packages of the missing ``binaries``; None when all are there, else why not."""
    wanted = tuple(binaries)
    if not missing(wanted):
        return None
    if wanted in _tried:
        return _tried[wanted]
    _tried[wanted] = reason = _install(sorted({PACKAGES[b] for b in missing(wanted)}))
    if reason is None and missing(wanted):
        reason = f"installed {', '.join(PACKAGES[b] for b in wanted)} but still missing {', '.join(missing(wanted))}"
    _tried[wanted] = reason
    return reason


def _install(packages: list[str]) -> str | None:
    apt = shutil.which("apt-get")
    if apt is None:
        return f"{', '.join(packages)} missing and no apt-get on this machine (install them from your distribution)"
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            return f"{', '.join(packages)} missing; installing needs root (apt-get install {' '.join(packages)})"
        sudo = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        [*sudo, apt, "update", "-q"],
        [*sudo, apt, "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        print(f"==> {' '.join(argv)}", file=sys.stderr, flush=True)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
            return f"`{' '.join(argv)}` failed ({done.returncode}): {last[0]}"
    return None


def main() -> int:
    failed = False
    for group in (BROWSER, PROMETHEUS):
        reason = ensure(group)
        if reason is None:
            print(f"{', '.join(group)}: {', '.join(str(shutil.which(b)) for b in group)}")
        else:
            failed = True
            print(f"{', '.join(group)}: {reason}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
