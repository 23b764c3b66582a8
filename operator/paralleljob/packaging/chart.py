"""Where the Helm chart is, and the check that its ``crds/`` folder is a byte-for-byte copy of ``crds/``.

The top-level ``crds/`` is the one source of truth (the operator's tests and the dev cluster install it);
Helm installs a chart's CRDs only from the chart's own ``crds/`` folder, so the chart carries a copy that
``make chart-crds`` refreshes and a test fails on if it drifts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from paralleljob.devcluster.versions import repo_root


def chart_dir() -> Path:
    return repo_root() / "charts" / "paralleljob"


def crd_drift(root: Path | None = None) -> list[str]:
    """What differs between ``crds/`` and the chart's copy: ``[]`` when they are identical."""
    root = root or repo_root()
    source, copy = root / "crds", root / "charts" / "paralleljob" / "crds"
    names = sorted({p.name for p in source.glob("*.yaml")} | {p.name for p in copy.glob("*.yaml")})
    problems = []
    for name in names:
        a, b = source / name, copy / name
        if not a.is_file():
            problems.append(f"charts/paralleljob/crds/{name} has no crds/{name}")
        elif not b.is_file():
            problems.append(f"crds/{name} is missing from charts/paralleljob/crds/")
        elif a.read_bytes() != b.read_bytes():
            problems.append(f"charts/paralleljob/crds/{name} differs from crds/{name}")
    return problems


def sync_crds(root: Path | None = None) -> list[str]:
    """Make the chart's copy identical to ``crds/``; returns what was out of date."""
    root = root or repo_root()
    source, copy = root / "crds", root / "charts" / "paralleljob" / "crds"
    problems = crd_drift(root)
    copy.mkdir(parents=True, exist_ok=True)
    for stale in copy.glob("*.yaml"):
        if not (source / stale.name).is_file():
            stale.unlink()
    for crd in source.glob("*.yaml"):
        shutil.copyfile(crd, copy / crd.name)
    return problems


if __name__ == "__main__":
    for line in sync_crds() or ["chart CRDs already match crds/"]:
        print(line)
