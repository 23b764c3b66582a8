"""docs/architecture.md names every module of the core (issue 39: its tables name every core module and every
rule's one home), so a new core module cannot arrive without a line saying what it decides."""

from __future__ import annotations

from pathlib import Path

import paralleljob

CORE = Path(paralleljob.__file__).parent / "core"
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def core_modules() -> list[str]:
    """Each core module as the tables write it: its path under ``core/``."""
    return sorted(str(path.relative_to(CORE)) for path in CORE.rglob("*.py") if path.name != "__init__.py")


def test_architecture_names_every_core_module() -> None:
    text = ARCHITECTURE.read_text()
    assert len(core_modules()) > 40  # the walk found the core
    missing = [module for module in core_modules() if f"`{module}`" not in text and f"/{module}`" not in text]
    assert not missing, f"docs/architecture.md does not name these core modules: {missing}"
