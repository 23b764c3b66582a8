"""The placement as it is recorded in a ParallelJob's status: the operator's source of truth.

The record is written before any pod exists, so an operator that dies at any point finds, on restart,
exactly which pod belongs on which node and GPUs. Each pod slot carries an ``incarnation`` that is bumped
when its pod must be re-created even though its GPUs did not change (a worker crashed, a full restart).
GPUs are named ``node/index`` everywhere in the record: global GPU ids are an artefact of one operator's
view of the cluster and would not survive a node joining or leaving. The rank order the pods were started
with is part of the record, so every repair numbers a replacement pod the way its siblings were numbered,
and a job placed before ``spec.rankOrder`` existed keeps the order its pods started with. A job placed over
the trays of NVLink cliques records whole-tray pods instead of TP-group pods (``trays``, k8s/edge/status/trayrecords).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paralleljob.core.rankorder import LEGACY_RANK_ORDER, RankOrder, global_ranks, node_rank
from paralleljob.core.timing.cost import CostBreakdown
from paralleljob.k8s.edge.status.trayrecords import (
    TRAY_LAYOUT,
    TraySlot,
    check_trays,
    tp_groups,
    tray_groups,
    trays_from_status,
    trays_to_status,
)


def pod_name(job: str, replica: int, stage: int) -> str:
    return f"{job}-d{replica}-p{stage}"


@dataclass(frozen=True, slots=True)
class MigGrant:
    """A rank's MIG slice: on a DRA node, the profile and the placement start (in memory slices) on its slot's
    one GPU; on a device-plugin node (``start`` None, the slot naming no GPU), the profile alone, since the
    device plugin picks the GPU and the MIG device when the pod is admitted."""

    profile: str
    start: int | None

    @property
    def exact(self) -> bool:
        """The operator chose the GPU and the MIG device (DRA), not the device plugin."""
        return self.start is not None

    def to_status(self) -> dict[str, Any]:
        return {"profile": self.profile, **({"start": self.start} if self.start is not None else {})}

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}" if self.start is not None else self.profile


@dataclass(frozen=True, slots=True)
class MpsGrant:
    """A rank's MPS share of its slot's one GPU: ``percent`` of its compute (and as much of its memory), a
    client of the GPU's one MPS server, which the pods of every share of its size in its namespace reach
    through one ResourceClaim (``edge/render/mpsclaims.py``)."""

    percent: int

    def to_status(self) -> dict[str, Any]:
        return {"percent": self.percent}

    def __str__(self) -> str:
        return f"MPS {self.percent}%"


@dataclass(frozen=True, slots=True)
class PodSlot:
    """One TP group: one pod on one node; or, with ``mig``, one rank on one MIG slice of one GPU."""

    name: str
    replica: int
    stage: int
    node: str
    gpu_indices: tuple[int, ...]
    incarnation: int = 0
    mig: MigGrant | None = None
    mps: MpsGrant | None = None

    def gpu_names(self) -> list[str]:
        return [f"{self.node}/{i}" for i in self.gpu_indices]


@dataclass(frozen=True, slots=True)
class PlacementRecord:
    epoch: int  # bumped on every new placement or repair
    cost_model: str
    tp: int
    pp: int
    dp: int
    slots: tuple[PodSlot, ...]  # in group order d * pp + p (the seed's order, whatever the rank order)
    rank_order: RankOrder
    cost: CostBreakdown | None = None
    reasons: tuple[str, ...] = ()
    # Whole-tray pods (one per tray of an NVLink clique); when set, ``slots`` is empty.
    trays: tuple[TraySlot, ...] = ()

    @property
    def nodes(self) -> list[str]:
        return list(dict.fromkeys(slot.node for slot in self.pod_slots))

    @property
    def pod_slots(self) -> tuple[PodSlot | TraySlot, ...]:
        """Every pod of the record, whichever layout."""
        return (*self.slots, *self.trays)

    @property
    def num_gpus(self) -> int:
        return sum(len(s.gpu_indices) for s in self.pod_slots)

    @property
    def pooled(self) -> bool:
        """Its pods hold MIG slices that the device plugin picks on their nodes (``MigGrant.exact`` False)."""
        return bool(self.slots) and self.slots[0].mig is not None and not self.slots[0].mig.exact

    @property
    def sliced(self) -> bool:
        """Its pods hold MIG slices of GPUs, not whole GPUs (``spec.gpuSharing``). A record never mixes the two
        (``slots_from_status`` refuses it), so the first pod says: asked for every record of every pass."""
        return bool(self.slots) and self.slots[0].mig is not None

    @property
    def shared(self) -> bool:
        """Its pods hold MPS shares of GPUs (``spec.gpuSharing.mps``); like MIG slices, never mixed."""
        return bool(self.slots) and self.slots[0].mps is not None

    def slot_named(self, name: str) -> PodSlot | None:
        for slot in self.slots:
            if slot.name == name:
                return slot
        return None

    def node_rank(self, slot: PodSlot) -> int:
        return node_rank(self.rank_order, slot.replica, slot.stage, self.pp, self.dp)

    def groups_of(self, slot: PodSlot | TraySlot) -> tuple[tuple[int, int], ...]:
        """(replica, stage) of every TP group whose ranks the pod holds, whichever layout: one for a TP-group
        pod, one or more for a whole-tray pod (``tray_groups``). What a surface shows as a pod's replica/stage."""
        if isinstance(slot, TraySlot):
            return tray_groups(slot, self.tp, self.pp, self.dp, self.rank_order)
        return ((slot.replica, slot.stage),)

    def master_slot(self) -> PodSlot:
        """The pod holding global rank 0 (node rank 0): torchrun's rendezvous host, ``MASTER_ADDR``."""
        return next(s for s in self.slots if self.node_rank(s) == 0)

    def to_status(self) -> dict[str, Any]:
        pp, dp = self.pp, self.dp
        if self.trays:
            return {**self._status_of(trays_to_status(self.trays), record_groups(self)), "layout": TRAY_LAYOUT}
        groups = [slot.gpu_names() for slot in self.slots]
        pods = []
        for slot in self.slots:
            pods.append(
                {
                    "name": slot.name,
                    "replica": slot.replica,
                    "stage": slot.stage,
                    "nodeRank": self.node_rank(slot),
                    "node": slot.node,
                    "gpuIndices": list(slot.gpu_indices),
                    "ranks": global_ranks(self.rank_order, slot.replica, slot.stage, self.tp, pp, dp),
                    "incarnation": slot.incarnation,
                    **({"migSlice": slot.mig.to_status()} if slot.mig is not None else {}),
                    **({"mpsShare": slot.mps.to_status()} if slot.mps is not None else {}),
                }
            )
        return self._status_of(pods, groups)

    def _status_of(self, pods: list[dict[str, Any]], groups: list[list[str]]) -> dict[str, Any]:
        pp, dp = self.pp, self.dp
        return {
            "epoch": self.epoch,
            "costModel": self.cost_model,
            "rankOrder": self.rank_order.value,
            "shape": {"tensor": self.tp, "pipeline": pp, "data": dp},
            "pods": pods,
            "tpGroups": groups,
            "ppStages": [[g for d in range(dp) for g in groups[d * pp + p]] for p in range(pp)],
            "dpReplicas": [[g for p in range(pp) for g in groups[d * pp + p]] for d in range(dp)],
            "reasons": list(self.reasons),
        }


def record_groups(record: PlacementRecord) -> list[list[str]]:
    """GPU names of each TP group, group order d x pp + p: a TP-group pod's GPUs, or the trays' slices."""
    if record.trays:
        return tp_groups(record.trays, record.tp, record.pp, record.dp, record.rank_order)
    return [slot.gpu_names() for slot in record.slots]


def cost_to_status(cost: CostBreakdown, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "tpMs": round(cost.tp_ms, 6),
        "ppMs": round(cost.pp_ms, 6),
        "dpMs": round(cost.dp_ms, 6),
        "totalMs": round(cost.total_ms, 6),
        # for reading only (kubectl's Cost-ms column): the fields above keep the precision decisions compare
        "roundedTotalMs": rounded_ms(cost.total_ms),
        "bottleneck": cost.bottleneck,
    }


def rounded_ms(ms: float) -> float:
    """A cost as people read it: to 0.01 ms from 1 ms up, three significant digits below (0.00412)."""
    if ms == 0 or not math.isfinite(ms):
        return ms
    if abs(ms) >= 1:
        return round(ms, 2)
    return round(ms, 2 - math.floor(math.log10(abs(ms))))


def cost_from_status(data: object) -> CostBreakdown | None:
    if not isinstance(data, Mapping):
        return None
    try:
        return CostBreakdown(float(data["tpMs"]), float(data["ppMs"]), float(data["dpMs"]), float(data["totalMs"]))
    except (KeyError, TypeError, ValueError):
        return None


class MalformedRecord(ValueError):
    """The status placement cannot be read back (edited by hand, or from an incompatible version)."""


def record_from_status(status: Mapping[str, Any]) -> PlacementRecord | None:
    """The recorded placement, None when there is none; :class:`MalformedRecord` when it is unreadable."""
    data = status.get("placement")
    if not data:
        return None
    if not isinstance(data, Mapping):
        raise MalformedRecord("status.placement is not an object")
    try:
        shape = data["shape"]
        tp, pp, dp = int(shape["tensor"]), int(shape["pipeline"]), int(shape["data"])
        # No rankOrder: recorded before the field existed, when every pod was numbered d·pp + p.
        order = RankOrder.parse(str(data.get("rankOrder") or LEGACY_RANK_ORDER.value))
        layout = data.get("layout")
        slots: tuple[PodSlot, ...] = ()
        trays: tuple[TraySlot, ...] = ()
        if layout == TRAY_LAYOUT:
            trays = trays_from_status(data["pods"])
            why = check_trays(trays, tp, pp, dp)
            if why:
                raise MalformedRecord(f"status.placement: {why}")
        elif layout is not None:
            raise MalformedRecord(f"status.placement.layout {layout!r} is not known to this operator")
        else:
            slots = slots_from_status(data["pods"], tp, pp, dp)
        return PlacementRecord(
            epoch=int(data.get("epoch", 0)),
            cost_model=str(data.get("costModel", "seed")),
            tp=tp,
            pp=pp,
            dp=dp,
            slots=slots,
            rank_order=order,
            cost=cost_from_status(status.get("communicationCost")),
            reasons=tuple(str(r) for r in data.get("reasons", [])),
            trays=trays,
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, MalformedRecord):
            raise
        raise MalformedRecord(f"status.placement is unreadable: {exc!r}") from None


def slots_from_status(items: Sequence[Mapping[str, Any]], tp: int, pp: int, dp: int) -> tuple[PodSlot, ...]:
    """The TP-group pods of a one-pod-per-group record, checked against TP x PP x DP (:class:`MalformedRecord`
    when they cannot be its pods; KeyError/TypeError/ValueError on an unreadable entry, as ``trays_from_status``)."""
    slots = tuple(
        PodSlot(
            name=str(item["name"]),
            replica=int(item["replica"]),
            stage=int(item["stage"]),
            node=str(item["node"]),
            gpu_indices=tuple(int(i) for i in item["gpuIndices"]),
            incarnation=int(item.get("incarnation", 0)),
            mig=_mig_grant(item.get("migSlice")),
            mps=_mps_grant(item.get("mpsShare")),
        )
        for item in items
    )
    if len(slots) != pp * dp or any(len(s.gpu_indices) != (tp if _names_gpus(s) else 0) for s in slots):
        raise MalformedRecord(f"status.placement lists {len(slots)} pods; TP{tp}xPP{pp}xDP{dp} needs {pp * dp}")
    if [(s.replica, s.stage) for s in slots] != [(d, p) for d in range(dp) for p in range(pp)]:
        raise MalformedRecord(f"status.placement must list the pods of PP{pp}xDP{dp} in order d·pp + p")
    if len({s.mig is None for s in slots}) > 1:
        raise MalformedRecord("status.placement mixes pods on MIG slices (migSlice) with pods on whole GPUs")
    if len({s.mps is None for s in slots}) > 1 or any(s.mps is not None and s.mig is not None for s in slots):
        raise MalformedRecord("status.placement mixes pods on MPS shares (mpsShare) with other pods")
    if len({s.mig.exact for s in slots if s.mig is not None}) > 1:
        raise MalformedRecord("status.placement mixes MIG slices of DRA devices with the device plugin's")
    return slots


def _names_gpus(slot: PodSlot) -> bool:
    """Every slot names its GPUs but a slice the device plugin picks (``MigGrant.exact`` False)."""
    return slot.mig is None or slot.mig.exact


def _mig_grant(data: object) -> MigGrant | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise MalformedRecord("status.placement.pods[].migSlice is not an object")
    start = data.get("start")
    return MigGrant(str(data["profile"]), None if start is None else int(start))


def _mps_grant(data: object) -> MpsGrant | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise MalformedRecord("status.placement.pods[].mpsShare is not an object")
    percent = int(data["percent"])
    if not 1 <= percent <= 100:
        raise MalformedRecord(f"status.placement.pods[].mpsShare.percent {percent} is not 1..100")
    return MpsGrant(percent)
