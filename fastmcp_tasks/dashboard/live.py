"""The hub: one change-feed subscription per dashboard, coalesced, fanned out over SSE.

A `Hub` subscribes once to `store.changes()` (every task, every kind) and keeps the
`TaskIndex` current: changed ids are collected and re-read together every
`REFRESH` seconds (`index.refresh`), new tasks are looked for every `POLL_NEW`
seconds (creation emits no change), the whole index is rescanned every `RELOAD`
seconds after the last rescan ended (purges and expiry emit nothing; the rescan runs
beside the refreshes, which never wait for it) and the backlog is sampled every
`SAMPLE` seconds. Everything these find changed is published (`Hub.publish`, which
the actions use too). A store error never ends the hub: it is logged, the clients
hear `status: offline`, the ids not yet re-read are kept, and the subscription is
retried with a growing backoff; once back, a rescan publishes what changed meanwhile.

Each SSE client (`Listener`) has a filter and a bounded buffer holding the latest state
of each task it should hear about (a newer state replaces an older one), the ids
gone, and the latest counts. The stream sends what the buffer holds at most once
every `REFRESH` seconds, so a burst of 1,000 changes a second is a few small
messages. A client whose buffer overflows (it reads slower than tasks change) is
told to `resync` (reload) instead of holding more memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from fastmcp_tasks.dashboard.index import Change, Gone, TaskIndex, TaskSummary
from fastmcp_tasks.dashboard.stats import BacklogSampler
from fastmcp_tasks.stores.listing import ListableTaskStore

log = logging.getLogger("fastmcp_tasks.dashboard")

REFRESH = 0.25
POLL_NEW = 0.5
RELOAD = 30.0
SAMPLE = 5.0
PING = 15.0
MAX_BUFFER = 1000
BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(eq=False)
class Listener:
    """One SSE client: what it wants to hear, and what it has not been sent yet."""

    wants: Callable[[TaskSummary], bool]
    #: Whether a wanted summary also matches the page's full filter (`matches` in JSON).
    matches: Callable[[TaskSummary], bool]
    tasks: dict[str, TaskSummary] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    counts: dict[str, int] | None = None
    status: str | None = None
    resync: bool = False
    wake: anyio.Event = field(default_factory=anyio.Event)

    def _notify(self) -> None:
        self.wake.set()

    def offer(self, changes: list[Change]) -> None:
        """Buffer the changes this client wants (a gone task: if it wanted its last state)."""
        changed = False
        for item in changes:
            if isinstance(item, Gone):
                if self.wants(item.summary):
                    self.tasks.pop(item.task_id, None)
                    self.gone.add(item.task_id)
                    changed = True
            elif self.wants(item):
                self.tasks[item.task_id] = item  # the latest state wins
                self.gone.discard(item.task_id)
                changed = True
        if len(self.tasks) + len(self.gone) > MAX_BUFFER:
            self.tasks.clear()
            self.gone.clear()
            self.resync = True
        if changed:
            self._notify()

    def set_counts(self, counts: dict[str, int]) -> None:
        if counts != self.counts:
            self.counts = counts
            self._notify()

    def set_status(self, status: str) -> None:
        self.status = status
        self._notify()

    def drain(self, now: float) -> list[str]:
        """The SSE messages of everything buffered; the buffer is left empty."""
        messages: list[str] = []
        if self.status is not None:
            messages.append(event("status", {"state": self.status}))
            self.status = None
        if self.resync:
            messages.append(event("resync", {}))
            self.resync = False
        if self.tasks:
            rows = []
            for summary in self.tasks.values():
                row = summary.to_json(now)
                row["matches"] = self.matches(summary)
                rows.append(row)
            messages.append(event("tasks", rows))
            self.tasks = {}
        if self.gone:
            messages.append(event("gone", sorted(self.gone)))
            self.gone = set()
        if self.counts is not None:
            messages.append(event("counts", self.counts))
            self.counts = None
        self.wake = anyio.Event()
        return messages


def event(name: str, data: Any) -> str:
    """One SSE message."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


class Hub:
    """Keeps a `TaskIndex` current from the store's feed and fans changes out (module doc)."""

    def __init__(
        self,
        store: ListableTaskStore,
        index: TaskIndex,
        sampler: BacklogSampler,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.index = index
        self.sampler = sampler
        self.clock = clock
        self.state = "connecting"
        self.listeners: set[Listener] = set()
        self._dirty: set[str] = set()
        self._rescanning = False
        self._last_rescan = 0.0

    # --- listeners --------------------------------------------------------------------

    def listen(
        self, wants: Callable[[TaskSummary], bool], matches: Callable[[TaskSummary], bool]
    ) -> Listener:
        listener = Listener(wants, matches)
        listener.status = self.state
        listener.counts = dict(self.index.counts()) if self.index.loaded else None
        listener.wake.set()  # the first message says where the hub stands
        self.listeners.add(listener)
        return listener

    def forget(self, listener: Listener) -> None:
        self.listeners.discard(listener)

    async def stream(self, listener: Listener) -> AsyncIterator[str]:
        """The SSE text of one client until it goes away (the response cancels it)."""
        try:
            yield "retry: 2000\n\n"
            while True:
                with anyio.move_on_after(PING):
                    await listener.wake.wait()
                messages = listener.drain(self.clock())
                yield "".join(messages) if messages else ": ping\n\n"
                await anyio.sleep(REFRESH)  # at most one message per REFRESH per client
        finally:
            self.forget(listener)

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            for listener in list(self.listeners):
                listener.set_status(state)

    def publish(self, changes: list[Change]) -> None:
        """Offer what the index changed to every client, with the counts."""
        if not changes:
            return
        counts = dict(self.index.counts())
        for listener in list(self.listeners):
            listener.offer(changes)
            listener.set_counts(counts)

    # --- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until cancelled; store errors are retried with backoff, never raised."""
        failures = 0
        while True:
            try:
                await self._serve()
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                self._set_state("offline")
                delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                log.warning("dashboard: the task store failed (%s); retrying in %gs", exc, delay)
                await anyio.sleep(delay)
            else:  # the feed ended (a store closing): subscribe again
                await anyio.sleep(BACKOFF[0])

    async def _serve(self) -> None:
        async with self.store.changes() as feed:
            if self.index.loaded:  # back after an outage: what changed meanwhile
                self.publish(await self.index.reload())
                self._last_rescan = anyio.current_time()
            else:
                await self.index.load()  # the first pages were read from the store
            self.sampler.sample(self.index, self.clock())
            self._set_state("live")
            self._publish_counts()
            async with anyio.create_task_group() as group:
                group.start_soon(self._read, feed)
                await self._tick(group)
                group.cancel_scope.cancel()

    def _publish_counts(self) -> None:
        counts = dict(self.index.counts())
        for listener in list(self.listeners):
            listener.set_counts(counts)

    async def _read(self, feed: AsyncIterator[Any]) -> None:
        async for change in feed:
            self._dirty.add(change.task_id)
        raise ConnectionError("the change feed ended")

    async def _rescan(self) -> None:
        """The periodic rescan, beside the refreshes (a store error ends `_serve`)."""
        try:
            self.publish(await self.index.reload())
        finally:
            self._rescanning = False
            self._last_rescan = anyio.current_time()

    async def _tick(self, group: anyio.abc.TaskGroup) -> None:
        last_new = last_sample = anyio.current_time()
        self._last_rescan = max(self._last_rescan, last_new)
        while True:
            await anyio.sleep(REFRESH)
            now = anyio.current_time()
            changes: list[Change] = []
            if self._dirty:
                ids, self._dirty = self._dirty, set()
                try:
                    changes += await self.index.refresh(ids)
                except BaseException:
                    self._dirty |= ids  # re-read once the store is back
                    raise
            if now - last_new >= POLL_NEW:
                last_new = now
                changes += await self.index.poll_new()
            if not self._rescanning and now - self._last_rescan >= RELOAD:
                self._rescanning = True
                group.start_soon(self._rescan)
            if now - last_sample >= SAMPLE:
                last_sample = now
                self.sampler.sample(self.index, self.clock())
            self.publish(changes)


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel the hub's task and wait for it."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


__all__ = ["Hub", "Listener", "event", "stop"]
