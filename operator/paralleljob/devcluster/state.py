"""The run directory of one named dev cluster and its ``state.json`` record.

``up`` writes the record as soon as it starts a process, so that even a half-started cluster can be torn
down by ``down``; ``status`` and ``kubeconfig`` read it. Layout of ``<cache>/run/<name>/``::

    state.json        PIDs, ports, paths
    kubeconfig        admin kubeconfig (bearer token)
    kube-controller-manager.kubeconfig   the controller manager's own credentials
    pki/              CA, serving certificates, service-account keys, token file
    etcd-data/        etcd's data directory
    kwok/             kwok's stage configuration and HOME
    logs/<proc>.log   one log per process
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from paralleljob.devcluster.versions import cache_root


@dataclass
class ProcessRecord:
    """A started process, identified by PID *and* start time so a recycled PID is never signalled."""

    name: str
    pid: int
    start_ticks: int
    log: str


@dataclass
class ClusterRecord:
    name: str
    run_dir: str
    kubeconfig: str = ""
    server: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    real_nodes: list[str] = field(default_factory=list)  # kubelet nodes (paralleljob.devcluster.realnodes)
    shape: dict[str, Any] = field(default_factory=dict)  # the NodeShape the nodes were made from
    versions: dict[str, str] = field(default_factory=dict)
    owner_pid: int = 0  # the process that ran `up` (lets the test fixture find runs it abandoned)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ClusterRecord:
        raw_processes = data.pop("processes", [])
        assert isinstance(raw_processes, list)
        # A cluster started by another version of this tool may record more: what this one does not know
        # is left alone (the processes it lists are still what `down` and the reaper act on).
        known = {f.name for f in fields(cls)}
        state = cls(**{k: v for k, v in data.items() if k in known})  # type: ignore[arg-type]
        state.processes = [ProcessRecord(**item) for item in raw_processes]
        return state


def runs_root() -> Path:
    return cache_root() / "run"


def run_dir(name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad dev-cluster name {name!r}")
    return runs_root() / name


def state_path(name: str) -> Path:
    return run_dir(name) / "state.json"


def save(state: ClusterRecord) -> None:
    """Write atomically: a reader never sees half a record."""
    path = Path(state.run_dir) / "state.json"
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(asdict(state), indent=2) + "\n")
    os.replace(temporary, path)


def load(name: str) -> ClusterRecord | None:
    path = state_path(name)
    if not path.is_file():
        return None
    return ClusterRecord.from_json(json.loads(path.read_text()))


def known_names() -> list[str]:
    root = runs_root()
    if not root.is_dir():
        return []
    return sorted(entry.name for entry in root.iterdir() if (entry / "state.json").is_file())
