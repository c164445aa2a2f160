"""The in-memory store's records as copies, and its reads of many tasks.

`_snapshot` is how every record leaves or enters `MemoryTaskStore`: one positional
constructor call, so mutating a record a caller holds never changes the store.
`MemoryListing` is the operator half (`fastmcp-tasks ls` / `purge`): newest first
with keyset paging, and purging finished tasks (each leaves a tombstone); and the
batch reads (`get_many`, `active_tasks`, `active_leases`).
"""

from __future__ import annotations

import heapq
import operator
import time
from dataclasses import fields
from typing import TYPE_CHECKING

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.listing import PageKey, check_listing, page_key, selected
from fastmcp_tasks.stores.memory_flow import MemoryFlow
from fastmcp_tasks.wire.names import ACTIVE_STATUSES

_FIELDS = operator.attrgetter(*(f.name for f in fields(TaskRecord)))


def _snapshot(record: TaskRecord) -> TaskRecord:
    """A shallow copy of `record`: ~4x cheaper than `copy.copy` of a slots dataclass."""
    return TaskRecord(*_FIELDS(record))


class MemoryListing:
    """Listing, purging and batch reads over a `MemoryTaskStore`'s dict."""

    _tasks: dict[str, TaskRecord]
    _flow: MemoryFlow

    if TYPE_CHECKING:

        def _live(self, task_id: str) -> TaskRecord | None: ...
        def _forget_history(self, task_id: str) -> None: ...

    async def get_many(self, task_ids: list[str]) -> dict[str, TaskRecord]:
        """The live tasks among `task_ids`, by id (see `base.get_many`)."""
        found = {}
        for task_id in task_ids:
            if (record := self._live(task_id)) is not None:
                found[task_id] = _snapshot(record)
        return found

    async def active_tasks(self) -> list[TaskRecord]:
        return [_snapshot(r) for r in self._tasks.values() if r.status in ACTIVE_STATUSES]

    async def active_leases(self, *, app: str | None = None) -> list[TaskRecord]:
        """The active tasks of `app` (all: `None`), lease fields only (`base.active_leases`)."""
        return [
            rules.lease_view(r)
            for r in self._tasks.values()
            if r.status in ACTIVE_STATUSES and (app is None or r.app == app)
        ]

    async def list_tasks(
        self,
        *,
        status: frozenset[str] | None = None,
        owner: str | None = None,
        limit: int = 100,
        before: PageKey | None = None,
    ) -> list[TaskRecord]:
        statuses, now = check_listing(status, limit), time.time()
        found = (r for r in self._tasks.values() if selected(r, statuses, owner, before, now))
        return [_snapshot(r) for r in heapq.nlargest(limit, found, key=page_key)]

    async def purge_finished(self, before: float, *, dry_run: bool = False) -> int:
        ended = [
            task_id
            for task_id, r in self._tasks.items()
            if r.terminal_at is not None and r.terminal_at < before and r.is_terminal
        ]
        if not dry_run:
            now = time.time()
            for task_id in ended:  # their expiry-heap entries are skipped when they come up
                self._forget_history(task_id)
                self._flow.bury(self._tasks.pop(task_id), "purged", now)
        return len(ended)
