"""Keeping the engine alive: supervised loops, and store writes retried through outages.

Every background loop of the engine (dispatch, change-feed watcher, sweeper,
lease heartbeat, recovery scan, queue taking) runs under `keep_running`: an
exception is reported to the `HealthMonitor` (which logs it once per outage or
failure streak), the loop waits a capped exponential backoff with jitter and
runs again. Nothing a loop raises reaches the runner's task group, so one
failing loop never stops the others or the server.

`retry_store` repeats one store call while it raises `StoreError`, with the same
backoff, until it succeeds or the caller's `stop` event says the process is
stopping; the runner uses it for the writes a task cannot do without (its
outcome, parking on input), so a blip never throws a finished result away.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from fastmcp_tasks.errors import StoreError, TaskLimitExceeded
from fastmcp_tasks.server.health import HealthMonitor

T = TypeVar("T")


class GaveUp(Exception):
    """`retry_store` stopped retrying because the process is shutting down."""


class Backoff:
    """Capped exponential backoff with jitter: `first`, doubling, at most `cap` seconds.

    Each delay is drawn from [half, full] of the nominal one, so processes that failed
    together (a store restart) do not retry in lockstep.
    """

    def __init__(self, first: float = 0.05, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self._nominal = first

    def next(self) -> float:
        nominal = self._nominal
        self._nominal = min(self.cap, nominal * 2)
        return nominal * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._nominal = self.first


async def keep_running(
    name: str, body: Callable[[], Awaitable[None]], health: HealthMonitor, *, cap: float = 5.0
) -> None:
    """Run `body()` until it returns; an exception restarts it after a backoff.

    A run that lasted longer than `cap` before failing starts the backoff over: the
    loop was healthy in between.
    """
    backoff = Backoff(cap=cap)
    health.loop_running(name)
    try:
        while True:
            started = anyio.current_time()
            try:
                await body()
                return
            except Exception as exc:
                health.loop_failed(name, exc)
                if anyio.current_time() - started > cap:
                    backoff.reset()
                await anyio.sleep(backoff.next())
    finally:
        health.loop_stopped(name)


async def periodic(
    name: str,
    step: Callable[[], Awaitable[object]],
    health: HealthMonitor,
    wait: Callable[[], Awaitable[None]],
) -> None:
    """Run `step()` then `wait()`, forever, supervised: a failed step is retried with backoff."""

    async def body() -> None:
        while True:
            await step()
            health.loop_ok(name)
            await wait()

    await keep_running(name, body, health)


async def retry_store(
    call: Callable[[], Awaitable[T]],
    *,
    stop: anyio.Event | None = None,
    cap: float = 5.0,
) -> T:
    """`await call()`, repeated with backoff while it raises `StoreError`.

    Raises:
        GaveUp: `stop` was set before an attempt succeeded (the process is stopping).
    """
    backoff = Backoff(cap=cap)
    while True:
        try:
            return await call()
        except TaskLimitExceeded:
            raise  # a refusal, not an outage
        except StoreError:
            if stop is None:
                await anyio.sleep(backoff.next())
                continue
            with anyio.move_on_after(backoff.next()):
                await stop.wait()
            if stop.is_set():
                raise GaveUp from None
