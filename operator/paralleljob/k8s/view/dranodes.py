"""The nodes the kept cluster view reads when DRA is on: each node with a pool of the configured driver seen
through its ResourceSlice (``dra.overlay_node``), every other node as its Node object says.

The view (``liveview.py``) patches per changed node, so this source reports *which* nodes changed: a Node
written, or — when a slice or a claim changed — every node whose overlaid value differs from the one last
reported. DeviceTaintRules (``taintrules.py``) are read the same way: a rule created, changed or deleted
re-derives the pools and reports the nodes whose GPUs it taints or untaints. Slices, claims and rules change
when pools are republished, when gangs get their claims and when a GPU's health changes, not on every node
heartbeat, so re-deriving the DRA nodes then costs O(DRA nodes) at those moments only. A re-list of any of
the four stores makes the view start over, as a node re-list does.
"""

from __future__ import annotations

from paralleljob.k8s.edge.config import DraConfig
from paralleljob.k8s.edge.parse.dra import ClaimInfo, NodeGpus, SliceInfo, held_devices, node_gpus, overlay_node
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.taintrules import TaintRuleInfo, parse_taint_rule
from paralleljob.k8s.view.store import ObjectStore


class OverlaidNodes:
    """Reads like an ``ObjectStore[NodeInfo]`` (``values``, ``get``, ``take_changes``) for ``LiveView``."""

    def __init__(
        self,
        nodes: ObjectStore[NodeInfo],
        slices: ObjectStore[SliceInfo],
        claims: ObjectStore[ClaimInfo],
        config: DraConfig,
        default_memory_gib: float,
        rules: ObjectStore[TaintRuleInfo] | None = None,
    ) -> None:
        self.nodes = nodes
        self.slices = slices
        self.claims = claims
        self.rules: ObjectStore[TaintRuleInfo] = rules if rules is not None else ObjectStore(parse_taint_rule)
        self.config = config
        self.default_memory_gib = default_memory_gib
        self._pools: dict[str, NodeGpus] = {}
        self._held: dict[str, frozenset[str]] = {}
        self._current: dict[str, NodeInfo] = {}  # node name -> overlaid value, as last reported

    def _derive(self) -> None:
        self._pools = node_gpus(self.slices.values(), self.config.driver, self.rules.values())
        self._held = held_devices(self.claims.values(), self.config.driver)

    def _overlaid(self, node: NodeInfo) -> NodeInfo:
        gpus = self._pools.get(node.name)
        if gpus is None:
            return node
        held = self._held.get(gpus.pool, frozenset())
        return overlay_node(node, gpus, held, self.config, self.default_memory_gib)

    def values(self) -> list[NodeInfo]:
        """Every node now, derived afresh (a rebuild and the self-check read this)."""
        self._derive()
        out = [self._overlaid(node) for node in self.nodes.values()]
        self._current = {node.name: node for node in out}
        return out

    def get(self, namespace: str, name: str) -> NodeInfo | None:
        return self._current.get(name)

    def take_changes(self) -> tuple[list[tuple[str, str]], bool]:
        node_keys, nodes_relisted = self.nodes.take_changes()
        slice_keys, slices_relisted = self.slices.take_changes()
        claim_keys, claims_relisted = self.claims.take_changes()
        rule_keys, rules_relisted = self.rules.take_changes()
        if nodes_relisted or slices_relisted or claims_relisted or rules_relisted:
            return [], True
        written = {name for _, name in node_keys}
        names = set(written)
        if slice_keys or claim_keys or rule_keys:
            before = set(self._pools)
            self._derive()
            names |= before | set(self._pools)
        changed = []
        for name in sorted(names):
            raw = self.nodes.get("", name)
            new = self._overlaid(raw) if raw is not None else None
            if new is None:
                gone = self._current.pop(name, None)
                if gone is not None or name in written:
                    changed.append(("", name))
            elif self._current.get(name) != new or name in written:
                self._current[name] = new
                changed.append(("", name))
        return changed, False
