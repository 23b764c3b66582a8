"""GPUs published through Dynamic Resource Allocation, parsed at the edge into frozen values, and laid over
the nodes they belong to.

A node whose GPUs come from a DRA driver (NVIDIA's ``gpu.nvidia.com``) has no ``nvidia.com/gpu``
allocatable; its kubelet plugin publishes ResourceSlices (``resource.k8s.io/v1``) for a pool named after
the node, with one device per GPU (``gpu-<minor>``). This module reads those slices and the ResourceClaims
that already hold devices, and replaces, for each such node, what :mod:`paralleljob.k8s.edge.parse.nodes` derived
from allocatable and GPU Feature Discovery labels: the GPU count, memory and product, which GPUs others
hold, and device taints. Nodes without slices keep the device-plugin view, so both kinds coexist.

**GPU indices.** The core numbers a node's GPUs 0..n-1. On a DRA node index ``i`` is the ``i``-th full GPU
of the node's pool in *natural order of device names*: by the number in ``gpu-<n>`` (the driver names a GPU
after its minor number, so ``gpu-2`` comes before ``gpu-10``), other names after those, alphabetically. The
order depends on names only, so it is stable across re-lists, driver restarts and pool generations; a GPU
that disappears shifts the ones after it, exactly as a lower allocatable count would.

**What counts as a GPU.** A device of the configured driver whose ``type`` attribute is ``gpu`` (the
driver also publishes MIG devices and VFIO devices with other types); the DeviceClass's CEL selector is
not evaluated here. MIG devices (``type`` ``mig``) are read too, into the node's ``NodeInfo.mig``
(``migdevices.py``): a GPU whose MIG device some claim holds is held, so it is never given whole.
Only slices bound to one node (``spec.nodeName``) are read, and only the newest
generation of a pool: a driver replacing its slices leaves older ones behind until it deletes them.

**Taints.** A device taint — in the slice, or from a DeviceTaintRule that selects the device
(``taintrules.py``) — with effect ``NoExecute`` makes that GPU unhealthy (its job is repaired);
``NoSchedule`` and ``None`` make it Degraded: it keeps its job and gets no new one.

**Used devices.** Every device of this driver in the ``status.allocation`` of a ResourceClaim counts as
used. The operator's own claims (``claims.py``) are no exception: the view loads placement records
first, so a claim a record explains holds GPUs its job owns already.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from paralleljob.k8s.edge.config import DraConfig
from paralleljob.k8s.edge.constants import JOB_LABEL, MANAGED_LABEL, MANAGED_VALUE, MPS_SHARE_LABEL, POD_LABEL
from paralleljob.k8s.edge.parse.matching import Term
from paralleljob.k8s.edge.parse.migdevices import MIG_TYPE, MigDevice, counter_set_of, dra_offer, parse_mig_device
from paralleljob.k8s.edge.parse.nodes import DraGpus, NodeInfo, indices_beyond
from paralleljob.k8s.edge.parse.quantity import QuantityError, parse_quantity
from paralleljob.k8s.edge.parse.taintrules import TAINT_EFFECTS, DeviceTaint, TaintRuleInfo, taints_for
from paralleljob.k8s.edge.parse.template import InvalidTemplate, node_selector_terms

RESOURCE_API = "/apis/resource.k8s.io/v1"
SLICES_PATH = f"{RESOURCE_API}/resourceslices"
CLAIMS_PATH = f"{RESOURCE_API}/resourceclaims"
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
GPU_TYPE = "gpu"
GIB = 1024**3

_NAME_NUMBER = re.compile(r"^gpu-(\d+)$")


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One full GPU as its driver publishes it."""

    name: str  # the device name in the pool: what a claim's allocation names
    uuid: str
    product: str  # NVML's productName with spaces made dashes, as GFD's nvidia.com/gpu.product label
    memory_gib: float | None  # capacity "memory"; None when absent or malformed
    pci_bus_id: str
    pcie_root: str
    taints: tuple[DeviceTaint, ...] = ()
    counter_set: str = ""  # the counter set it consumes from: its MIG devices consume from the same one


@dataclass(frozen=True, slots=True)
class SliceInfo:
    """The part of one ResourceSlice that matters here; ``devices`` keeps only full GPUs, ``mig`` the MIG
    devices (``migdevices.py``)."""

    name: str
    driver: str
    node: str  # spec.nodeName; empty for slices not bound to a single node
    pool: str
    generation: int
    slice_count: int
    devices: tuple[GpuDevice, ...]
    warnings: tuple[str, ...] = ()
    mig: tuple[MigDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A ResourceClaim, reduced to whether it is ours and which devices its allocation holds."""

    namespace: str
    name: str
    uid: str
    operator_owned: bool
    devices: tuple[AllocatedDevice, ...]
    job: str = ""  # the operator's claims: the ParallelJob (same namespace) and worker pod they serve
    pod: str = ""
    reserved_for: tuple[str, ...] = ()  # UIDs of the consumers in status.reservedFor
    # For a claim the operator does not allocate (a PodGroup's shared claim): whether it is allocated, the
    # nodes its allocation can be used from (allocation.nodeSelector's terms; None: any node, or unreadable),
    # the consumers as written (status.reservedFor entries, to write them back with ours) and its version.
    allocated: bool = False
    node_terms: tuple[Term, ...] | None = None
    consumers: tuple[tuple[tuple[str, str], ...], ...] = ()
    resource_version: str = ""
    mps_share: bool = False  # the operator's shared claim of an MPS GPU (edge/render/mpsclaims.py)


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """A node's GPUs from its pool, in index order (see the module docstring)."""

    node: str
    driver: str
    pool: str
    devices: tuple[GpuDevice, ...]
    warnings: tuple[str, ...] = ()
    mig: tuple[MigDevice, ...] = ()  # the MIG devices of its pool (dynamic MIG: every one its GPUs could hold)


def _string(attributes: Mapping[str, Any], name: str) -> str:
    value = attributes.get(name)
    if isinstance(value, Mapping) and isinstance(value.get("string"), str):
        return str(value["string"])
    return ""


def _int(value: object, default: int) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def device_order(name: str) -> tuple[int, int, str]:
    """Natural order of device names: ``gpu-<n>`` by n first, any other name after them."""
    match = _NAME_NUMBER.match(name)
    return (0, int(match.group(1)), name) if match else (1, 0, name)


def _taints(raw: object, device: str, warnings: list[str]) -> tuple[DeviceTaint, ...]:
    taints = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping):
            continue
        taint = DeviceTaint(str(item.get("key") or ""), str(item.get("value") or ""), str(item.get("effect") or ""))
        if taint.effect not in TAINT_EFFECTS:
            warnings.append(f"device {device}: ignored taint {taint.key} with unknown effect {taint.effect!r}")
            continue
        taints.append(taint)
    return tuple(taints)


def _memory_gib(capacity: object, device: str, warnings: list[str]) -> float | None:
    raw = capacity.get("memory") if isinstance(capacity, Mapping) else None
    value = raw.get("value") if isinstance(raw, Mapping) else None
    if value is None:
        return None
    try:
        amount = parse_quantity(value)
    except QuantityError:
        warnings.append(f"device {device}: ignored malformed capacity memory={value!r}")
        return None
    if amount <= 0:
        warnings.append(f"device {device}: ignored capacity memory={value!r}: not positive")
        return None
    return float(amount / Fraction(GIB))


def parse_slice(body: Mapping[str, Any]) -> SliceInfo:
    """Any ResourceSlice; devices that are not full GPUs (another ``type``) are dropped here."""
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    pool = spec.get("pool") or {}
    warnings: list[str] = []
    devices = []
    mig = []
    for raw in spec.get("devices") or []:
        if not isinstance(raw, Mapping) or not raw.get("name"):
            continue
        name = str(raw["name"])
        attributes = raw.get("attributes") or {}
        if isinstance(attributes, Mapping) and _string(attributes, "type") == MIG_TYPE:
            if (device := parse_mig_device(raw, warnings)) is not None:
                mig.append(device)
            continue
        if not isinstance(attributes, Mapping) or _string(attributes, "type") != GPU_TYPE:
            continue
        devices.append(
            GpuDevice(
                name=name,
                uuid=_string(attributes, "uuid"),
                product=_string(attributes, "productName").strip().replace(" ", "-"),
                memory_gib=_memory_gib(raw.get("capacity"), name, warnings),
                pci_bus_id=_string(attributes, PCI_BUS_ID_ATTRIBUTE),
                pcie_root=_string(attributes, PCIE_ROOT_ATTRIBUTE),
                taints=_taints(raw.get("taints"), name, warnings),
                counter_set=counter_set_of(raw)[0],
            )
        )
    return SliceInfo(
        name=str(metadata.get("name") or ""),
        driver=str(spec.get("driver") or ""),
        node=str(spec.get("nodeName") or ""),
        pool=str(pool.get("name") or ""),
        generation=_int(pool.get("generation"), 0),
        slice_count=max(1, _int(pool.get("resourceSliceCount"), 1)),
        devices=tuple(devices),
        warnings=tuple(warnings),
        mig=tuple(mig),
    )


def parse_claim(body: Mapping[str, Any]) -> ClaimInfo:
    metadata = body.get("metadata") or {}
    allocation = (body.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or [] if isinstance(allocation, Mapping) else []
    devices = tuple(
        AllocatedDevice(str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
        for r in results
        if isinstance(r, Mapping)
    )
    labels = metadata.get("labels") or {}
    reserved = (body.get("status") or {}).get("reservedFor") or []
    return ClaimInfo(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        operator_owned=JOB_LABEL in labels and POD_LABEL in labels,
        devices=devices,
        job=str(labels.get(JOB_LABEL) or ""),
        pod=str(labels.get(POD_LABEL) or ""),
        reserved_for=tuple(str(r.get("uid") or "") for r in reserved if isinstance(r, Mapping)),
        allocated=bool(allocation),
        node_terms=_allocation_terms(allocation),
        consumers=tuple(
            tuple(sorted((str(k), str(v)) for k, v in r.items())) for r in reserved if isinstance(r, Mapping)
        ),
        resource_version=str(metadata.get("resourceVersion") or ""),
        mps_share=MPS_SHARE_LABEL in labels and labels.get(MANAGED_LABEL) == MANAGED_VALUE,
    )


def _allocation_terms(allocation: Any) -> tuple[Term, ...] | None:
    selector = allocation.get("nodeSelector") if isinstance(allocation, Mapping) else None
    if not isinstance(selector, Mapping):
        return None
    try:
        return node_selector_terms(selector, "status.allocation.nodeSelector")
    except InvalidTemplate:
        return ()  # a selector we cannot read admits no node: better to wait than to place where it is unusable


def node_gpus(slices: Iterable[SliceInfo], driver: str, rules: Iterable[TaintRuleInfo] = ()) -> dict[str, NodeGpus]:
    """Per node: the GPUs of its pool's newest generation, in index order, each with its slice's taints and
    those of the DeviceTaintRules that select it (``taintrules.py``)."""
    rules = [r for r in rules if not r.selector.matches_nothing]
    pools: dict[tuple[str, str], list[SliceInfo]] = {}
    for item in slices:
        if item.driver == driver and item.node:
            pools.setdefault((item.node, item.pool), []).append(item)
    out: dict[str, NodeGpus] = {}
    for (node, pool), members in sorted(pools.items()):
        newest = max(m.generation for m in members)
        current = [m for m in members if m.generation == newest]
        warnings = [w for m in current for w in m.warnings]
        expected = max(m.slice_count for m in current)
        if len(current) < expected:
            warnings.append(
                f"pool {pool} of driver {driver} has {len(current)} of {expected} slices at generation {newest};"
                " using the devices published so far"
            )
        devices = sorted({d.name: d for m in current for d in m.devices}.values(), key=lambda d: device_order(d.name))
        if rules:
            devices = [replace(d, taints=d.taints + taints_for(rules, driver, pool, d.name)) for d in devices]
        if node in out:
            warnings.append(f"node {node} has more than one pool of driver {driver}; using {out[node].pool}")
            out[node] = replace(out[node], warnings=out[node].warnings + tuple(warnings))
            continue
        mig = tuple({d.name: d for m in current for d in m.mig}.values())
        out[node] = NodeGpus(node, driver, pool, tuple(devices), tuple(warnings), mig)
    return out


def held_devices(claims: Iterable[ClaimInfo], driver: str) -> dict[str, frozenset[str]]:
    """Pool -> names of its devices allocated in any claim. The operator's own count too: the view loads
    placement records first, so a claim its record explains holds GPUs the job owns already, and only a
    leftover (a stale worker's claim not yet deleted) keeps its devices from new work."""
    held: dict[str, set[str]] = {}
    for claim in claims:
        for device in claim.devices:
            if device.driver == driver:
                held.setdefault(device.pool, set()).add(device.device)
    return {pool: frozenset(names) for pool, names in held.items()}


def overlay_node(
    node: NodeInfo, gpus: NodeGpus, held: frozenset[str], config: DraConfig, default_memory_gib: float
) -> NodeInfo:
    """``node`` with its GPUs taken from its pool instead of allocatable and GFD labels."""
    count = len(gpus.devices)
    # Unhealthy indices were checked against allocatable nvidia.com/gpu, which a DRA node does not have:
    # check them against the pool instead (valid indices must not raise a MalformedLabel warning).
    # (the parse checked the annotation as written: drained GPUs were still in it then)
    listed = node.unhealthy_gpus | node.drained_gpus
    stale = indices_beyond(node.name, listed, node.gpu_count)
    warnings = [w for w in node.warnings if not stale or w != stale]
    beyond = indices_beyond(node.name, listed, count)
    if beyond:
        warnings.append(beyond)
    warnings.extend(gpus.warnings)
    products = sorted({d.product for d in gpus.devices if d.product})
    if len(products) > 1:
        warnings.append(f"node {node.name} has GPUs of several products {products}; it is matched as {products[0]}")
    memories = [d.memory_gib for d in gpus.devices if d.memory_gib is not None]
    # The core gives a node one memory size; the smallest GPU's keeps every placement within bounds.
    memory = min(memories) if memories else default_memory_gib
    # drained GPUs (maintenance) take no new work: the parse could not count them against the pool yet
    unhealthy, degraded = set(node.unhealthy_gpus), set(node.degraded_gpus) | node.drained_gpus
    # a GPU some claim holds a MIG device of is not whole for anyone (the full device shares its counters)
    mig, sliced = dra_offer([(d.name, d.uuid, d.counter_set) for d in gpus.devices], gpus.mig, held)
    for index, device in enumerate(gpus.devices):
        effects = {t.effect for t in device.taints}
        if "NoExecute" in effects:
            unhealthy.add(index)
        elif effects:
            degraded.add(index)
    return replace(
        node,
        gpu_count=count,
        gpu_memory_gib=memory,
        gpu_product=products[0] if products else "",
        unhealthy_gpus=frozenset(i for i in unhealthy if i < count),
        degraded_gpus=frozenset(i for i in degraded if i < count) - unhealthy,
        warnings=tuple(warnings),
        dra=DraGpus(
            gpus.driver,
            gpus.pool,
            config.device_class,
            tuple(d.name for d in gpus.devices),
            tuple(d.pcie_root for d in gpus.devices),
        ),
        held_gpus=frozenset(i for i, d in enumerate(gpus.devices) if d.name in held) | sliced,
        mig=mig,
    )


def overlay_nodes(
    nodes: Iterable[NodeInfo],
    slices: Iterable[SliceInfo],
    claims: Iterable[ClaimInfo],
    config: DraConfig,
    default_memory_gib: float,
    rules: Iterable[TaintRuleInfo] = (),
) -> list[NodeInfo]:
    """Every node, those with a pool of the configured driver seen through it; the rest unchanged."""
    if not config.enabled:
        return list(nodes)
    pools = node_gpus(slices, config.driver, rules)
    if not pools:
        return list(nodes)
    held = held_devices(claims, config.driver)
    out = []
    for node in nodes:
        gpus = pools.get(node.name)
        if gpus is None:
            out.append(node)
        else:
            out.append(overlay_node(node, gpus, held.get(gpus.pool, frozenset()), config, default_memory_gib))
    return out
