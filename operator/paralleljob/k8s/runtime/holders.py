"""The placements that hold GPUs, as each pass's view needs them, kept from the job store's changes.

With thousands of jobs waiting, most passes follow a pod or node event and change no job, and a flood
changes some waiting job on every pass: so the claims are worked out again only when a job or the set of
busy chains changed, and from the jobs that may hold GPUs (kept up to date from the store's changes) rather
than from every job. The result is what ``plan.decide.claims_of`` finds reading every job.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.decide import claims_of, holds_gpus
from paralleljob.k8s.view.clusterview import Claim
from paralleljob.k8s.view.store import ObjectStore


class HolderClaims:
    """The claims of one job store, cached between passes."""

    def __init__(self, jobs: ObjectStore[JobObject]) -> None:
        self.jobs = jobs
        self._claims_for: tuple[object, list[Claim]] | None = None  # (what they were worked out from, claims)
        # the jobs whose recorded placement holds GPUs (active, not deleting), kept from the job store's
        # changes; None: to be read from the whole store
        self._holders: dict[tuple[str, str], JobObject] | None = None

    def claims(self, busy: Mapping[str, PlacementRecord | None], releasing: Collection[str]) -> list[Claim]:
        """The placements holding GPUs (``claims_of``: ``busy`` chains' placements count, ``releasing`` jobs'
        do not), worked out again only when a job or the set of busy chains changed."""
        # the records themselves, not their ids: the key keeps them alive, so a freed id can never match anew
        key = (self.jobs.version, tuple(busy.items()), frozenset(releasing))
        if self._claims_for is None or self._claims_for[0] != key:
            # only the jobs that may hold GPUs, not every job: a flood changes some waiting job every pass
            candidates = {job.key: job for job in self._holding()}
            for busy_key in busy:
                namespace, _, name = busy_key.partition("/")
                if busy_key not in candidates and (job := self.jobs.get(namespace, name)) is not None:
                    candidates[busy_key] = job
            self._claims_for = (key, claims_of(list(candidates.values()), busy, releasing))
        return self._claims_for[1]

    def _holding(self) -> list[JobObject]:
        """The jobs whose recorded placement holds GPUs (those ``claims_of`` reads when not busy), kept up to
        date from the job store's changes since the last call; read from the whole store after a re-list."""
        changed, restart = self.jobs.take_changes()
        if restart or self._holders is None:
            self._holders = {key: job for key, job in self.jobs.items() if holds_gpus(job)}
        else:
            for store_key in changed:
                job = self.jobs.get(*store_key)
                if job is not None and holds_gpus(job):
                    self._holders[store_key] = job
                else:
                    self._holders.pop(store_key, None)
        return list(self._holders.values())
