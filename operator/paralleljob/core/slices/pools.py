"""MIG slices a node offers as counts per profile (the GPU Operator's device plugin, ``mig.strategy: mixed``):
which node a slice goes to under the packing rule, when the device plugin, not the operator, picks the GPU.

mig-manager partitions a node's GPUs once, as its ``nvidia.com/mig.config`` label names, and the device
plugin then offers ``nvidia.com/mig-<profile>: N``: N slices of that profile, made before anything asks for
them. Unlike the partitionable devices of DRA (``mig.py``), what a node offers does not change with what is
asked: a slice takes one of its own profile, never room another profile could use. So a node is, per profile,
how many slices it offers and how many are taken (:class:`ProfilePool`). Which GPU and which MIG device a pod
gets is the device plugin's choice when the kubelet admits the pod: a placement names the node and the
profile only (:class:`PoolPlacement`).

The packing rule is ``sharing.pack``'s at node granularity: a slice goes first to a node where slices are
already taken (the one with the fewest of its profile left: best fit), then to a node partly used by
whole-GPU work, then to a node in a partly used NVLink domain; a node nothing runs on is broken last, a
whole domain last of all. Every refusal says, per node, why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from paralleljob.core.errors import InvalidRequest, PlacementInfeasible


def _count(items: tuple[tuple[str, int], ...], profile: str) -> int:
    return sum(n for name, n in items if name == profile)


def _add(items: tuple[tuple[str, int], ...], profile: str, delta: int) -> tuple[tuple[str, int], ...]:
    counts = dict(items)
    counts[profile] = counts.get(profile, 0) + delta
    return tuple(sorted((name, n) for name, n in counts.items() if n > 0))


@dataclass(frozen=True, slots=True)
class ProfilePool:
    """One node's MIG slices as counts: ``offered`` per profile (the node's allocatable), ``taken`` per
    profile (slices that pods hold or that placements made for pods still to come)."""

    node: str
    domain: str  # its NVLink domain: the node itself on HGX
    offered: tuple[tuple[str, int], ...]
    taken: tuple[tuple[str, int], ...] = ()
    whole_used: bool = False  # some of its whole GPUs (those not in MIG mode) hold work
    closed: str = ""  # why it takes no new slice ("" when it does)

    def __post_init__(self) -> None:
        if any(n < 0 for _, n in (*self.offered, *self.taken)):
            raise InvalidRequest(f"a node's MIG slice counts cannot be negative: {self}")

    def offers(self, profile: str) -> int:
        return _count(self.offered, profile)

    def held(self, profile: str) -> int:
        return _count(self.taken, profile)

    def free(self, profile: str) -> int:
        """Slices of ``profile`` left (never below 0: a node whose offer shrank under its pods has none)."""
        return max(0, self.offers(profile) - self.held(profile))

    @property
    def sliced(self) -> bool:
        return any(n for _, n in self.taken)

    @property
    def used(self) -> bool:
        return self.whole_used or self.sliced

    def fit(self, profile: str) -> str:
        """Why a slice of ``profile`` cannot go here ("" when it can)."""
        if self.closed:
            return self.closed
        offered = self.offers(profile)
        if not offered:
            have = ", ".join(f"{n} x {name}" for name, n in self.offered) or "none"
            return f"offers no MIG {profile} (it offers {have})"
        if not self.free(profile):
            return f"all {offered} MIG {profile} slices taken"
        return ""


@dataclass(frozen=True, slots=True)
class PoolPlacement:
    """A slice of ``profile`` on ``node``; the device plugin picks the GPU and the MIG device."""

    node: str
    profile: str
    why: str


def pack_pool(profile: str, pools: Sequence[ProfilePool], label: str = "request") -> PoolPlacement:
    """Where one slice of ``profile`` goes under the packing rule (module docstring); PlacementInfeasible with
    one reason per node when no node has one free."""
    used_domains = {p.domain for p in pools if p.used}
    reasons: list[str] = []
    best: tuple[tuple[bool, bool, bool, int, str], PoolPlacement] | None = None
    for pool in pools:
        why_not = pool.fit(profile)
        if why_not:
            reasons.append(f"{pool.node}: {why_not}")
            continue
        domain_whole = pool.domain not in used_domains
        key = (not pool.sliced, not pool.used, domain_whole, pool.free(profile), pool.node)
        if best is None or key < best[0]:
            best = (key, PoolPlacement(pool.node, profile, _why(pool, profile, domain_whole)))
    if best is None:
        raise PlacementInfeasible(label, [f"no node has a MIG {profile} slice free", *reasons])
    return best[1]


def _why(pool: ProfilePool, profile: str, domain_whole: bool) -> str:
    left = f"{pool.free(profile) - 1} of {pool.offers(profile)} MIG {profile} left there"
    if pool.sliced:
        return f"{pool.node}: onto a node already sliced ({left})"
    if pool.used:
        return f"{pool.node}: onto a node already in use ({left})"
    return f"{pool.node}: breaks a whole node" + (" and a whole NVLink domain" if domain_whole else "") + f" ({left})"


def take(pools: Sequence[ProfilePool], placement: PoolPlacement, *, release: bool = False) -> tuple[ProfilePool, ...]:
    """The pools with ``placement``'s slice taken (or given back with ``release``)."""
    delta = -1 if release else 1
    return tuple(
        replace(p, taken=_add(p.taken, placement.profile, delta)) if p.node == placement.node else p for p in pools
    )


def place_ranks(profile: str, ranks: int, pools: Sequence[ProfilePool], label: str) -> list[PoolPlacement]:
    """One slice per rank, packed one after the other (each rank sees the slices before it taken)."""
    out = []
    for _ in range(ranks):
        placement = pack_pool(profile, pools, label)
        pools = take(pools, placement)
        out.append(placement)
    return out
