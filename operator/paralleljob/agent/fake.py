"""A scripted NVML for CI and demos: :class:`FakeNvml` replays XIDs and changes to the GPU readings from a
YAML or JSON script, poll by poll, so every path of the agent runs without a GPU.

Script (polls count from 0; a step applies just before its poll is sampled; ``set`` changes persist)::

    gpus: 8                       # GPUs on the fake node
    defaults: {temperature_c: 40} # starting readings of every GPU (any GpuSample field)
    steps:
      - {poll: 2, gpu: 3, xid: 79, set: {lost: true}}
      - {poll: 9, gpu: 3, set: {lost: false}}

A bad script is refused with the path of the bad entry, before anything runs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from paralleljob.agent.model import GpuSample, NodeSample, XidEvent

SETTABLE = tuple(f.name for f in dataclasses.fields(GpuSample) if f.name != "index")
_TYPES: dict[str, tuple[type, ...]] = {
    name: (bool,)
    if name in ("lost", "ecc_enabled", "retired_pages_pending", "remap_pending", "remap_failed")
    else (str,)
    if name in ("uuid", "name", "error")
    else (int,)
    if name.startswith(("ecc_", "retired_", "remapped_", "nvlinks_"))
    else (int, float)
    for name in SETTABLE
}


class ScriptError(ValueError):
    """The fake-NVML script is malformed; the message names the entry to fix."""


@dataclass(frozen=True, slots=True)
class Step:
    poll: int
    gpu: int
    xid: int | None = None
    set: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FakeScript:
    gpus: int
    defaults: Mapping[str, Any]
    steps: tuple[Step, ...]


def _fields(data: object, where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ScriptError(f"{where}: expected a mapping of GPU readings")
    for key, value in data.items():
        if key not in _TYPES:
            raise ScriptError(f"{where}.{key}: unknown reading (known: {', '.join(SETTABLE)})")
        types = _TYPES[key]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if not ok and not (value is None and key not in ("lost", "uuid", "name", "error")):
            raise ScriptError(f"{where}.{key}: expected {' or '.join(t.__name__ for t in types)}, got {value!r}")
    return dict(data)


def _int(data: Mapping[str, Any], key: str, where: str, low: int = 0) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ScriptError(f"{where}.{key}: expected an integer >= {low}, got {value!r}")
    return value


def parse_script(data: object) -> FakeScript:
    if not isinstance(data, Mapping):
        raise ScriptError("script: expected a mapping with gpus, defaults, steps")
    unknown = set(data) - {"gpus", "defaults", "steps"}
    if unknown:
        raise ScriptError(f"script: unknown keys {sorted(unknown)} (known: gpus, defaults, steps)")
    gpus = _int(data, "gpus", "script", low=1)
    defaults = _fields(data.get("defaults") or {}, "defaults")
    raw_steps = data.get("steps") or []
    if not isinstance(raw_steps, list):
        raise ScriptError("steps: expected a list")
    steps = []
    for i, item in enumerate(raw_steps):
        where = f"steps[{i}]"
        if not isinstance(item, Mapping):
            raise ScriptError(f"{where}: expected a mapping with poll, gpu, and xid and/or set")
        unknown = set(item) - {"poll", "gpu", "xid", "set"}
        if unknown:
            raise ScriptError(f"{where}: unknown keys {sorted(unknown)} (known: poll, gpu, xid, set)")
        gpu = _int(item, "gpu", where)
        if gpu >= gpus:
            raise ScriptError(f"{where}.gpu: {gpu} but the script has only {gpus} GPUs")
        xid = _int(item, "xid", where, low=1) if "xid" in item else None
        changes = _fields(item.get("set") or {}, f"{where}.set")
        if xid is None and not changes:
            raise ScriptError(f"{where}: needs an xid or a set")
        steps.append(Step(_int(item, "poll", where), gpu, xid, changes))
    return FakeScript(gpus, defaults, tuple(sorted(steps, key=lambda s: s.poll)))


def load_script(path: Path) -> FakeScript:
    import yaml  # JSON is YAML too

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ScriptError(f"{path}: {exc}") from None
    try:
        return parse_script(data)
    except ScriptError as exc:
        raise ScriptError(f"{path}: {exc}") from None


class FakeNvml:
    """Implements :class:`~paralleljob.agent.nvml.NvmlSource` from a :class:`FakeScript`."""

    def __init__(self, script: FakeScript, sleep: Callable[[float], None] = time.sleep) -> None:
        self.script = script
        self.sleep = sleep
        self.poll = 0  # the poll the next sample() belongs to
        self.opened = False
        base: dict[str, Any] = {
            "temperature_c": 40.0,
            "power_w": 120.0,
            "utilization_pct": 0.0,
            "memory_utilization_pct": 0.0,
        }
        base.update(script.defaults)
        self.gpus = [
            replace(GpuSample(index=i, uuid=f"GPU-fake-{i:04d}", name="Fake NVML GPU"), **base)
            for i in range(script.gpus)
        ]
        self._applied = 0  # steps whose ``set`` is applied
        self._delivered = 0  # steps whose XID is delivered

    def open(self) -> None:
        self.opened = True

    def close(self) -> None:
        self.opened = False

    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        steps = self.script.steps
        due = []
        while self._delivered < len(steps) and steps[self._delivered].poll <= self.poll:
            step = steps[self._delivered]
            if step.xid is not None:
                due.append(XidEvent(step.gpu, step.xid))
            self._delivered += 1
        if not due:
            self.sleep(timeout_s)  # as the real event wait does when nothing happens
        return due

    def sample(self) -> NodeSample:
        steps = self.script.steps
        while self._applied < len(steps) and steps[self._applied].poll <= self.poll:
            step = steps[self._applied]
            if step.set:
                self.gpus[step.gpu] = replace(self.gpus[step.gpu], **step.set)
            self._applied += 1
        self.poll += 1
        return NodeSample(tuple(self.gpus), driver_version="fake", nvml_version="fake")
