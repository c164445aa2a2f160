"""The calls this process accepted whose tasks wait in the store, not in its own queue.

A task of a tool with `concurrency=N` waits in its gate, and a failed attempt waits
for its retry, in the store, where whichever process of the application has a slot
claims it. When that is the process that took the `tools/call`, the run should have
what the foreground had (`caller.Caller`: token, headers, session) and the tool's input
timeout: `AcceptedCalls` keeps the `Job` built for the call until this process claims
the task (`take`), the call fails or is answered by another task (`forget`), or it is
too old or too many to keep: at most `MAX_KEPT`, none older than `MAX_AGE` seconds
(a task claimed by another process is never heard of here again). They live in memory
only, like the caller they hold.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from fastmcp_tasks.server.engine.jobs import Job

MAX_KEPT = 10_000
MAX_AGE = 24 * 3600.0


class AcceptedCalls:
    """Jobs by task id, oldest first, bounded in number and age."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, tuple[float, Job]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._jobs)

    def keep(self, job: Job) -> None:
        now = time.monotonic()
        self._jobs[job.task_id] = (now, job)
        self._jobs.move_to_end(job.task_id)
        while self._jobs and (
            len(self._jobs) > MAX_KEPT or next(iter(self._jobs.values()))[0] < now - MAX_AGE
        ):
            self._jobs.popitem(last=False)

    def take(self, task_id: str) -> Job | None:
        kept = self._jobs.pop(task_id, None)
        return None if kept is None else kept[1]

    def forget(self, task_id: str) -> None:
        self._jobs.pop(task_id, None)
