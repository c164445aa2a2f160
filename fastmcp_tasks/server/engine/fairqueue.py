"""The jobs of one process waiting for a slot, shared out fairly between principals.

`FairQueue` replaces a plain first-in-first-out queue in front of the runner's
`concurrency` slots: each principal (the task's owner; unauthenticated callers
count as one) has its own line, and the next job comes from the line served least
recently (a line that was never served goes first), so one tenant's thousand queued
tasks do not starve another's one. Within a line, jobs keep their order. An owner's
last turn is remembered when its line empties (up to `MAX_REMEMBERED` owners), so a
tenant that just ran does not count as new when it queues again. `put` is O(1), `get`
O(owners waiting).

Across processes the same rule applies to gated tools in the store
(`stores.flow.plan_claims`); this queue is the in-process half.
"""

from __future__ import annotations

from collections import deque

import anyio

from fastmcp_tasks.server.engine.jobs import Job

#: Owners whose last turn is remembered after their line empties (then the idle are forgotten).
MAX_REMEMBERED = 10_000


class FairQueue:
    """The least recently served owner's oldest job first; FIFO within each owner."""

    def __init__(self) -> None:
        self._lines: dict[str | None, deque[Job]] = {}
        self._turns: dict[str | None, int] = {}  # each owner's last turn (-1: never)
        self._next_turn = 0
        self._size = 0
        self._ready = anyio.Event()

    def __len__(self) -> int:
        return self._size

    def put(self, job: Job) -> None:
        line = self._lines.get(job.owner)
        if line is None:
            line = self._lines[job.owner] = deque()
        line.append(job)
        self._size += 1
        self._ready.set()

    def get_nowait(self) -> Job | None:
        """The next job in turn, or `None` when empty."""
        if not self._lines:
            return None
        if len(self._lines) == 1:
            owner = next(iter(self._lines))
        else:  # O(owners waiting): few, next to the jobs
            owner = min(self._lines, key=lambda o: self._turns.get(o, -1))
        line = self._lines[owner]
        job = line.popleft()
        self._turns[owner] = self._next_turn
        self._next_turn += 1
        if not line:
            del self._lines[owner]
            if len(self._turns) > MAX_REMEMBERED:  # forget owners that wait for nothing
                self._turns = {o: n for o, n in self._turns.items() if o in self._lines}
        self._size -= 1
        return job

    async def get(self) -> Job:
        while True:
            job = self.get_nowait()
            if job is not None:
                return job
            self._ready = anyio.Event()
            await self._ready.wait()
