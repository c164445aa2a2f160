"""Changes that read nothing back: the optional `settle` and `settle_message` capabilities.

`TaskStore.transition` answers the task's new record, which a store reads back in the
same round trip and decodes: its arguments, its result, its context. The engine only
asks whether the change was applied when it records how a run ended, so a store may
also offer `settle`, exactly `transition` but answering `True` (applied) or `False`
(refused) and reading no record back. A task with a megabyte of arguments and a
megabyte of result then costs its worker, and its store, no second copy of either when
it ends.

Likewise `settle_message(task_id, message)`: `set_status_message` answering only whether
the task is active (and so now shows `message`). A tool's progress reports each write one
message; without it every report read the whole task back.

`settle(store, ...)` calls the store's `settle` when its class defines one at least as
far down its class tree as its `transition`, else its `transition` (a store without the
capability loses nothing but the saving; `lean_method`); `settle_message(store, ...)`
likewise with `set_status_message`. A lean method a wrapper only forwards through
`__getattr__` does not count, nor one a subclass inherits from above its own
`transition` (or `set_status_message`): a wrapper or subclass that overrides those (to
redact, say) around a store that settles would otherwise see its override skipped. One
that wants both defines both, as `SealedStore` and `MonitoredStore` do. The SQLite,
Redis and PostgreSQL stores offer both; the memory store reads nothing back, so it needs
neither. `testing.SettleContract` checks a store's `settle` and `settle_message` against
its own `transition` and `set_status_message`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from fastmcp_tasks.stores.base import UNCHANGED, TaskStore, _Unchanged
from fastmcp_tasks.wire.names import TaskStatus


@runtime_checkable
class SettlingStore(TaskStore, Protocol):
    """A store whose status changes can skip reading the record back (module doc)."""

    async def settle(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        expect: frozenset[str] | None = None,
        status_message: str | _Unchanged | None = UNCHANGED,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """`transition` with the same arguments and effect; whether it was applied."""
        ...

    async def settle_message(self, task_id: str, message: str | None) -> bool:
        """`set_status_message` with the same effect; whether the task is active."""
        ...


def lean_method(store: object, name: str, instead_of: str) -> Any:
    """`store`'s method `name`, used in place of `instead_of`, when its class defines
    `name` at least as far down its class tree as `instead_of`; else `None`.

    Only classes count, never what an object's `__getattr__` forwards nor what it keeps in
    its own `__dict__`: a wrapper that overrides `instead_of` and forwards the rest, or a
    subclass of a bundled store that overrides `instead_of` (to filter or redact, say),
    keeps its override used (module doc)."""
    mro = type(store).__mro__
    own = next((i for i, cls in enumerate(mro) if name in vars(cls)), None)
    paired = next((i for i, cls in enumerate(mro) if instead_of in vars(cls)), None)
    if own is None or (paired is not None and paired < own):
        return None
    return getattr(store, name)


async def settle(store: TaskStore, task_id: str, status: TaskStatus, **fields: Any) -> bool:
    """Change `task_id` to `status` as `store.transition` would; whether it was applied,
    read back only by a store without `settle` (module doc)."""
    own = lean_method(store, "settle", "transition")
    if own is not None:
        return bool(await own(task_id, status, **fields))
    return await store.transition(task_id, status, **fields) is not None


async def settle_message(store: TaskStore, task_id: str, message: str | None) -> bool:
    """Set `task_id`'s status message as `store.set_status_message` would; whether the
    task is active, read back only by a store without `settle_message` (module doc)."""
    own = lean_method(store, "settle_message", "set_status_message")
    if own is not None:
        return bool(await own(task_id, message))
    return await store.set_status_message(task_id, message) is not None


__all__ = ["SettlingStore", "lean_method", "settle", "settle_message"]
