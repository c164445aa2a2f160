"""Recording how a task's run ended: the one place outcomes are written to the store.

`OutcomeRecorder.finish` turns a run's end (an `Outcome`, an engine failure, a
cancel, a shutdown) into one compare-and-set transition. A `StoreError` while
writing is waited out with backoff, the outcome kept in memory meanwhile, so a
blip never throws a finished result away; when shutdown gives up waiting
(`abandon` is set) the task is left to lease recovery, exactly as a crash would
leave it. Any other exception while writing (a bug, e.g. a result that cannot be
encoded) fails that task with a clear error instead.

Each outcome written is noted in the task's history (`history`, a `finished` event).
A run stopped by a cancel request says who asked: "Cancelled at the client's request",
or "Cancelled by an operator (<who>)" when the latest `cancel_requested` event of the
task's history, which only operator commands and the engine write (never a client's
text), says `by: "operator"`.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import anyio

from fastmcp_tasks.errors import StoreError, interrupted, result_too_large
from fastmcp_tasks.server import observability
from fastmcp_tasks.server.engine.call import Outcome
from fastmcp_tasks.server.engine.history import HistoryWriter, cut, ending, operations_of
from fastmcp_tasks.server.engine.jobs import Job
from fastmcp_tasks.server.engine.supervision import GaveUp, retry_store
from fastmcp_tasks.server.limits import Limits
from fastmcp_tasks.server.observability import shown_id
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.settling import settle
from fastmcp_tasks.stores.text import encoded

logger = logging.getLogger("fastmcp_tasks.runner")

CANCELLED_MESSAGE = "Cancelled at the client's request"


def operator_cancelled(who: Any) -> str:
    """The status message of a task an operator cancelled (`who`: their label)."""
    return f"Cancelled by an operator ({cut(who) if who else 'unnamed'})"


class OutcomeRecorder:
    """Writes the outcomes of one runner's jobs."""

    def __init__(
        self,
        store: TaskStore,
        limits: Limits,
        abandon: anyio.Event,
        handed_back: set[str],
        history: HistoryWriter | None = None,
    ) -> None:
        self.store = store
        self.limits = limits
        self._abandon = abandon
        self._handed_back = handed_back
        self.history = history if history is not None else HistoryWriter(store)
        self.operations = operations_of(store)  # histories are read even when not written

    async def finish(
        self, job: Job, outcome: Outcome | None, failure: dict[str, Any] | None
    ) -> str:
        """Record how the run ended; the status recorded ("handed back" if none)."""
        store, task_id = self.store, job.task_id
        if outcome is None and failure is None:
            if job.cancel_requested:
                message = await self.cancelled_message(task_id)
                return await self.record(job, "cancelled", status_message=message)
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
        result = outcome.result if outcome.result is None else encoded(outcome.result)
        if (over := self.limits.over("max_result_bytes", result)) is not None:  # sized once
            error = result_too_large(over[1], over[0])
            return await self.record(job, "failed", error=error, status_message=error["message"])
        return await self.record(job, "completed", result=result)

    async def cancelled_message(self, task_id: str) -> str:
        """Who asked for the cancel, from the task's history (module doc)."""
        operations = self.operations
        if operations is None:
            return CANCELLED_MESSAGE
        try:
            events = await operations.events(task_id)
        except StoreError:
            return CANCELLED_MESSAGE  # the store is failing: the outcome matters more
        for event in sorted(events, key=lambda e: e.at, reverse=True):
            if event.kind == "cancel_requested":
                if event.details.get("by") == "operator":
                    return operator_cancelled(event.details.get("who"))
                break
        return CANCELLED_MESSAGE

    async def record(self, job: Job, status: Any, **fields: Any) -> str:
        """Write an outcome; a store outage is waited out (the outcome is kept meanwhile)."""
        task_id = job.task_id

        async def write(status: Any = status, fields: dict[str, Any] = fields) -> bool:
            return await settle(self.store, task_id, status, **fields)  # reads nothing back

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
                fields = {"error": error, "status_message": error["message"]}
                applied = await retry_store(
                    functools.partial(write, "failed", fields), stop=self._abandon
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
        if not applied:  # another ending won the race (C21): report what it is
            try:
                current = await self.store.get(task_id)
            except StoreError:
                return "unknown"
            return current.status if current is not None else "gone"
        observability.transition(task_id, job.name, status, job.attempt)
        result, failure = fields.get("result"), fields.get("error")
        details = ending(status, result, failure, fields.get("status_message"))
        self.history.note(task_id, "finished", **details)
        return str(status)
