"""Listing and purging tasks: an optional store capability for operators.

The `TaskStore` protocol is what the extension needs to serve tasks, and it never
enumerates them (MCP has no `tasks/list` in SEP-2663). Operators do need to: the
`fastmcp-tasks ls`, `show` and `purge` commands work on any store that also
implements `ListableTaskStore`. All three bundled stores do.

Order. `list_tasks` returns tasks newest first by `(created_at, task_id)`, the
page key (`page_key`); the next page is the one `before` the last task's key.
Expired tasks are never listed, as `get` never returns them.

Purging. `purge_finished` deletes terminal tasks that ended before a time,
whatever retention they have left. Active tasks are never purged: a running or
waiting task belongs to its caller until it ends.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES

#: Every task status, the default of a listing.
ALL_STATUSES: frozenset[str] = ACTIVE_STATUSES | TERMINAL_STATUSES

#: Most tasks one `list_tasks` call returns.
MAX_PAGE = 10_000

PageKey = tuple[float, str]


def page_key(record: TaskRecord) -> PageKey:
    """Where a task sits in a listing: `(created_at, task_id)`, listed in descending order."""
    return (record.created_at, record.task_id)


def check_listing(status: frozenset[str] | None, limit: int) -> frozenset[str]:
    """The statuses to list (default: all), after checking `status` and `limit`.

    Raises:
        ValueError: an unknown status, or `limit` outside 1..`MAX_PAGE`.
    """
    wanted = ALL_STATUSES if status is None else frozenset(status)
    unknown = wanted - ALL_STATUSES
    if unknown:
        raise ValueError(f"unknown task status {sorted(unknown)}; known: {sorted(ALL_STATUSES)}")
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be 1..{MAX_PAGE}, got {limit}")
    return wanted


def selected(
    record: TaskRecord,
    statuses: frozenset[str],
    owner: str | None,
    before: PageKey | None,
    now: float,
) -> bool:
    """Whether a listing with these filters shows `record` (live, matching, on this page)."""
    if record.status not in statuses or (owner is not None and record.owner != owner):
        return False
    if before is not None and page_key(record) >= before:
        return False
    expires_at = record.expires_at
    return expires_at is None or expires_at > now


@runtime_checkable
class ListableTaskStore(TaskStore, Protocol):
    """A `TaskStore` that can also enumerate and bulk-delete tasks (operator commands)."""

    async def list_tasks(
        self,
        *,
        status: frozenset[str] | None = None,
        owner: str | None = None,
        limit: int = 100,
        before: PageKey | None = None,
    ) -> list[TaskRecord]:
        """Up to `limit` live tasks, newest first (by `page_key`).

        Args:
            status: only tasks in these statuses (default: all).
            owner: only tasks of this principal key (default: anyone's).
            limit: most tasks returned, 1..`MAX_PAGE`.
            before: only tasks whose `page_key` is below this one: pass the key of
                the last task of a page to get the next page.

        Raises:
            ValueError: an unknown status or a `limit` out of range.
        """
        ...

    async def purge_finished(self, before: float, *, dry_run: bool = False) -> int:
        """Delete the terminal tasks that ended (`terminal_at`) before `before`; how many.

        Retention is not consulted; active tasks are never deleted. With `dry_run`,
        nothing is deleted and the count is of the tasks that would be.
        """
        ...


__all__ = [
    "ALL_STATUSES",
    "MAX_PAGE",
    "ListableTaskStore",
    "PageKey",
    "check_listing",
    "page_key",
    "selected",
]
