"""Each job's node filter (``core.placing.eligibility.NodeFilter``), from its pod template and ``gpuProduct``.

A node is out for a job when its GPU product differs from ``gpuProduct``, its labels do not satisfy the
template's ``nodeSelector`` or required node affinity, or one worker's requests (CPU, memory, ephemeral
storage, extended resources; ``template.py``) exceed its allocatable. Those are permanent: the core counts
only the remaining nodes when it decides whether a job can ever fit. A NoSchedule/NoExecute taint the
template does not tolerate (``matching.py``: Kubernetes' own rules) closes the node to the job *for now*:
taints come and go with maintenance, so the job waits instead of failing.

What is free now is the node's allocatable minus what bound, unfinished pods request there: our own workers
are counted from the recorded placements in the state (so a gang admitted earlier in the same pass counts
before its pods exist), every other pod from its spec. A node with room for fewer of the job's workers than
its free GPUs would take has its surplus GPUs held back while the job is placed.

Filters are built lazily and cached per pass by what they depend on (constraints, product, TP size), so a
thousand jobs from one template cost one scan of the nodes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.eligibility import NodeFilter
from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.matching import Toleration, affinity_matches, selector_matches, untolerated
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.quantity import format_amount
from paralleljob.k8s.edge.parse.specs import JobRequest
from paralleljob.k8s.edge.parse.template import PodConstraints
from paralleljob.k8s.view.clusterview import ClusterView

Usage = dict[str, int]
_Static = tuple[frozenset[int] | None, dict[int, int], tuple[str, ...], dict[tuple[int, float], tuple[int, float, int]]]
_Tainted = tuple[frozenset[int], tuple[str, ...]]


def _groups_fitting(requests: Sequence[tuple[str, int]], free: Mapping[str, int]) -> int | float:
    """How many workers with ``requests`` fit in ``free`` (inf when the worker requests nothing)."""
    most: int | float = math.inf
    for name, amount in requests:
        most = min(most, max(0, free.get(name, 0)) // amount)
    return most


def node_refusal(info: NodeInfo, constraints: PodConstraints, product: str) -> str:
    """Why this node can never take the job's workers, as a short category (empty: it can). Taints are not
    asked here: they come and go with maintenance, so a taint makes a job wait, never fail."""
    if product and info.gpu_product != product:
        return f"GPU product is not {product}"
    if constraints.node_selector and not selector_matches(constraints.selector, info.labels):
        wanted = ", ".join(f"{k}={v}" for k, v in constraints.node_selector)
        return f"labels do not match nodeSelector {{{wanted}}}"
    if not affinity_matches(constraints.affinity, info.labels, info.name):
        return "labels do not match the required node affinity"
    short = [name for name, amount in constraints.requests if amount > info.allocatable.get(name, 0)]
    if short:
        return "allocatable " + ", ".join(short) + " is less than one worker requests"
    return ""


class Eligibility:
    """Node filters for one pass over ``view``; ``requests`` maps every job key to its request."""

    def __init__(self, view: ClusterView, pods: Sequence[PodInfo], requests: Mapping[str, JobRequest]) -> None:
        self.view = view
        self.requests = requests
        self._static: dict[tuple[PodConstraints, str, int], _Static] = {}
        self._tainted: dict[tuple[Toleration, ...], _Tainted] = {}
        self._by_label: dict[str, tuple[tuple[str, frozenset[int]], ...]] = {}
        self.tainted_nodes = [
            (view.node_index[name], info)
            for name, info in view.nodes.items()
            if info.taints and name in view.node_index
        ]
        self._used: dict[int, Usage] = {}  # node -> what bound pods and our recorded workers request there
        state = view.state
        claimed = set(state.allocations)
        for pod in pods:
            if not pod.requests or not pod.bound or pod.terminal:
                continue
            if pod.job is not None and object_key(pod.namespace, pod.job) in claimed:
                continue  # counted from its job's recorded placement instead
            if pod.group is not None and object_key(pod.namespace, pod.group) in claimed:
                continue  # likewise for a pod group's pod (its adopting job's placement)
            n = view.node_index.get(pod.node)
            if n is not None:
                _add(self._used.setdefault(n, {}), dict(pod.requests), 1)
        self._counted: dict[str, Allocation] = {}  # allocation id -> the allocation counted (by identity)
        self._changed: list[int] = []  # nodes whose usage changed, in order (a log the limits catch up on)
        # (requests, tp) -> (log position seen, node -> most workers that fit there now, when below its GPUs)
        self._limits: dict[tuple[tuple[tuple[str, int], ...], int], tuple[int, dict[int, int]]] = {}

    def _sync(self, state: ClusterState) -> None:
        """Bring the usage of our own workers in line with the allocations in ``state`` right now."""
        current = state.allocations
        for key in [k for k in self._counted if current.get(k) is not self._counted[k]]:
            self._count(state, self._counted.pop(key), key, -1)
        for key, allocation in current.items():
            if key not in self._counted and key in self.requests and self.requests[key].constraints.requests:
                self._counted[key] = allocation
                self._count(state, allocation, key, +1)

    def _count(self, state: ClusterState, allocation: Allocation, key: str, sign: int) -> None:
        requests = dict(self.requests[key].constraints.requests)
        per_node = Counter(state.topology.gpu_node[group[0]] for group in allocation.groups if group)
        for n, count in per_node.items():
            _add(self._used.setdefault(n, {}), requests, sign * count)
            self._changed.append(n)

    def _static_filter(self, constraints: PodConstraints, product: str, tp: int) -> _Static:
        key = (constraints, product, tp)
        if key in self._static:
            return self._static[key]
        view = self.view
        unconstrained = (
            not product and not constraints.node_selector and constraints.affinity is None and not constraints.requests
        )
        if unconstrained:
            self._static[key] = (None, {}, (), {})
            return self._static[key]
        allowed: set[int] = set()
        ever: dict[int, int] = {}
        out: Counter[str] = Counter()
        for n, name in enumerate(view.topology.node_names):
            info = view.nodes.get(name)
            if info is None:
                continue  # a ghost: gone, never eligible for new work
            why = node_refusal(info, constraints, product)
            if why:
                out[why] += 1
                continue
            allowed.add(n)
            fit = _groups_fitting(constraints.requests, info.allocatable)
            if fit < view.topology.node_gpu_count[n] // tp:
                ever[n] = int(fit)
        reasons = tuple(f"{count} node(s): {why}" for why, count in sorted(out.items(), key=lambda i: (-i[1], i[0])))
        if constraints.requests and not allowed:
            largest = {
                name: max((info.allocatable.get(name, 0) for info in view.nodes.values()), default=0)
                for name, _ in constraints.requests
            }
            reasons += (
                f"one worker requests {_describe(constraints.requests)};"
                f" the most any node has allocatable is {_describe(tuple(largest.items()))}",
            )
        # every node eligible: say so, and the core skips the per-node work of a filter
        everyone = len(allowed) == view.topology.num_nodes
        self._static[key] = (None if everyone else frozenset(allowed), ever, reasons, {})
        return self._static[key]

    def _taints(self, tolerations: tuple[Toleration, ...]) -> _Tainted:
        """Nodes with a NoSchedule/NoExecute taint these tolerations do not match, and why, in words."""
        if tolerations not in self._tainted:
            out: Counter[str] = Counter()
            nodes = set()
            for n, info in self.tainted_nodes:
                taint = untolerated(info.taints, tolerations)
                if taint is not None:
                    nodes.add(n)
                    out[f"taint {taint} is not tolerated"] += 1
            why = tuple(f"{count} node(s): {what}" for what, count in sorted(out.items(), key=lambda i: (-i[1], i[0])))
            self._tainted[tolerations] = (frozenset(nodes), why)
        return self._tainted[tolerations]

    def filter_for(self, key: str, spec: JobSpec, with_usage: bool = True) -> NodeFilter | None:
        """The job's filter (None: it may use every node); ``with_usage`` False leaves out what other pods
        use now (for repairs, whose own workers are still counted there)."""
        request = self.requests.get(key)
        if request is None or self.view.empty:
            return None
        allowed, ever, why, memo = self._static_filter(request.constraints, request.gpu_product, spec.tp)
        tainted, taint_why = self._taints(request.constraints.tolerations)
        key_name = request.constraints.topology_key
        domains = self._domains(key_name) if key_name else ()
        if (
            allowed is None
            and not tainted
            and not ever
            and not key_name
            and not (with_usage and request.constraints.requests)
        ):
            return None
        now: dict[int, int] = dict(ever)
        now.update((n, 0) for n in tainted if allowed is None or n in allowed)
        why += taint_why
        requests = request.constraints.requests
        if with_usage and requests:
            short = 0
            for n, fit in self._usage_limits(requests, spec.tp).items():
                if allowed is None or n in allowed:
                    now[n] = min(now.get(n, fit), fit)
                    short += 1
            if short:
                why += (
                    f"{short} node(s) have room for fewer workers: their allocatable minus what bound pods request"
                    f" is less than {_describe(requests)} per worker",
                )
        return NodeFilter(allowed, ever, now, why, memo, key_name, domains)

    def _domains(self, label: str) -> tuple[tuple[str, frozenset[int]], ...]:
        """The nodes of each value of a node label (a topology key), in value order; cached per pass."""
        if label not in self._by_label:
            members: dict[str, set[int]] = {}
            for name, info in self.view.nodes.items():
                n = self.view.node_index.get(name)
                value = info.labels.get(label)
                if n is not None and value is not None:
                    members.setdefault(value, set()).add(n)
            self._by_label[label] = tuple((v, frozenset(members[v])) for v in sorted(members))
        return self._by_label[label]

    def _usage_limits(self, requests: tuple[tuple[str, int], ...], tp: int) -> dict[int, int]:
        """Nodes where what is requested already leaves room for fewer such workers than their GPUs would
        take; caught up incrementally on the nodes whose usage changed since the last question."""
        view = self.view
        self._sync(view.state)
        key = (requests, tp)
        seen, limits = self._limits.get(key, (-1, {}))
        if seen == len(self._changed):
            return limits
        nodes = self._used.keys() if seen < 0 else set(self._changed[seen:])
        names, counts = view.topology.node_names, view.topology.node_gpu_count
        for n in nodes:
            used = self._used.get(n, {})
            info = view.nodes.get(names[n])
            limits.pop(n, None)
            if info is None or not any(used.get(name) for name, _ in requests):
                continue
            fit = _groups_fitting(
                requests, {name: info.allocatable.get(name, 0) - used.get(name, 0) for name, _ in requests}
            )
            if fit < counts[n] // tp:
                limits[n] = int(fit)
        self._limits[key] = (len(self._changed), limits)
        return limits


def _add(total: Usage, extra: Mapping[str, int], times: int) -> None:
    for name, amount in extra.items():
        total[name] = total.get(name, 0) + amount * times


def _describe(requests: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{name}={format_amount(name, amount)}" for name, amount in requests)
