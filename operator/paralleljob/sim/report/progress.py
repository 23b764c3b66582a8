"""A one-line progress bar on stderr for long simulations; silent when stderr is not a terminal.

This is the only place in the simulator that reads the wall clock, and only to limit how often it redraws:
nothing it reads flows back into the simulation.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30
REDRAW_EVERY_S = 0.25


class ProgressBar:
    def __init__(self, label: str, total_s: float, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.label = label
        self.total_s = max(total_s, 1e-9)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last_draw = -1.0

    def __call__(self, now_s: float) -> None:
        if not self.enabled:
            return
        wall = time.monotonic()
        if wall - self._last_draw < REDRAW_EVERY_S:
            return
        self._last_draw = wall
        self._draw(now_s)

    def _draw(self, now_s: float) -> None:
        share = min(1.0, max(0.0, now_s / self.total_s))
        filled = int(share * WIDTH)
        bar = "#" * filled + "-" * (WIDTH - filled)
        days, total_days = now_s / 86_400.0, self.total_s / 86_400.0
        self.stream.write(f"\r{self.label:>10} [{bar}] {share:4.0%}  day {days:7.2f} / {total_days:.2f}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(self.total_s)
            self.stream.write("\n")
            self.stream.flush()
