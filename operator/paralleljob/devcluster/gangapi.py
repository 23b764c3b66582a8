"""Kubernetes' own gang scheduling in the dev cluster (``up --gang-api``, ``up --kube-scheduler``).

What a control plane needs for ``scheduling.k8s.io`` Workloads and PodGroups (facts read from
k8s.io/kubernetes v1.36.4 and v1.37.2: pkg/features/kube_features.go,
pkg/scheduler/apis/config/v1/default_plugins.go, pkg/controller/job/job_scheduling_manager.go); what differs
per minor (API version, gate names) is in :mod:`paralleljob.devcluster.kubeline`:

- kube-apiserver serves the gang API (``v1alpha2`` in 1.36, ``v1beta1`` in 1.37) only when asked
  (``--runtime-config``), and keeps ``pod.spec.schedulingGroup`` and ``PodGroup.spec.schedulingConstraints``
  only with their gates on: ``GenericWorkload`` (alpha in 1.35, beta but off in 1.37; it also carries gang
  scheduling in 1.37, where 1.36 had a ``GangScheduling`` gate of its own),
  ``TopologyAwareWorkloadScheduling`` (alpha 1.36); ``WorkloadWithJob`` (alpha 1.36) lets the Job
  controller's RBAC and API writes through.
- kube-controller-manager with ``WorkloadWithJob`` makes a Workload and a PodGroup (gang, minCount =
  parallelism) for every Indexed Job with parallelism = completions > 1, and stamps its pods'
  ``spec.schedulingGroup``; the PodGroup protection controller, started by name, takes a deleted PodGroup's
  finalizer off.
- kube-scheduler with the gang gate(s) and ``TopologyAwareWorkloadScheduling`` adds the GangScheduling,
  TopologyPlacementGenerator and PodGroupPodsCount plugins to its default profile: a PodGroup's pods wait
  until ``minCount`` exist, are placed in one cycle, and with a topology key inside one domain of that label.
  It reports a cycle as the condition ``PodGroupScheduled`` (1.36) or ``PodGroupInitiallyScheduled`` (1.37).

Additive to the dev cluster: without ``--gang-api`` nothing here is used.
"""

from __future__ import annotations

from pathlib import Path

from paralleljob.devcluster import process, state
from paralleljob.devcluster.kubeline import KubernetesLine
from paralleljob.devtools.kubescheduler import scheduler_config

GANG_GROUP = "scheduling.k8s.io"
SCHEDULER_NAME = "default-scheduler"  # kube-scheduler's own: the pods it places name it (or nothing)


def apiserver_args(line: KubernetesLine) -> tuple[str, ...]:
    return (f"--runtime-config={GANG_GROUP}/{line.gang_api_version}=true", f"--feature-gates={line.gates_flag}")


def controller_manager_args(line: KubernetesLine) -> tuple[str, ...]:
    # podgroup-protection-controller takes a deleted PodGroup's finalizer off once no pod of it is active;
    # without it a deleted PodGroup stays Terminating for ever (and its adopting ParallelJob with it).
    # kube-controller-manager adds a repeated --controllers to the list already given.
    return (f"--feature-gates={line.gates_flag}", "--controllers=podgroup-protection-controller")


def start_scheduler(
    binary: Path, run_dir: Path, kubeconfig: Path, die_with_caller: bool, gates: str
) -> state.ProcessRecord:
    """kube-scheduler of the API server's version, with the gang and topology-aware workload gates on (or
    ``gates=""``: as it ships, which is what Kueue's users run beside it)."""
    config = run_dir / "kube-scheduler.yaml"
    # the default profile (the gates add the gang and topology plugins to it); client limits lifted, as in the
    # throughput benchmark's unthrottled run, so that a comparison measures scheduling, not the limiter
    config.write_text(scheduler_config(kubeconfig, qps=5000.0, burst=5000))
    argv = [
        str(binary),
        f"--config={config}",
        *([f"--feature-gates={gates}"] if gates else []),
        "--secure-port=0",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "-v=2",
    ]
    log = run_dir / "logs" / "kube-scheduler.log"
    return process.spawn("kube-scheduler", argv, log, die_with_parent=die_with_caller)
