"""The seam between the agent and NVML: :class:`NvmlSource` is all the agent calls.
:class:`~paralleljob.agent.pynvml_source.PynvmlSource` implements it with ``nvidia-ml-py``, and
:class:`~paralleljob.agent.fake.FakeNvml` replays a script, so CI runs every path without a GPU.
"""

from __future__ import annotations

from typing import Protocol

from paralleljob.agent.model import NodeSample, XidEvent


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no NVIDIA driver or library, no devices visible, package missing)."""


class NvmlSource(Protocol):
    def open(self) -> None:
        """Initialise; :class:`NvmlUnavailable` when NVML cannot be used on this machine."""

    def close(self) -> None: ...

    def sample(self) -> NodeSample:
        """Read every GPU once. Never raises for a GPU's fault: that is what the sample reports."""
        ...

    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        """XIDs raised since the last call; waits up to ``timeout_s`` for the first (doubles as the poll sleep)."""
        ...
