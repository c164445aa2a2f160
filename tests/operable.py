"""Helpers for the tests of the operator records the engine writes (`stores.operations`):
a memory store several servers of one process share, store URLs by kind, and reading
a task's history once the engine has written it.

`SharedMemoryStore` is a `MemoryTaskStore` that says it is durable, so a
`concurrency=0` front end and a worker can be two servers in one process on one store
(the way they are two processes on a SQLite file), and whose `close` leaves the other
server's change feed alone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.stores.operations import OperableTaskStore, TaskEvent, operable


class SharedMemoryStore(MemoryTaskStore):
    """One process's memory store, shared by a front end and a worker (module doc)."""

    scheme = "shared"
    durable = True

    async def close(self) -> None:
        return None  # the other server still follows the feed


def require_operable(store: TaskStore) -> OperableTaskStore:
    """`store`'s operator records, or skip: a store of this branch may not keep them yet."""
    found = operable(store)
    if found is None:
        pytest.skip(f"the {store.scheme} store keeps no operator records (OperableTaskStore)")
    return found


def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file of the test's own, skipped while that store keeps no operator records."""
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    require_operable(store_from_url(url))
    return url


async def history(
    store: Any, task_id: str, until: str = "finished", count: int = 0, within: float = 10.0
) -> list[TaskEvent]:
    """The task's history, oldest first (by `at`: each process writes its events in
    batches of its own, so they reach the store out of order), once an event of kind
    `until` and at least `count` events are in it."""
    with anyio.fail_after(within):
        while True:
            events = await store.events(task_id)
            if len(events) >= count and any(event.kind == until for event in events):
                return sorted(events, key=lambda event: event.at)
            await anyio.sleep(0.02)


def kinds(events: list[TaskEvent]) -> list[str]:
    return [event.kind for event in events]


def one(events: list[TaskEvent], kind: str) -> TaskEvent:
    (found,) = [event for event in events if event.kind == kind]
    return found


async def eventually(predicate: Any, within: float = 10.0, step: float = 0.02) -> None:
    """Wait (bounded) until `predicate()` (sync or async) holds."""
    deadline = time.monotonic() + within
    with anyio.fail_after(within + 1):
        while True:
            value = predicate()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return
            assert time.monotonic() < deadline, "the condition never held"
            await anyio.sleep(step)


__all__ = [
    "SharedMemoryStore",
    "eventually",
    "history",
    "kinds",
    "one",
    "require_operable",
    "sqlite_url",
]
