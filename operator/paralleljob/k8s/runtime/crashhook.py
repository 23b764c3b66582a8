"""A test hook for "the operator killed in the middle of a gang": let exactly N binds go out, hold every later
one, and end the process hard once the N have landed (``PARALLELJOB_CRASH_AFTER_BINDS``; the crash-repair e2e
tests and ``paralleljob bench worker-crash`` use it). Kept out of the executor, which only calls
:meth:`before_bind`, then :meth:`after_bind` or :meth:`bind_failed`, when a hook is configured.

A bind the API refuses (the pod gone or replaced meanwhile, a conflict) gives its turn back to a held one:
counting it as "out" made the process wait forever with fewer than N landed, which is how CI's
``crash_after=10`` run hung for 90 s while stale pods were still being replaced.
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
        self._turn_freed: asyncio.Event | None = None

    async def before_bind(self) -> None:
        """Let N binds be out at once; a later one waits for a refused bind's turn, or forever (the process
        ends first)."""
        while self.started >= self.binds:
            if self._turn_freed is None:
                self._turn_freed = asyncio.Event()
            await self._turn_freed.wait()
        self.started += 1

    def bind_failed(self) -> None:
        """The bind did not land: its turn goes to a waiting one."""
        self.started -= 1
        if self._turn_freed is not None:
            self._turn_freed.set()
            self._turn_freed = None

    def after_bind(self) -> None:
        self.done += 1
        if self.done >= self.binds:
            log.error("crash hook: exiting hard after %d binds", self.done)
            self.exit_process(CRASH_EXIT_CODE)
