"""Helpers for the operator's end-to-end tests: the operator as a subprocess, a ParallelJob client for one
namespace, polling, and the invariant checks every scenario ends with."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from paralleljob.devcluster.process import free_loopback_ports
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools import operatorproc
from paralleljob.devtools.waiting import wait_until
from paralleljob.k8s.edge.constants import GROUP, JOB_LABEL, PLURAL, VERSION


def free_port() -> int:
    return free_loopback_ports(1)[0]


class OperatorProcess(operatorproc.OperatorProcess):
    """``paralleljob operator`` in a subprocess with the e2e suites' settings: the operator's default 15 s
    lease (renewed within 10 s: a 4 s lease, renewed within 2.7 s, was lost to a busy API server on a loaded
    machine; a restarted operator retakes its own lease at once whatever its length) and a 10 s resync,
    every pass comparing the kept cluster view with a rebuild, and
    a log per identity and start (``operator-<identity>-<n>.log``) shown when a test fails. ``start``
    waits until it leads unless told not to."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        identity: str = "e2e-operator",
        extra_args: tuple[str, ...] = (),
        log_name: str = "operator-{identity}-{start}.log",
    ) -> None:
        super().__init__(
            kubeconfig,
            log_dir,
            identity=identity,
            lease_seconds=15,
            resync_seconds=10,
            view_check_passes=1,
            extra_args=extra_args,
            log_name=log_name,
        )

    def start(self, extra_env: dict[str, str] | None = None, wait: bool = True) -> None:
        super().start(extra_env)
        if wait:
            self.wait_leader()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60.0, interval: float = 0.1) -> Any:
    return wait_until(what, check, timeout_s, interval)


class Jobs:
    """ParallelJobs and their pods in one namespace, through the session's API client."""

    def __init__(self, kube: KubeSession, namespace: str, operator: OperatorProcess) -> None:
        self.kube = kube
        self.namespace = namespace
        self.operator = operator
        self.custom: Any = CustomObjectsApi(kube.api)

    @staticmethod
    def manifest(name: str, tp: int, pp: int, dp: int, **spec: Any) -> dict[str, Any]:
        template = spec.pop("template", {"spec": {"containers": [{"name": "trainer", "image": "trainer:e2e"}]}})
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ParallelJob",
            "metadata": {"name": name},
            "spec": {"parallelism": {"tensor": tp, "pipeline": pp, "data": dp}, "template": template, **spec},
        }

    def create(self, name: str, tp: int, pp: int, dp: int, **spec: Any) -> dict[str, Any]:
        return self.create_raw(self.manifest(name, tp, pp, dp, **spec))

    def create_raw(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self.kube.run(self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body))
        )

    def get(self, name: str) -> dict[str, Any]:
        return dict(
            self.kube.run(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))
        )

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def _status_or_missing(self, name: str) -> Any:
        try:
            return self.status(name)
        except ApiException as exc:
            return f"(no ParallelJob {name}: HTTP {exc.status})"

    def delete(self, name: str) -> None:
        self.kube.run(self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))

    def wait_phase(self, name: str, phase: str, timeout_s: float = 90.0, **fields: Any) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            try:
                status = self.status(name)
            except ApiException as exc:
                if exc.status == 404:  # not there yet: a pod group's ParallelJob is made by the operator
                    return None
                raise
            ok = status.get("phase") == phase and all(status.get(k) == v for k, v in fields.items())
            return status if ok else None

        try:
            return dict(wait_for(f"{name} in phase {phase} {fields or ''}", check, timeout_s))
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nstatus: {self._status_or_missing(name)}\noperator log:\n{self.operator.log_tail()}"
            ) from None

    def pods(self, name: str | None = None) -> list[Any]:
        selector = f"{JOB_LABEL}={name}" if name else JOB_LABEL
        listed = self.kube.run(self.kube.core.list_namespaced_pod(self.namespace, label_selector=selector))
        return sorted(listed.items, key=lambda p: p.metadata.name)

    def live_pods(self, name: str) -> list[Any]:
        return [p for p in self.pods(name) if not p.metadata.deletion_timestamp]

    def events(self, name: str) -> list[Any]:
        listed = self.kube.run(
            self.kube.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}")
        )
        return list(listed.items)

    def wait_events(self, name: str, reasons: set[str], timeout_s: float = 60.0) -> set[str]:
        """The operator posts Events in the background, after the status write that a test usually waits
        for, so they are waited for too (bounded): all of ``reasons`` must land."""
        seen: set[str] = set()

        def landed() -> bool:
            seen.clear()
            seen.update(e.reason for e in self.events(name))
            return reasons <= seen

        try:
            wait_for(f"events {sorted(reasons)} about {name}", landed, timeout_s, interval=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; landed: {sorted(seen)}\noperator log:\n{self.operator.log_tail()}") from None
        return set(seen)

    def cleanup(self) -> None:
        listed = self.kube.run(self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL))
        for item in listed.get("items", []):
            self.delete(item["metadata"]["name"])
        self.operator.ensure_running()
        wait_for(f"pods of {self.namespace} deleted by the operator", lambda: not self.pods(), timeout_s=30)


@contextmanager
def running(operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """A module's operator: started (and leading) for the block, stopped after it, or when it never leads (else
    the process outlives the failed fixture and its ResourceWarning fails some later test)."""
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()


@contextmanager
def jobs_in(kube: KubeSession, namespace: str, operator: OperatorProcess, *, check_view: bool) -> Iterator[Jobs]:
    """A test's ParallelJobs, the operator running first. The scenario must end settled (``assert_settled``);
    afterwards every ParallelJob is deleted and the operator has removed their pods (the next test starts on
    free GPUs); with ``check_view``, the operator's kept cluster view must never have differed from a
    rebuild."""
    operator.ensure_running()
    jobs = Jobs(kube, namespace, operator)
    log_start = operator.log_size()
    passed = False
    try:
        yield jobs
        passed = True
    finally:
        try:
            if passed:  # a failed scenario reports its own failure, not an unsettled operator
                assert_settled(jobs, log_start)
        finally:
            jobs.cleanup()
    if check_view:
        assert operator.view_mismatches() == [], "the kept cluster view differed from a rebuild"


# What counts as idle is the operator process's own (``operatorproc.IDLE_PASSES_PER_S``), shared with the chaos run.
SETTLED_PASSES_PER_S = operatorproc.IDLE_PASSES_PER_S
SETTLE_TIMEOUT_S = 20.0
# Occurrences per scenario (an aggregated Event counts its ``count``): of one reason about one object (a
# decision repeated on every pass floods one reason: 1,128 Reoptimizable Events in 3 minutes), and of all
# reasons about one object (the crash test fails a worker 8 times: 3 Events each).
MAX_EVENTS_PER_REASON = 10
MAX_EVENTS_PER_OBJECT = 40
MAX_LOG_WARNINGS = 30  # WARNING/ERROR lines the operator logs per scenario


def assert_settled(jobs: Jobs, log_start: int) -> None:
    """What every e2e scenario ends with: the operator back to its idle pass rate (within 20 s of the test's
    end), a bounded number of Events per object, a bounded number of warnings in its log, and no status
    field dropped by the CRD."""
    operator = jobs.operator
    if operator.running() and operator.is_leader():
        rate = operator.settled_pass_rate(SETTLE_TIMEOUT_S)
        if rate > SETTLED_PASSES_PER_S:
            raise AssertionError(
                f"the operator did not settle: {rate:.0f} reconcile passes/s {SETTLE_TIMEOUT_S:.0f} s after the"
                f" scenario (idle is <= {SETTLED_PASSES_PER_S:g})\noperator log:\n{operator.log_tail()}"
            )
    counts: Counter[str] = Counter()
    for item in jobs.kube.run(jobs.kube.core.list_namespaced_event(jobs.namespace)).items:
        if item.reporting_component == "paralleljob.dev/operator":
            counts[f"{item.involved_object.kind}/{item.involved_object.name} {item.reason}"] += item.count or 1
    per_object: Counter[str] = Counter()
    for key, count in counts.items():
        per_object[key.split(" ")[0]] += count
    flooded = {obj: n for obj, n in per_object.items() if n > MAX_EVENTS_PER_OBJECT}
    flooded.update({key: n for key, n in counts.items() if n > MAX_EVENTS_PER_REASON})
    assert not flooded, (
        f"too many Events (more than {MAX_EVENTS_PER_REASON} of one reason or {MAX_EVENTS_PER_OBJECT} in all about"
        f" one object): {dict(counts)}"
    )
    new_log = operator.log_since(log_start)
    assert "the API server dropped" not in new_log, "the CRD pruned a status field the operator writes"
    warnings = [line for line in new_log.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(warnings) <= MAX_LOG_WARNINGS, f"{len(warnings)} warnings in the operator's log:\n" + "\n".join(
        warnings[:40]
    )


def assert_gang_on_record(pjs: Jobs, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """Every pod bound where the status says, requesting TP GPUs, TP group on one node, GPUs as recorded.
    The status is written before the pods it names are created and bound, so this waits (up to ``timeout_s``)
    for the pods to match it, and fails with the last mismatch."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _gang_on_record(pjs, name)
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _gang_on_record(pjs: Jobs, name: str) -> dict[str, Any]:
    status = pjs.status(name)
    record = {p["name"]: p for p in status["placement"]["pods"]}
    tp = status["placement"]["shape"]["tensor"]
    pods = pjs.live_pods(name)
    names = sorted(p.metadata.name for p in pods)
    assert names == sorted(record), f"{name}: live pods {names}, recorded {sorted(record)}"
    for pod in pods:
        slot = record[pod.metadata.name]
        assert pod.spec.node_name == slot["node"], f"{pod.metadata.name} bound to {pod.spec.node_name}"
        assert pod.spec.scheduler_name == "paralleljob-scheduler", pod.spec.scheduler_name
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == str(tp), pod.spec.containers[0].resources
        indices = [int(i) for i in pod.metadata.annotations["paralleljob.dev/gpu-indices"].split(",")]
        assert indices == slot["gpuIndices"] and len(indices) == tp, (pod.metadata.name, indices, slot["gpuIndices"])
        assert pod.metadata.owner_references[0].kind == "ParallelJob", pod.metadata.owner_references
    return status


def assert_no_gpu_used_twice(kube: KubeSession) -> None:
    pods = kube.run(kube.core.list_pod_for_all_namespaces(label_selector=JOB_LABEL)).items
    used: Counter[tuple[str, int]] = Counter()
    for pod in pods:
        if (
            pod.spec.node_name
            and pod.status.phase not in ("Succeeded", "Failed")
            and not pod.metadata.deletion_timestamp
        ):
            for index in pod.metadata.annotations["paralleljob.dev/gpu-indices"].split(","):
                used[(pod.spec.node_name, int(index))] += 1
    twice = [gpu for gpu, count in used.items() if count > 1]
    assert not twice, f"GPUs used by two pods: {twice}"
