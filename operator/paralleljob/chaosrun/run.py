"""One bounded chaos run: the monkey disturbs, the operator is SIGKILLed and restarted, and the invariants
are checked from the API every ``check_every_s`` throughout; then the disturbances stop, every node is
restored, and once the jobs have had ``settle_s`` to settle each must end Running, Queued, Succeeded or
Failed with a reason, and the operator must be back to its idle pass rate (``unsettled-operator`` otherwise:
the reconcile loop of issue 21 kept a settled-looking cluster at 60-90 passes a second). The report counts
operations, kills, checks and violations, and gives that last pass rate.

The run ends after ``duration_s`` or, if ``kills`` is set, once that many SIGKILLs were dealt.

An operator that exits on its own is restarted at once, as its Deployment would: stepping down after a lease it
could not renew (an overloaded API server) is the operator's design and is counted in ``step_downs``; any other
exit is an ``operator-crash`` violation. Either way the invariants' clock for "an operator leads" stops at the
exit. It used not to: an operator that had stepped down stayed down until the next scheduled kill while the
checker still counted it as leading, so the gangs it had left mid-repair were reported half-bound "with the
operator up" (the likeliest reading of issue 22's first finding; seen again on a machine at load 17).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paralleljob.chaosrun.invariants import SETTLED_PHASES, InvariantChecker, Snapshot, Violation, snapshot
from paralleljob.chaosrun.monkey import Monkey
from paralleljob.devcluster import chaos
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devtools.operatorproc import IDLE_PASSES_PER_S, OperatorProcess
from paralleljob.k8s.edge.constants import JOB_LABEL
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path, pod_path
from paralleljob.k8s.runtime.runner import LEASE_LOST


@dataclass(frozen=True)
class ChaosConfig:
    seed: int = 1
    duration_s: float = 150.0
    kills: int | None = None  # run until this many SIGKILLs instead of for duration_s
    kill_every_s: tuple[float, float] = (6.0, 14.0)  # operator up this long between kills
    dead_for_s: tuple[float, float] = (0.0, 2.0)  # and dead this long before the restart
    act_every_s: tuple[float, float] = (0.3, 1.5)
    check_every_s: float = 2.0
    grace_s: float = 10.0
    settle_s: float = 60.0
    max_jobs: int = 14
    max_broken_nodes: int = 4
    namespace: str = "chaos"


@dataclass
class ChaosReport:
    seed: int
    seconds: float
    operations: dict[str, int]
    kills: int
    checks: int
    violations: list[dict[str, Any]]
    violation_counts: dict[str, int]
    final_phases: dict[str, int] = field(default_factory=dict)
    step_downs: int = 0  # times the operator gave up its lease on its own and was restarted
    end_passes_per_s: float = 0.0  # the operator's reconcile passes a second once the jobs had settled

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ChaosRun:
    def __init__(self, kube: Kube, shape: NodeShape, operator: OperatorProcess, config: ChaosConfig) -> None:
        self.kube = kube
        self.shape = shape
        self.operator = operator
        self.config = config
        self.rng = random.Random(config.seed)
        self.monkey = Monkey(kube, config.namespace, shape, self.rng, config.max_jobs, config.max_broken_nodes)
        self.checker = InvariantChecker(grace_s=config.grace_s, expected=self.monkey.jobs)
        self.up_since: float | None = None
        self.stop = asyncio.Event()
        self.step_downs = 0
        # Kills, restarts and the supervisor's restarts of an operator that exited take turns: a kill during
        # a supervised restart would otherwise read as the new operator crashing.
        self.lifecycle = asyncio.Lock()

    async def observe(self) -> Snapshot:
        ns = self.config.namespace
        # A job must be listed if it was applied before the lists were taken and not deleted meanwhile (the
        # monkey forgets a job before it deletes it): in the set both before and after listing.
        before = set(self.monkey.jobs)
        nodes, _ = await self.kube.list("/api/v1/nodes")
        jobs, _ = await self.kube.list(job_path(ns))
        pods, _ = await self.kube.list(pod_path(ns), {"labelSelector": JOB_LABEL})
        return snapshot(time.monotonic(), nodes, pods, jobs, before & self.monkey.jobs)

    async def _checks(self) -> None:
        while True:
            await self._supervise()
            with contextlib.suppress(ApiError):
                for violation in self.checker.check(await self.observe(), self.up_since):
                    print(f"VIOLATION {violation}", flush=True)
            await asyncio.sleep(self.config.check_every_s)

    async def _disturb(self) -> None:
        while not self.stop.is_set():
            await self.monkey.step(time.monotonic())
            await asyncio.sleep(self.rng.uniform(*self.config.act_every_s))

    async def _supervise(self) -> None:
        """Restart an operator that exited on its own; a step-down is counted, anything else is a violation."""
        async with self.lifecycle:
            if self.up_since is None or self.operator.running():
                return
            self.up_since = None
            tail = self.operator.log_tail(20)
            if LEASE_LOST in tail:
                self.step_downs += 1
                print(f"operator stepped down (lease not renewed in time), restarted ({self.step_downs})", flush=True)
            else:
                detail = f"exited with {self.operator.returncode}: {tail[-2000:]}"
                self.checker.violations.append(Violation("operator-crash", "operator", detail, time.monotonic()))
                print(f"VIOLATION operator crashed: {detail}", flush=True)
            await self._restart()

    async def _kill(self) -> None:
        # a separate generator, so the kill times do not shift the monkey's choices
        rng = random.Random(self.config.seed + 1)
        while not self.stop.is_set():
            await asyncio.sleep(rng.uniform(*self.config.kill_every_s))
            async with self.lifecycle:
                self.up_since = None
                self.operator.kill()
                if self.config.kills is not None and self.operator.kills >= self.config.kills:
                    self.stop.set()
                await asyncio.sleep(rng.uniform(*self.config.dead_for_s))
                await self._restart()

    async def run(self) -> ChaosReport:
        started = time.monotonic()
        with contextlib.suppress(ApiError):
            await self.kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": self.config.namespace}})
        await self._restart()
        checks = asyncio.create_task(self._checks(), name="chaos-checks")
        workers = [asyncio.create_task(self._disturb()), asyncio.create_task(self._kill())]
        try:
            if self.config.kills is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), self.config.duration_s)
            else:
                await self.stop.wait()
            self.stop.set()
            await asyncio.gather(*workers)
            await self._restore()
            final = await self._settle()
            end_rate = await self._idle_rate()
        finally:
            for task in (checks, *workers):
                task.cancel()
            await asyncio.gather(checks, *workers, return_exceptions=True)
        self.checker.final(final)
        phases: dict[str, int] = {}
        for job in final.jobs.values():
            phases[job.phase] = phases.get(job.phase, 0) + 1
        return ChaosReport(
            seed=self.config.seed,
            seconds=round(time.monotonic() - started, 1),
            operations=dict(sorted(self.monkey.ops.items())),
            kills=self.operator.kills,
            checks=self.checker.checks,
            violations=[asdict(v) for v in self.checker.violations],
            violation_counts=self.checker.summary(),
            final_phases=phases,
            step_downs=self.step_downs,
            end_passes_per_s=round(end_rate, 1),
        )

    async def _restore(self) -> None:
        """Undo every disturbance still pending and put every node back as the cluster started."""
        if not self.operator.running():
            await self._restart()
        await self.monkey.undo_due(time.monotonic(), everything=True)
        await chaos.restore_nodes(self.kube.api, self.shape)

    async def _settle(self) -> Snapshot:
        """Wait (at least 5 s, at most ``settle_s``) until every job is in a settled phase and whole."""
        started = time.monotonic()
        while True:
            snap = await self.observe()
            settled = all(
                j.phase in SETTLED_PHASES and j.name not in self.checker.half_since for j in snap.jobs.values()
            )
            waited = time.monotonic() - started
            if (settled and waited >= 5.0) or waited >= self.config.settle_s:
                return snap
            await asyncio.sleep(1.0)

    async def _idle_rate(self, timeout_s: float = 20.0) -> float:
        """The operator's pass rate once it settles (within ``timeout_s``); above the idle rate is a violation."""
        await self._supervise()
        rate = await asyncio.to_thread(self.operator.settled_pass_rate, timeout_s)
        if rate > IDLE_PASSES_PER_S:
            idle = f"idle <= {IDLE_PASSES_PER_S:g}"
            detail = f"{rate:.1f} reconcile passes/s {timeout_s:.0f} s after the jobs settled ({idle})"
            self.checker.violations.append(Violation("unsettled-operator", "operator", detail, time.monotonic()))
            print(f"VIOLATION {detail}", flush=True)
        return rate

    async def _restart(self) -> None:
        """Start the operator and wait until it leads; an operator that dies on its own is a violation."""
        while True:
            self.operator.start()
            try:
                self.up_since = await self.operator.wait_leader_async()
                return
            except RuntimeError as exc:
                detail = str(exc)[-2000:]
                self.checker.violations.append(Violation("operator-crash", "operator", detail, time.monotonic()))
                print(f"VIOLATION operator crashed: {detail}", flush=True)


async def delete_all_jobs(kube: Kube, namespace: str, timeout_s: float = 60.0) -> None:
    """Delete the run's jobs and wait for the operator to remove their pods (the namespace is reusable)."""
    items, _ = await kube.list(job_path(namespace))
    for item in items:
        with contextlib.suppress(ApiError):
            await kube.delete(job_path(namespace, item["metadata"]["name"]))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pods, _ = await kube.list(pod_path(namespace), {"labelSelector": JOB_LABEL})
        if not pods:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"pods of {namespace} still there {timeout_s} s after their jobs were deleted")


async def run_chaos(kubeconfig: Path, shape: NodeShape, config: ChaosConfig, log_dir: Path) -> ChaosReport:
    """A whole run against a running dev cluster: its own operator, the run, then the jobs cleaned up."""
    kube = await Kube.connect(str(kubeconfig))
    # The operator's own resync (30 s); a short lease so that a SIGKILLed operator is back within seconds.
    operator = OperatorProcess(kubeconfig, log_dir, identity="chaos-operator", lease_seconds=4, resync_seconds=30.0)
    try:
        report = await ChaosRun(kube, shape, operator, config).run()
        await delete_all_jobs(kube, config.namespace)
        return report
    finally:
        operator.stop()
        await kube.close()
