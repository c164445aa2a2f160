"""The jobs of one process waiting for a slot, shared out fairly between principals.

`FairQueue` replaces a plain first-in-first-out queue in front of the runner's
`concurrency` slots: each principal (the task's owner; unauthenticated callers
count as one) has its own line, and the next job is taken round-robin across the
lines, so one tenant's thousand queued tasks do not starve another's one. Within a
line, jobs keep their order. Every operation is O(1).

Across processes the same rule applies to gated tools in the store
(`stores.flow.plan_claims`); this queue is the in-process half.
"""

from __future__ import annotations

from collections import OrderedDict, deque

import anyio

from fastmcp_tasks.server.engine.jobs import Job


class FairQueue:
    """Round-robin across owners, FIFO within each owner."""

    def __init__(self) -> None:
        self._lines: OrderedDict[str | None, deque[Job]] = OrderedDict()
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
        owner, line = next(iter(self._lines.items()))
        job = line.popleft()
        if line:
            self._lines.move_to_end(owner)  # the next owner's turn
        else:
            del self._lines[owner]
        self._size -= 1
        return job

    async def get(self) -> Job:
        while True:
            job = self.get_nowait()
            if job is not None:
                return job
            self._ready = anyio.Event()
            await self._ready.wait()
