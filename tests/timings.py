"""Wall-clock times the tests measure but do not assert (issue 38, item 10).

A test on a real process or API server waits with a generous deadline and records how long it took here; the
target itself lives in a benchmark (docs/benchmarks.md says which), because a test that asserts a 2 s target
fails on a busy machine for no fault of the code. Each record is printed (``pytest -s`` shows it) and appended
as one JSON line to ``out/test-timings.jsonl`` at the repository root, so a run's times can be compared with
the targets afterwards without failing it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

TIMINGS = Path(__file__).resolve().parent.parent / "out" / "test-timings.jsonl"


def record_time(what: str, seconds: float, target_s: float | None = None, measured_by: str = "") -> float:
    """Record one measured time (``target_s``: the target it is held to in ``measured_by``, a benchmark);
    returns ``seconds``."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    line = {"at": round(time.time(), 3), "test": test, "what": what, "seconds": round(seconds, 3)}
    if target_s is not None:
        line.update(target_s=target_s, measured_by=measured_by)
    target = f" (target {target_s:g} s{': ' if measured_by else ''}{measured_by})" if target_s is not None else ""
    print(f"\n[timing] {what}: {seconds:.2f} s{target}", flush=True)
    try:
        TIMINGS.parent.mkdir(exist_ok=True)
        with TIMINGS.open("a") as out:
            out.write(json.dumps(line) + "\n")
    except OSError:
        pass  # a read-only checkout still runs its tests
    return seconds
