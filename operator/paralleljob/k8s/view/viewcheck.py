"""The kept cluster view's self-check: every so many passes or seconds, build the view from scratch and
compare. A difference is a bug in the patching, so it is logged with what differs, counted
(``paralleljob_view_rebuild_mismatches_total``), and repaired by adopting the rebuild; the pass then goes
on with the right view. The check is what makes the incremental view safe to trust between checks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from paralleljob.core.statecheck import state_differences
from paralleljob.k8s.view.clusterview import Claim, ClusterView, build_view
from paralleljob.k8s.view.liveview import LiveView

log = logging.getLogger("paralleljob.k8s.view.clusterview")


def view_differences(kept: ClusterView, fresh: ClusterView) -> list[str]:
    """What a decision could see differently in ``kept`` than in ``fresh`` (empty: nothing)."""
    if kept.pools != fresh.pools:
        names = sorted(n for n in set(kept.pools) | set(fresh.pools) if kept.pools.get(n) != fresh.pools.get(n))
        return [f"MIG pool nodes {names[:5]}"]
    if kept.empty or fresh.empty:
        return [] if kept.empty and fresh.empty else ["one view is empty, the other is not"]
    out = state_differences(kept.state, fresh.state)
    if out == ["topology differs"]:
        return out
    plain = {
        "node index": (kept.node_index, fresh.node_index),
        "GPU products": (kept.products, fresh.products),
        "ghost nodes": (kept.ghosts, fresh.ghosts),
        "conflicts": (kept.conflicts, fresh.conflicts),
        "loaded claims": (kept.loaded, fresh.loaded),
        "occupants": (
            {node: pods for node, pods in kept.occupants.items() if pods},
            {node: pods for node, pods in fresh.occupants.items() if pods},
        ),
        "warnings": (sorted(kept.warnings), sorted(fresh.warnings)),
    }
    out += [name for name, (left, right) in plain.items() if left != right]
    if kept.nodes != fresh.nodes:
        names = sorted(n for n in set(kept.nodes) | set(fresh.nodes) if kept.nodes.get(n) != fresh.nodes.get(n))
        out.append(f"nodes {names[:5]}")
    return out


class CheckedView:
    """A :class:`LiveView` compared with a rebuild every ``every_passes`` refreshes or ``every_seconds``,
    whichever comes first (0 turns that trigger off)."""

    def __init__(
        self,
        live: LiveView,
        every_passes: int = 100,
        every_seconds: float = 60.0,
        on_mismatch: Callable[[list[str]], None] = lambda differences: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.live = live
        self.every_passes = every_passes
        self.every_seconds = every_seconds
        self.on_mismatch = on_mismatch
        self.clock = clock
        self.checks = 0
        self.mismatches = 0
        self._passes_since = 0
        self._checked_at = clock()

    def refresh(self, claims: Sequence[Claim]) -> ClusterView:
        rebuilds = sum(self.live.rebuilds.values())
        view = self.live.refresh(claims)
        if sum(self.live.rebuilds.values()) != rebuilds:
            self._passes_since, self._checked_at = 0, self.clock()  # just built from scratch: nothing to check
            return view
        self._passes_since += 1
        by_passes = self.every_passes > 0 and self._passes_since >= self.every_passes
        by_time = self.every_seconds > 0 and self.clock() - self._checked_at >= self.every_seconds
        if by_passes or by_time:
            return self.check(view, claims)[0]
        return view

    def check(self, kept: ClusterView, claims: Sequence[Claim]) -> tuple[ClusterView, list[str]]:
        """Compare the kept view with a rebuild now; on a difference, adopt the rebuild. Returns the view
        to use and the differences found."""
        live = self.live
        self.checks += 1
        self._passes_since, self._checked_at = 0, self.clock()
        pods = live.pods.values()
        fresh = build_view(live.nodes.values(), pods, claims, live.config)
        differences = view_differences(kept, fresh)
        if differences:
            self.mismatches += 1
            log.warning(
                "the kept cluster view differed from a rebuild; adopting the rebuild: %s", "; ".join(differences)
            )
            self.on_mismatch(differences)
            live.adopt(fresh, claims, pods)
            return fresh, differences
        return kept, differences
