"""Leader election by a coordination.k8s.io Lease, decided purely from the Lease's spec and the time.

The holder renews well inside ``leaseDurationSeconds``; anyone may take a lease whose renewal is older
than its duration. An instance that restarts under the same identity (same pod name) takes its own lease
back at once instead of waiting for it to expire.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def micro_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Verdict:
    take: bool  # write the lease with us as holder
    holder: str  # who holds it now
    transitions: int  # leaseTransitions to write


def verdict(spec: Mapping[str, Any], me: str, now: dt.datetime) -> Verdict:
    holder = str(spec.get("holderIdentity") or "")
    transitions = int(spec.get("leaseTransitions") or 0)
    if holder == me:
        return Verdict(True, holder, transitions)
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = float(spec.get("leaseDurationSeconds") or 0)
    expired = not holder or renewed is None or (now - renewed).total_seconds() > duration
    return Verdict(expired, holder, transitions + 1 if expired else transitions)


def lease_spec(me: str, now: dt.datetime, duration_s: float, transitions: int, acquired: str | None) -> dict[str, Any]:
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": max(1, round(duration_s)),
        "acquireTime": acquired or micro_time(now),
        "renewTime": micro_time(now),
        "leaseTransitions": transitions,
    }
