"""The engine's supervised background loops: which run where, how they start and end.

Every process: the sweeper (retention), the lease heartbeat, the history writer
(`history`) and, on a durable store, the recovery scan. A process that runs tasks
(`concurrency > 0`) also follows the change feed, takes queued tasks and, on a store
that keeps workers (`stores.operations`), beats as a worker (`heartbeat`). A front end
that runs nothing (`concurrency=0`) instead checks that its waiting tasks have a live
worker (`staffing`). On a store that shares queue wake-ups out among workers, a process
that runs tasks also reads its share (`queue_listener`). Each loop runs under
`supervision.keep_running`.

`open_then_start` is the degraded start: the store is opened with backoff, then the
loops start. `after_stop` is what shutdown owes the store once the loops have ended:
the worker's goodbye and the history's last write, both bounded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from fastmcp_tasks.server.engine.heartbeat import WorkerHeartbeat
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.engine.leases import LeaseKeeper
from fastmcp_tasks.server.engine.pauses import Pauses
from fastmcp_tasks.server.engine.queue_listener import LOOP as LISTENER_LOOP
from fastmcp_tasks.server.engine.queue_listener import QueueListener
from fastmcp_tasks.server.engine.staffing import StaffingCheck
from fastmcp_tasks.server.engine.supervision import keep_running, periodic, retry_store
from fastmcp_tasks.server.engine.watcher import ChangeWatcher
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.operations import OperableTaskStore
from fastmcp_tasks.stores.queue_wakes import queue_wakes_of

logger = logging.getLogger("fastmcp_tasks.runner")


class TaskRunner(Protocol):
    """What the loops need of `runner.TaskRunner` (typed here: the runner imports this)."""

    server: Any
    store: TaskStore
    health: HealthMonitor
    leases: LeaseKeeper
    watcher: ChangeWatcher
    history: HistoryWriter
    pauses: Pauses
    operations: OperableTaskStore | None
    heartbeat: WorkerHeartbeat | None
    staffing: StaffingCheck | None
    owner: str
    app: str | None
    concurrency: int
    sweep_interval: float
    opened: bool

    @property
    def running_now(self) -> int: ...

    @property
    def stopping(self) -> bool: ...

    def free_slots(self) -> int: ...


def operator_parts(
    runner: TaskRunner, worker_interval: float
) -> tuple[WorkerHeartbeat | None, StaffingCheck | None]:
    """The worker heartbeat (a process that runs tasks) and the staffing check (one that
    runs nothing), on a store that keeps workers; `None` where they do not apply."""
    operations = runner.operations
    if operations is None:
        return None, None
    if runner.concurrency:
        return WorkerHeartbeat(runner, operations, worker_interval), None
    every = StaffingCheck.every(worker_interval)
    check = StaffingCheck(runner.store, operations, runner.app, runner.health, runner.pauses, every)
    return None, check


async def start_loops(runner: TaskRunner, group: TaskGroup) -> None:
    """Start the loops this process runs (module doc)."""
    health, leases = runner.health, runner.leases

    async def sweep() -> None:
        removed = await runner.store.purge_expired(time.time())
        if removed:
            logger.debug("Purged %d expired tasks", removed)

    async def sweep_wait() -> None:
        await anyio.sleep(runner.sweep_interval)

    group.start_soon(periodic, "sweeper", sweep, health, sweep_wait)
    group.start_soon(periodic, "heartbeat", leases.renew_held, health, leases.heartbeat_wait)
    if runner.history.enabled:
        history = runner.history
        history.starting()
        group.start_soon(periodic, "history", history.flush, health, history.wait)
    if runner.store.durable:
        group.start_soon(periodic, "recovery", leases.scan, health, leases.scan_wait)
    if runner.staffing is not None:
        group.start_soon(runner.staffing.run)
    if runner.concurrency:  # a front end runs no job: no cancel, answer or queue to hear
        if runner.heartbeat is not None:  # its first beat at once: listed within seconds
            beat = runner.heartbeat
            group.start_soon(periodic, "workers", beat.beat, health, beat.wait)
        group.start_soon(keep_running, "feed", runner.watcher.follow, health)
        take: Callable[[], Awaitable[object]] = leases.take_queued
        source = queue_wakes_of(runner.store)
        if source is not None:  # wake-ups shared out among workers (`queue_listener`)
            listener = QueueListener(runner, source)
            take = partial(listener.take_queued, leases.take_queued)
            group.start_soon(keep_running, LISTENER_LOOP, listener.follow, health)
        group.start_soon(periodic, "queue", take, health, runner.watcher.queue_wait)
        with anyio.move_on_after(5):  # a cancel right after creation is heard at once
            await runner.watcher.subscribed.wait()


async def open_then_start(runner: TaskRunner, group: TaskGroup) -> None:
    """Degraded start: open the store with backoff, then start the loops."""

    async def open_store() -> None:
        await runner.store.open()

    logger.warning("Task store unreachable at startup; retrying until it answers")
    await retry_store(open_store, cap=10.0)
    runner.opened = True
    runner.health.opened = True
    runner.health.store_ok()
    logger.warning("Task store opened; the task engine is running")
    await start_loops(runner, group)


async def after_stop(runner: TaskRunner) -> None:
    """Once the loops have ended: the worker's goodbye, then the history's last write."""
    if not runner.opened:
        return
    if runner.heartbeat is not None:
        await runner.heartbeat.goodbye()
    await runner.history.close()


__all__ = ["after_stop", "open_then_start", "operator_parts", "start_loops"]
