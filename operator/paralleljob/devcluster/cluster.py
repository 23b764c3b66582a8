"""Bring a named dev cluster up and down.

``up`` builds missing binaries, starts etcd, kube-apiserver and kwok on free loopback ports, writes the
kubeconfig, installs the CRDs, starts kube-controller-manager (after the CRDs, so its garbage collector
watches ParallelJobs from its first discovery), creates the fake GPU nodes and returns once they are Ready
and the controller manager is healthy; with ``controllers=("jobset",)`` it then starts JobSet's controller
manager too (``paralleljob.devcluster.jobset``), with ``"kueue"`` Kueue's (``paralleljob.devcluster.kueue``)
and a kube-scheduler to bind what Kueue admits. Every process is recorded in ``state.json`` the moment it starts,
and a failure or Ctrl-C part-way tears down what was started, so nothing is left running behind an error.
``down`` stops the recorded processes by PID and removes the run directory.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paralleljob.devcluster import (
    controllermanager,
    controlplane,
    crds,
    dra,
    gangapi,
    jobset,
    kubeline,
    kueue,
    kwok,
    nodecleanup,
    nvl72,
    process,
    realnodes,
    state,
)
from paralleljob.devcluster.build import ensure_addon, ensure_binaries, ensure_dra_node_binaries, ensure_node_binaries
from paralleljob.devcluster.certs import JOBSET_USER, KUEUE_USER, OPERATOR_USER, Pki, write_pki
from paralleljob.devcluster.kubeconfig import api_client, write_kubeconfig
from paralleljob.devcluster.nodes import NodeShape, create_gpu_nodes, wait_nodes_ready
from paralleljob.devcluster.versions import ADDONS, versions
from paralleljob.devtools.kubescheduler import ensure_kube_scheduler

Report = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class AlreadyRunning(RuntimeError):
    pass


# The kubeconfig of OPERATOR_USER, written for every cluster (cheap); a benchmark binds the user a role.
OPERATOR_KUBECONFIG_NAME = "paralleljob-operator.kubeconfig"


@dataclass(frozen=True)
class DevCluster:
    """A running dev cluster, as callers (the CLI, the e2e fixture, the demo) need it."""

    name: str
    kubeconfig: Path
    server: str
    run_dir: Path
    nodes: tuple[str, ...] = field(default_factory=tuple)
    shape: NodeShape = field(default_factory=NodeShape)
    real_nodes: tuple[str, ...] = field(default_factory=tuple)  # kubelet nodes (``up --real-nodes``)

    def log_path(self, process_name: str) -> Path:
        return self.run_dir / "logs" / f"{process_name}.log"

    @property
    def operator_kubeconfig(self) -> Path:
        """Credentials of ``OPERATOR_USER``, who can do nothing until a role is bound to it."""
        return self.run_dir / OPERATOR_KUBECONFIG_NAME


def is_running(record: state.ClusterRecord) -> bool:
    return bool(record.processes) and all(process.is_alive(p) for p in record.processes)


def apiserver_args_from_env() -> tuple[str, ...]:
    """More kube-apiserver flags from ``PARALLELJOB_APISERVER_ARGS`` (shell words; they come last, so they
    win over the defaults): a developer's knob, e.g. ``--profiling=true`` to read the API server's pprof."""
    return tuple(shlex.split(os.environ.get("PARALLELJOB_APISERVER_ARGS", "")))


def up(
    name: str = "default",
    shape: NodeShape | None = None,
    report: Report = _stderr,
    die_with_caller: bool = False,
    controllers: tuple[str, ...] = (),
    gang_api: bool = False,
    kube_scheduler: bool = False,
    real_nodes: int = 0,
    real_node_gpus: int = 8,
    nvl72_racks: int = 0,
    kueue_qps: int = 0,
    pod_gc_threshold: int = 0,
) -> DevCluster:
    """Start the cluster; ``die_with_caller`` makes its processes die with this Python process (tests);
    ``controllers`` names optional controllers to run as well (``ADDONS``: ``jobset``, ``kueue``; Kueue brings
    a stock kube-scheduler, no alpha gates, unless ``kube_scheduler`` asks for the gated one); ``gang_api`` serves
    Kubernetes' own Workload/PodGroup API with its gates on (``gangapi.py``), and ``kube_scheduler`` (which
    implies it) also runs kube-scheduler of the same version with the gang and topology gates on;
    ``real_nodes`` kubelet nodes join beside the kwok ones (:mod:`paralleljob.devcluster.realnodes`), each
    with ``real_node_gpus`` fake GPUs from our device plugin, or from our DRA kubelet plugin through containerd
    2.x and CDI when the shape's ``gpu_api`` is ``dra`` (:mod:`paralleljob.devcluster.dranode`), and a
    kube-scheduler of their own unless the gang-gated one runs; ``nvl72_racks`` GB200 NVL72 racks of 18 trays
    join as well, with the ComputeDomain CRD and a stand-in for its controller (:mod:`paralleljob.devcluster.nvl72`);
    ``kueue_qps`` > 0 sets Kueue's API client limit (QPS, burst twice that) instead of its shipped 50/100;
    ``pod_gc_threshold`` > 0 runs kube-controller-manager's pod GC, keeping that many terminated pods."""
    gang_api = gang_api or kube_scheduler
    shape = shape or NodeShape()
    unknown = sorted(set(controllers) - set(ADDONS))
    if unknown:
        raise ValueError(f"unknown controllers {', '.join(unknown)} (known: {', '.join(sorted(ADDONS))})")
    if "kueue" in controllers:
        kueue.require_root()  # before anything is built or started
    if real_nodes and not kubeline.selected().kubelet:
        minor = kubeline.selected().minor
        raise ValueError(f"Kubernetes {minor} has no kubelet here (docs/devcluster.md): real nodes need 1.36 or 1.37")
    existing = state.load(name)
    if existing is not None:
        if is_running(existing):
            raise AlreadyRunning(f"dev cluster {name!r} is already running (kubeconfig {existing.kubeconfig})")
        down(name, report=lambda _: None)  # leftovers of a crashed run
    dra_mode = shape.gpu_api == "dra"
    binaries = ensure_binaries(report)
    # Built before anything starts, so that a long build is not startup time.
    addon_folders = {addon: ensure_addon(addon, report) for addon in controllers}
    scheduler_binary = ensure_kube_scheduler(report) if kube_scheduler or "kueue" in controllers else None
    if real_nodes:
        ensure_node_binaries(report)
        if dra_mode:  # containerd 2.x and the DRA plugin (devcluster/dranode.py)
            ensure_dra_node_binaries(report)
    started = time.monotonic()
    run_dir = state.run_dir(name)
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "logs").mkdir(parents=True)
    record = state.ClusterRecord(name=name, run_dir=str(run_dir), versions=versions(), owner_pid=os.getpid())
    state.save(record)
    try:
        etcd_port, etcd_peer_port, api_port, kcm_port = process.free_loopback_ports(4)
        record.ports = {
            "etcd": etcd_port, "etcd-peer": etcd_peer_port, "kube-apiserver": api_port,
            "kube-controller-manager": kcm_port,
        }  # fmt: skip
        pki = write_pki(run_dir / "pki")
        addon_crds = [
            d for a, f in addon_folders.items() if a != "kueue" for d in crds.crd_documents(jobset.crd_dir(f))
        ]
        if "kueue" in addon_folders:  # its CRDs name its webhook port (conversion): chosen now, used by start_kueue
            record.ports.update(kueue.allocate_ports())
            addon_crds += kueue.crd_documents(
                addon_folders["kueue"], record.ports["kueue-webhook"], pki.ca_cert.read_bytes()
            )

        etcd = controlplane.start_etcd(binaries["etcd"], run_dir, etcd_port, etcd_peer_port, die_with_caller)
        _remember(record, etcd)
        controlplane.wait_etcd(etcd, etcd_port)

        server = f"https://127.0.0.1:{api_port}"
        apiserver = controlplane.start_apiserver(
            binaries["kube-apiserver"],
            run_dir,
            pki,
            api_port,
            etcd_port,
            die_with_caller,
            (
                *(dra.APISERVER_ARGS if dra_mode else ()),
                *(gangapi.apiserver_args(kubeline.selected()) if gang_api else ()),
                *apiserver_args_from_env(),
            ),
            service_account_admission=bool(real_nodes),
        )
        _remember(record, apiserver)
        controlplane.wait_apiserver(apiserver, server, pki)
        report(f"kube-apiserver ready at {server} ({time.monotonic() - started:.1f} s)")

        kubeconfig = run_dir / "kubeconfig"
        write_kubeconfig(kubeconfig, server, pki.ca_cert, pki.admin_token, f"paralleljob-{name}")
        record.kubeconfig, record.server = str(kubeconfig), server
        # Written for every cluster (cheap): JobSet may be started on it later (jobset.start_jobset).
        write_kubeconfig(
            run_dir / jobset.KUBECONFIG_NAME, server, pki.ca_cert, pki.jobset_token, f"paralleljob-{name}",
            user=JOBSET_USER,
        )  # fmt: skip
        write_kubeconfig(
            run_dir / kueue.KUBECONFIG_NAME, server, pki.ca_cert, pki.kueue_token, f"paralleljob-{name}",
            user=KUEUE_USER,
        )  # fmt: skip
        write_kubeconfig(
            run_dir / OPERATOR_KUBECONFIG_NAME, server, pki.ca_cert, pki.operator_token, f"paralleljob-{name}",
            user=OPERATOR_USER,
        )  # fmt: skip
        _remember(record, kwok.start_kwok(binaries["kwok"], run_dir, kubeconfig, die_with_caller))

        def start_controller_manager() -> state.ProcessRecord:
            kcm_kubeconfig = _controller_manager_kubeconfig(run_dir, server, pki, name)
            kcm = controllermanager.start_controller_manager(
                binaries["kube-controller-manager"],
                run_dir,
                pki,
                kcm_kubeconfig,
                kcm_port,
                die_with_caller,
                (
                    *(dra.CONTROLLER_MANAGER_ARGS if dra_mode else ()),
                    *(gangapi.controller_manager_args(kubeline.selected()) if gang_api else ()),
                    *(realnodes.CONTROLLER_MANAGER_ARGS if real_nodes else ()),
                    *(controllermanager.pod_gc_args(pod_gc_threshold) if pod_gc_threshold > 0 else ()),
                    *((f"--root-ca-file={pki.ca_cert}",) if real_nodes else ()),  # kube-root-ca.crt in pods
                ),
            )
            _remember(record, kcm)
            return kcm

        installed, kcm = asyncio.run(
            _populate(kubeconfig, shape, record.processes, start_controller_manager, addon_crds, nvl72_racks)
        )
        controllermanager.wait_controller_manager(kcm, kcm_port, pki)
        record.nodes, record.shape = shape.names(), asdict(shape)
        state.save(record)
        if real_nodes:
            record.real_nodes = realnodes.start(
                name, run_dir, pki, api_port, kubeconfig, real_nodes, real_node_gpus, shape,
                lambda proc: _remember(record, proc), report, die_with_caller,
                own_scheduler=scheduler_binary is None, dra=dra_mode,
            )  # fmt: skip
            state.save(record)
        if nvl72_racks:
            controller = process.spawn(
                "computedomain-controller",
                [sys.executable, "-m", "paralleljob.devcluster.nvl72", "--kubeconfig", str(kubeconfig)],
                run_dir / "logs" / "computedomain-controller.log",
                die_with_parent=die_with_caller,
            )
            _remember(record, controller)
        if "jobset" in controllers:
            jobset.start_jobset(name, report, die_with_caller)
        if "kueue" in controllers:
            kueue.start_kueue(name, report, die_with_caller, client_qps=kueue_qps)
        # the add-ons recorded their processes and ports in the saved state: saving this copy as it was would
        # drop them, and `down` would leave them running
        record = state.load(name) or record
        if scheduler_binary is not None:
            gates = kubeline.selected().scheduler_gates_flag if kube_scheduler else ""
            _remember(record, gangapi.start_scheduler(scheduler_binary, run_dir, kubeconfig, die_with_caller, gates))
        crd_note = f", CRDs {', '.join(installed)}" if installed else ""
        api_note = f", GPUs as DRA devices ({dra.DRIVER})" if dra_mode else ""
        api_note += f", gang API (scheduling.k8s.io/{kubeline.selected().gang_api_version})" if gang_api else ""
        api_note += ", kube-scheduler with gang + topology gates" if kube_scheduler else ""
        api_note += ", stock kube-scheduler" if scheduler_binary is not None and not kube_scheduler else ""
        api_note += f", {nvl72_racks} NVL72 racks ({nvl72_racks * 18} trays)" if nvl72_racks else ""
        report(
            f"dev cluster {name!r} up with {shape.count} GPU nodes{crd_note}{api_note}"
            f" ({time.monotonic() - started:.1f} s)"
        )
    except BaseException as exc:
        # A StartupError already carries the failing log's tail; otherwise show any process that died.
        for proc in record.processes if not isinstance(exc, controlplane.StartupError) else []:
            if not process.is_alive(proc):
                report(f"{proc.name} exited; last lines of {proc.log}:\n{process.tail(proc.log)}")
        down(name, report=lambda _: None)
        raise
    return DevCluster(name, kubeconfig, server, run_dir, tuple(record.nodes), shape, tuple(record.real_nodes))


def _remember(record: state.ClusterRecord, proc: state.ProcessRecord) -> None:
    record.processes.append(proc)
    state.save(record)


def _controller_manager_kubeconfig(run_dir: Path, server: str, pki: Pki, name: str) -> Path:
    """Its own credentials (user system:kube-controller-manager), not the admin's superuser token."""
    path = run_dir / "kube-controller-manager.kubeconfig"
    write_kubeconfig(
        path, server, pki.ca_cert, pki.controller_manager_token, f"paralleljob-{name}", user="kube-controller-manager"
    )
    return path


async def _populate(
    kubeconfig: Path,
    shape: NodeShape,
    processes: list[state.ProcessRecord],
    after_crds: Callable[[], state.ProcessRecord],
    extra_crds: list[dict[str, Any]],
    nvl72_racks: int = 0,
) -> tuple[list[str], state.ProcessRecord]:
    """Install CRDs (the project's and ``extra_crds``, e.g. JobSet's), call ``after_crds`` and create
    the nodes; fail fast if a process dies meanwhile (a bad kwok stage, say). The process ``after_crds``
    starts is watched from then on too. Installing an add-on's CRD before kube-controller-manager starts
    matters: its garbage collector discovers resources added later only at its 30 s resync, so until then
    deleting a JobSet would not delete its Jobs."""

    async def work() -> tuple[list[str], state.ProcessRecord]:
        async with api_client(kubeconfig) as api:
            installed = await crds.install_crds(api)
            if extra_crds:
                installed += await crds.install_documents(api, extra_crds)
            if nvl72_racks:
                await nvl72.install(api, shape.gpu_api == "dra")
                installed.append("computedomains.resource.nvidia.com")
            started = after_crds()
            if shape.gpu_api == "dra":
                await dra.publish_device_class(api)
            names = await create_gpu_nodes(api, shape)
            await wait_nodes_ready(api, names)
            if nvl72_racks:
                await nvl72.add_racks(api, nvl72_racks, shape.gpu_api)
        return installed, started

    worker = asyncio.create_task(work())
    watcher = asyncio.create_task(controlplane.watch_processes(processes))
    try:
        await asyncio.wait({worker, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            watcher.result()  # raises the StartupError
        return await worker
    finally:
        for task in (worker, watcher):
            task.cancel()
        await asyncio.gather(worker, watcher, return_exceptions=True)


def down(name: str = "default", report: Report = _stderr) -> bool:
    """Stop every process the named cluster started (newest first) and remove its run directory."""
    record = state.load(name)
    if record is None:
        return False
    for proc in reversed(record.processes):
        process.stop(proc)
    nodecleanup.cleanup(name, Path(record.run_dir))  # containers, mounts, cgroups, namespaces, host files
    shutil.rmtree(record.run_dir, ignore_errors=True)
    report(f"dev cluster {name!r} stopped ({len(record.processes)} processes)")
    return True


def get(name: str = "default") -> DevCluster | None:
    record = state.load(name)
    if record is None or not record.kubeconfig:
        return None
    shape = NodeShape(**record.shape) if record.shape else NodeShape(count=len(record.nodes))
    return DevCluster(
        name, Path(record.kubeconfig), record.server, Path(record.run_dir), tuple(record.nodes), shape,
        tuple(record.real_nodes),
    )  # fmt: skip


def reap_abandoned(prefix: str, report: Report = _stderr) -> list[str]:
    """Tear down clusters named ``prefix*`` whose owner process is gone (e.g. a killed test session)."""
    reaped = []
    for name in state.known_names():
        if not name.startswith(prefix):
            continue  # not ours to reap, nor to read: another checkout's newer state file need not parse here
        record = state.load(name)
        if record and not _pid_exists(record.owner_pid):
            down(name, report)
            reaped.append(name)
    return reaped


def _pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
