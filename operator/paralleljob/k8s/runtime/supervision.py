"""Background work the reconcile loop starts (job chains, orphan and claim deletes, adoptions) as tasks
that never take the loop down: what one throws is logged, and the next pass decides again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("paralleljob.k8s")


def supervised(work: Coroutine[Any, Any, None], name: str, ended: Callable[[bool], None]) -> asyncio.Task[None]:
    """``work`` as a task that never takes the loop down: an exception is logged (the next pass decides
    again) and ``ended(crashed)`` runs however it ends, cancelled included, to take it off its in-flight
    table and wake the loop."""

    async def run() -> None:
        crashed = False
        try:
            await work
        except Exception:
            log.exception("%s failed", name)
            crashed = True
        finally:
            ended(crashed)

    return asyncio.create_task(run(), name=name)
