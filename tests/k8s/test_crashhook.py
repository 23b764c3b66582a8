"""The crash test hook lets exactly N binds out, holds later ones, and ends the process once N have landed."""

from __future__ import annotations

import asyncio
from typing import NoReturn

import pytest

from paralleljob.k8s.runtime.crashhook import CRASH_EXIT_CODE, CrashAfterBinds


class Exited(Exception):
    pass


def test_n_binds_go_out_the_next_waits_and_the_nth_landing_ends_the_process() -> None:
    codes: list[int] = []

    def exit_process(code: int) -> NoReturn:
        codes.append(code)
        raise Exited

    hook = CrashAfterBinds(2, exit_process)

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
