"""Recording how a task's run ended: the one place outcomes are written to the store.

`OutcomeRecorder.finish` turns a run's end (an `Outcome`, an engine failure, a
cancel, a shutdown) into one compare-and-set transition. A `StoreError` while
writing is waited out with backoff, the outcome kept in memory meanwhile, so a
blip never throws a finished result away; when shutdown gives up waiting
(`abandon` is set) the task is left to lease recovery, exactly as a crash would
leave it. Any other exception while writing (a bug, e.g. a result that cannot be
encoded) fails that task with a clear error instead.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import anyio

from fastmcp_tasks.errors import StoreError, interrupted, result_too_large
from fastmcp_tasks.server import observability
from fastmcp_tasks.server.engine.call import Outcome
from fastmcp_tasks.server.engine.jobs import Job
from fastmcp_tasks.server.engine.supervision import GaveUp, retry_store
from fastmcp_tasks.server.limits import Limits
from fastmcp_tasks.server.observability import shown_id
from fastmcp_tasks.stores.base import TaskStore

logger = logging.getLogger("fastmcp_tasks.runner")

CANCELLED_MESSAGE = "Cancelled at the client's request"


class OutcomeRecorder:
    """Writes the outcomes of one runner's jobs."""

    def __init__(
        self, store: TaskStore, limits: Limits, abandon: anyio.Event, handed_back: set[str]
    ) -> None:
        self.store = store
        self.limits = limits
        self._abandon = abandon
        self._handed_back = handed_back

    async def finish(
        self, job: Job, outcome: Outcome | None, failure: dict[str, Any] | None
    ) -> str:
        """Record how the run ended; the status recorded ("handed back" if none)."""
        store, task_id = self.store, job.task_id
        if outcome is None and failure is None:
            if job.cancel_requested:
                return await self.record(job, "cancelled", status_message=CANCELLED_MESSAGE)
            if store.durable:  # another process, or the next start, recovers it
                self._handed_back.add(task_id)
                return "handed back"
            failure = interrupted("the server shut down while the task was running")
        if failure is not None:
            return await self.record(
                job, "failed", error=failure, status_message=failure["message"]
            )
        if outcome is not None and outcome.status == "failed":
            error = outcome.error or {}
            message = str(error.get("message", ""))
            return await self.record(job, "failed", error=error, status_message=message)
        assert outcome is not None
        if (over := self.limits.over("max_result_bytes", outcome.result)) is not None:
            error = result_too_large(over[1], over[0])
            return await self.record(job, "failed", error=error, status_message=error["message"])
        return await self.record(job, "completed", result=outcome.result)

    async def record(self, job: Job, status: Any, **fields: Any) -> str:
        """Write an outcome; a store outage is waited out (the outcome is kept meanwhile)."""
        task_id = job.task_id

        async def write(status: Any = status, fields: dict[str, Any] = fields) -> Any:
            return await self.store.transition(task_id, status, **fields)

        try:
            try:
                applied = await retry_store(write, stop=self._abandon)
            except (GaveUp, anyio.get_cancelled_exc_class()):
                raise
            except Exception as exc:  # a bug (an unencodable result, say): fail the task
                logger.exception(
                    "Recording task %s (%s) as %s failed", shown_id(task_id), job.name, status
                )
                error = interrupted(f"its outcome could not be recorded ({type(exc).__name__})")
                status = "failed"
                applied = await retry_store(
                    functools.partial(
                        write, "failed", {"error": error, "status_message": error["message"]}
                    ),
                    stop=self._abandon,
                )
        except GaveUp:
            logger.warning(
                "Task %s (%s): the store did not answer before shutdown; its outcome (%s) "
                "is lost and lease recovery takes the task",
                shown_id(task_id),
                job.name,
                status,
            )
            return "handed back"
        if applied is None:  # another ending won the race (C21): report what it is
            try:
                current = await self.store.get(task_id)
            except StoreError:
                return "unknown"
            return current.status if current is not None else "gone"
        observability.transition(task_id, job.name, status, job.attempt)
        return str(status)
