"""One dashboard's running state: its store, index, sampler and hub, started lazily.

`Dashboard` opens a store it owns (it was given a URL) and starts the hub on the first
request (a dashboard mounted inside another application gets no lifespan of its own)
and stops both in `aclose`; `open_store` turns what `dashboard.app()` was given into
the store to show.
"""

from __future__ import annotations

import asyncio

import anyio

from fastmcp_tasks.dashboard.index import TaskIndex
from fastmcp_tasks.dashboard.live import Hub, stop
from fastmcp_tasks.dashboard.security import Guard
from fastmcp_tasks.dashboard.stats import BacklogSampler
from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.listing import ListableTaskStore


class Dashboard:
    """One dashboard's state: the store, the index, the hub and the access policy."""

    def __init__(self, store: ListableTaskStore, owns: bool, guard: Guard, lease_seconds: float):
        self.store = store
        self.owns = owns
        self.guard = guard
        self.lease_seconds = lease_seconds
        self.index = TaskIndex(store)
        self.sampler = BacklogSampler()
        self.hub = Hub(store, self.index, self.sampler)
        self._task: asyncio.Task[None] | None = None
        self._opened = False
        self._lock = anyio.Lock()

    async def start(self) -> None:
        """Open an owned store and start the hub, once (on the first request)."""
        if self._task is not None:
            return
        async with self._lock:
            if self._task is not None:
                return
            if self.owns and not self._opened:
                await self.store.open()  # a StoreError here is a 503; the next request retries
                self._opened = True
            self._task = asyncio.get_running_loop().create_task(self.hub.run())

    async def aclose(self) -> None:
        """Stop the hub; close the store if the dashboard opened it."""
        task, self._task = self._task, None
        await stop(task)
        if self.owns and self._opened:
            self._opened = False
            await self.store.close()


def open_store(store_or_url: ListableTaskStore | str) -> tuple[ListableTaskStore, bool]:
    """The store to show and whether the dashboard owns it (it was given a URL)."""
    owns = isinstance(store_or_url, str)
    if isinstance(store_or_url, str):
        # an idle SQLite feed is read every 0.2 s, not 1 s: a change reaches the page
        # well within a second after a quiet spell (5 cheap reads a second)
        options = {"idle_poll_interval": 0.2} if store_or_url.startswith("sqlite:") else {}
        store = store_from_url(store_or_url, **options)
    else:
        store = store_or_url
    if not isinstance(store, ListableTaskStore):
        scheme = getattr(store, "scheme", type(store).__name__)
        raise ConfigurationError(
            f"the dashboard needs a store that can list tasks (ListableTaskStore); "
            f"the {scheme} store cannot"
        )
    return store, owns


__all__ = ["Dashboard", "open_store"]
