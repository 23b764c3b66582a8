"""MIG profiles as counters a GPU has and a slice consumes: which profiles a GPU can still hold.

The model is the one NVIDIA's DRA driver publishes for "partitionable devices" (KEP-4815): each GPU has one
counter set, a compute counter and one counter of capacity 1 per memory slice; a MIG device consumes its
compute slices and the memory slices ``[start, start + size)`` of its placement, and the whole GPU consumes
everything. So a GPU offers a profile exactly when one of the profile's valid placements has all its memory
slices free and enough compute is left; a GPU with any slice is never whole (its counters are not full).

Facts, read (not copied) on 2026-12-02 from:

* github.com/NVIDIA/k8s-dra-driver-gpu ``cmd/gpu-kubelet-plugin/partitions.go`` (one counter set per GPU,
  ``memory-slice-<i>`` counters of capacity 1, the full GPU consuming all of them) and ``mig.go`` (a MIG
  device consumes the profile's capacities; device names ``gpu-<minor>-mig-<profile>-<id>-<start>``);
* the go-nvml mock of the A100 vendored in github.com/NVIDIA/mig-parted
  (``vendor/github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus/a100.go``): compute slices per profile (1, 1, 2, 3,
  4, 7 of 7) and placements in memory slices of 8: 1-slice {0..6} size 1, 1-slice-rev2 {0,2,4,6} size 2,
  2-slice {0,2,4} size 2, 3-slice {0,4} size 4, 4-slice {0} size 4, 7-slice {0} size 8, memory per profile
  (A100-40GB: 5, 10, 10, 20, 20, 40 GB; 80 GB parts: 10, 20, 20, 40, 40, 80 GB);
* mig-parted's ``deployments/container/nvidia-mig-manager-example.yaml``: the profile names the GPU
  Operator uses (``1g.5gb`` ... ``7g.40gb``, ``1g.10gb`` ... ``7g.80gb``; ``nvidia.com/mig-<profile>`` in
  the device plugin's mixed strategy).

The media-extension profiles (``+me``, one a GPU) are left out: nothing here asks for a decoder.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from paralleljob.core.errors import InvalidRequest

COMPUTE_SLICES = 7
MEMORY_SLICES = 8


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile: ``name`` as the GPU Operator and the DRA driver spell it (e.g. ``3g.40gb``)."""

    name: str
    compute_slices: int  # of COMPUTE_SLICES
    memory_slices: int  # of MEMORY_SLICES: the size of every placement
    memory_gb: int
    starts: tuple[int, ...]  # valid placement starts, in memory slices

    @property
    def compute_fraction(self) -> float:
        return self.compute_slices / COMPUTE_SLICES

    @property
    def resource_name(self) -> str:
        """The device plugin's extended resource in the mixed MIG strategy."""
        return f"nvidia.com/mig-{self.name}"


@dataclass(frozen=True, slots=True)
class MigShape:
    """The MIG profiles one GPU model offers, smallest first."""

    model: str
    memory_gb: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile:
        for p in self.profiles:
            if p.name == name:
                return p
        raise InvalidRequest(f"{self.model} has no MIG profile {name!r} (it has {[p.name for p in self.profiles]})")


def _shape(model: str, gb: int) -> MigShape:
    unit = gb // MEMORY_SLICES  # 5 GB on a 40 GB part, 10 GB on an 80 GB one
    return MigShape(
        model,
        gb,
        (
            MigProfile(f"1g.{unit}gb", 1, 1, unit, (0, 1, 2, 3, 4, 5, 6)),
            MigProfile(f"1g.{2 * unit}gb", 1, 2, 2 * unit, (0, 2, 4, 6)),
            MigProfile(f"2g.{2 * unit}gb", 2, 2, 2 * unit, (0, 2, 4)),
            MigProfile(f"3g.{4 * unit}gb", 3, 4, 4 * unit, (0, 4)),
            MigProfile(f"4g.{4 * unit}gb", 4, 4, 4 * unit, (0,)),
            MigProfile(f"7g.{gb}gb", 7, 8, gb, (0,)),
        ),
    )


A100_40GB = _shape("A100-40GB", 40)
GPU_80GB = _shape("A100-80GB/H100-80GB", 80)  # the two share profile names, sizes and placements


@dataclass(frozen=True, slots=True)
class MigSlice:
    """A MIG device: a profile at one placement start on one GPU."""

    profile: MigProfile
    start: int

    @property
    def memory(self) -> range:
        return range(self.start, self.start + self.profile.memory_slices)


def compute_used(slices: Iterable[MigSlice]) -> int:
    return sum(s.profile.compute_slices for s in slices)


def memory_used(slices: Iterable[MigSlice]) -> frozenset[int]:
    return frozenset(i for s in slices for i in s.memory)


def free_starts(slices: tuple[MigSlice, ...], profile: MigProfile) -> tuple[int, ...]:
    """The placement starts where ``profile`` fits next to ``slices``: no memory slice taken twice and no
    more compute than the GPU has (two 3g slices take all 8 memory slices and leave one compute slice
    stranded, as on the hardware)."""
    if compute_used(slices) + profile.compute_slices > COMPUTE_SLICES:
        return ()
    taken = memory_used(slices)
    return tuple(s for s in profile.starts if taken.isdisjoint(range(s, s + profile.memory_slices)))


def why_not(slices: tuple[MigSlice, ...], profile: MigProfile) -> str:
    """Why ``profile`` does not fit next to ``slices`` (call it when :func:`free_starts` is empty)."""
    left = COMPUTE_SLICES - compute_used(slices)
    if left < profile.compute_slices:
        return f"{profile.name} needs {profile.compute_slices} compute slices, {left} of {COMPUTE_SLICES} left"
    taken = sorted(memory_used(slices))
    return (f"no placement of {profile.name} (starts {list(profile.starts)}, {profile.memory_slices} memory "
            f"slices each) avoids the taken memory slices {taken}")  # fmt: skip


def offers(shape: MigShape, slices: tuple[MigSlice, ...]) -> tuple[MigProfile, ...]:
    """Every profile the GPU could still hold, as the DRA driver's counters would offer it."""
    return tuple(p for p in shape.profiles if free_starts(slices, p))


def best_start(shape: MigShape, slices: tuple[MigSlice, ...], profile: MigProfile) -> int | None:
    """The free start that leaves the GPU offering the most placements afterwards (ties: the lowest start),
    so a 1g slice does not land where it would block the only 4g or 3g placement; None when none is free."""
    starts = free_starts(slices, profile)
    if not starts:
        return None

    def room_after(start: int) -> int:
        after = (*slices, MigSlice(profile, start))
        return sum(len(free_starts(after, p)) for p in shape.profiles)

    return max(starts, key=lambda s: (room_after(s), -s))


def round_up(shape: MigShape, compute_fraction: float, memory_gb: float = 0.0) -> MigProfile | None:
    """The smallest profile (by compute, then memory) that covers the fraction and the memory asked for;
    None when only the whole-GPU profile would, so the caller gives a whole GPU instead of a 7g slice."""
    if not 0.0 < compute_fraction <= 1.0 or memory_gb < 0:
        raise InvalidRequest(f"a GPU share needs 0 < fraction <= 1, memory >= 0: got {compute_fraction}, {memory_gb}")
    for p in sorted(shape.profiles, key=lambda p: (p.compute_slices, p.memory_slices)):
        if p.compute_slices == COMPUTE_SLICES:
            return None
        # a small tolerance: 3/7 is 0.42857..., and a request of exactly that fraction fits it
        if p.compute_slices / COMPUTE_SLICES + 1e-9 >= compute_fraction and p.memory_gb >= memory_gb:
            return p
    return None
