"""Making sure of an MPS GPU's shared ResourceClaim before a pod that uses it is bound (``edge/render/mpsclaims``):
created if missing, replaced if allocated to another device, allocated to the exact GPU with the MPS config,
and reserved for the pod next to the pods that still use it.

Several pods, of one job or of several, may want the same claim at once: the writes of one claim are made one
at a time here (a lock per claim), and each is conditional on the claim's resourceVersion, so a reservation
written by another writer (another operator replica's last act, the resource claim controller removing a
finished pod) is never lost: a 409 holds the job for the next pass, which reads the claim again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.render import mpsclaims
from paralleljob.k8s.edge.render.claims import DeviceClaim, claim_path
from paralleljob.k8s.plan.actions import PodBind
from paralleljob.k8s.runtime.api import Answer, ApiError, Kube, retrying
from paralleljob.k8s.view.store import ObjectStore

HOLD, REFUSED = "hold", "refused"  # what went wrong: try again after a pause, or the job's gang cannot be completed

log = logging.getLogger("paralleljob.k8s")


class SharedClaims:
    def __init__(self, kube: Kube, pods: ObjectStore[PodInfo], claim_store: ObjectStore[Any] | None) -> None:
        self.kube = kube
        self.pods = pods
        self.claim_store = claim_store
        self.locks: dict[tuple[str, str], asyncio.Lock] = {}  # one per claim ever written: a few per MPS GPU

    async def ensure(self, bind: PodBind, claim: DeviceClaim) -> tuple[str, str]:
        """("", "") when the pod may be bound (the claim is allocated to its GPU and reserved for it), else
        (HOLD or REFUSED, why)."""
        key = (bind.namespace, claim.name)
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:
            try:
                return await self._ensure(bind, claim)
            except ApiError as exc:
                if exc.answer in (Answer.TRANSIENT, Answer.GONE, Answer.CONFLICT):
                    return HOLD, f"ResourceClaim {claim.name} for pod {bind.name} not ready: {exc.message}"
                return REFUSED, f"the API refused ResourceClaim {claim.name}: {exc.message}"

    async def _ensure(self, bind: PodBind, claim: DeviceClaim) -> tuple[str, str]:
        path = claim_path(bind.namespace, claim.name)
        body = await self._body(bind.namespace, claim)
        if not mpsclaims.is_ours(body, claim):
            return REFUSED, (
                f"ResourceClaim {claim.name} exists and is not the operator's MPS claim for {claim.mps_percent}% shares"
            )
        verdict = mpsclaims.state(body, claim, bind.uid)
        if verdict == "stale":
            # An allocation cannot be changed: the GPU's device is another now (a replaced pool); start over.
            uid = str((body.get("metadata") or {}).get("uid") or "")
            await retrying(lambda: self.kube.delete(path, uid or None))
            log.info("replaced MPS ResourceClaim %s/%s allocated to another device", bind.namespace, claim.name)
            body = await self._body(bind.namespace, claim)
            verdict = mpsclaims.state(body, claim, bind.uid)
        if verdict == "write":
            live = set()
            for entry in mpsclaims.reserved_pods(body):  # (name, uid): kept while that pod is there and running
                pod = self.pods.get(bind.namespace, entry[0])
                if pod is not None and pod.uid == entry[1] and not pod.terminal:
                    live.add(pod.uid)
            try:
                reserved = mpsclaims.reservations(body, bind.name, bind.uid, live | {bind.uid})
            except ValueError as exc:
                return HOLD, f"ResourceClaim {claim.name}: {exc}"
            patch = mpsclaims.status_patch(body, claim, bind.node, reserved)
            body = await retrying(lambda: self.kube.merge_patch(f"{path}/status", patch))
        if self.claim_store is not None:
            self.claim_store.upsert(body)
        return "", ""

    async def _body(self, namespace: str, claim: DeviceClaim) -> dict[str, Any]:
        """The claim as it is now, created (unallocated) if it does not exist."""
        path = claim_path(namespace, claim.name)
        try:
            return await retrying(lambda: self.kube.request("GET", path))
        except ApiError as exc:
            if exc.answer is not Answer.GONE:
                raise
        manifest = mpsclaims.claim_manifest(namespace, claim)
        try:
            return await retrying(lambda: self.kube.request("POST", claim_path(namespace), manifest))
        except ApiError as created:
            if created.answer is not Answer.CONFLICT:
                raise
        return await retrying(lambda: self.kube.request("GET", path))
