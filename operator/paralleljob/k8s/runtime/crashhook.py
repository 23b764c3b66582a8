"""A test hook for "the operator killed in the middle of a gang": let exactly N binds go out, hold every later
one, and end the process hard once the N have landed (``PARALLELJOB_CRASH_AFTER_BINDS``; the crash-repair e2e
tests and ``paralleljob bench worker-crash`` use it). Kept out of the executor, which only calls
:meth:`before_bind` and :meth:`after_bind` when a hook is configured.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import NoReturn

log = logging.getLogger(__name__)

CRASH_EXIT_CODE = 17


class CrashAfterBinds:
    def __init__(self, binds: int, exit_process: Callable[[int], NoReturn] = os._exit) -> None:
        if binds < 1:
            raise ValueError(f"crash after {binds} binds: give at least 1")
        self.binds = binds
        self.exit_process = exit_process
        self.started = 0
        self.done = 0

    async def before_bind(self) -> None:
        """Let the first N binds go out; any later one waits forever (the process ends first)."""
        if self.started >= self.binds:
            await asyncio.Event().wait()
        self.started += 1

    def after_bind(self) -> None:
        self.done += 1
        if self.done >= self.binds:
            log.error("crash hook: exiting hard after %d binds", self.done)
            self.exit_process(CRASH_EXIT_CODE)
