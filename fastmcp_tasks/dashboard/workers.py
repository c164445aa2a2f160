"""The dashboard's workers view: the processes holding leases, from the index's active tasks.

A lease owner id is `host:pid:token` (`server.engine.leases.new_owner`); a runner renews
its leases every `lease_seconds / 3` to `now + lease_seconds`, so the heartbeat age of
an owner is about `now - (lease_expires - lease_seconds)` of its freshest lease (never
below 0), and a lease is stale once `lease_expires < now`: its runner stopped renewing
(crashed, hung or cut off), and recovery will take the task. A worker is stale when
every lease it holds is. Rows come stale first, then busiest first, then by owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastmcp_tasks.dashboard.index import TaskIndex, TaskSummary


@dataclass(frozen=True)
class WorkerRow:
    """One lease holder and the active tasks it holds (oldest first)."""

    owner: str
    host: str
    pid: int | None
    tasks: list[TaskSummary]
    heartbeat_age: float | None  # seconds since its freshest lease was renewed
    stale: bool
    stale_tasks: int = 0  # how many of its leases ran out

    def to_json(self, now: float) -> dict[str, Any]:
        """The `/api/workers` entry."""
        return {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "tasks": [s.task_id for s in self.tasks],
            "tools": sorted({s.tool for s in self.tasks}),
            "task_count": len(self.tasks),
            "heartbeat_age": None if self.heartbeat_age is None else round(self.heartbeat_age, 3),
            "stale": self.stale,
            "stale_tasks": self.stale_tasks,
        }


def parse_owner(owner: str) -> tuple[str, int | None]:
    """`(host, pid)` of a `host:pid:token` owner id (`pid` `None` when it is not a number)."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    return host, int(pid) if pid.isdigit() else None


def workers(index: TaskIndex, now: float, lease_seconds: float) -> list[WorkerRow]:
    """A row per lease holder of the index's active tasks (see the module docstring)."""
    held: dict[str, list[TaskSummary]] = {}
    for s in index.active():
        if s.lease_owner is not None:
            held.setdefault(s.lease_owner, []).append(s)
    rows = []
    for owner, tasks in held.items():
        expiries = [s.lease_expires for s in tasks if s.lease_expires is not None]
        freshest = max(expiries, default=None)
        age = None if freshest is None else max(0.0, now - (freshest - lease_seconds))
        stale_tasks = sum(1 for s in tasks if s.lease_expires is None or s.lease_expires < now)
        host, pid = parse_owner(owner)
        tasks.sort(key=lambda s: s.key)
        rows.append(WorkerRow(owner, host, pid, tasks, age, stale_tasks == len(tasks), stale_tasks))
    rows.sort(key=lambda row: (not row.stale, -len(row.tasks), row.owner))
    return rows


__all__ = ["WorkerRow", "parse_owner", "workers"]
