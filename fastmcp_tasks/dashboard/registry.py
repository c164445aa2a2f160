"""The workers the dashboard lists: the store's registry merged with the lease holders.

A store that keeps operator records (`stores.operations`) has every process that runs
tasks in its registry (`store.workers()`: app, host, pid, version, concurrency, tools,
how many it runs, when it started and was last seen, whether it stopped cleanly).
The index knows which processes hold leases (`workers.workers`). One row per process
id (a registry's `worker_id` is its lease owner id):

- a registered process: `alive` (heard from within three beats), `gone` (silent for
  longer, and it never said goodbye: it probably died) or `stopped` (a clean
  shutdown); with the tasks it holds, idle ones too;
- a lease holder the registry does not know (an older process, or a store without a
  registry): `leases` while its leases are renewed, `stale` once they all ran out.

Rows come in the order an operator should look: gone and stale first, then alive and
lease-only, then stopped; within each by app, host, pid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastmcp_tasks.dashboard.index import TaskIndex, TaskSummary
from fastmcp_tasks.dashboard.workers import WorkerRow, parse_owner, workers
from fastmcp_tasks.stores.operations import WorkerInfo

#: A row's state, in the order rows are listed.
STATES = ("gone", "stale", "alive", "leases", "stopped")
STATE_WORDS = {
    "alive": "alive",
    "gone": "gone",
    "stopped": "stopped",
    "leases": "unregistered",
    "stale": "unregistered, stale",
}


def state_of(info: WorkerInfo, now: float) -> str:
    """`alive`, `gone` or `stopped` (module docstring)."""
    if info.stopped:
        return "stopped"
    return "alive" if info.alive(now) else "gone"


@dataclass(frozen=True)
class WorkerView:
    """One process: its registry entry, the leases it holds, or both."""

    worker_id: str
    info: WorkerInfo | None
    leases: WorkerRow | None
    state: str

    @property
    def host(self) -> str:
        return self.info.host if self.info is not None else parse_owner(self.worker_id)[0]

    @property
    def pid(self) -> int | None:
        return self.info.pid if self.info is not None else parse_owner(self.worker_id)[1]

    @property
    def app(self) -> str | None:
        return None if self.info is None else self.info.app

    @property
    def tasks(self) -> list[TaskSummary]:
        return [] if self.leases is None else self.leases.tasks

    @property
    def stale(self) -> bool:
        return self.state in ("gone", "stale")

    def heartbeat_age(self, now: float) -> float | None:
        """Seconds since it was last heard: its last beat, else its freshest lease."""
        if self.info is not None:
            return max(0.0, now - self.info.last_seen)
        return None if self.leases is None else self.leases.heartbeat_age

    def sort_key(self) -> tuple[int, str, str, int, str]:
        return (STATES.index(self.state), self.app or "", self.host, self.pid or 0, self.worker_id)

    def to_json(self, now: float) -> dict[str, Any]:
        """The `/api/workers` entry: the lease holder's keys, then the registry's."""
        info, age = self.info, self.heartbeat_age(now)
        return {
            "owner": self.worker_id,
            "host": self.host,
            "pid": self.pid,
            "tasks": [s.task_id for s in self.tasks],
            "tools": sorted({s.tool for s in self.tasks}),
            "task_count": len(self.tasks),
            "heartbeat_age": None if age is None else round(age, 3),
            "stale": self.stale,
            "stale_tasks": 0 if self.leases is None else self.leases.stale_tasks,
            "registered": info is not None,
            "state": self.state,
            "app": self.app,
            "version": None if info is None else info.version,
            "concurrency": None if info is None else info.concurrency,
            "running": None if info is None else info.running,
            "can_run": None if info is None else list(info.tools),
            "started_at": None if info is None else info.started_at,
            "last_seen": None if info is None else info.last_seen,
            "interval": None if info is None else info.interval,
            "stopped": None if info is None else info.stopped,
        }


def merge(
    registered: list[WorkerInfo] | None, holders: list[WorkerRow], now: float
) -> list[WorkerView]:
    """One `WorkerView` per process of the registry or the leases, in listing order."""
    by_id = {row.owner: row for row in holders}
    views = [
        WorkerView(info.worker_id, info, by_id.pop(info.worker_id, None), state_of(info, now))
        for info in registered or ()
    ]
    views += [
        WorkerView(row.owner, None, row, "stale" if row.stale else "leases")
        for row in by_id.values()
    ]
    views.sort(key=WorkerView.sort_key)
    return views


def worker_views(
    registered: list[WorkerInfo] | None, index: TaskIndex, now: float, lease_seconds: float
) -> list[WorkerView]:
    """The workers page's rows from the registry (`None`: the store keeps none) and the
    index's lease holders."""
    return merge(registered, workers(index, now, lease_seconds), now)


__all__ = ["STATES", "STATE_WORDS", "WorkerView", "merge", "state_of", "worker_views"]
