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

Faults. Every background loop is supervised (`supervision.keep_running`): an
error is logged once per outage and retried with backoff, never stopping the
other loops. An outcome whose write fails with `StoreError` stays in memory
(`pending_outcomes`) and is retried until the store answers; if the process
stops first, the task is left to lease recovery exactly as a crash would leave
it. Any other exception while recording (a bug) fails that task with a clear
error. The change-feed watcher (`watcher.ChangeWatcher`) resubscribes after a
broken feed and reconciles what the gap may have hidden. Which loops a process runs
is `loops`; on a store that keeps operator records the runner also notes its tasks'
history (`history`), beats as a worker (`heartbeat`) or, running nothing, checks that
its waiting tasks have one (`staffing`), and holds a paused tool's tasks (`pauses`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup
from fastmcp.tools.base import Tool

from fastmcp_tasks.errors import ConfigurationError, interrupted
from fastmcp_tasks.server import observability
from fastmcp_tasks.server.engine.accepted import AcceptedCalls
from fastmcp_tasks.server.engine.call import Outcome, run_job
from fastmcp_tasks.server.engine.context import RunningTask, _current_task
from fastmcp_tasks.server.engine.fairqueue import FairQueue
from fastmcp_tasks.server.engine.heartbeat import DEFAULT_INTERVAL
from fastmcp_tasks.server.engine.history import HistoryWriter, operations_of
from fastmcp_tasks.server.engine.inputs import InputBroker
from fastmcp_tasks.server.engine.jobs import Job
from fastmcp_tasks.server.engine.leases import CANCELLED_BEFORE_START, LeaseKeeper, new_owner
from fastmcp_tasks.server.engine.loops import (
    after_stop,
    open_then_start,
    operator_parts,
    start_loops,
)
from fastmcp_tasks.server.engine.outcomes import OutcomeRecorder
from fastmcp_tasks.server.engine.pauses import Pauses
from fastmcp_tasks.server.engine.retries import RetryPlanner
from fastmcp_tasks.server.engine.supervision import keep_running
from fastmcp_tasks.server.engine.watcher import ChangeWatcher
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.server.limits import Limits
from fastmcp_tasks.server.observability import shown_id
from fastmcp_tasks.server.sealing import Sealer
from fastmcp_tasks.stores.base import TaskRecord, TaskStore

logger = logging.getLogger("fastmcp_tasks.runner")


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
        health: HealthMonitor | None = None,
        app: str | None = None,
        queue_poll: float = 5.0,
        opened: bool = True,
        input_timeout: Any = None,
        history: HistoryWriter | None = None,
        worker_interval: float = DEFAULT_INTERVAL,
        sealer: Sealer | None = None,
    ) -> None:
        if concurrency < 0:
            raise ConfigurationError(f"concurrency must not be negative, got {concurrency}")
        self.server = server
        self.store = store
        self.concurrency = concurrency
        self.sweep_interval = sweep_interval
        self.shutdown_grace = shutdown_grace
        self.limits = limits or Limits()
        self.health = health or HealthMonitor()
        self.app = app
        self.queue_poll = queue_poll
        self.input_timeout = input_timeout  # the extension's default, for resumed tasks
        self.opened = opened
        self.sealer = sealer  # opens the sealed caller of a task taken from the store
        #: this process's task events, written in batches (`history`; shared with handlers)
        self.history = history if history is not None else HistoryWriter(store)
        self.operations = operations_of(store)  # workers and pauses (`stores.operations`)
        self.pauses = Pauses(self.operations, app, self.history)
        self.inputs = InputBroker(store, self.history)
        self.owner = new_owner()
        self.leases = LeaseKeeper(self, owner=self.owner, lease_seconds=lease_seconds)
        self.watcher = ChangeWatcher(self)
        self._abandon = anyio.Event()  # set when shutdown stops waiting for the store
        self._handed_back: set[str] = set()
        self.outcomes = OutcomeRecorder(
            store, self.limits, self._abandon, self._handed_back, self.history
        )
        self.retries = RetryPlanner(self, store, self._abandon)
        #: jobs this process accepted whose tasks wait in the store (a gate, a retry's
        #: backoff): when this process claims one, it runs with the caller it came with
        self._accepted = AcceptedCalls()
        #: ids `take_queued` has claimed and not yet submitted, and cancels heard for them
        self.claiming: set[str] = set()
        self.missed_cancels: set[str] = set()
        #: ids whose creation failed after the store may have committed it (a lost reply):
        #: recovery fails them, since no client learned their id
        self.unconfirmed: set[str] = set()
        self._pending: dict[str, str] = {}  # task id -> the outcome waiting for the store
        self._jobs: dict[str, Job] = {}
        self._waiting = 0
        self._running = 0
        self._slots = anyio.Semaphore(concurrency)
        self._idle = anyio.Event()
        self._queue = FairQueue()
        self._group: TaskGroup | None = None
        self._stopping = False
        self.heartbeat, self.staffing = operator_parts(self, worker_interval)

    @property
    def started(self) -> bool:
        return self._group is not None and not self._stopping

    def spawn(self, function: Any, *args: Any, name: str) -> None:
        """Run `function(*args)` in the engine's task group (it ends with the engine)."""
        if self._group is not None:
            self._group.start_soon(function, *args, name=name)

    @property
    def running_now(self) -> int:
        """How many tool bodies run in this process now."""
        return self._running

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
        self._queue.put(job)

    def accept(self, job: Job, *, wake: bool = True) -> None:
        """Keep a job whose task waits in the store until a process claims it."""
        self._accepted.keep(job)
        if wake:
            self.watcher.wake_queue()

    def forget(self, task_id: str) -> None:
        self._accepted.forget(task_id)

    def resubmit(
        self,
        record: TaskRecord,
        tool: Tool,
        message: str | None,
        *,
        queued: bool = False,
        input_timeout: float | None = None,
    ) -> None:
        """Run a task leased from the store (queued, gated, retried, or recovered)."""
        accepted = self._accepted.take(record.task_id)
        job = Job.resumed(record, tool, message, queued, accepted, input_timeout, self.sealer)
        self.submit(job)

    @property
    def stopping(self) -> bool:
        """Whether the runner is shutting down (it starts nothing new)."""
        return self._stopping

    def job_ids(self) -> set[str]:
        """The tasks this process is running, has queued, is claiming or is still recording."""
        return set(self._jobs) | set(self._pending) | self.claiming

    def job(self, task_id: str) -> Job | None:
        return self._jobs.get(task_id)

    def stop_taking_work(self) -> None:
        """Start nothing new (shutdown has begun); running tasks go on."""
        self._stopping = True

    async def wait_idle(self) -> None:
        """Return once no task runs in this process."""
        while self._running:
            await self._idle.wait()

    @property
    def pending_outcomes(self) -> int:
        """Finished tasks whose outcome waits for the store to be written."""
        return len(self._pending)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[TaskRunner]:
        """Run the dispatcher and the supervised loops until exit.

        They live in a task group owned by a host task of their own rather than one
        held open across this context manager's `yield`: FastMCP closes extension
        lifespans inside a shielding cancel scope, which a task group entered before it
        cannot be exited under. The host task starts from the lifespan, so runs inherit
        the lifespan's context (`Shared()` dependencies), never a request's. When the
        store did not open at startup (`opened=False`), the loops start once it opens.
        """
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        stop = anyio.Event()

        async def host() -> None:
            try:
                async with anyio.create_task_group() as group:
                    self._group = group
                    group.start_soon(keep_running, "dispatch", self._dispatch, self.health)
                    if self.opened:
                        await start_loops(self, group)
                    else:
                        group.start_soon(
                            keep_running,
                            "open",
                            functools.partial(open_then_start, self, group),
                            self.health,
                        )
                    ready.set_result(None)
                    await stop.wait()
                    self._stopping = True  # start nothing new
                    with anyio.move_on_after(self.shutdown_grace):
                        await self.wait_idle()
                    self._abandon.set()  # outcomes still waiting for the store: to recovery
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
            with anyio.CancelScope(shield=True):
                await self.hand_back_queued()
                await after_stop(self)  # the worker's goodbye, the history's last write

    async def hand_back_queued(self) -> None:
        """Shutdown on a durable store: queued tasks back to the queue (`leases`)."""
        if self.store.durable and self.opened:
            await self.leases.hand_back_at_shutdown(set(self._jobs), self._handed_back)

    # --- dispatch ------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Start waiting jobs, each as soon as a slot is free, in fair turns (`fairqueue`).

        A slot is taken before a job is chosen, so the choice is made when the job can
        start, among every job waiting then (a job chosen early would jump the turns of
        principals that queue meanwhile). Waiting costs a loop turn per `get()`/`acquire()`;
        on a busy server a turn is long, so what can go on without waiting does.
        """
        while True:
            try:
                self._slots.acquire_nowait()
            except anyio.WouldBlock:
                await self._slots.acquire()
            job = self._queue.get_nowait()
            if job is None:
                try:
                    job = await self._queue.get()
                except BaseException:
                    self._slots.release()
                    raise
            if not self._start(job):
                self._slots.release()

    def _start(self, job: Job) -> bool:
        """Start `job` in the slot just taken; False when it must not start."""
        assert self._group is not None
        if job.cancel_requested or self._stopping:
            return False  # cancelled while queued (already recorded), or shutting down
        self._waiting -= 1
        observability.queued.add(-1)
        self._running += 1
        job.started = True
        self._group.start_soon(self._run, job, name=f"fastmcp-task {job.task_id}")
        return True

    async def _run(self, job: Job) -> None:
        running = RunningTask(
            self.store,
            job.task_id,
            job.name,
            message=job.message,
            broker=self.inputs,
            input_timeout=job.input_timeout,
            input_kinds=job.input_kinds,
            caller=job.caller,
            related=job.related,
            history=self.history,
        )
        outcome: Outcome | None = None
        failure: dict[str, Any] | None = None
        begun = False
        started = time.perf_counter()
        with observability.task_span(job.task_id, job.name, job.attempt, self.health.store) as span:
            try:
                with job.scope:
                    begun = await self.leases.begin(job, self._abandon)
                    if begun:
                        token = _current_task.set(running)
                        try:
                            outcome = await run_job(self.server, job, running)
                        finally:
                            _current_task.reset(token)
            except Exception:
                logger.exception(
                    "Task %s (%s) crashed in the task engine", shown_id(job.task_id), job.name
                )
                failure = interrupted("the task engine failed while running the tool")
            finally:
                self._running -= 1
                self._slots.release()
                if not self._running:  # wake every waiter; later waits take a new event
                    idle, self._idle = self._idle, anyio.Event()
                    idle.set()
                self.watcher.slot_freed()
                self._pending[job.task_id] = "recording"
                self._jobs.pop(job.task_id, None)
                with anyio.CancelScope(shield=True):
                    try:
                        if job.held:
                            status = "paused"  # back in the store until `resume`
                        elif not begun and failure is None and not job.cancel_requested:
                            self._handed_back.add(job.task_id)  # its lease ends at shutdown
                            status = "not started"  # still waiting in the store (`leases`)
                        elif await self.retries.try_later(job, outcome):
                            status = "retrying"
                        else:
                            status = await self.outcomes.finish(job, outcome, failure)
                    finally:
                        self._pending.pop(job.task_id, None)
                span.set_attribute("mcp.task.status", status)
                observability.duration.record(
                    time.perf_counter() - started, {"tool": job.name, "status": status}
                )

    # --- cancel requests (heard by the watcher) -------------------------------

    async def cancel(self, task_id: str) -> None:
        job = self._jobs.get(task_id)
        if job is None and task_id in self.claiming:  # claimed, not submitted yet
            self.missed_cancels.add(task_id)
            return
        if job is None or job.cancel_requested:
            return
        job.cancel_requested = True
        if job.started:
            job.scope.cancel()
            return
        self._waiting -= 1
        observability.queued.add(-1)
        self._jobs.pop(task_id, None)
        self._pending[task_id] = "cancelled"
        try:
            await self.outcomes.record(job, "cancelled", status_message=CANCELLED_BEFORE_START)
        finally:
            self._pending.pop(task_id, None)
