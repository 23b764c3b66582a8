"""What broke under a placed job, as the failure handlers hand it on: the failure's kind, the TP groups (or
trays) it hit, their nodes and pods, and the message people read. Found by each layout (``failures.detect``
on HGX nodes, ``kinds/trayrepair.broken_trays`` on NVL72 trays, ``draining.off_drained`` for a drain) and
carried out under the core's failure policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from paralleljob.core.failure.repair import FailureKind


@dataclass(frozen=True, slots=True)
class Breakage:
    kind: FailureKind
    slots: tuple[int, ...]  # affected TP groups
    nodes: tuple[str, ...]
    pods: tuple[str, ...]
    message: str

    @property
    def hardware(self) -> bool:
        return self.kind.hardware
