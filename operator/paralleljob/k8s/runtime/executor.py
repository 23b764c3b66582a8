"""Carry a :class:`Plan` out against the API, per job in the order that keeps every crash recoverable
(jobs' chains run concurrently):

1. status write (the placement is recorded before any pod exists; optimistic concurrency on the job's
   resourceVersion, so a decision made on a stale copy is refused and re-made);
2. deletes (stale or orphaned workers) and annotations (a preemption's checkpoint-now signal); then, for a
   finished job whose ``ttlSecondsAfterFinished`` ran out, the ParallelJob itself (UID precondition);
3. the job's headless Service, then creates, each pod bound the moment it exists;
4. binds of pods that exist but are unbound (an operator restarted mid-gang).
On a DRA node a pod's ResourceClaim is made sure of between its creation and its bind (``_ensure_claim``):
created if missing, replaced if allocated to other devices, its status written with exactly the placed
devices and reserved for the pod's UID. Every step is idempotent, so a crash anywhere in between is
finished by the next pass's bind of the unbound pod, and no pod is bound before its claim is allocated.
Each response is written back into the stores at once, so the next pass sees what was just done even
before the watch delivers it. The executor decides nothing: failures are reported to the next pass.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.render import claims
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.statuscheck import dropped_fields
from paralleljob.k8s.plan.actions import (
    DomainDelete,
    JobActions,
    JobDelete,
    PodAnnotate,
    PodBind,
    PodCreate,
    PodDelete,
)
from paralleljob.k8s.runtime.api import Answer, ApiError, Kube, job_path, pod_path, retrying
from paralleljob.k8s.runtime.crashhook import CrashAfterBinds
from paralleljob.k8s.runtime.lanes import BACKGROUND, CHAIN, new_chain
from paralleljob.k8s.runtime.sharedclaims import HOLD, SharedClaims
from paralleljob.k8s.view.store import ObjectStore

log = logging.getLogger("paralleljob.k8s")
# A job seen in these phases has pods at work: what its chain does (replace lost pods, end it, grow it) goes
# before placing new gangs (runtime/lanes.py).
RUNNING_GANG = (Phase.RUNNING, Phase.RECOVERING)


def puts_pods_into_running_gang(actions: JobActions) -> bool:
    """Whether a chain creates or binds pods of a gang already running: a repair, a replaced pod of a pod
    group or native PodGroup, an elastic job's growth. Its surviving pods hold their GPUs idle until it is
    whole, so while it runs the other chains keep only their share of the request slots (``Lanes.repairing``)."""
    return actions.job.phase in RUNNING_GANG and bool(actions.creates or actions.binds)


@dataclass
class Outcome:
    wrote: int = 0
    bound: int = 0
    deleted: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # job key -> why its gang cannot be completed
    hold: dict[str, str] = field(default_factory=dict)  # job key -> transient trouble; retry after a pause
    invalid: dict[str, str] = field(default_factory=dict)  # job key -> the API refused its pod as invalid
    written: list[JobActions] = field(default_factory=list)  # jobs whose status write went through
    dropped: list[str] = field(default_factory=list)  # status fields the API server did not keep (statuscheck)
    changed: bool = False  # something changed on the API server (an object's resourceVersion moved)


class Executor:
    def __init__(  # params: the executor's collaborators, each injected so the FakeKube tests run it unchanged
        self,
        kube: Kube,
        jobs: ObjectStore[JobObject],
        pods: ObjectStore[PodInfo],
        post_event: Callable[[JobObject, str, str, str], None],
        crash_hook: CrashAfterBinds | None = None,
        claim_store: ObjectStore[Any] | None = None,
        domain_store: ObjectStore[Any] | None = None,
    ) -> None:
        self.kube = kube
        self.jobs = jobs
        self.pods = pods
        self.claim_store = claim_store
        self.domain_store = domain_store  # our ComputeDomains (watched), forgotten once deleted
        self.post_event = post_event
        self.crash_hook = crash_hook  # a test hook (runtime/crashhook.py); None in production
        self.services: set[tuple[str, str, str]] = set()
        self.domains: set[tuple[str, str, str]] = set()  # ComputeDomains made: (namespace, name, owner uid)
        self.dropped_reported: set[str] = set()
        self.shared: SharedClaims | None = None  # MPS GPUs' claims, shared by several pods (sharedclaims.py)

    async def run_job(self, actions: JobActions, outcome: Outcome) -> None:
        """One job's chain: its status first, then its pods."""
        await self._job(actions, outcome)

    async def delete_orphan(self, delete: PodDelete, outcome: Outcome) -> None:
        await self._delete(delete, outcome)

    async def delete_domain(self, delete: DomainDelete, outcome: Outcome) -> None:
        """Delete a ComputeDomain of a clique the job left (plan/pods/computedomains.py), on the UID the decision
        saw. Gone (404) or another one by now (409) is done: the next pass judges what exists then. It is
        forgotten as made, so a job placed in that clique again gets a new one."""
        path = f"/apis/{cd.GROUP}/{cd.VERSION}/namespaces/{delete.namespace}/{cd.PLURAL}/{delete.name}"
        self.domains.discard((delete.namespace, delete.name, delete.job.uid))
        try:
            await retrying(lambda: self.kube.delete(path, delete.uid))
        except ApiError as exc:
            if exc.answer not in (Answer.GONE, Answer.CONFLICT):
                log.warning("could not delete ComputeDomain %s/%s: %s", delete.namespace, delete.name, exc)
                return
        else:
            log.info("deleted ComputeDomain %s/%s (%s)", delete.namespace, delete.name, delete.why)
            self.post_event(delete.job, "Normal", "ComputeDomainDeleted", f"deleted {delete.name}: {delete.why}")
            outcome.deleted += 1
            outcome.changed = True
        if self.domain_store is not None:
            self.domain_store.forget(delete.namespace, delete.name, delete.uid)

    async def _job(self, actions: JobActions, outcome: Outcome) -> None:
        mends = actions.job.phase in RUNNING_GANG
        lane = BACKGROUND.set(actions.only_records_waiting)
        chain = CHAIN.set(new_chain(mends=mends))
        try:
            if puts_pods_into_running_gang(actions):
                with self.kube.limit.repairing():
                    await self._chain(actions, outcome)
            else:
                await self._chain(actions, outcome)
        finally:
            CHAIN.reset(chain)
            BACKGROUND.reset(lane)

    async def _chain(self, actions: JobActions, outcome: Outcome) -> None:
        if actions.writes_status and not await self._write_status(actions, outcome):
            return  # nothing about its pods happens unless the status (the placement) is recorded
        for note in actions.events:
            self.post_event(actions.job, note.event_type, note.reason, note.message)
        await asyncio.gather(
            *(self._delete(d, outcome) for d in actions.deletes),
            *(self._annotate(a) for a in actions.annotates),
        )
        if actions.delete_job is not None:
            await self._delete_job(actions.delete_job, outcome)
            return  # a finished job: nothing of it is created or bound any more
        if actions.reserves and not await self._reserve(actions, outcome):
            return  # a PodGroup's pods are bound only once its shared claims are reserved for it
        if actions.compute_domains:
            await self._compute_domains(actions)
        work: list[Awaitable[None]] = []
        if actions.service is not None:
            work.append(self._service(actions))
        if actions.membership is not None:
            work.append(self._replace(actions.membership, "configmaps"))
        if actions.rendezvous is not None:
            work.append(self._replace(actions.rendezvous, "services"))
        work.extend(self._create_and_bind(actions, c, outcome) for c in actions.creates)
        work.extend(self._bind(actions.job.key, b, outcome) for b in actions.binds)
        await asyncio.gather(*work)

    async def _reserve(self, actions: JobActions, outcome: Outcome) -> bool:
        """Reserve a PodGroup's shared ResourceClaims for it (``status.reservedFor``, written with the claim's
        resourceVersion); False when one could not be: the next pass, on the claim's new version, decides again."""
        for reserve in actions.reserves:
            path = claims.claim_path(reserve.namespace, reserve.name, "status")
            try:
                body = await retrying(partial(self.kube.merge_patch, path, reserve.body))
            except ApiError as exc:
                why = f"reserving ResourceClaim {reserve.name} for the PodGroup failed: {exc.message}"
                if exc.answer is Answer.TRANSIENT:
                    outcome.hold[actions.job.key] = why
                elif exc.answer is not Answer.CONFLICT:  # 409: changed meanwhile; the watch brings the new version
                    outcome.failures[actions.job.key] = why
                outcome.changed = True
                return False
            if self.claim_store is not None:
                self.claim_store.upsert(body)
        return True

    async def create_job(self, manifest: dict[str, Any]) -> bool:
        """Create a pod group's adopting ParallelJob; one that exists already (409) is left as it is.
        False when the API refused it (the caller waits before trying again)."""
        meta = manifest["metadata"]
        path = job_path(meta["namespace"])
        try:
            body = await retrying(lambda: self.kube.request("POST", path, manifest))
        except ApiError as exc:
            if exc.answer is not Answer.CONFLICT:
                log.warning("ParallelJob for pod group %s/%s not created: %s", meta["namespace"], meta["name"], exc)
            return exc.answer is Answer.CONFLICT
        log.info("created ParallelJob %s/%s for its pod group", meta["namespace"], meta["name"])
        self.jobs.upsert(body)
        return True

    # ---- status -------------------------------------------------------------------------------------
    async def _write_status(self, actions: JobActions, outcome: Outcome) -> bool:
        job = actions.job
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": job.resource_version},
            "status": actions.draft.merge_patch(),
        }
        try:
            body = await retrying(lambda: self.kube.merge_patch(job_path(job.namespace, job.name, "status"), patch))
        except ApiError as exc:
            if exc.answer is Answer.GONE:
                return False  # deleted meanwhile; the DELETED event cleans up
            if exc.answer is Answer.CONFLICT:
                await self._refresh(job)  # changed meanwhile: decide again on the new version
                outcome.changed = True
            else:
                log.warning("status of %s not written: %s", job.key, exc)
                outcome.hold[job.key] = f"status write failed: {exc.message}"
            return False
        self.jobs.upsert(body)
        outcome.wrote += 1
        outcome.written.append(actions)
        if str((body.get("metadata") or {}).get("resourceVersion")) != job.resource_version:
            outcome.changed = True
        dropped = dropped_fields(patch["status"], body.get("status") or {})
        if dropped:
            outcome.dropped.extend(dropped)
            new = [path for path in dropped if path not in self.dropped_reported]
            if new:  # once per field per process: the cause is the installed CRD, not this job
                self.dropped_reported.update(new)
                log.error(
                    "the API server dropped %s of %s's status write: the ParallelJob CRD installed in the cluster"
                    " does not declare it; install this release's CRDs (crds/ or the chart's crds/)",
                    ", ".join(new),
                    job.key,
                )
        return True

    async def _delete_job(self, delete: JobDelete, outcome: Outcome) -> None:
        """Delete the ParallelJob, on the UID the decision saw: a job re-created under its name meanwhile is
        refused by the API (409) and kept. Gone already (404) is done. Its pods go through the garbage
        collector (their ownerReferences), and the stores forget the job at once, as the watch will."""
        path = job_path(delete.namespace, delete.name)
        try:
            await retrying(lambda: self.kube.delete(path, delete.uid))
        except ApiError as exc:
            if exc.answer is Answer.GONE:
                self._forget_job(delete)
            elif exc.answer is not Answer.CONFLICT:  # a conflict: another job by now; the watch brings it
                log.warning("could not delete ParallelJob %s/%s: %s", delete.namespace, delete.name, exc)
                outcome.hold[object_key(delete.namespace, delete.name)] = f"deleting the job failed: {exc.message}"
            return
        log.info("deleted ParallelJob %s/%s (%s)", delete.namespace, delete.name, delete.why)
        self._forget_job(delete)
        outcome.changed = True

    def _forget_job(self, delete: JobDelete) -> None:
        """Drop the job from the store, and what this executor remembers making for it (its Service and
        ComputeDomains, by the job's UID): with thousands of short jobs those sets would only grow."""
        self.jobs.forget(delete.namespace, delete.name, delete.uid)
        self.services.discard((delete.namespace, delete.name, delete.uid))
        if self.domains:
            self.domains = {key for key in self.domains if key[2] != delete.uid}

    async def _refresh(self, job: JobObject) -> None:
        try:
            body = await self.kube.request("GET", job_path(job.namespace, job.name))
            self.jobs.upsert(body)
        except ApiError as exc:
            log.debug("could not re-read %s: %s", job.key, exc)

    # ---- pods ---------------------------------------------------------------------------------------
    async def _delete(self, delete: PodDelete, outcome: Outcome) -> None:
        path = pod_path(delete.namespace, delete.name)
        try:
            body = await retrying(lambda: self.kube.delete(path, delete.uid or None, 0 if delete.force else None))
        except ApiError as exc:
            if exc.answer in (Answer.GONE, Answer.CONFLICT):  # gone, or a different pod by now (UID)
                self.pods.forget(delete.namespace, delete.name, delete.uid)
                return
            log.warning("could not delete pod %s/%s: %s", delete.namespace, delete.name, exc)
            return
        log.info("deleted pod %s/%s (%s)", delete.namespace, delete.name, delete.why)
        outcome.deleted += 1
        if delete.force or not (body.get("metadata") or {}).get("deletionTimestamp"):
            self.pods.forget(delete.namespace, delete.name, delete.uid)
        else:
            self.pods.upsert(body)

    async def _annotate(self, annotate: PodAnnotate) -> None:
        patch = {"metadata": {"uid": annotate.uid, "annotations": annotate.annotations}}
        try:
            body = await retrying(lambda: self.kube.merge_patch(pod_path(annotate.namespace, annotate.name), patch))
        except ApiError as exc:  # gone or replaced meanwhile: the next pass looks again
            log.debug("could not annotate pod %s/%s: %s", annotate.namespace, annotate.name, exc)
            return
        self.pods.upsert(body)

    async def _service(self, actions: JobActions) -> None:
        job = actions.job
        key = (job.namespace, job.name, job.uid)
        if key in self.services or actions.service is None:
            return
        try:
            await retrying(
                lambda: self.kube.request("POST", f"/api/v1/namespaces/{job.namespace}/services", actions.service)
            )
        except ApiError as exc:
            if exc.answer is not Answer.CONFLICT:
                log.warning("service for %s not created: %s", job.key, exc)
                return
        self.services.add(key)

    async def _compute_domains(self, actions: JobActions) -> None:
        """The job's ComputeDomains (one per clique its trays use), before its pods: the driver's controller
        makes the claim template the pods reference from each. One that exists already (409) is kept: it is
        the job's (same name, owned by it), and a ComputeDomain's spec is immutable anyway."""
        job = actions.job
        path = f"/apis/{cd.GROUP}/{cd.VERSION}/namespaces/{job.namespace}/{cd.PLURAL}"
        for manifest in actions.compute_domains:
            name = manifest["metadata"]["name"]
            key = (job.namespace, name, job.uid)
            if key in self.domains:
                continue
            try:
                await retrying(functools.partial(self.kube.request, "POST", path, manifest))
            except ApiError as exc:
                if exc.answer is not Answer.CONFLICT:
                    log.warning("ComputeDomain %s/%s for %s not created: %s", job.namespace, name, job.key, exc)
                    continue
            log.info("created ComputeDomain %s/%s for %s", job.namespace, name, job.key)
            self.domains.add(key)

    async def _replace(self, manifest: dict[str, Any], plural: str) -> None:
        """An elastic job's replicas ConfigMap or rendezvous Service: replaced (an unconditional update), or
        created the first time."""
        meta = manifest["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/{plural}"
        try:
            try:
                await retrying(lambda: self.kube.request("PUT", f"{path}/{meta['name']}", manifest))
            except ApiError as exc:
                if exc.answer is not Answer.GONE:
                    raise
                await retrying(lambda: self.kube.request("POST", path, manifest))
        except ApiError as exc:  # the status is the record; the next resize writes it again
            log.warning("%s %s/%s not written: %s", plural, meta["namespace"], meta["name"], exc)

    async def _create_and_bind(self, actions: JobActions, create: PodCreate, outcome: Outcome) -> None:
        job = actions.job
        meta = create.manifest["metadata"]
        try:
            body = await retrying(lambda: self.kube.request("POST", pod_path(job.namespace), create.manifest))
        except ApiError as exc:
            if exc.answer is Answer.CONFLICT:
                return  # the old pod of that name is still going away; the next pass tries again
            if exc.answer is Answer.TRANSIENT:
                outcome.hold[job.key] = f"creating pod {meta['name']} failed: {exc.message}"
            elif exc.answer is Answer.INVALID:
                # The template itself is refused: invalid, or above the namespace's Pod Security level (a 403
                # that no retry or rollback can mend, unlike an RBAC 403), so the job fails with the reason.
                outcome.invalid[job.key] = exc.message
            else:
                outcome.failures[job.key] = f"the API refused pod {meta['name']}: {exc.message}"
            return
        self.pods.upsert(body)
        uid = str(body["metadata"]["uid"])
        await self._bind(job.key, PodBind(job.namespace, meta["name"], uid, create.node, create.claim), outcome)

    async def _bind(self, job_key: str, bind: PodBind, outcome: Outcome) -> None:
        if bind.claim is not None and not await self._ensure_claim(job_key, bind, bind.claim, outcome):
            return
        if self.crash_hook is not None:
            await self.crash_hook.before_bind()
        try:
            await retrying(lambda: self.kube.bind(bind.namespace, bind.name, bind.uid, bind.node))
        except ApiError as exc:
            if self.crash_hook is not None:
                self.crash_hook.bind_failed()
            if exc.answer in (Answer.GONE, Answer.CONFLICT):
                # gone, replaced (UID precondition) or already bound: re-read it and let the next pass judge
                await self._refresh_pod(bind.namespace, bind.name)
            elif exc.answer is Answer.TRANSIENT:
                outcome.hold[job_key] = f"binding {bind.name} failed: {exc.message}"
            else:
                outcome.failures[job_key] = f"binding {bind.name} to {bind.node} was refused: {exc.message}"
            return

        def bound(body: Mapping[str, Any]) -> dict[str, Any]:
            return {**body, "spec": {**(body.get("spec") or {}), "nodeName": bind.node}}

        self.pods.patch_local(bind.namespace, bind.name, bound)
        outcome.bound += 1
        if self.crash_hook is not None:
            self.crash_hook.after_bind()

    # ---- DRA claims -------------------------------------------------------------------------------
    async def _ensure_claim(self, job_key: str, bind: PodBind, claim: claims.DeviceClaim, outcome: Outcome) -> bool:
        """The pod's claim exists, is the job's, is allocated with exactly ``claim.devices`` on the pod's
        node and reserved for this pod (UID). True when the pod may be bound."""
        namespace, _, name = job_key.partition("/")
        job = self.jobs.get(namespace, name)
        if job is None:
            return False  # deleted meanwhile; its pods and claims are cleaned up as orphans
        if claim.mps_percent:
            shared = SharedClaims(self.kube, self.pods, self.claim_store) if self.shared is None else self.shared
            self.shared = shared
            trouble, why = await shared.ensure(bind, claim)
            if trouble:
                (outcome.hold if trouble == HOLD else outcome.failures)[job_key] = why
            return not trouble
        path = claims.claim_path(bind.namespace, claim.name)
        try:
            body = await self._claim_body(job, bind, claim)
            if not claims.is_ours(body, job, bind.name):
                outcome.failures[job_key] = (
                    f"ResourceClaim {claim.name} exists and is not the one this job made for pod {bind.name}"
                )
                return False
            verdict = claims.state(body, claim, bind.uid)
            if verdict == "stale":
                # An allocation cannot be changed: a claim left from an earlier placement is replaced.
                uid = str((body.get("metadata") or {}).get("uid") or "")
                await retrying(lambda: self.kube.delete(path, uid or None))
                log.info("replaced ResourceClaim %s/%s allocated to other devices", bind.namespace, claim.name)
                body = await self._claim_body(job, bind, claim)
                verdict = claims.state(body, claim, bind.uid)
            if verdict == "write":
                patch = {
                    # The claim's UID as precondition: a claim replaced meanwhile is not written to.
                    "metadata": {"uid": (body.get("metadata") or {}).get("uid")},
                    "status": {
                        "allocation": claims.allocation(claim, bind.node),
                        "reservedFor": claims.reserved_for(bind.name, bind.uid),
                    },
                }
                body = await retrying(lambda: self.kube.merge_patch(f"{path}/status", patch))
        except ApiError as exc:
            if exc.answer in (Answer.TRANSIENT, Answer.GONE, Answer.CONFLICT):
                outcome.hold[job_key] = f"ResourceClaim {claim.name} for pod {bind.name} not ready: {exc.message}"
            else:
                outcome.failures[job_key] = f"the API refused ResourceClaim {claim.name}: {exc.message}"
            return False
        if self.claim_store is not None:
            self.claim_store.upsert(body)
        return True

    async def _claim_body(self, job: JobObject, bind: PodBind, claim: claims.DeviceClaim) -> dict[str, Any]:
        """The claim as it is now, created (unallocated) if it does not exist."""
        path = claims.claim_path(bind.namespace, claim.name)
        try:
            return await retrying(lambda: self.kube.request("GET", path))
        except ApiError as exc:
            if exc.answer is not Answer.GONE:
                raise
        manifest = claims.claim_manifest(job, bind.name, claim)
        try:
            return await retrying(lambda: self.kube.request("POST", claims.claim_path(bind.namespace), manifest))
        except ApiError as created:
            if created.answer is not Answer.CONFLICT:
                raise
        return await retrying(lambda: self.kube.request("GET", path))

    async def _refresh_pod(self, namespace: str, name: str) -> None:
        try:
            body = await self.kube.request("GET", pod_path(namespace, name))
            self.pods.upsert(body)
        except ApiError as exc:
            if exc.answer is Answer.GONE:
                current = self.pods.get(namespace, name)
                if current is not None:
                    self.pods.forget(namespace, name, current.uid)
