"""Which control-plane binaries the dev cluster runs, at which versions, and where their build lives.

The versions come from the committed wrapper Go modules in ``deploy/devcluster/<module>/go.mod``, so a
version bump there changes the cache directory name and the next ``build`` rebuilds instead of reusing
stale binaries. The name is made of every binary's name and version, so adding a binary changes it too.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from paralleljob.devcluster import kubeline

# operator/paralleljob/devcluster/versions.py -> the repository root is three levels above the package.
_REPO_ROOT = Path(__file__).resolve().parents[3]

_VERSION_PACKAGE = "k8s.io/component-base/version"
# The symbolic folder of the Kubernetes binaries: resolved per minor by module_path. Our own programs beside
# them (the fake device plugin, pause) are built from the default minor's folder whatever the minor: the
# device plugin API they speak is the same in every supported kubelet, so their sources live once.
KUBERNETES_MODULE = "kubernetes@minor"
OUR_PROGRAMS_MODULE = "kubernetes"


@dataclass(frozen=True)
class BinarySpec:
    """One binary: the wrapper module that pins it and the Go package that is its main, plus files of the
    pinned module (CRDs, webhook and RBAC manifests) installed beside the binary, so they always match it."""

    name: str
    module_dir: str
    package: str
    pinned_module: str
    module_files: tuple[str, ...] = ()


BINARIES: tuple[BinarySpec, ...] = (
    BinarySpec("etcd", "etcd", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/server/v3"),
    BinarySpec("kube-apiserver", KUBERNETES_MODULE, "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes"),
    BinarySpec(
        "kube-controller-manager",
        KUBERNETES_MODULE,
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes",
    ),
    BinarySpec("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", "sigs.k8s.io/kwok"),
)

# What the Kueue add-on copies out of its module: every CRD, the conversion-webhook patches its kustomization
# may name, and the roles its controller is bound to (the rest of config/components/rbac is for users).
_KUEUE_CRDS = (
    "admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs",
    "provisioningrequestconfigs", "resourceflavors", "topologies", "workloadpriorityclasses", "workloads",
)  # fmt: skip
_KUEUE_CONVERTED = ("clusterqueues", "cohorts", "localqueues", "multikueueclusters", "resourceflavors", "workloads")
_KUEUE_ROLES = ("role", "manager_secrets_role", "manager_clusterprofiles_role", "metrics_auth_role")

# Controllers a cluster runs only when asked (``up --controllers jobset``). Each is cached in a folder of its
# own, so adding one never invalidates the core binaries' folder, and ``up`` without it never builds it.
ADDONS: dict[str, BinarySpec] = {
    "jobset": BinarySpec(
        "jobset-controller-manager",
        "jobset",
        "sigs.k8s.io/jobset",
        "sigs.k8s.io/jobset",
        module_files=(
            "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
            "config/components/webhook/manifests.yaml",
            "config/components/webhook/patches/mutating-patch.yaml",
            "config/components/webhook/patches/validating-patch.yaml",
            "config/components/rbac/role.yaml",
            "config/components/rbac/auth_proxy_role.yaml",
        ),
    ),
    "kueue": BinarySpec(
        "kueue-controller-manager",
        "kueue",
        "sigs.k8s.io/kueue/cmd/kueue",
        "sigs.k8s.io/kueue",
        module_files=(
            *(f"config/components/crd/bases/kueue.x-k8s.io_{kind}.yaml" for kind in _KUEUE_CRDS),
            "config/components/crd/kustomization.yaml",
            *(f"config/components/crd/patches/webhook_in_{kind}.yaml" for kind in _KUEUE_CONVERTED),
            "config/components/webhook/manifests.yaml",
            "config/components/webhook/kustomization.yaml",
            "config/components/manager/controller_manager_config.yaml",
            *(f"config/components/rbac/{role}.yaml" for role in _KUEUE_ROLES),
        ),
    ),
}


# What a real (kubelet) node runs, built only when a cluster asks for real nodes: the kubelet from the same
# wrapper module as the API server, and two small programs of ours in that module (the fake GPU device
# plugin and the pod sandbox's pause process, since no image may be pulled from a registry).
NODE_BINARIES: tuple[BinarySpec, ...] = (
    BinarySpec("kubelet", KUBERNETES_MODULE, "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes"),
    BinarySpec("fakegpu", OUR_PROGRAMS_MODULE, "./fakegpu", "k8s.io/kubernetes"),
    BinarySpec("pause", OUR_PROGRAMS_MODULE, "./pause", "k8s.io/kubernetes"),
    # Pods that are not ParallelJob's (the chart's Deployment and DaemonSet) need the default scheduler.
    BinarySpec("kube-scheduler", KUBERNETES_MODULE, "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes"),
    # Service names for pods (MASTER_ADDR is a headless Service's pod name), from its own wrapper module.
    BinarySpec("coredns", "coredns", "./cmd", "github.com/coredns/coredns"),
)


# What a real node runs instead when its GPUs are DRA devices (``up --gpu-api dra --real-nodes N``): containerd
# 2.x from its own wrapper module, whose CRI plugin applies CDI specs (Debian 12's containerd 1.6 has no CDI),
# with its runc shim and ctr of the same version, and our DRA kubelet plugin (deploy/devcluster/fakedra).
_CONTAINERD = "github.com/containerd/containerd/v2"
DRA_NODE_BINARIES: tuple[BinarySpec, ...] = (
    BinarySpec("containerd", "containerd", f"{_CONTAINERD}/cmd/containerd", _CONTAINERD),
    BinarySpec("containerd-shim-runc-v2", "containerd", f"{_CONTAINERD}/cmd/containerd-shim-runc-v2", _CONTAINERD),
    BinarySpec("ctr", "containerd", f"{_CONTAINERD}/cmd/ctr", _CONTAINERD),
    BinarySpec("fakedra", "fakedra", ".", "k8s.io/dynamic-resource-allocation"),
)


def repo_root() -> Path:
    return _REPO_ROOT


def deploy_dir() -> Path:
    """The folder holding the wrapper modules and kwok stages (overridable for unusual installs)."""
    override = os.environ.get("PARALLELJOB_DEVCLUSTER_DEPLOY")
    return Path(override) if override else _REPO_ROOT / "deploy" / "devcluster"


def cache_root() -> Path:
    """``~/.cache/paralleljob`` (honouring XDG_CACHE_HOME, or PARALLELJOB_CACHE for tests)."""
    override = os.environ.get("PARALLELJOB_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "paralleljob"


def module_path(spec: BinarySpec) -> Path:
    """The wrapper module that builds ``spec``: the Kubernetes binaries' follows the chosen minor
    (:mod:`paralleljob.devcluster.kubeline`), every other is the folder it names."""
    name = kubeline.selected().module_dir if spec.module_dir == KUBERNETES_MODULE else spec.module_dir
    return deploy_dir() / name


def go_toolchain(spec: BinarySpec) -> str:
    """GOTOOLCHAIN for building ``spec``: the minor's own where its module needs a newer Go than the machine's
    (1.38: go1.27.3, which the go command takes from the module proxy), else ``local`` (never fetch one), so
    the default minor and everything else keep the machine's Go."""
    chosen = kubeline.selected().go_toolchain
    return chosen if spec.module_dir == KUBERNETES_MODULE and chosen else "local"


def pinned_version(module_dir: Path, module: str) -> str:
    """The version of ``module`` required by the go.mod in ``module_dir``."""
    go_mod = module_dir / "go.mod"
    if not go_mod.is_file():
        raise RuntimeError(
            f"{go_mod} not found: the dev cluster builds from a source checkout (or set PARALLELJOB_DEVCLUSTER_DEPLOY)"
        )
    text = go_mod.read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if not match:
        raise RuntimeError(f"{go_mod} does not require {module}")
    return match.group(1)


def versions() -> dict[str, str]:
    """Binary name -> pinned version, e.g. ``{"kube-apiserver": "v1.36.4", ...}``."""
    return {spec.name: pinned_version(module_path(spec), spec.pinned_module) for spec in BINARIES}


def binaries_dir(pins: dict[str, str] | None = None) -> Path:
    """``<cache>/k8s/<versions>/``: one folder per combination of versions, so bumps rebuild."""
    pins = pins if pins is not None else versions()
    key = "_".join(f"{name}-{pins[name]}" for name in sorted(pins))
    return cache_root() / "k8s" / key


def node_binaries_dir() -> Path:
    """``<cache>/k8s/realnode-<kubelet version>-<sources hash>/``: our own programs' sources and the module's
    go.sum are part of the key, so editing the device plugin rebuilds it."""
    module = deploy_dir() / kubeline.selected().module_dir
    ours = deploy_dir() / OUR_PROGRAMS_MODULE
    digest = hashlib.sha256()
    sources = [module / "go.sum", *ours.glob("fakegpu/*.go"), *ours.glob("pause/*.go")]
    coredns = deploy_dir() / "coredns"
    for source in sorted([*sources, coredns / "go.sum", *coredns.glob("cmd/*.go")]):
        digest.update(str(source.relative_to(deploy_dir())).encode() + b"\0" + source.read_bytes())
    kubelet = pinned_version(module, "k8s.io/kubernetes")
    return cache_root() / "k8s" / f"realnode-{kubelet}-{digest.hexdigest()[:12]}"


def dra_node_binaries_dir() -> Path:
    """``<cache>/k8s/dranode-<containerd version>-<sources hash>/``: both modules' go.sum and the plugin's
    sources are part of the key, so a bump or an edit of the plugin rebuilds."""
    root = deploy_dir()
    digest = hashlib.sha256()
    sources = [root / "containerd" / "go.sum", root / "fakedra" / "go.sum", *(root / "fakedra").glob("*.go")]
    for source in sorted(sources):
        digest.update(str(source.relative_to(root)).encode() + b"\0" + source.read_bytes())
    containerd = pinned_version(root / "containerd", _CONTAINERD)
    return cache_root() / "k8s" / f"dranode-{containerd}-{digest.hexdigest()[:12]}"


def addon_version(addon: str) -> str:
    spec = ADDONS[addon]
    return pinned_version(module_path(spec), spec.pinned_module)


def addon_dir(addon: str, version: str | None = None) -> Path:
    """``<cache>/k8s/<addon binary>-<version>/``: the binary and the manifests from the same module."""
    return cache_root() / "k8s" / f"{ADDONS[addon].name}-{version or addon_version(addon)}"


def ldflags(spec: BinarySpec, version: str) -> str:
    """Linker flags: strip symbols, and stamp Kubernetes binaries so `kubectl version` reports sanely."""
    flags = ["-s", "-w"]
    if spec.pinned_module == "k8s.io/kubernetes":
        major, minor = version.lstrip("v").split(".")[:2]
        stamps = {
            "gitVersion": version,
            "gitMajor": major,
            "gitMinor": minor,
            "gitTreeState": "clean",
        }
        flags += [f"-X {_VERSION_PACKAGE}.{key}={value}" for key, value in stamps.items()]
    elif spec.pinned_module == "sigs.k8s.io/jobset":
        flags.append(f"-X sigs.k8s.io/jobset/pkg/version.GitVersion={version}")  # as JobSet's Makefile does
    elif spec.pinned_module == "sigs.k8s.io/kueue":
        flags.append(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={version}")  # as Kueue's Makefile does
    return " ".join(flags)
