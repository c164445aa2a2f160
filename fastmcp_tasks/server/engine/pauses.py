"""Paused tools, honoured by this process: no run of a paused tool starts here.

An operator pauses a tool of an application in the store (`stores.operations`:
`pause`, `resume`, `paused`); every process sharing the store honours it. `Pauses`
keeps this process's copy of the store's pauses, read again at most every
`REFRESH_SECONDS` when asked (`is_paused`), never on a timer, so an idle process
costs the store nothing. Callers that ask while a read is under way wait for it (a
burst of claims right after a pause must not start on the copy from before it). A
read that fails keeps the copy it had, for `REFRESH_SECONDS`; the store's own bound
(`store_timeout`) limits how long a read may take.

Where it is asked:

- at creation (`server.creation`): a task of a tool known paused is created
  unleased, as a front end creates it, showing `paused_message`; no attempt is
  counted and no slot is taken;
- before a task's tool body starts in this process, for every task that waited
  (a claim from the queue, a recovery's requeue, this process's own queue):
  `hold` hands it back with `store.hold_paused`, a compare-and-set with the pause
  still being there. A held task waits unleased until `resume` makes it claimable
  again (a `queued` change, heard by every idle worker's watcher). When the store
  refuses (the pause was lifted meanwhile, a cancel was requested, the lease is
  gone) the task goes on as if it were not paused: its start or its cancel follows.

The copy may be up to `REFRESH_SECONDS` old: a pause begun that recently may still
see a run start, and a run that was already going when the pause began runs to its
end (a pause stops starting, like a queue pause). A stale "paused" costs one refused
`hold_paused`, never a held task after `resume`. A task created to start at once by
this process (its run counted at creation) is checked at creation only.
"""

from __future__ import annotations

import logging
import time

import anyio

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.observability import shown_id
from fastmcp_tasks.stores.operations import OperableTaskStore, pause_key

logger = logging.getLogger("fastmcp_tasks.runner")

#: Seconds a copy of the store's pauses is used before it is read again.
REFRESH_SECONDS = 1.0


def paused_message(tool: str) -> str:
    """The status message of a task held because its tool is paused."""
    return f"Paused: tool {tool!r} is paused by an operator; it runs when resumed"


class Pauses:
    """This process's copy of the store's pauses for its application (module doc)."""

    def __init__(
        self,
        store: OperableTaskStore | None,
        app: str | None,
        history: HistoryWriter,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.store = store
        self.key = pause_key(app)
        self.history = history
        self.refresh_seconds = refresh_seconds
        self._tools: frozenset[str] = frozenset()  # this application's paused tools
        self._read_at = -float("inf")  # time.monotonic() of the last read begun
        self._reading: anyio.Event | None = None  # set when the read under way ends

    @property
    def tools(self) -> frozenset[str]:
        """The tools of this application paused as of the last read."""
        return self._tools

    async def is_paused(self, tool: str) -> bool:
        """Whether `tool` of this application is paused (a copy at most `refresh_seconds` old)."""
        if self.store is None:
            return False
        await self.refresh()
        return tool in self._tools

    async def refresh(self) -> None:
        """Read the store's pauses again if the copy is older than `refresh_seconds`; a
        read under way is waited for."""
        store = self.store
        if self._reading is not None:
            await self._reading.wait()
            return
        now = time.monotonic()
        if store is None or now - self._read_at < self.refresh_seconds:
            return
        self._read_at = now
        self._reading = done = anyio.Event()
        try:
            pauses = await store.paused()
            self._tools = frozenset(p.tool for p in pauses if p.app == self.key)
        except StoreError as exc:
            logger.debug("Reading the paused tools failed (%s); using the last copy", exc)
        finally:
            self._reading = None
            done.set()

    async def hold(self, task_id: str, tool: str, owner: str) -> bool:
        """Hand a task of a paused tool, leased to `owner`, back to wait for `resume`;
        False when the store refuses (not paused any more, cancel requested, not ours)."""
        if self.store is None:
            return False
        held = await self.store.hold_paused(task_id, owner, paused_message(tool))
        if held is None:
            return False
        self.history.note(task_id, "paused", worker=owner)
        logger.info("Task %s (%s) held: its tool is paused", shown_id(task_id), tool)
        return True

    async def holds(self, task_id: str, tool: str, owner: str) -> bool:
        """Before the tool body of a task that waited starts here: whether it was held
        instead (its tool is paused and the store agreed)."""
        if self.store is None or not await self.is_paused(tool):
            return False
        return await self.hold(task_id, tool, owner)


__all__ = ["REFRESH_SECONDS", "Pauses", "paused_message"]
