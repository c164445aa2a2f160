"""SIGTERM to a server started with `mcp.run()`: running tasks still get their grace.

FastMCP's `run(transport="http")` enters the server lifespan around uvicorn.
uvicorn answers SIGTERM by stopping HTTP and then raising the signal again with
the handler that was there before it started; with the default handler the
process dies right then, before the lifespan exits, so the extension's
`shutdown_grace` never runs and running tasks are interrupted as by a crash.
(Under `uvicorn app:app` the app lifespan exits before the re-raise, so the
grace runs without help.)

While an extension with a grace runs in the main thread and nothing else
handles SIGTERM, `SigtermGuard` installs a handler that turns the signal into
the extension's own graceful shutdown:

- raised again by uvicorn after HTTP stopped: nothing more to do; the lifespan
  exit that follows lets running tasks finish for `shutdown_grace` and hands the
  rest back;
- any other SIGTERM (a stdio server, say): the runner stops taking work, running
  tasks get the grace, queued ones go back to the queue, then the default handler
  is restored and the signal raised again, so the process still ends as SIGTERM
  asks.

The previous handler is restored when the lifespan ends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from fastmcp_tasks.server.engine.runner import TaskRunner

logger = logging.getLogger("fastmcp_tasks.runner")


class SigtermGuard:
    """Installs, for one lifespan, the SIGTERM handler described in the module docstring."""

    def __init__(self, runner: Callable[[], TaskRunner | None], grace: float) -> None:
        self._runner = runner
        self._grace = grace
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: Any = None
        self._installed = False
        self.exiting = False  # the lifespan exit has begun: it does the draining
        self._drain: asyncio.Task[None] | None = None

    def install(self) -> bool:
        """Install the handler if this is the main thread and SIGTERM is unhandled."""
        if self._grace <= 0 or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False  # the application (or a worker command) handles it
        self._loop = asyncio.get_running_loop()
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self._installed = True
        return True

    def uninstall(self) -> None:
        self.exiting = True
        if self._installed and signal.getsignal(signal.SIGTERM) == self._handle:
            signal.signal(signal.SIGTERM, self._previous)
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.exiting or self._loop is None or self._drain is not None:
            return
        logger.warning("SIGTERM: finishing running tasks (up to %g s) before exiting", self._grace)
        self._loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        assert self._loop is not None
        self._drain = self._loop.create_task(self._drain_then_exit(), name="fastmcp-tasks sigterm")

    async def _drain_then_exit(self) -> None:
        runner = self._runner()
        if runner is None or self.exiting:
            return
        runner.stop_taking_work()
        with anyio.move_on_after(self._grace):
            await runner.wait_idle()
        if self.exiting:  # the lifespan is exiting after all: it hands back and finishes
            return
        await runner.hand_back_queued()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
