"""Which Kubernetes minor the dev cluster runs: 1.37 by default, 1.36 or the 1.38 beta on request.

Each supported minor is a wrapper Go module of its own under ``deploy/devcluster/`` (``kubernetes`` pins the
default, ``kubernetes-1.36`` the older one, ``kubernetes-1.38`` the next) and a few facts that differ between
them, read from each release's k8s.io/kubernetes (pkg/features/kube_features.go, pkg/scheduler) and k8s.io/api
(scheduling):

- the gang API (Workload, PodGroup) is ``scheduling.k8s.io/v1alpha2`` in 1.36 and ``v1beta1`` in 1.37; as a
  beta API of a beta gate it is still served only when asked for, in both;
- 1.36 has a ``GangScheduling`` gate; 1.37 folds it into ``GenericWorkload`` (beta, off by default), and a
  gate the binary does not know stops it at start, so each minor gets its own list;
- DeviceTaintRules are ``resource.k8s.io/v1beta2`` behind ``DRADeviceTaintRules`` in 1.36 and GA in 1.37
  (``resource.k8s.io/v1``); the dev cluster serves v1beta2 as well in both, so clients of either version
  find them, and the operator and agent ask the server which it serves;
- 1.38 (v1.38.0-beta.0, the newest the Go module proxy serves) keeps the gang API at ``v1beta1`` (its
  ``scheduling/v1`` has only PriorityClass and the Job's scheduling types) and makes ``CompositePodGroup`` and
  ``TopologyAwareWorkloadScheduling`` beta, both still off by default: the CompositePodGroup gate serves
  ``compositepodgroups`` and a PodGroup's ``parentCompositePodGroupName``, and gives kube-scheduler its
  composite cycle. Its module needs Go 1.27 (``go_toolchain``), and its kubelet cannot be built here (it needs
  ``sigs.k8s.io/iptables-wrappers``, which the module proxy does not serve), so it has no real nodes.

The choice travels in ``PARALLELJOB_KUBERNETES`` (``dev-cluster build/up --kubernetes`` sets it), so the
binaries' cache folder, the processes ``up`` starts and the e2e tests that spawn a cluster all agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = "PARALLELJOB_KUBERNETES"


@dataclass(frozen=True)
class KubernetesLine:
    """One supported Kubernetes minor: where its binaries are pinned and what its control plane needs."""

    minor: str  # "1.37"
    module_dir: str  # the wrapper module under deploy/devcluster pinning k8s.io/kubernetes at this minor
    gang_api_version: str  # scheduling.k8s.io's Workload/PodGroup version
    gang_gates: tuple[str, ...]  # control-plane gates for the gang API and the Job controller's Workloads
    scheduler_gates: tuple[str, ...]  # kube-scheduler's gates for gang and topology-aware workload scheduling
    go_toolchain: str = ""  # GOTOOLCHAIN for its module's builds when it needs a newer Go than the machine's
    composite_groups: bool = False  # CompositePodGroups served at gang_api_version (the operator reads them)
    kubelet: bool = True  # a kubelet can be built from its module (real nodes)

    @property
    def gates_flag(self) -> str:
        return ",".join(f"{gate}=true" for gate in self.gang_gates)

    @property
    def scheduler_gates_flag(self) -> str:
        return ",".join(f"{gate}=true" for gate in self.scheduler_gates)


LINES: dict[str, KubernetesLine] = {
    "1.37": KubernetesLine(
        "1.37",
        "kubernetes",
        "v1beta1",
        ("GenericWorkload", "TopologyAwareWorkloadScheduling", "WorkloadWithJob"),
        ("GenericWorkload", "TopologyAwareWorkloadScheduling"),
    ),
    "1.36": KubernetesLine(
        "1.36",
        "kubernetes-1.36",
        "v1alpha2",
        ("GenericWorkload", "GangScheduling", "TopologyAwareWorkloadScheduling", "WorkloadWithJob"),
        ("GenericWorkload", "GangScheduling", "TopologyAwareWorkloadScheduling"),
    ),
    "1.38": KubernetesLine(
        "1.38",
        "kubernetes-1.38",
        "v1beta1",
        ("GenericWorkload", "TopologyAwareWorkloadScheduling", "WorkloadWithJob", "CompositePodGroup"),
        ("GenericWorkload", "TopologyAwareWorkloadScheduling", "CompositePodGroup"),
        go_toolchain="go1.27.3",
        composite_groups=True,
        kubelet=False,
    ),
}
DEFAULT = "1.37"


class UnsupportedKubernetes(ValueError):
    """A minor the dev cluster has no wrapper module for."""


def line(minor: str) -> KubernetesLine:
    try:
        return LINES[minor.removeprefix("v")]
    except KeyError:
        supported = ", ".join(sorted(LINES))
        raise UnsupportedKubernetes(f"Kubernetes {minor} is not supported by the dev cluster ({supported})") from None


def selected() -> KubernetesLine:
    """The minor this process (and the clusters it starts) runs: ``PARALLELJOB_KUBERNETES``, else the default."""
    return line(os.environ.get(ENV) or DEFAULT)


def select(minor: str) -> KubernetesLine:
    """Choose ``minor`` for this process and its children (checked first)."""
    chosen = line(minor)
    os.environ[ENV] = chosen.minor
    return chosen
