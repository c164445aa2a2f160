"""Runs tool calls as tasks: a bounded, first-in-first-out pool inside the server lifespan.

`submit()` is called from the `tools/call` interceptor after the task exists in
the store; it only enqueues. A dispatcher started in the extension's lifespan
takes jobs in order, waits for one of `concurrency` slots and starts the run in
the lifespan's own task group, so a run never inherits the submitting
request's context variables (GUIDE §2). Each run gets a fresh `TaskContext`
and its own cancel scope.

The runner learns of cancel requests from the store's change feed, never from
the handlers directly: a queued task is cancelled before it starts, a running
one through its cancel scope (the tool sees cancellation at its next await).
Every outcome is written with a compare-and-set transition, so a completion
racing a cancel leaves exactly one terminal state.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types
from anyio.abc import TaskGroup
from fastmcp.tools.base import Tool

from fastmcp_tasks import observability
from fastmcp_tasks.context import RunningTask, _current_task
from fastmcp_tasks.errors import ConfigurationError, interrupted, result_too_large
from fastmcp_tasks.execution import Outcome
from fastmcp_tasks.inputs import InputBroker
from fastmcp_tasks.limits import Limits
from fastmcp_tasks.recovery import QUEUED_MESSAGE, LeaseKeeper, new_owner
from fastmcp_tasks.rounds import run_rounds
from fastmcp_tasks.stores.base import TaskRecord, TaskStore

logger = logging.getLogger("fastmcp_tasks.runner")

CANCELLED_MESSAGE = "Cancelled at the client's request"
CANCELLED_BEFORE_START = "Cancelled before it started"


@dataclass(eq=False)
class Job:
    """One task waiting for, or holding, a worker slot in this process."""

    task_id: str
    name: str
    arguments: dict[str, Any]
    tool: Tool | None = None
    queued: bool = False
    message: str | None = None  # the statusMessage the task shows while it starts
    attempt: int = 1
    input_kinds: frozenset[str] = frozenset()
    input_timeout: float | None = None
    input_responses: Any = None
    request_state: str | None = None
    started: bool = False
    cancel_requested: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class TaskRunner:
    """Executes submitted jobs with at most `concurrency` running at once."""

    def __init__(
        self,
        server: Any,
        store: TaskStore,
        *,
        concurrency: int,
        sweep_interval: float = 60.0,
        lease_seconds: float = 30.0,
        shutdown_grace: float = 0.0,
        limits: Limits | None = None,
    ) -> None:
        if concurrency < 0:
            raise ConfigurationError(f"concurrency must not be negative, got {concurrency}")
        self.server = server
        self.store = store
        self.concurrency = concurrency
        self.sweep_interval = sweep_interval
        self.shutdown_grace = shutdown_grace
        self.limits = limits or Limits()
        self.inputs = InputBroker(store)
        self.owner = new_owner()
        self.leases = LeaseKeeper(self, owner=self.owner, lease_seconds=lease_seconds)
        self._jobs: dict[str, Job] = {}
        self._waiting = 0
        self._running = 0
        self._slots = anyio.Semaphore(concurrency)
        self._idle = anyio.Event()
        self._send, self._receive = anyio.create_memory_object_stream[Job](math.inf)
        self._group: TaskGroup | None = None
        self._stopping = False
        self._handed_back: set[str] = set()

    @property
    def started(self) -> bool:
        return self._group is not None and not self._stopping

    def saturated(self) -> bool:
        """True when a job submitted now would have to wait for a slot."""
        return self._running + self._waiting >= self.concurrency

    def free_slots(self) -> int:
        """How many more jobs could start now."""
        return max(0, self.concurrency - self._running - self._waiting)

    def submit(self, job: Job) -> None:
        """Enqueue a job whose task already exists in the store (leased to `owner`)."""
        self._jobs[job.task_id] = job
        self._waiting += 1
        observability.queued.add(1)
        self._send.send_nowait(job)

    def resubmit(
        self, record: TaskRecord, tool: Tool, message: str | None, *, queued: bool = False
    ) -> None:
        """Run a task leased from the store (queued by a front end, or recovered)."""
        context = record.context or {}
        responses = context.get("inputResponses")
        if responses is not None:
            params = mcp_types.InputResponseRequestParams.model_validate(
                {"inputResponses": responses}
            )
            responses = params.input_responses
        self.submit(
            Job(
                record.task_id,
                record.tool,
                dict(record.arguments or {}),
                tool=tool,
                message=message,
                queued=queued,
                attempt=max(1, record.attempts),
                input_kinds=frozenset(context.get("inputKinds", ())),
                input_responses=responses,
                request_state=context.get("requestState"),
            )
        )

    def job_ids(self) -> set[str]:
        """The tasks this process is running or has queued."""
        return set(self._jobs)

    async def find_tool(self, name: str) -> Tool | None:
        try:
            return await self.server.get_tool(name)
        except Exception:
            logger.exception("Looking up tool %r for a recovered task failed", name)
            return None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[TaskRunner]:
        """Run the dispatcher, the cancel watcher and the sweeper until exit.

        They live in a task group owned by a host task of their own rather than
        one held open across this context manager's `yield`: FastMCP closes
        extension lifespans inside a shielding cancel scope, which a task group
        entered before it cannot be exited under. The host task starts from the
        lifespan, so runs inherit the lifespan's context (`Shared()`
        dependencies), never a request's.
        """
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        stop = anyio.Event()

        async def host() -> None:
            try:
                async with anyio.create_task_group() as group:
                    self._group = group
                    await group.start(self._watch_changes)
                    group.start_soon(self._dispatch)
                    group.start_soon(self._sweep)
                    group.start_soon(self.leases.heartbeat)
                    if self.store.durable:
                        await self.leases.scan()  # recover before serving new work
                        group.start_soon(self.leases.scan_forever, self.leases.lease_seconds / 2)
                        if self.concurrency:
                            group.start_soon(self.leases.take_queued_forever)
                    ready.set_result(None)
                    await stop.wait()
                    self._stopping = True  # start nothing new
                    with anyio.move_on_after(self.shutdown_grace):
                        while self._running:
                            self._idle = anyio.Event()
                            await self._idle.wait()
                    group.cancel_scope.cancel()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise
            finally:
                self._group = None

        task = loop.create_task(host(), name="fastmcp-tasks runner")
        await ready
        try:
            yield self
        finally:
            stop.set()
            await task
            if self.store.durable:  # queued: back to the queue; interrupted: to recovery
                with anyio.CancelScope(shield=True):
                    await self.leases.hand_back(set(self._jobs), self._handed_back)

    # --- dispatch ------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Start queued jobs in order, as many per wake-up as there are free slots.

        Waiting costs a loop turn per `receive()`/`acquire()`; on a busy server a
        turn is long, so jobs that can start now are started without waiting.
        """
        assert self._group is not None
        async with self._receive:
            while True:
                job = await self._receive.receive()
                while True:
                    await self._start(job)
                    try:
                        job = self._receive.receive_nowait()
                    except anyio.WouldBlock:
                        break

    async def _start(self, job: Job) -> None:
        assert self._group is not None
        if job.cancel_requested or self._stopping:
            return  # cancelled while queued (already recorded), or shutting down
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            await self._slots.acquire()
            if job.cancel_requested:
                self._slots.release()
                return
        self._waiting -= 1
        observability.queued.add(-1)
        self._running += 1
        job.started = True
        self._group.start_soon(self._run, job, name=f"fastmcp-task {job.task_id}")

    async def _run(self, job: Job) -> None:
        running = RunningTask(
            self.store,
            job.task_id,
            job.name,
            message=QUEUED_MESSAGE if job.queued else job.message,
            broker=self.inputs,
            input_timeout=job.input_timeout,
            input_kinds=job.input_kinds,
        )
        outcome: Outcome | None = None
        failure: dict[str, Any] | None = None
        started = time.perf_counter()
        with observability.task_span(job.task_id, job.name, job.attempt) as span:
            try:
                with job.scope:
                    await running.status(job.message)  # clears "Queued"; no write if unchanged
                    token = _current_task.set(running)
                    try:
                        outcome = await run_rounds(
                            self.server,
                            job.tool,
                            job.name,
                            job.arguments,
                            running,
                            job.input_responses,
                            job.request_state,
                        )
                    finally:
                        _current_task.reset(token)
            except Exception:
                logger.exception("Task %s (%s) crashed in the task engine", job.task_id, job.name)
                failure = interrupted("the task engine failed while running the tool")
            finally:
                self._running -= 1
                self._slots.release()
                if not self._running:
                    self._idle.set()
                self._jobs.pop(job.task_id, None)
                with anyio.CancelScope(shield=True):
                    status = await self._finish(job, outcome, failure)
                span.set_attribute("mcp.task.status", status)
                observability.duration.record(
                    time.perf_counter() - started, {"tool": job.name, "status": status}
                )

    async def _finish(
        self, job: Job, outcome: Outcome | None, failure: dict[str, Any] | None
    ) -> str:
        """Record how the run ended; the status recorded ("handed back" if none)."""
        store, task_id = self.store, job.task_id
        if outcome is None and failure is None:
            if job.cancel_requested:
                return await self._record(job, "cancelled", status_message=CANCELLED_MESSAGE)
            if store.durable:  # another process, or the next start, recovers it
                self._handed_back.add(task_id)
                return "handed back"
            failure = interrupted("the server shut down while the task was running")
        if failure is not None:
            return await self._record(
                job, "failed", error=failure, status_message=failure["message"]
            )
        if outcome is not None and outcome.status == "failed":
            error = outcome.error or {}
            message = str(error.get("message", ""))
            return await self._record(job, "failed", error=error, status_message=message)
        assert outcome is not None
        if (over := self.limits.over("max_result_bytes", outcome.result)) is not None:
            error = result_too_large(over[1], over[0])
            return await self._record(job, "failed", error=error, status_message=error["message"])
        return await self._record(job, "completed", result=outcome.result)

    async def _record(self, job: Job, status: Any, **fields: Any) -> str:
        applied = await self.store.transition(job.task_id, status, **fields)
        if applied is None:  # another ending won the race (C21): report what it is
            current = await self.store.get(job.task_id)
            return current.status if current is not None else "gone"
        observability.transition(job.task_id, job.name, status, job.attempt)
        return str(status)

    # --- the change feed: cancel requests and input answers ------------------

    async def _watch_changes(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with self.store.changes(kinds=frozenset({"cancel_requested", "answered"})) as feed:
            task_status.started()
            async for change in feed:
                if change.kind == "cancel_requested":
                    await self._cancel(change.task_id)
                elif change.kind == "answered":
                    await self.inputs.answered(change.task_id, change.details.get("keys", []))

    async def _cancel(self, task_id: str) -> None:
        job = self._jobs.get(task_id)
        if job is None or job.cancel_requested:
            return
        job.cancel_requested = True
        if job.started:
            job.scope.cancel()
            return
        self._waiting -= 1
        observability.queued.add(-1)
        self._jobs.pop(task_id, None)
        await self._record(job, "cancelled", status_message=CANCELLED_BEFORE_START)

    # --- retention -----------------------------------------------------------------

    async def _sweep(self) -> None:
        while True:
            await anyio.sleep(self.sweep_interval)
            try:
                removed = await self.store.purge_expired(time.time())
            except Exception:
                logger.exception("Purging expired tasks failed; will retry")
                continue
            if removed:
                logger.debug("Purged %d expired tasks", removed)
