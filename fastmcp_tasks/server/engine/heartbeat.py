"""Workers that say they are alive: this process's `WorkerInfo`, written every `interval`.

A process that runs tasks (a server with `concurrency > 0`, `fastmcp-tasks worker`)
upserts its `stores.operations.WorkerInfo` with `store.beat` as soon as its engine
starts and every `interval` seconds after (`DEFAULT_INTERVAL`, 5 s): its lease owner
id, application, host, pid, package version, concurrency, the tools it can run as
tasks, how many run now, when it started and when it was last seen. On a clean
shutdown it says goodbye: one last beat with `stopped=True`. Readers decide whether it
is alive with `WorkerInfo.alive(now)` (three missed beats, at least 15 s), so a
process killed without a goodbye is seen gone within 20 s at the default interval.

A front end with `concurrency=0` runs nothing and does not beat: it is not a worker,
and counting it as one would hide that no process can run its tasks (`staffing`).

The loop runs supervised (`supervision.periodic`, loop `workers`): a store error is
logged once per outage and retried with backoff; the tools are listed again at each
beat, and a listing that fails keeps the last one. A worker on a store whose change
feed it paces (`watcher`: peers) also lists the workers after a beat, at its first claim
round (which brings that beat forward) and while it claims, to count its peers.
"""

from __future__ import annotations

import logging
import os
import time
from importlib import metadata
from typing import Any, Protocol

import anyio
from fastmcp.tools.base import Tool

from fastmcp_tasks.server.engine.leases import HOST
from fastmcp_tasks.server.engine.watcher import ChangeWatcher
from fastmcp_tasks.stores.operations import OperableTaskStore, WorkerInfo

logger = logging.getLogger("fastmcp_tasks.runner")

#: Seconds between two heartbeats of a worker (`TasksExtension(worker_interval=...)`).
DEFAULT_INTERVAL = 5.0
#: How long the goodbye at shutdown may wait for the store.
GOODBYE_SECONDS = 2.0


def package_version() -> str:
    """The installed version of fastmcp-tasks (`unknown` when it is not installed)."""
    try:
        return metadata.version("fastmcp-tasks")
    except metadata.PackageNotFoundError:
        return "unknown"


class BeatingRunner(Protocol):
    """What `WorkerHeartbeat` needs of the runner it speaks for."""

    server: Any
    owner: str
    app: str | None
    concurrency: int
    watcher: ChangeWatcher

    @property
    def running_now(self) -> int: ...


class WorkerHeartbeat:
    """Beats for one runner (module doc)."""

    def __init__(
        self, runner: BeatingRunner, store: OperableTaskStore, interval: float = DEFAULT_INTERVAL
    ) -> None:
        self.runner = runner
        self.store = store
        self.interval = interval
        self.started_at = time.time()
        self.version = package_version()
        self.tools: tuple[str, ...] = ()

    def info(self, *, stopped: bool = False) -> WorkerInfo:
        """This process as its next heartbeat describes it."""
        runner = self.runner
        return WorkerInfo(
            worker_id=runner.owner,
            app=runner.app,
            host=HOST,
            pid=os.getpid(),
            version=self.version,
            concurrency=runner.concurrency,
            tools=self.tools,
            running=runner.running_now,
            started_at=self.started_at,
            last_seen=time.time(),
            interval=self.interval,
            stopped=stopped,
        )

    async def list_tools(self) -> None:
        """The names of the tools this process can run as tasks (kept if listing fails)."""
        try:
            found = await self.runner.server.get_tasks()
        except Exception:
            logger.debug("Listing the task tools for the worker heartbeat failed", exc_info=True)
            return
        self.tools = tuple(sorted({c.name for c in found if isinstance(c, Tool)}))

    async def beat(self) -> None:
        """One heartbeat (raises `StoreError` when the store does not take it); then, when
        this worker claims on a store whose feed it paces, a count of its peers
        (`watcher.ChangeWatcher.count_peers`; a failed listing keeps the last count)."""
        await self.list_tools()
        await self.store.beat(self.info())
        watcher = self.runner.watcher
        if watcher.peers_due():
            try:
                listed: list[WorkerInfo] | None = await self.store.workers()
            except Exception:  # the beat was written: the count waits for the next one
                logger.debug("Counting the worker's peers failed", exc_info=True)
                listed = None
            watcher.count_peers(listed, time.time())

    async def wait(self) -> None:
        """The interval, or until the worker's first claim round (its peers are counted
        then, `beat`)."""
        with anyio.move_on_after(self.interval):
            await self.runner.watcher.first_claim.wait()

    async def goodbye(self) -> None:
        """At a clean shutdown: one last beat saying it stopped (bounded, never raises)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(GOODBYE_SECONDS):
            try:
                await self.store.beat(self.info(stopped=True))
            except Exception as exc:
                logger.debug("The worker's last heartbeat failed (%r)", exc)


__all__ = ["DEFAULT_INTERVAL", "WorkerHeartbeat", "package_version"]
