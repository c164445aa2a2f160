"""`FaultyStore`: a `TaskStore` wrapper that injects store failures on demand.

    store = FaultyStore(inner)                  # any TaskStore: memory, SQLite, Redis
    store.fail("transition", when=to("completed"))   # the next such call raises StoreError
    store.fail_after_apply("create")            # applied to `inner`, then raises (lost reply)
    store.outage()                              # every call raises StoreError (hang=True: blocks)
    store.restore()
    store.break_feed(keep_down=True)            # live feeds raise; new subscriptions refused
    store.restore_feed()
    await store.fired("transition").wait()      # a fault of that method fired
    await store.wait_calls("renew", 5)          # `renew` has been called 5 times in all

Faults fire *before* the call reaches `inner` (nothing is applied), except the
`fail_after_apply` ones, which model a reply lost after the store committed.
Every protocol method goes through the same gate, `changes()` included (its entry,
and every step of a live feed); optional methods (`get_many`, `active_leases`,
listing, `ping`, ...) are reached through `__getattr__` and gated the same way
when `inner` has them. `close()` is never failed, so teardown always releases
`inner`. The default error is a `StoreError` whose text names `inner` (host, port,
path, as a real store's error does), so tests can check that none of it reaches a
client.
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.base import TaskChange, TaskStore
from fastmcp_tasks.stores.settling import lean_method

ANY = "*"  # the tick every call and every fault sets

ErrorSpec = BaseException | type[BaseException] | None
Predicate = Callable[..., bool]


@dataclass
class Fault:
    """One planned failure of one method."""

    error: ErrorSpec
    after_apply: bool
    when: Predicate | None


def to(*statuses: str) -> Predicate:
    """A `when=` predicate for `transition` (or `settle`): only changes to these statuses."""
    wanted = frozenset(statuses)

    def matches(task_id: str, status: str, *args: Any, **kwargs: Any) -> bool:
        return status in wanted

    return matches


def message_write(store: TaskStore) -> str:
    """The method the engine writes a status message with (`stores.settling`)."""
    lean = lean_method(store, "settle_message", "set_status_message")
    return "set_status_message" if lean is None else "settle_message"


def outcome_write(store: TaskStore) -> str:
    """The method the engine records a run's outcome with: `settle` where the store has
    it (`stores.settling`), else `transition`."""
    return "settle" if lean_method(store, "settle", "transition") is not None else "transition"


class FaultyStore:
    """Delegates every call to `inner`, failing the ones the test planned (module doc)."""

    def __init__(self, inner: TaskStore) -> None:
        self.inner = inner
        self.scheme: str = inner.scheme
        self.durable: bool = inner.durable
        self.calls: Counter[str] = Counter()
        self.faults_fired: Counter[str] = Counter()
        self._planned: dict[str, deque[Fault]] = {}
        self._fired: dict[str, anyio.Event] = {}
        self._ticks: dict[str, anyio.Event] = {}
        self._out: ErrorSpec | bool = False
        self._hang = False
        self._restored: anyio.Event | None = None
        self._feed_down = False
        self._feeds: set[_FaultyFeed] = set()

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r})"

    # --- planning faults -----------------------------------------------------------

    def fail(
        self, method: str, times: int = 1, error: ErrorSpec = None, *, when: Predicate | None = None
    ) -> None:
        """The next `times` calls of `method` (matching `when(*args, **kw)`) raise, unapplied."""
        queue = self._planned.setdefault(method, deque())
        queue.extend(Fault(error, False, when) for _ in range(times))

    def fail_after_apply(
        self, method: str, times: int = 1, error: ErrorSpec = None, *, when: Predicate | None = None
    ) -> None:
        """The next `times` calls of `method` reach `inner`, then raise (a lost reply)."""
        queue = self._planned.setdefault(method, deque())
        queue.extend(Fault(error, True, when) for _ in range(times))

    def pending(self, method: str) -> int:
        """How many planned faults of `method` have not fired yet."""
        return len(self._planned.get(method, ()))

    def outage(self, error: ErrorSpec = None, *, hang: bool = False) -> None:
        """Every call fails until `restore()`; live feeds break. `hang=True`: calls block
        instead (a black-holed connection) and go through once restored."""
        self._out = error if error is not None else True
        self._hang = hang
        self._restored = None
        if not hang:  # a hung feed just stalls; a failing one breaks
            for feed in list(self._feeds):
                feed.break_now()

    def restore(self) -> None:
        """End the outage (feeds broken by it stay broken: subscribe again)."""
        self._out = False
        self._hang = False
        if self._restored is not None:
            self._restored.set()

    @property
    def out(self) -> bool:
        return self._out is not False

    @property
    def hanging(self) -> bool:
        return self._hang

    def break_feed(self, *, keep_down: bool = False) -> int:
        """Live `changes()` iterators raise `StoreError` at their next step; how many.

        `keep_down=True` also refuses new subscriptions until `restore_feed()`.
        """
        self._feed_down = self._feed_down or keep_down
        feeds = list(self._feeds)
        for feed in feeds:
            feed.break_now()
        return len(feeds)

    def restore_feed(self) -> None:
        self._feed_down = False

    @property
    def live_feeds(self) -> int:
        return sum(1 for feed in self._feeds if not feed.broken)

    # --- waiting on what happened --------------------------------------------------

    def fired(self, method: str) -> anyio.Event:
        """Set once a fault of `method` has fired (planned, or during an outage)."""
        return self._fired.setdefault(method, anyio.Event())

    async def wait_fired(self, method: str | None = None, count: int = 1) -> None:
        """Wait until `count` faults of `method` (`None`: of any method) have fired in all."""
        key = ANY if method is None else method

        def fired() -> int:
            return self.total_fired if method is None else self.faults_fired[key]

        while fired() < count:
            await self._tick(key).wait()

    @property
    def total_fired(self) -> int:
        return sum(self.faults_fired.values())

    async def wait_calls(self, method: str, count: int) -> None:
        """Wait until `method` has been called `count` times in all (failed calls count)."""
        while self.calls[method] < count:
            await self._tick(method).wait()

    def _tick(self, method: str) -> anyio.Event:
        return self._ticks.setdefault(method, anyio.Event())

    def _note(self, method: str) -> None:
        for key in (method, ANY):
            tick = self._ticks.pop(key, None)
            if tick is not None:
                tick.set()

    # --- the gate ------------------------------------------------------------------

    def _error(self, method: str, spec: ErrorSpec | bool) -> BaseException:
        if isinstance(spec, BaseException):
            return spec
        if isinstance(spec, type):
            return spec(f"injected {spec.__name__} in {method}")
        return StoreError(f"{describe(self.inner)} is unreachable (injected fault in {method})")

    def _fire(self, method: str, spec: ErrorSpec | bool) -> BaseException:
        self.faults_fired[method] += 1
        self.fired(method).set()
        self._note(method)
        return self._error(method, spec)

    async def _enter(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Fault | None:
        """Count the call; raise for an outage or a planned fault; the after-apply fault."""
        self.calls[method] += 1
        self._note(method)
        if self._out is not False:
            if not self._hang:
                raise self._fire(method, self._out)
            self._fire(method, self._out)  # counted; the call blocks until restored
            if self._restored is None:
                self._restored = anyio.Event()
            await self._restored.wait()
        queue = self._planned.get(method)
        if not queue:
            return None
        for fault in queue:
            if fault.when is None or fault.when(*args, **kwargs):
                queue.remove(fault)
                if fault.after_apply:
                    return fault
                raise self._fire(method, fault.error)
        return None

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        after = await self._enter(method, args, kwargs)
        result = await getattr(self.inner, method)(*args, **kwargs)
        if after is not None:
            raise self._fire(method, after.error)
        return result

    def __getattr__(self, name: str) -> Any:
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self.inner, name)  # AttributeError when `inner` lacks it
        if not callable(value) or not _is_coroutine_function(value):
            return value
        return functools.partial(self._call, name)

    # --- the TaskStore protocol ------------------------------------------------------

    async def open(self) -> None:
        await self._call("open")

    async def close(self) -> None:
        self.calls["close"] += 1
        for feed in list(self._feeds):
            feed.break_now()
        await self.inner.close()

    async def create(self, record: Any, *, caps: Any = None, **kw: Any) -> Any:
        return await self._call("create", record, caps=caps, **kw)  # (`dedupe_window=`)

    async def get(self, task_id: str) -> Any:
        return await self._call("get", task_id)

    async def set_status_message(self, task_id: str, message: str | None) -> Any:
        return await self._call("set_status_message", task_id, message)

    async def transition(self, task_id: str, status: Any, **fields: Any) -> Any:
        return await self._call("transition", task_id, status, **fields)

    async def settle(self, task_id: str, status: Any, **fields: Any) -> Any:
        """Gated as `settle` where `inner` settles, else this store's `transition`."""
        if lean_method(self.inner, "settle", "transition") is None:
            return await self.transition(task_id, status, **fields) is not None
        return await self._call("settle", task_id, status, **fields)

    async def settle_message(self, task_id: str, message: str | None) -> Any:
        """Gated as `settle_message` where `inner` has it, else `set_status_message`."""
        if lean_method(self.inner, "settle_message", "set_status_message") is None:
            return await self.set_status_message(task_id, message) is not None
        return await self._call("settle_message", task_id, message)

    async def peek(self, task_id: str) -> Any:
        """Gated as `peek` where `inner` peeks, else this store's `get`."""
        if lean_method(self.inner, "peek", "get") is None:
            return await self.get(task_id)
        return await self._call("peek", task_id)

    async def request_input(self, task_id: str, requests: dict[str, Any], **kw: Any) -> Any:
        return await self._call("request_input", task_id, requests, **kw)

    async def answer_input(self, task_id: str, responses: dict[str, Any]) -> Any:
        return await self._call("answer_input", task_id, responses)

    async def take_answers(self, task_id: str, keys: frozenset[str]) -> Any:
        return await self._call("take_answers", task_id, keys)

    async def withdraw_input(self, task_id: str, keys: frozenset[str]) -> Any:
        return await self._call("withdraw_input", task_id, keys)

    async def request_cancel(self, task_id: str) -> Any:
        return await self._call("request_cancel", task_id)

    async def purge_expired(self, now: float) -> int:
        removed: int = await self._call("purge_expired", now)
        return removed

    async def claim(self, task_id: str, owner: str, until: float, **kw: Any) -> Any:
        return await self._call("claim", task_id, owner, until, **kw)

    async def renew(self, owner: str, task_ids: frozenset[str], until: float) -> None:
        await self._call("renew", owner, task_ids, until)

    async def active_tasks(self) -> Any:
        return await self._call("active_tasks")

    async def requeue(self, task_id: str, owner: str) -> Any:
        return await self._call("requeue", task_id, owner)

    async def claim_queued(self, owner: str, until: float, limit: int, **kw: Any) -> Any:
        return await self._call("claim_queued", owner, until, limit, **kw)

    @asynccontextmanager
    async def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AsyncIterator[AsyncIterator[TaskChange]]:
        if self._feed_down:
            self.calls["changes"] += 1
            raise self._fire("changes", None)
        await self._enter("changes", (task_ids, kinds), {})
        async with self.inner.changes(task_ids, kinds) as inner_feed:
            feed = _FaultyFeed(self, inner_feed)
            self._feeds.add(feed)
            try:
                yield feed
            finally:
                self._feeds.discard(feed)


class _FaultyFeed:
    """One live subscription: raises `StoreError` at every step once broken."""

    def __init__(self, store: FaultyStore, inner: AsyncIterator[TaskChange]) -> None:
        self.store = store
        self.inner = inner
        self.broken = False
        self._scope: anyio.CancelScope | None = None

    def break_now(self) -> None:
        self.broken = True
        if self._scope is not None:
            self._scope.cancel()

    def __aiter__(self) -> _FaultyFeed:
        return self

    async def __anext__(self) -> TaskChange:
        if not self.broken and self.store.out and not self.store.hanging:
            self.broken = True
        if not self.broken:
            with anyio.CancelScope() as scope:
                self._scope = scope
                try:
                    return await self.inner.__anext__()
                finally:
                    self._scope = None
        self.store.calls["changes.next"] += 1
        raise self.store._fire("changes.next", None)


def describe(store: Any) -> str:
    """Where a store lives, as its own errors say it (Redis `where`, SQLite `path`)."""
    where = getattr(store, "where", None) or getattr(store, "path", None)
    return f"{type(store).__name__}({where})" if where is not None else repr(store)


def _is_coroutine_function(value: Any) -> bool:
    return inspect.iscoroutinefunction(value)
