"""The reconciler's one way to run background work (job chains, orphan deletes, adoptions, claim deletes):
an exception is logged, never raised into the loop, and the end callback runs however the work ends."""

from __future__ import annotations

import asyncio
import logging

import pytest

from paralleljob.k8s.runtime.supervision import supervised


def test_every_ending_reaches_the_callback(caplog: pytest.LogCaptureFixture) -> None:
    ended: dict[str, bool] = {}

    async def fine() -> None:
        await asyncio.sleep(0)

    async def broken() -> None:
        raise RuntimeError("the API said something odd")

    async def endless() -> None:
        await asyncio.Event().wait()

    async def scenario() -> None:
        tasks = [
            supervised(work(), name, lambda crashed, n=name: ended.__setitem__(n, crashed))
            for name, work in (("fine", fine), ("broken", broken), ("endless", endless))
        ]
        await asyncio.sleep(0.01)
        tasks[2].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert tasks[1].exception() is None  # logged, not raised

    with caplog.at_level(logging.ERROR, logger="paralleljob.k8s"):
        asyncio.run(scenario())
    assert ended == {"fine": False, "broken": True, "endless": False}
    assert "broken failed" in caplog.text and "the API said something odd" in caplog.text
