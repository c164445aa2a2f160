"""Queue wake-ups shared out among workers, on a store that offers them.

On a store with `queue_wakes` (`stores.queue_wakes`: Redis), a worker does not hear
every `queued` change on its feed; `QueueListener.follow` joins its application's
consumers instead and reads wake-ups no other worker gets, so each new task wakes one
worker rather than all of them, and the others run no claim round that would find it
taken. It asks for no more wake-ups than it has room for: its free slots less the
wake-ups it holds whose claim round has not run yet (`room`). A full worker reads
none, so the wake-up goes to a worker that can take the task; nor does a worker that
is stopping (it takes no new task). Each wake-up is applied
as the feed's would be (`watcher.ChangeWatcher.apply`: a claim round after the batch
window, or at a retry's due time).

Wake-ups are hints: the queue loop still claims when a slot frees while more may be
waiting, when its feed subscription starts again, and on its safety poll, so a
wake-up lost with a worker that died delays the tasks it stood for by at most that
poll. A claim round that cannot claim (the worker filled up after reading its wake-up,
a retry it was told of came due while it is full, it is stopping) hands on what woke
it (`take_queued`): the store wakes another worker when tasks wait. The listener runs
supervised: a store failure ends the subscription and the supervisor joins again with
backoff.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.engine.watcher import ChangeWatcher
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.stores.queue_wakes import QueueWakeSource

#: The supervised loop's name (`loops.start_loops`, `HealthMonitor`).
LOOP = "queue wake-ups"


class ListeningRunner(Protocol):
    """What the listener needs of `runner.TaskRunner`."""

    health: HealthMonitor
    owner: str
    app: str | None
    watcher: ChangeWatcher

    @property
    def stopping(self) -> bool: ...

    def free_slots(self) -> int: ...


class QueueListener:
    """Reads this worker's share of its application's queue wake-ups (module doc)."""

    def __init__(self, runner: ListeningRunner, source: QueueWakeSource) -> None:
        self.runner = runner
        self.source = source
        self.held = 0  # wake-ups handed to the queue loop whose claim round has not run

    def room(self) -> int:
        """How many more wake-ups this worker could act on now (none while it stops: a
        draining worker takes no new task, so it leaves the wake-ups to the others)."""
        if self.runner.stopping:
            return 0
        return self.runner.free_slots() - self.held

    async def follow(self) -> None:
        """One membership: read wake-ups while there is room, until cancelled or failing."""
        runner = self.runner
        watcher = runner.watcher
        async with self.source.queue_wakes(runner.app, runner.owner) as wakes:
            runner.health.loop_ok(LOOP)  # joined: a failure streak (if any) is over
            while True:
                room = self.room()
                if room <= 0:
                    await watcher.room_changed()
                    continue
                for change in await wakes.next(room):
                    if await watcher.apply(change):  # a claim round now: room it will use
                        self.held += 1
                await anyio.lowlevel.checkpoint()

    async def take_queued(self, take: Callable[[], Awaitable[bool]]) -> None:
        """Run one claim round (`take`), then count the wake-ups held when it began as
        spent (those read meanwhile wait for the next round, which they asked for). A
        round that could not claim (the worker is full, or stopping) hands on whatever
        woke it: a wake-up it read before it filled up, a retry this worker was told of
        coming due, its poll. The store wakes another worker when tasks wait
        (`stores.queue_wakes`), since one wake-up may stand for many tasks; a hand-on that
        fails is made again by the next round, which cannot claim either."""
        spent = self.held
        try:
            asked = await take()
        finally:
            self.held = max(0, self.held - spent)
            self.runner.watcher.room_may_have_changed()
        if asked:
            return
        if not self.runner.stopping:
            await self.source.hand_on(self.runner.app)
            return
        try:  # best effort: the store may be closing with the process
            await self.source.hand_on(self.runner.app)
        except StoreError:
            pass


__all__ = ["LOOP", "ListeningRunner", "QueueListener"]
