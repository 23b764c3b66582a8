"""Helpers for the operator's end-to-end tests: the operator as a subprocess, a ParallelJob client for one
namespace, polling, and the invariant checks every scenario ends with."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from paralleljob.devcluster.process import exit_with_parent, free_loopback_ports
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import GROUP, JOB_LABEL, PLURAL, VERSION

_die_with_pytest = exit_with_parent  # the operator subprocess dies with the test session


def free_port() -> int:
    return free_loopback_ports(1)[0]


class OperatorProcess:
    """``paralleljob operator`` in a subprocess; its log goes to a file shown when a test fails."""

    def __init__(
        self, kubeconfig: Path, log_dir: Path, identity: str = "e2e-operator", extra_args: tuple[str, ...] = ()
    ) -> None:
        self.kubeconfig = kubeconfig
        self.extra_args = extra_args
        self.identity = identity
        self.log_dir = log_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = log_dir / "operator-0.log"
        self.starts = 0

    def start(self, extra_env: dict[str, str] | None = None, wait: bool = True) -> None:
        assert self.proc is None or self.proc.poll() is not None, "operator already running"
        self.starts += 1
        self.log_path = self.log_dir / f"operator-{self.identity}-{self.starts}.log"
        env = {**os.environ, **(extra_env or {})}
        argv = [
            sys.executable,
            "-m",
            "paralleljob.cli",
            "operator",
            "--kubeconfig",
            str(self.kubeconfig),
            "--metrics-port",
            str(self.port),
            "--metrics-host",
            "127.0.0.1",
            "--lease-duration",
            "4",
            "--identity",
            self.identity,
            "--resync-seconds",
            "10",
            "--view-check-passes",  # every pass compares the kept cluster view with a rebuild
            "1",
            "--log-level",
            "INFO",
            *self.extra_args,
        ]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_pytest
            )
        if wait:
            self.wait_leader()

    def wait_leader(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if "paralleljob_leader 1.0" in self.metrics():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"operator did not become leader in {timeout_s} s:\n{self.log_tail()}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def healthz(self) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as response:
            return int(response.status), str(response.read().decode())

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def ensure_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.start()

    def view_mismatches(self) -> list[str]:
        """Self-check mismatches of the kept cluster view logged by any start of this operator."""
        found = []
        for path in sorted(self.log_dir.glob("operator-*.log")):
            text = path.read_text(errors="replace")
            found += [line for line in text.splitlines() if "kept cluster view differed from a rebuild" in line]
        return found

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 30.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


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

    def wait_phase(self, name: str, phase: str, timeout_s: float = 30.0, **fields: Any) -> dict[str, Any]:
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

    def wait_events(self, name: str, reasons: set[str], timeout_s: float = 15.0) -> set[str]:
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


def assert_gang_on_record(pjs: Jobs, name: str) -> dict[str, Any]:
    """Every pod bound where the status says, requesting TP GPUs, TP group on one node, GPUs as recorded."""
    status = pjs.status(name)
    record = {p["name"]: p for p in status["placement"]["pods"]}
    tp = status["placement"]["shape"]["tensor"]
    pods = pjs.live_pods(name)
    assert sorted(p.metadata.name for p in pods) == sorted(record)
    for pod in pods:
        slot = record[pod.metadata.name]
        assert pod.spec.node_name == slot["node"], f"{pod.metadata.name} bound to {pod.spec.node_name}"
        assert pod.spec.scheduler_name == "paralleljob-scheduler"
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == str(tp)
        indices = [int(i) for i in pod.metadata.annotations["paralleljob.dev/gpu-indices"].split(",")]
        assert indices == slot["gpuIndices"] and len(indices) == tp
        assert pod.metadata.owner_references[0].kind == "ParallelJob"
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
