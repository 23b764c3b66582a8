"""Whether two cluster states are the same cluster, and if not, where they differ.

A state kept up to date by deltas must equal one built from scratch from the same facts. "Equal" means
everything a decision reads: the topology, each GPU's health, owner and memory in use, each node's free
count and schedulability, the allocations, the assumed usage beside them, and the per-domain counters.
The one thing allowed to differ is the order in which a domain lists its nodes of equal free count (it
records history, not facts), so the buckets are compared as sets.
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.cluster import ClusterState

MAX_REPORTED = 5  # differences named per field; a summary is enough to find the bug


def _first_differences(name: str, left: Sequence[object], right: Sequence[object]) -> list[str]:
    if len(left) != len(right):
        return [f"{name}: {len(left)} entries vs {len(right)}"]
    diffs = [i for i, (a, b) in enumerate(zip(left, right, strict=True)) if a != b]
    shown = ", ".join(f"[{i}] {left[i]!r} vs {right[i]!r}" for i in diffs[:MAX_REPORTED])
    more = f" and {len(diffs) - MAX_REPORTED} more" if len(diffs) > MAX_REPORTED else ""
    return [f"{name}: {shown}{more}"] if diffs else []


def state_differences(kept: ClusterState, fresh: ClusterState) -> list[str]:
    """Human-readable differences between two states (empty: the same cluster)."""
    if kept.topology != fresh.topology:
        return ["topology differs"]  # every index below would differ too
    out: list[str] = []
    out += _first_differences("health", kept.health, fresh.health)
    out += _first_differences("owner", kept.owner, fresh.owner)
    out += _first_differences("memory used", kept.memory_used, fresh.memory_used)
    out += _first_differences("free GPUs per node", kept.node_free, fresh.node_free)
    out += _first_differences("schedulable", kept.node_schedulable, fresh.node_schedulable)
    if kept.allocations != fresh.allocations:
        only_kept = sorted(set(kept.allocations) - set(fresh.allocations))[:MAX_REPORTED]
        only_fresh = sorted(set(fresh.allocations) - set(kept.allocations))[:MAX_REPORTED]
        changed = sorted(
            k for k in set(kept.allocations) & set(fresh.allocations) if kept.allocations[k] != fresh.allocations[k]
        )[:MAX_REPORTED]
        out.append(f"allocations: only kept {only_kept}, only fresh {only_fresh}, different {changed}")
    kept_assumed = {k: sorted(v) for k, v in kept.assumed.items()}
    fresh_assumed = {k: sorted(v) for k, v in fresh.assumed.items()}
    if kept_assumed != fresh_assumed:
        holders = kept_assumed.keys() | fresh_assumed.keys()
        differ = sorted(k for k in holders if kept_assumed.get(k) != fresh_assumed.get(k))
        out.append(f"assumed usage: {differ[:MAX_REPORTED]}")
    for level in range(1, kept.topology.top + 1):
        name = kept.topology.levels[level].name
        out += _first_differences(f"{name} histograms", kept.hist[level], fresh.hist[level])
        kept_sets = [[set(bucket) for bucket in row] for row in kept.buckets[level]]
        fresh_sets = [[set(bucket) for bucket in row] for row in fresh.buckets[level]]
        out += _first_differences(f"{name} buckets", kept_sets, fresh_sets)
    return out
