"""Which nodes to warn about, decided from the nodes that changed since the last pass.

Every value of a Node the operator ignores or caps when it parses it (a malformed count, label or annotation,
allocatable GPUs above what GPU feature discovery counted or above the configured maximum: ``NodeInfo.warnings``)
is reported as a Warning event on the Node (reason ``MalformedLabel``), once per distinct set of warnings,
not on every status heartbeat.
What was reported is a value the pass takes in and hands back; only changed nodes are looked at, so a pass
with nothing changed costs nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from paralleljob.k8s.edge.parse.nodes import NodeInfo


@dataclass(frozen=True, slots=True)
class NodeEvent:
    node: str
    event_type: str
    reason: str
    message: str


def node_warnings(
    reported: Mapping[str, tuple[str, ...]], changed: Mapping[str, NodeInfo | None]
) -> tuple[Mapping[str, tuple[str, ...]], list[NodeEvent]]:
    """The warnings reported after this pass (node -> warnings) and the events to post for ``changed``
    (node name -> its parsed Node, None when it is gone)."""
    if not changed:
        return reported, []
    after = dict(reported)
    events: list[NodeEvent] = []
    for name, info in changed.items():
        warnings = info.warnings if info is not None else ()
        if after.get(name, ()) == warnings:
            continue
        if warnings:
            after[name] = warnings
            events.extend(NodeEvent(name, "Warning", "MalformedLabel", warning) for warning in warnings)
        else:
            after.pop(name, None)
    return after, events
