"""Retrying a failed attempt (`task_options(retry=Retry(...))`): the decision and the hand-back.

After a run ends, `RetryPlanner.try_later` decides whether its outcome is a failed
attempt to retry: the tool raised (a `ToolError`, an `MCPError`, any exception; never
a cancellation, never an `isError` result the tool returned), the exception is one of
`Retry.on`, attempts are left and no cancel was requested. Then the task is given
back to the store's queue with `not_before` = now + backoff (`store.retry_later`):
`statusMessage` reads "Retrying (attempt 2 of 3) after: <error>", the wait is in the
store (so it survives a restart on a durable store), and whichever process of the
application claims it when due runs the next attempt. This process keeps what the
creating request had (`Caller`) for that attempt, in case it is the one to claim it.

Durable steps (`fastmcp_tasks.step`) stay: the next attempt replays the steps the
failed one completed and runs again from the step that failed, as Temporal does (nothing
is deleted between attempts; they go with the task).

The error text shown is the one the outcome would report (so a server that masks
error details shows the masked text). The final outcome is the last attempt's. The
task's history gets a `retry_scheduled` event: the attempt that runs next, when it is
due and that error text.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio

from fastmcp_tasks.server.engine.call import Outcome, leaf_of
from fastmcp_tasks.server.engine.jobs import Job
from fastmcp_tasks.server.engine.supervision import GaveUp, retry_store
from fastmcp_tasks.server.flow import retry_message
from fastmcp_tasks.server.observability import shown_id
from fastmcp_tasks.server.options import options_of
from fastmcp_tasks.stores.base import TaskStore

logger = logging.getLogger("fastmcp_tasks.runner")

#: Longest error text carried into a retry's status message.
SHOWN_ERROR = 200


def reason_of(outcome: Outcome) -> str:
    """The error an outcome reports, as one short line."""
    if outcome.error is not None:
        text = str(outcome.error.get("message", ""))
    else:
        content = (outcome.result or {}).get("content") or []
        text = next((c.get("text", "") for c in content if c.get("type") == "text"), "")
    text = " ".join(text.split()) or "an error"
    return text if len(text) <= SHOWN_ERROR else text[: SHOWN_ERROR - 1] + "…"


class RetryPlanner:
    """Turns a retryable failed attempt into a queued retry in the store."""

    def __init__(self, runner: Any, store: TaskStore, abandon: anyio.Event) -> None:
        self.runner = runner
        self.store = store
        self._abandon = abandon

    async def try_later(self, job: Job, outcome: Outcome | None) -> bool:
        """Whether the run was a failed attempt now queued for a retry (no outcome recorded).

        Never raises (but for cancellation): a bug here records the attempt's outcome
        instead, as if no retry were configured.
        """
        try:
            return await self._try_later(job, outcome)
        except Exception:
            logger.exception(
                "Retrying task %s (%s) failed; recording its attempt",
                shown_id(job.task_id),
                job.name,
            )
            self.runner.forget(job.task_id)
            return False

    async def _try_later(self, job: Job, outcome: Outcome | None) -> bool:
        if outcome is None or outcome.raised is None or job.cancel_requested or job.tool is None:
            return False
        retry = options_of(await leaf_of(job.tool)).retry
        if retry is None or not retry.retries(outcome.raised, job.retries):
            return False
        if not getattr(self.store, "flow_control", False):
            return False
        number = job.retries + 1
        due = time.time() + retry.delay(number)
        reason = reason_of(outcome)
        message = retry_message(number + 1, retry.attempts, reason)
        runner = self.runner

        async def hand_back() -> Any:
            return await self.store.retry_later(job.task_id, runner.owner, due, message)  # type: ignore[attr-defined]

        runner.accept(job, wake=False)  # this process keeps the caller for the next attempt
        try:
            back = await retry_store(hand_back, stop=self._abandon)
        except GaveUp:
            runner.forget(job.task_id)
            return False  # shutting down: recorded as the attempt ended (or recovered)
        if back is None:  # cancelled meanwhile, or the lease is gone: record this attempt
            runner.forget(job.task_id)
            return False
        history = runner.history  # `attempt`: the one that runs when due
        history.note(job.task_id, "retry_scheduled", attempt=number + 1, at=due, reason=reason)
        logger.info(
            "Task %s (%s) attempt %d failed; retrying in %.1fs",
            shown_id(job.task_id),
            job.name,
            number,
            max(0.0, due - time.time()),
        )
        runner.watcher.wake_at(due)
        return True
