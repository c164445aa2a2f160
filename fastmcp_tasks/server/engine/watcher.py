"""What the runner hears from the store's change feed, kept whole across feed outages.

`ChangeWatcher.follow` subscribes to the feed for three kinds of change:
cancel requests and input answers for this process's tasks, and `queued`
(a task of this application became claimable, so an idle worker takes it at
once instead of polling). It runs supervised: when the feed breaks (a Redis
restart, a failing disk) the supervisor subscribes again, and every
subscription begins by reconciling: each task this process runs is read once
and a cancel request or an answer that arrived while nobody listened is
applied. Both are idempotent (a job is cancelled once; `take_answers` removes
what it returns), so nothing is lost or applied twice.

The queue loop waits in `queue_wait`: woken by a `queued` change, by a slot
freeing while more tasks may be waiting, or after `queue_poll` seconds at the
latest (the safety net for a change the feed trimmed), or when a retry's
backoff (`not_before` in a `queued` change, or one this process scheduled) is
due; wake-ups within `QUEUE_BATCH_SECONDS` of each other share one claim. On a store
without shared-out wake-ups (`stores.queue_wakes`) every worker hears every `queued`
change, so with several workers most claims of a burst
find the task taken already: after a claim round that took nothing the window doubles
(up to `QUEUE_BATCH_MAX_SECONDS`), and one that took a task sets it back. The
workers that keep losing then claim less often; a task still waits at most one window
for whichever worker claims next (plus, on PostgreSQL, the reader's pace: peers below),
and the safety poll is unchanged.

Peers. On PostgreSQL every worker's `LISTEN` reader is woken by every new task, and would
wake its runner up to once per window, so a pool of four made about three times the claim
rounds of one worker, each round taking a share of what one would have and many finding
nothing. Such a store paces its reader (`space_wakes`): the worker heartbeat lists the live
workers of the application (`peers`, `count_peers`) at the worker's first claim round and
then at each beat after which it claimed (an idle worker reads nothing). The first of them
by worker id (`primary`: every worker reading the same listing names the same one) keeps a
lone worker's pace and takes a busy queue as it comes; each other one (a secondary) waits
up to twice `peers` windows (at most `QUEUE_BATCH_MAX_SECONDS`; less by up to half at
random, so that their claims interleave) between two waits for notifications, and takes
what the primary leaves: the tasks beyond its free slots, or all of them while the primary
takes none (full; draining at shutdown, until its goodbye; or killed and still listed, up
to `WorkerInfo.gone_after`). While the others keep up, a secondary's claims find fewer
tasks than it has free slots, each created a moment ago; it then doubles that pace after
each such round, up to `SECONDARY_PACE_MAX_SECONDS` (`spared`). A round that fills every
free slot (the queue holds more than it can take) or takes a task created
`LEFT_WAITING_SECONDS` or more before (nobody else took it: the primary is full, draining
or gone; or a task created that long after now: the front end's clock is ahead of its own)
brings it back to its pace, from its reader's next read (`feed_parts.Pace`); so while it is
needed, it claims at least every `SECONDARY_PACE_MAX_SECONDS` (plus its claim window), and
mostly much sooner. Four workers under a queue that one could nearly keep up with made
about two and a half times the claim rounds of one, a third or more of them empty; with
this, about one and a half times, a fifth of them empty. The pool wakes and claims far less
often, each claim taking more; a notification after a pause that long is still handled at
once by every worker, and a freed slot while tasks wait claims after one window as before.
Cancel requests and answers share the reader, so under a busy queue they reach a secondary
up to its pace later. A store without such a reader (SQLite, whose workers poll; Redis,
which shares wake-ups out) is never told, and no count is read for it.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from typing import Literal

import anyio

from fastmcp_tasks.server.engine.jobs import WatchedRunner
from fastmcp_tasks.server.monitored_store import innermost
from fastmcp_tasks.stores.base import NEW_TASKS_KIND, TaskChange, get_many
from fastmcp_tasks.stores.operations import WorkerInfo
from fastmcp_tasks.stores.queue_wakes import queue_wakes_of

logger = logging.getLogger("fastmcp_tasks.runner")

WATCHED = frozenset({"cancel_requested", "answered", "queued"})

#: How long the queue loop lets wake-ups gather before it claims (see `queue_wait`).
QUEUE_BATCH_SECONDS = 0.01
#: The longest such window after claims that found nothing (see `claimed`).
QUEUE_BATCH_MAX_SECONDS = 0.08
#: The slowest a pool's secondary reads its notifications while the others keep up
#: (module doc: peers).
SECONDARY_PACE_MAX_SECONDS = 0.32
#: A task a secondary claims that waited this long was left by the others (module doc).
LEFT_WAITING_SECONDS = QUEUE_BATCH_MAX_SECONDS


class ChangeWatcher:
    """Follows the change feed for one runner; reconciles after every (re)subscription."""

    def __init__(self, runner: WatchedRunner) -> None:
        self.runner = runner
        self.subscribed = anyio.Event()
        self._wake = anyio.Event()
        self.more_queued = False  # the last claim filled every free slot
        self._due: list[float] = []  # when queued retries become claimable (a heap)
        self._wanted = False  # a wake-up that asks for a claim now
        self.window = QUEUE_BATCH_SECONDS  # how long wake-ups gather (see `claimed`)
        self._room = anyio.Event()  # set when this worker's room may have changed
        self.peers = 1  # live workers of the application, this one included (`count_peers`)
        self.primary = True  # the first of them by worker id (module doc: peers)
        self.spared = 0  # a secondary's rounds in a row that were not needed (up to its cap)
        self._claimed = False  # a claim round ran since the last count
        self._counted = False
        self.first_claim = anyio.Event()  # the first claim round, before any count
        self._pace: Callable[[float, str], None] | Literal[False] | None = False  # `_pacer`

    async def follow(self) -> None:
        """One subscription: reconcile, then apply changes until the feed ends or fails."""
        runner = self.runner
        async with runner.store.changes(kinds=WATCHED | {NEW_TASKS_KIND}) as feed:
            self.subscribed.set()
            await self.reconcile()
            runner.health.loop_ok("feed")
            async for change in feed:
                await self.apply(change)
        if not runner.stopping:  # a feed that ends by itself is a fault: subscribe again
            raise ConnectionError("the change feed ended")

    async def apply(self, change: TaskChange) -> bool:
        """Act on one change; `True` when it asks for a claim round now."""
        runner = self.runner
        if change.kind == "queued":
            app = change.details.get("app")
            if app is None or app == runner.app:
                due = change.details.get("not_before")
                if isinstance(due, int | float) and due > time.time():
                    self.wake_at(float(due))
                else:
                    self.wake_queue()
                    return True
        elif change.task_id not in runner.job_ids():
            pass
        elif change.kind == "cancel_requested":
            await runner.cancel(change.task_id)
        elif change.kind == "answered":
            await runner.inputs.answered(change.task_id, change.details.get("keys", []))
        return False

    async def reconcile(self) -> None:
        """Apply what the feed may have missed to every task this process holds."""
        runner = self.runner
        held = sorted(runner.job_ids())
        self.wake_queue()  # something may have been queued meanwhile
        if not held:
            return
        records = await get_many(runner.store, held)
        for task_id in held:
            record = records.get(task_id)
            if record is None:
                continue
            if record.cancel_requested:
                await runner.cancel(task_id)
            elif record.answers:
                await runner.inputs.answered(task_id, list(record.answers))

    # --- the queue loop's wake-ups -------------------------------------------

    def wake_queue(self) -> None:
        self._wanted = True
        self._wake.set()

    def wake_at(self, due: float) -> None:
        """Claim again at `due` (a retry's backoff ends then)."""
        if len(self._due) < 10_000:
            heapq.heappush(self._due, due)
        self._wake.set()  # the loop recomputes how long it sleeps

    def claimed(self, taken: int, waited: float = 0.0) -> None:
        """A claim round took `taken` tasks (the oldest of them created `waited` seconds
        ago): the next window starts short again, or, when it took none (another worker
        was quicker), is twice as long, up to `QUEUE_BATCH_MAX_SECONDS`; a secondary's
        pace follows (module doc: peers)."""
        self._claimed = True
        if not self._counted and self._pacer() is not None:
            self.first_claim.set()  # the heartbeat counts the peers now, not in `interval`
        if taken:
            self.window = QUEUE_BATCH_SECONDS
        else:
            self.window = min(self.window * 2, QUEUE_BATCH_MAX_SECONDS)
        if not self.primary and self.peers > 1 and (space := self._pacer()) is not None:
            was = self.pace()  # a secondary: slower while the others keep up (module doc)
            if self.more_queued or not -LEFT_WAITING_SECONDS < waited < LEFT_WAITING_SECONDS:
                self.spared = 0  # the others do not keep up, or the clocks disagree
            elif was < SECONDARY_PACE_MAX_SECONDS:
                self.spared += 1
            if self.pace() != was:
                space(self.pace(), self.runner.owner)

    def _pacer(self) -> Callable[[float, str], None] | None:
        """The store's `space_wakes` (module doc: peers), or `None` (a store without a
        reader to pace, or one that shares its wake-ups out); looked up once, since a
        claim round on a store without one asks every time."""
        if self._pace is False:
            store = self.runner.store
            space = getattr(innermost(store), "space_wakes", None)
            self._pace = space if callable(space) and queue_wakes_of(store) is None else None
        return self._pace

    def peers_due(self) -> bool:
        """Whether the heartbeat should count this worker's peers now (module doc)."""
        return self._claimed and self._pacer() is not None

    def count_peers(self, workers: list[WorkerInfo] | None, now: float) -> None:
        """The live workers of this application that run tasks, this one included, whether
        this one is the first of them (`primary`), and the reader's pace that follows
        (`pace`); `None`: the listing failed (the count stands)."""
        if workers is not None:
            app = self.runner.app
            live = sorted(
                w.worker_id for w in workers if w.app == app and w.concurrency > 0 and w.alive(now)
            )
            self.peers = max(1, len(live))
            self.primary = not live or live[0] == self.runner.owner
            if self.primary or self.peers == 1:
                self.spared = 0  # a secondary again later starts at its pace
            if (space := self._pacer()) is not None:
                space(self.pace(), self.runner.owner)
        self._claimed = False
        if not self._counted:
            self._counted, self.first_claim = True, anyio.Event()

    def pace(self) -> float:
        """Seconds the reader lets pass between two wake-ups of this worker (module doc):
        one window for a lone worker and a pool's primary, twice `peers` windows (at most
        `QUEUE_BATCH_MAX_SECONDS`) for the others, doubled for each of their rounds in a row
        that was not needed (`spared`, `claimed`), up to `SECONDARY_PACE_MAX_SECONDS`."""
        if self.primary or self.peers == 1:
            return QUEUE_BATCH_SECONDS
        pace = min(2 * QUEUE_BATCH_SECONDS * self.peers, QUEUE_BATCH_MAX_SECONDS)
        return min(pace * 2.0**self.spared, max(pace, SECONDARY_PACE_MAX_SECONDS))

    def slot_freed(self) -> None:
        if self.more_queued:
            self.wake_queue()
        self.room_may_have_changed()

    def room_may_have_changed(self) -> None:
        """A slot freed or a claim round ended (`room_changed` waiters look again)."""
        room, self._room = self._room, anyio.Event()
        room.set()

    async def room_changed(self) -> None:
        await self._room.wait()

    async def queue_wait(self) -> None:
        while True:
            now, due = time.time(), self._due
            while due and due[0] <= now:
                heapq.heappop(due)
            wait = self.runner.queue_poll if not due else min(self.runner.queue_poll, due[0] - now)
            woken = False
            with anyio.move_on_after(wait):
                await self._wake.wait()
                woken = True
            self._wake = anyio.Event()
            if woken and due and due[0] > time.time() and not self._wanted:
                continue  # only a new due time came in: sleep until the earliest
            break
        self._wanted = False
        # wake-ups that come together (a burst of creates, slots freeing one by one)
        # share one claim: at most one claim per window instead of one per change
        await anyio.sleep(self.window)
