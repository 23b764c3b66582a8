"""The shipped package stays readable (issue 39, item 5): no module over 500 lines, no flat folder over 20 files.

"Shipped" is what the operator image and the simulator run: every package but the developer tools and the
dev cluster, which import-linter already keeps out of the operator. A folder that grows past 20 modules is
split by what its modules decide (``core/admit``, ``k8s/plan/failure``...), not by alphabet.
"""

from __future__ import annotations

from pathlib import Path

import paralleljob

ROOT = Path(paralleljob.__file__).parent
NOT_SHIPPED = ("devtools", "devcluster")
MAX_LINES = 500
MAX_FILES = 20


def shipped_folders() -> list[Path]:
    return [
        folder
        for folder in [ROOT, *sorted(p for p in ROOT.rglob("*") if p.is_dir())]
        if folder.name != "__pycache__"
        and not any(part in NOT_SHIPPED for part in folder.relative_to(ROOT).parts)
        and (folder / "__init__.py").exists()
    ]


def entries(folder: Path) -> list[str]:
    """What a reader sees in the folder: its modules and its subpackages (``__init__`` not counted)."""
    modules = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
    packages = [p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    return modules + packages


def test_no_shipped_folder_holds_more_than_20_entries() -> None:
    crowded = {
        str(folder.relative_to(ROOT.parent)): len(entries(folder))
        for folder in shipped_folders()
        if len(entries(folder)) > MAX_FILES
    }
    assert not crowded, f"split these folders by role (at most {MAX_FILES} modules and subpackages each): {crowded}"


def test_no_shipped_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT.parent)): lines
        for folder in shipped_folders()
        for path in folder.glob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these modules by role (at most {MAX_LINES} lines): {long}"


def test_the_check_sees_the_folders_it_guards() -> None:
    seen = {str(folder.relative_to(ROOT)) for folder in shipped_folders()}
    assert {"core", "k8s/plan", "k8s/edge", "k8s/runtime", "sim/run"} <= seen
    assert not any(name.startswith(NOT_SHIPPED) for name in seen)
