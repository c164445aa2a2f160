"""The store as the engine and the request handlers use it: bounded in time, watched.

`MonitoredStore` wraps any `TaskStore`. Every call that serves a request or a
running task is bounded by the extension's `store_timeout`: a store that hangs
(a black-holed network, a file lock held by another process) answers with
`StoreTimeout` (a `StoreError`) within that bound instead of hanging the
request. Every outcome is reported to the `HealthMonitor`: a `StoreError`
starts or continues an outage, a success ends it. Refusals that are answers,
not failures (`TaskLimitExceeded`, `DuplicateTask`, `StepLimitExceeded`), count as the store
answering.

Housekeeping calls that may legitimately take long (`purge_expired`, the
listing and scanning reads, `open`, `close`) are watched but not bounded here;
each store bounds its own single round trips. Methods a store offers beyond the
protocol (`get_many`, `active_leases`, listing) are wrapped the same way when
present, and absent when the store lacks them, so `getattr(store, name, None)`
keeps working.

One request, one bound: a request handler that makes several store calls takes its
`request_deadline(store)` when it begins and makes them inside `deadline_at(it)`:
each bounded call gets what is left, at most `store_timeout`, so the answer comes
within one `store_timeout` however many calls it took. A nested `deadline_at`
narrows it for a part of the request, so that a later part keeps a share (task
creation keeps one for reading back a create that timed out, `server.creation`). A
call that finds no time left fails at once with `StoreTimeout` and is not reported
to health (the store was never asked).

The in-memory store cannot fail or hang and is used unwrapped.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar, Token
from typing import Any, TypeVar

import anyio

from fastmcp_tasks.errors import (
    DuplicateTask,
    StepLimitExceeded,
    StoreError,
    StoreTimeout,
    TaskLimitExceeded,
)
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.server.sealed_store import SealedStore
from fastmcp_tasks.stores.base import TaskChange, TaskRecord, TaskStore
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.stores.peeking import peek
from fastmcp_tasks.stores.settling import settle, settle_message

T = TypeVar("T")

#: Calls bounded by `store_timeout`: the ones a request or a running task waits on.
BOUNDED = frozenset(
    {
        "create",
        "get",
        "peek",
        "get_many",
        "tombstone",
        "set_status_message",
        "settle_message",
        "transition",
        "settle",
        "request_input",
        "answer_input",
        "take_answers",
        "withdraw_input",
        "request_cancel",
        "claim",
        "renew",
        "requeue",
        "claim_queued",
        "retry_later",
        # the operator records (`stores.operations`): each one round trip
        "add_events",
        "events",
        "beat",
        "workers",
        "paused",
        "hold_paused",
        # durable steps (`stores.steps`): a running task waits on them
        "save_step",
        "steps",
    }
)


#: When (anyio's clock) the store calls of the request being served must have ended, and
#: the task serving it: a task spawned meanwhile copies the context, not the deadline.
_deadline: ContextVar[tuple[float, int] | None] = ContextVar(
    "fastmcp_tasks_store_deadline", default=None
)


def _task_id() -> int:
    """The current task's id, as `anyio.get_current_task().id` gives it (on asyncio the
    task's `id()`, read here without building anyio's task description)."""
    try:
        return id(asyncio.current_task())
    except RuntimeError:  # no asyncio loop: another anyio backend
        return anyio.get_current_task().id


def current_deadline() -> float | None:
    """The deadline the current task's bounded store calls end by, if any."""
    found = _deadline.get()
    if found is None or found[1] != _task_id():
        return None
    return found[0]


class deadline_at:  # named as a function: `with deadline_at(when):`
    """Bounded store calls inside end by `when` (anyio's clock; `None`: no deadline of its
    own), or by an enclosing deadline if that is earlier; `as` gives the deadline in force.
    Only the calls of the current task: one it spawns inside is not bounded by it."""

    __slots__ = ("_token", "_when")

    def __init__(self, when: float | None) -> None:
        self._when = when
        self._token: Token[tuple[float, int] | None] | None = None

    def __enter__(self) -> float | None:
        when, current = self._when, current_deadline()
        if when is None or (current is not None and current <= when):
            return current
        self._token = _deadline.set((when, _task_id()))
        return when

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _deadline.reset(self._token)
            self._token = None


def request_deadline(store: TaskStore) -> float | None:
    """The deadline of a request that begins now: `store_timeout` from now (anyio's
    clock), or `None` for a store without a bound (the in-memory store)."""
    timeout = store.timeout if isinstance(store, MonitoredStore) else None
    return None if timeout is None else anyio.current_time() + timeout


class MonitoredStore:
    """A `TaskStore` that bounds and reports every call of the store it wraps."""

    def __init__(self, inner: TaskStore, health: HealthMonitor, timeout: float | None) -> None:
        self.inner = inner
        self.health = health
        self.timeout = timeout
        self.scheme = inner.scheme
        self.durable = inner.durable

    async def call(
        self, operation: str, fn: Callable[..., Awaitable[T]], *args: Any, **kw: Any
    ) -> T:
        """`await fn(*args, **kw)`, bounded when `operation` is, reported to health."""
        health = self.health
        limit = self.timeout if operation in BOUNDED else None
        deadline = current_deadline() if limit is not None else None
        if limit is not None and deadline is not None:
            limit = min(limit, deadline - anyio.current_time())
            if limit <= 0:
                raise StoreTimeout(f"{operation}: no time left of the request's store_timeout")
        try:
            if limit is None:
                result = await fn(*args, **kw)
            else:  # a cancel scope: it cancels every await until the call ends (a driver's
                # own cleanup after a cancel, psycopg's, ends at once), not only the first;
                # `anyio.fail_after`'s own, without its two generator-based wrappers (half
                # the cost of a call made alone, which every task makes several of)
                scope = anyio.CancelScope(deadline=anyio.current_time() + limit)
                with scope:
                    result = await fn(*args, **kw)
                if scope.cancelled_caught:
                    raise TimeoutError
        except TimeoutError:
            within = "in time" if limit is None else f"within {limit:g} s"
            error = StoreTimeout(f"{operation} did not answer {within}")
            health.store_failed(operation, error)
            raise error from None
        except (TaskLimitExceeded, DuplicateTask, StepLimitExceeded):
            health.store_ok()
            raise
        except StoreError as exc:
            health.store_failed(operation, exc)
            raise
        health.store_ok()
        return result

    async def settle(self, task_id: str, status: Any, **fields: Any) -> bool:
        """`stores.settling`: the inner store's `settle`, or its `transition`."""
        return await self.call("settle", settle, self.inner, task_id, status, **fields)

    async def settle_message(self, task_id: str, message: str | None) -> bool:
        """`stores.settling`: the inner store's `settle_message`, or `set_status_message`."""
        return await self.call("settle_message", settle_message, self.inner, task_id, message)

    async def peek(self, task_id: str) -> TaskRecord | None:
        """`stores.peeking`: the inner store's `peek`, or its `get`."""
        return await self.call("peek", peek, self.inner, task_id)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)  # AttributeError when the store lacks it
        if not inspect.iscoroutinefunction(target):
            return target

        async def bound(*args: Any, **kw: Any) -> Any:
            return await self.call(name, target, *args, **kw)

        bound.__name__ = name
        self.__dict__[name] = bound  # found directly from now on
        return bound

    def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[TaskChange]]:
        return self._changes(task_ids, kinds)

    @asynccontextmanager
    async def _changes(
        self, task_ids: frozenset[str] | None, kinds: frozenset[str] | None
    ) -> AsyncIterator[AsyncIterator[TaskChange]]:
        try:
            manager = self.inner.changes(task_ids, kinds)
            feed = await manager.__aenter__()
        except StoreError as exc:
            self.health.store_failed("changes", exc)
            raise
        self.health.store_ok()
        try:
            yield self._watched(feed)
        except BaseException as exc:
            if not await manager.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await manager.__aexit__(None, None, None)

    async def _watched(self, feed: AsyncIterator[TaskChange]) -> AsyncIterator[TaskChange]:
        while True:
            try:
                change = await feed.__anext__()
            except StopAsyncIteration:
                return
            except StoreError as exc:
                self.health.store_failed("changes", exc)
                raise
            yield change

    def __repr__(self) -> str:
        return f"MonitoredStore({self.inner!r})"


def monitored(store: TaskStore, health: HealthMonitor, timeout: float | None) -> TaskStore:
    """`store` bounded and watched, unless it is the in-memory store (it cannot fail),
    sealing or not."""
    if type(innermost(store)) is MemoryTaskStore:
        return store
    return MonitoredStore(store, health, timeout)


def innermost(store: TaskStore) -> TaskStore:
    """The store under every wrapper (`MonitoredStore`, `SealedStore`)."""
    while isinstance(store, MonitoredStore | SealedStore):
        store = store.inner
    return store


def builtin_store(store: TaskStore) -> bool:
    """Whether the store under every wrapper is one of the package's own stores (exactly:
    not a subclass, which may run code of its author's that reads the request's context)."""
    return type(innermost(store)).__module__.startswith("fastmcp_tasks.stores.")
