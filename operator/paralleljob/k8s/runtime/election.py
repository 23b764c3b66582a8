"""Keep (or wait for) the leader Lease; only the leader reconciles. Watches run on every replica, so a
standby takes over with warm caches.

The rules are client-go's, because two leaders mean two placers and GPUs given out twice:

- A standby never compares the holder's ``renewTime`` with its own clock (the two clocks may disagree by
  more than a lease). It remembers when *it* last saw the lease record change, by its own monotonic clock,
  and takes the lease only once the record has stood still for ``leaseDurationSeconds`` since then.
- The leader renews every ``retry`` seconds, each attempt bounded by what is left of its renew deadline, and gives up
  leadership once ``renew_deadline`` (shorter than the lease duration) has passed since its last successful renewal:
  it stops acting before any standby may take over. :meth:`leading` is that test, checked by every write the operator
  makes (``Kube.write_fence``), so a leader paused past its deadline (SIGSTOP, a long GC, a frozen VM) cannot act on
  what it knew before the pause, even for the moment until this loop notices.
- Writes to the Lease carry its ``resourceVersion``: of two standbys racing for an expired lease, one gets a
  409 and stays a standby.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from collections.abc import Callable
from typing import Any

from paralleljob.k8s.edge.lease import lease_spec
from paralleljob.k8s.runtime.api import ApiError, Kube

log = logging.getLogger("paralleljob.k8s")


class LeaderElection:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        duration_s: float,
        renew_deadline_s: float | None = None,
        retry_s: float | None = None,
        clock: Callable[[], float] | None = None,
        observe: Callable[[str, float], None] | None = None,
    ) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.identity = identity
        self.duration = duration_s
        # client-go's defaults are 15 / 10 / 2 s: the same proportions for any duration.
        self.renew_deadline = renew_deadline_s if renew_deadline_s is not None else duration_s * 2 / 3
        self.retry = retry_s if retry_s is not None else duration_s / 7.5
        if not 0 < self.retry < self.renew_deadline < self.duration:
            raise ValueError(
                f"leader election needs 0 < retry ({self.retry}) < renew deadline ({self.renew_deadline})"
                f" < lease duration ({self.duration})"
            )
        self.clock = clock or (lambda: asyncio.get_running_loop().time())
        # Told of every attempt of the leader to renew: (renewed | conflict | failed | timeout, seconds taken).
        self.observe = observe or (lambda outcome, seconds: None)
        self._last_trouble = ""  # why the latest renewal failed, for the step-down message
        self.leader = asyncio.Event()
        self.lost = asyncio.Event()
        self._renewed_at: float | None = None  # our last successful write, by our clock
        self.renewals = 0  # successful writes of the lease so far (a new one: it was just renewed)
        self._observed: tuple[Any, ...] | None = None  # the lease record as last seen
        self._observed_at = 0.0  # when it last changed, by our clock

    def leading(self) -> bool:
        """Whether this instance may act now: it holds the lease and renewed it within the renew deadline."""
        return (
            self.leader.is_set()
            and not self.lost.is_set()
            and self._renewed_at is not None
            and self.clock() - self._renewed_at < self.renew_deadline
        )

    async def run(self) -> None:
        while True:
            if self.leader.is_set() and not self.leading():
                log.error(
                    "leader lease not renewed for %.1f s (deadline %.1f s)%s; stepping down",
                    self.clock() - (self._renewed_at or 0.0),
                    self.renew_deadline,
                    f": the API server did not renew it in time ({self._last_trouble})" if self._last_trouble else "",
                )
                self.leader.clear()
                self.lost.set()
                return
            timeout = self.retry
            if self.leader.is_set() and self._renewed_at is not None:
                # A leader's attempt may take what is left of its renew deadline (client-go's rule), not just
                # the retry period: on a loaded machine an API server answering in 2-3 s failed every attempt
                # cut at 2 s, and the leader stepped down while each renewal would have succeeded.
                timeout = max(0.05, self.renew_deadline - (self.clock() - self._renewed_at))
            leading = self.leader.is_set()
            started = self.clock()
            try:
                async with asyncio.timeout(timeout):  # not wait_for: see Reconciler.run (gh-86296)
                    held = await self._try_once()
                outcome = "renewed" if held else "conflict"
            except (ApiError, TimeoutError) as exc:
                why = str(exc) or f"the attempt timed out after {timeout:.2f} s"
                log.warning("leader election: %s", why)
                held, outcome = False, "timeout" if isinstance(exc, TimeoutError) else "failed"
                self._last_trouble = why
            took = self.clock() - started
            if leading:
                self.observe(outcome, took)
                if held and took > self.retry:
                    log.warning(
                        "renewing the leader lease took %.2f s (more than the %.2f s between renewals): the API"
                        " server is slow; the lease is lost if this reaches %.1f s",
                        took,
                        self.retry,
                        self.renew_deadline,
                    )
            if held:
                self._last_trouble = ""
                self.renewals += 1
                # When the attempt began, not when its answer came: the lease was written no earlier than
                # that, so no standby's timer started before it; a pause while the answer was in flight
                # (SIGSTOP, a long GC) then counts against this leader, never in its favour.
                self._renewed_at = started
                if not self.leader.is_set():
                    log.info("became leader as %s", self.identity)
                    self.leader.set()
            await asyncio.sleep(self.retry * (0.9 + 0.2 * random.random()))

    async def _try_once(self) -> bool:
        try:
            lease = await self.kube.request("GET", f"{self.path}/{self.name}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            return await self._create()
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        now = self.clock()
        record = (holder, spec.get("renewTime"), spec.get("acquireTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        if holder and holder != self.identity and now - self._observed_at < duration:
            return False  # someone else holds it, and we have not seen it stand still for a whole lease
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        lease["spec"] = lease_spec(self.identity, dt.datetime.now(dt.UTC), self.duration, transitions, acquired)
        try:
            # the body keeps metadata.resourceVersion: a concurrent writer makes this a 409
            await self.kube.request("PUT", f"{self.path}/{self.name}", lease, fenced=False)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def _create(self) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name},
            "spec": lease_spec(self.identity, dt.datetime.now(dt.UTC), self.duration, 0, None),
        }
        try:
            await self.kube.request("POST", self.path, body, fenced=False)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def release(self) -> None:
        """Give the lease up on a clean shutdown so a successor need not wait for it to expire."""
        if not self.leading():
            return
        self.leader.clear()
        try:
            lease = await self.kube.request("GET", f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.kube.request("PUT", f"{self.path}/{self.name}", lease, fenced=False)
        except ApiError as exc:
            log.debug("lease not released: %s", exc)
