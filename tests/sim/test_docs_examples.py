"""docs/simulator.md's first example prints what the docs say it prints (issue 38: the docs' tables had
drifted from the commands beside them). The rows the docs quote are copied from report.md, so each must
appear there verbatim. About 7 s (marked slow); the other documented runs take from 10 s to minutes each and
are not run here."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from paralleljob.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


def _first_example(text: str) -> tuple[list[str], list[str]]:
    """The first command of "Running it" (its arguments after ``paralleljob``) and the table rows quoted
    after it."""
    section = text.split("## Running it", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    command = block.split("\n\n", 1)[0]
    lines = [line for line in command.splitlines() if not line.startswith("#")]
    argv = shlex.split(" ".join(line.rstrip("\\").strip() for line in lines))
    assert argv[:2] == ["paralleljob", "simulate"], argv
    quoted = section.split("`report.md` has", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in quoted.splitlines() if line.startswith("| ") and not line.startswith("| metric")]
    return argv[1:], rows


@pytest.mark.slow  # about 7 s on an idle core
def test_the_first_documented_example_prints_the_documented_table(traces: Path, tmp_path: Path) -> None:
    argv, rows = _first_example(DOC.read_text())
    assert len(rows) >= 5
    argv = [a.replace("../shared/traces", str(traces)) for a in argv]
    argv[argv.index("--out") + 1] = str(tmp_path / "out")
    assert main([*argv, "--no-plots"]) == 0
    report = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert [row for row in rows if row not in report] == []


def test_every_documented_output_folder_is_git_ignored() -> None:
    # Issue 38: the NVL72 command wrote to out-nvl72, an untracked folder in the checkout.
    ignored = {
        line.strip().strip("/") for line in (DOC.parents[1] / ".gitignore").read_text().splitlines() if line.strip()
    }
    blocks = [part.split("```", 1)[0] for part in DOC.read_text().split("```sh\n")[1:]]
    outs = [words[i + 1] for block in blocks if (words := block.split()) for i, w in enumerate(words) if w == "--out"]
    assert len(outs) >= 8
    assert [out for out in outs if out.split("/", 1)[0] not in ignored] == []
