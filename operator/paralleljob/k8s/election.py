"""Keep (or wait for) the leader Lease; only the leader reconciles. Watches run on every replica, so a
standby takes over with warm caches."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

from paralleljob.k8s.api import ApiError, Kube
from paralleljob.k8s.lease import lease_spec, verdict

log = logging.getLogger("paralleljob.k8s")


class LeaderElection:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, duration_s: float) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.identity = identity
        self.duration = duration_s
        self.leader = asyncio.Event()
        self.lost = asyncio.Event()
        self._last_renew = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                held = await self._try_once()
            except ApiError as exc:
                log.warning("leader election: %s", exc)
                held = False
            if held:
                self._last_renew = loop.time()
                if not self.leader.is_set():
                    log.info("became leader as %s", self.identity)
                    self.leader.set()
            elif self.leader.is_set() and loop.time() - self._last_renew > self.duration:
                log.error("lost the leader lease; stopping")
                self.leader.clear()
                self.lost.set()
                return
            await asyncio.sleep(self.duration / 3 if held else max(0.2, self.duration / 6))

    async def _try_once(self) -> bool:
        now = dt.datetime.now(dt.UTC)
        try:
            lease = await self.kube.request("GET", f"{self.path}/{self.name}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name},
                "spec": lease_spec(self.identity, now, self.duration, 0, None),
            }
            try:
                await self.kube.request("POST", self.path, body)
            except ApiError as create_error:
                if create_error.status == 409:
                    return False
                raise
            return True
        spec: dict[str, Any] = lease.get("spec") or {}
        decision = verdict(spec, self.identity, now)
        if not decision.take:
            return False
        acquired = spec.get("acquireTime") if decision.holder == self.identity else None
        lease["spec"] = lease_spec(self.identity, now, self.duration, decision.transitions, acquired)
        try:
            await self.kube.request("PUT", f"{self.path}/{self.name}", lease)
        except ApiError as exc:
            if exc.status == 409:
                return False  # somebody else wrote it first
            raise
        return True

    async def release(self) -> None:
        """Give the lease up on a clean shutdown so a successor need not wait for it to expire."""
        if not self.leader.is_set():
            return
        try:
            lease = await self.kube.request("GET", f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.kube.request("PUT", f"{self.path}/{self.name}", lease)
        except ApiError as exc:
            log.debug("lease not released: %s", exc)
        self.leader.clear()
