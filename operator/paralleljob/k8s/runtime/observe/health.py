"""What ``/healthz`` answers: healthy only while the operator is really doing its job.

A process whose reconcile loop died, or whose pod watch has been cut off for minutes, still answers HTTP;
a liveness probe that only checks that would keep a useless replica alive forever. So the runtime reports
here: every pass the reconcile loop completes, every time the pod watch is (re)connected or cut off, and
the death of any supervised task. The verdict is a pure function of those facts and the time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Health:
    # A leader passes at least once per resync period (the loop wakes for it even on an idle cluster), so
    # no pass for a few periods means the loop is stuck.
    max_pass_age_s: float
    max_watch_down_s: float
    started_at: float
    last_pass_at: float | None = None
    watch_down_since: float | None = None
    dead: str = ""  # "<task>: <why>" once a supervised task ended

    def passed(self, now: float) -> None:
        self.last_pass_at = now

    def watch_up(self) -> None:
        self.watch_down_since = None

    def watch_down(self, now: float) -> None:
        if self.watch_down_since is None:
            self.watch_down_since = now

    def died(self, task: str, why: str) -> None:
        if not self.dead:
            self.dead = f"{task}: {why}"

    def verdict(self, now: float, leading: bool) -> tuple[bool, str]:
        """(healthy, the line /healthz answers with)."""
        if self.dead:
            return False, f"unhealthy: task {self.dead}"
        if self.watch_down_since is not None and now - self.watch_down_since > self.max_watch_down_s:
            return False, f"unhealthy: the pod watch has been down for {now - self.watch_down_since:.0f} s"
        if leading:
            since = self.last_pass_at if self.last_pass_at is not None else self.started_at
            if now - since > self.max_pass_age_s:
                return False, f"unhealthy: no reconcile pass for {now - since:.0f} s"
        return True, "ok" + (" (leader)" if leading else " (standby)")
