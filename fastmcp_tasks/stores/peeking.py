"""A read of a task for the wire: the optional `peek` capability.

`TaskStore.get` answers the whole record, its arguments and context included: what a
worker needs to run the task. `tasks/get`, `tasks/update` and `tasks/cancel` show or
change a task's state and never its arguments nor its context, yet a client polls
`tasks/get` every `pollIntervalMs` while the task runs. A store may offer
`peek(task_id)`: `get` with `arguments` and `context` left `None`, neither read nor
sent nor decoded (nor, with sealed payloads, opened), so a poll of a task with a
megabyte of arguments costs what a poll of a small one does.

`peek(store, task_id)` calls the store's `peek` when its class defines one at least as
far down its class tree as its `get`, else `get` (`stores.settling.lean_method`): a
wrapper's or a subclass's own `get` is never skipped. The
SQLite, Redis and PostgreSQL stores offer it; the memory store's `get` copies no
payload, so it needs none. `testing.PeekContract` checks a store's `peek` against its
own `get`. Use it only where neither field is read.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.stores.settling import lean_method


@runtime_checkable
class PeekingStore(TaskStore, Protocol):
    """A store that can read a task without its payloads (module doc)."""

    async def peek(self, task_id: str) -> TaskRecord | None:
        """`get(task_id)` with `arguments` and `context` `None`."""
        ...


async def peek(store: TaskStore, task_id: str) -> TaskRecord | None:
    """The task as `store.get` answers it, but maybe without `arguments` and `context`
    (module doc)."""
    own = lean_method(store, "peek", "get")
    if own is not None:
        found: TaskRecord | None = await own(task_id)
        return found
    return await store.get(task_id)


__all__ = ["PeekingStore", "peek"]
