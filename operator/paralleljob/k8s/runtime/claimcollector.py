"""Garbage collection of the operator's ResourceClaims (DRA): a claim whose worker pod is gone or finished
is deleted, so no device stays allocated for a pod that no longer needs it (Kubernetes' garbage collector
would only act once the whole ParallelJob is deleted)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Collection, Sequence

from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.dra import ClaimInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.render.claims import claim_path
from paralleljob.k8s.runtime.api import Answer, ApiError, Kube, retrying
from paralleljob.k8s.runtime.supervision import supervised
from paralleljob.k8s.view.store import ObjectStore

log = logging.getLogger("paralleljob.k8s")


class ClaimCollector:
    """Deletes the claims no pod needs, one task per claim; ``ended`` runs when a delete is done (it wakes
    the loop)."""

    def __init__(
        self,
        kube: Kube,
        claims: ObjectStore[ClaimInfo],
        pods: ObjectStore[PodInfo],
        namespaces: Sequence[str],
        ended: Callable[[], None],
    ) -> None:
        self.kube = kube
        self.claims = claims
        self.pods = pods
        self.namespaces = namespaces
        self.ended = ended
        self.deletes: dict[tuple[str, str], asyncio.Task[None]] = {}

    def collect(self, inflight: Collection[str]) -> None:
        """Start deleting the operator's claims whose worker pod is gone or finished; never while the job's
        chain runs (``inflight``: job keys): it may be creating that very pod."""
        for claim in self.claims.values():
            if not claim.operator_owned:
                continue
            if self.namespaces and claim.namespace not in self.namespaces:
                continue
            key = (claim.namespace, claim.name)
            if key in self.deletes or object_key(claim.namespace, claim.job) in inflight:
                continue
            pod = self.pods.get(claim.namespace, claim.pod)
            if pod is not None and not pod.terminal:
                continue
            self.deletes[key] = supervised(
                self._delete(claim),
                f"deleting ResourceClaim {claim.namespace}/{claim.name}",
                functools.partial(self._ended, key),
            )

    def _ended(self, key: tuple[str, str], crashed: bool) -> None:
        self.deletes.pop(key, None)
        self.ended()

    async def _delete(self, claim: ClaimInfo) -> None:
        try:
            await retrying(lambda: self.kube.delete(claim_path(claim.namespace, claim.name), claim.uid or None))
            log.info("deleted ResourceClaim %s/%s: its pod %s is gone", claim.namespace, claim.name, claim.pod)
            self.claims.forget(claim.namespace, claim.name, claim.uid)
        except ApiError as exc:
            if exc.answer in (Answer.GONE, Answer.CONFLICT):  # gone already, or replaced (UID precondition)
                self.claims.forget(claim.namespace, claim.name, claim.uid)
            else:
                log.warning("could not delete ResourceClaim %s/%s: %s", claim.namespace, claim.name, exc)
