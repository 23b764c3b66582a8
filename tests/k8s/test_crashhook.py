"""The crash test hook lets exactly N binds out, holds later ones, and ends the process once N have landed."""

from __future__ import annotations

import asyncio
from typing import NoReturn

import pytest

from paralleljob.k8s.runtime.crashhook import CRASH_EXIT_CODE, CrashAfterBinds


class Exited(Exception):
    pass


def _hook(binds: int) -> tuple[CrashAfterBinds, list[int]]:
    """A hook whose "exit" records the code and raises :class:`Exited` instead of ending pytest."""
    codes: list[int] = []

    def exit_process(code: int) -> NoReturn:
        codes.append(code)
        raise Exited

    return CrashAfterBinds(binds, exit_process), codes


def test_n_binds_go_out_the_next_waits_and_the_nth_landing_ends_the_process() -> None:
    hook, codes = _hook(2)

    async def scenario() -> None:
        await hook.before_bind()
        await hook.before_bind()
        with pytest.raises(TimeoutError):  # a third bind never goes out
            await asyncio.wait_for(hook.before_bind(), 0.05)
        hook.after_bind()
        assert codes == []
        with pytest.raises(Exited):
            hook.after_bind()

    asyncio.run(scenario())
    assert codes == [CRASH_EXIT_CODE]
    with pytest.raises(ValueError):
        CrashAfterBinds(0)


def test_a_refused_bind_gives_its_turn_to_a_held_one() -> None:
    """CI hung here: a bind refused by the API (pod replaced meanwhile) kept its turn, so with N=2 only one
    bind ever landed and the process never ended."""
    hook, codes = _hook(2)

    async def scenario() -> None:
        await hook.before_bind()
        await hook.before_bind()
        held = asyncio.ensure_future(hook.before_bind())
        await asyncio.sleep(0.01)
        assert not held.done()
        hook.bind_failed()  # the second one was refused
        await asyncio.wait_for(held, 30)  # the held bind goes out in its place
        hook.after_bind()
        assert codes == []
        with pytest.raises(Exited):
            hook.after_bind()

    asyncio.run(scenario())
    assert codes == [CRASH_EXIT_CODE]
