"""Garbage collection of the operator's ResourceClaims (DRA): a claim whose worker pod is gone or finished
is deleted, so no device stays allocated for a pod that no longer needs it (Kubernetes' garbage collector
would only act once the whole ParallelJob is deleted). An MPS GPU's shared claim (``render/mpsclaims.py``),
which no job owns, is deleted once no record names it and no pod it is reserved for still runs: read from
the records and pods alone on every pass, so a claim left by an operator that died is collected too."""

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

    def collect(
        self, inflight: Collection[str], wanted_shared: Callable[[], Collection[tuple[str, str]]] | None = None
    ) -> None:
        """Start deleting the operator's claims whose worker pod is gone or finished; never while the job's
        chain runs (``inflight``: job keys): it may be creating that very pod. ``wanted_shared``: (namespace,
        name) of the MPS claims the records (loaded and being written) name, asked for only when there is an
        MPS claim; None: leave MPS claims alone."""
        wanted: Collection[tuple[str, str]] | None = None
        for claim in self.claims.values():
            if claim.mps_share and wanted_shared is not None:
                wanted = wanted_shared() if wanted is None else wanted
                if self._unused(claim, wanted):
                    self._start(claim)
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
            self._start(claim)

    def _unused(self, claim: ClaimInfo, wanted: Collection[tuple[str, str]]) -> bool:
        """An MPS claim no record names, reserved for no pod that still exists unfinished."""
        if (claim.namespace, claim.name) in wanted or (claim.namespace, claim.name) in self.deletes:
            return False
        if self.namespaces and claim.namespace not in self.namespaces:
            return False
        live = {p.uid for p in self.pods.values() if p.namespace == claim.namespace and not p.terminal}
        return not live.intersection(claim.reserved_for)

    def _start(self, claim: ClaimInfo) -> None:
        key = (claim.namespace, claim.name)
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
            why = f"its pod {claim.pod} is gone" if claim.pod else "no MPS share uses it"
            log.info("deleted ResourceClaim %s/%s: %s", claim.namespace, claim.name, why)
            self.claims.forget(claim.namespace, claim.name, claim.uid)
        except ApiError as exc:
            if exc.answer in (Answer.GONE, Answer.CONFLICT):  # gone already, or replaced (UID precondition)
                self.claims.forget(claim.namespace, claim.name, claim.uid)
            else:
                log.warning("could not delete ResourceClaim %s/%s: %s", claim.namespace, claim.name, exc)
