"""One subscription to a store's change feed, as the Redis and PostgreSQL feeds keep it.

Both feeds run one reader per store instance that hands each change, with its position
in the feed (a Redis stream id, a PostgreSQL `seq`), to every in-process subscriber whose
filters select it. `Subscriber` is one subscription: its filters, its unbounded queue and
`start`, the newest position at the time it subscribed, which it skips; `SubscriberFeed`
is what the subscriber iterates: its changes past `start`.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from fastmcp_tasks.stores.base import TaskChange

#: A position in a feed (comparable: later is greater).
P = TypeVar("P", bound=Any)


class Subscriber(Generic[P]):
    """One `changes()` subscription: its filters, its queue and the newest position it skips."""

    __slots__ = ("kinds", "send", "start", "task_ids")

    def __init__(
        self,
        task_ids: frozenset[str] | None,
        kinds: frozenset[str] | None,
        send: MemoryObjectSendStream[tuple[P, TaskChange]],
        start: P,
    ) -> None:
        self.task_ids = task_ids
        self.kinds = kinds
        self.send = send
        self.start = start


class SubscriberFeed(Generic[P]):
    """The async iterator a subscriber reads: its queued changes past `start`."""

    def __init__(
        self, receive: MemoryObjectReceiveStream[tuple[P, TaskChange]], sub: Subscriber[P]
    ) -> None:
        self._receive = receive
        self._sub = sub

    def __aiter__(self) -> SubscriberFeed[P]:
        return self

    async def __anext__(self) -> TaskChange:
        while True:
            try:
                position, change = await self._receive.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise StopAsyncIteration from None
            if position > self._sub.start:
                return change


__all__ = ["Subscriber", "SubscriberFeed"]
