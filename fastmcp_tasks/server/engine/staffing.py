"""Tasks that wait for a worker that is not there: found, logged once, shown in health.

A front end (`concurrency=0`) runs nothing: its tasks wait in the store for worker
processes. When none is alive, or none of them has the task's tool (an older
deployment, a worker of another server file), they wait forever and nobody is told.
`StaffingCheck` looks every `interval` seconds (twice the heartbeat interval, at most
`MAX_INTERVAL`; the first look one interval after the start, so workers starting
alongside have beaten once): it lists the workers (`store.workers()`, kept alive by
`engine.heartbeat`) and the lease fields of this application's active tasks
(`base.active_leases`, the narrow read recovery makes), and counts, by tool, the
unleased tasks whose tool no live worker of the application (`WorkerInfo.alive`,
`concurrency > 0`) can run. Tasks of a paused tool wait on purpose and are left out
(`engine.pauses`). The `HealthMonitor` logs the start of each episode once (and a tool
joining it) and `EngineHealth.no_worker` shows it until it ends.

It runs only where it can matter, a process that runs nothing (`concurrency=0`) on a
store that keeps workers (`stores.operations`); a process that runs tasks is a worker
of every tool it has.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import anyio

from fastmcp_tasks.server.engine.pauses import Pauses
from fastmcp_tasks.server.engine.supervision import periodic
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.stores.base import TaskStore, active_leases
from fastmcp_tasks.stores.operations import OperableTaskStore

#: The longest time between two checks.
MAX_INTERVAL = 15.0


class StaffingCheck:
    """Finds this application's tasks that no live worker can run (module doc)."""

    def __init__(
        self,
        store: TaskStore,
        operations: OperableTaskStore,
        app: str | None,
        health: HealthMonitor,
        pauses: Pauses,
        interval: float,
    ) -> None:
        self.store = store
        self.operations = operations
        self.app = app
        self.health = health
        self.pauses = pauses
        self.interval = interval

    @classmethod
    def every(cls, heartbeat_interval: float) -> float:
        """The check's interval for workers beating every `heartbeat_interval` seconds."""
        return min(MAX_INTERVAL, 2 * heartbeat_interval)

    async def unserved(self) -> dict[str, int]:
        """Waiting tasks, by tool, that no live worker of the application can run."""
        now = time.time()
        workers = await self.operations.workers()
        served: set[str] = set()
        for worker in workers:
            if worker.app == self.app and worker.concurrency > 0 and worker.alive(now):
                served.update(worker.tools)
        waiting: Counter[str] = Counter(
            record.tool
            for record in await active_leases(self.store, self.app)
            if record.lease_owner is None and record.tool not in served
        )
        if waiting:
            await self.pauses.refresh()
            for tool in self.pauses.tools:
                waiting.pop(tool, None)
        return dict(waiting)

    async def check(self) -> None:
        self.health.no_workers(self.app, await self.unserved())

    async def wait(self) -> None:
        await anyio.sleep(self.interval)

    async def run(self) -> None:
        """The supervised loop (`workers check`); its first check after one interval."""
        await self.wait()
        await periodic("workers check", self.check, self.health, self.wait)

    @staticmethod
    def wanted(concurrency: int, operations: Any) -> bool:
        """Whether a process runs the check: it runs nothing, on a store with workers."""
        return concurrency == 0 and operations is not None


__all__ = ["MAX_INTERVAL", "StaffingCheck"]
