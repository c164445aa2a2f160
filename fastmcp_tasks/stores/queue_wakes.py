"""Queue wake-ups a store hands to one worker each: the optional `queue_wakes` capability.

Every worker follows the change feed for the cancel requests and answers of its own
tasks; on most stores it also hears every `queued` change there, so with several
workers each new task wakes every one of them, and all but one run a claim round that
finds the task taken. A store that can deliver each `queued` change to one worker of
the task's application instead offers `queue_wakes(app, consumer)`: entering it joins
the application's consumers (`consumer` names this process); `next(count)` waits for
at most `count` wake-ups not delivered to any other consumer of that application (up
to the store's block time, then `[]`). A store may hand out fewer wake-ups than tasks
were queued, one for each claim it asks for (a claim takes every claimable task up to
the worker's free slots), as long as a claim that leaves tasks waiting asks for another,
and `hand_on` wakes another consumer for the wake-ups one could not act on.

The engine asks for no more wake-ups than it has free slots (`engine.queue_listener`),
so a full worker leaves the next task's wake-up to a worker that can take it. Wake-ups
are hints, never the only way a queued task is found: the queue loop still claims when
a slot frees while more may be waiting and on its safety poll. A store without the
capability is followed the old way (every worker hears every `queued` change).

Only Redis offers it (`redis.queue_wakes`, a consumer group per application). Its
workers' feed subscriptions add `NEW_TASKS_KIND`, and so opt out of hearing those
`queued` changes on the feed (`stores.base.NEW_TASKS_KIND`).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol, cast

from fastmcp_tasks.stores.base import TaskChange, TaskStore


class QueueWakes(Protocol):
    """One consumer's share of an application's `queued` changes."""

    async def next(self, count: int) -> list[TaskChange]:
        """Up to `count` `queued` changes no other consumer of the application got;
        `[]` when none came within the store's block time.

        Raises:
            StoreError: the store failed (leave the context and enter it again).
        """
        ...


class QueueWakeSource(Protocol):
    """A store that hands each `queued` change to one consumer of its application."""

    def queue_wakes(
        self, app: str | None, consumer: str
    ) -> AbstractAsyncContextManager[QueueWakes]: ...

    async def hand_on(self, app: str | None) -> None:
        """A consumer of `app` read wake-ups it cannot act on (it filled up, or stops):
        wake another consumer if tasks of `app` wait. Harmless when none do.

        Raises:
            StoreError: the store failed.
        """
        ...


def queue_wakes_of(store: TaskStore) -> QueueWakeSource | None:
    """`store` as a `QueueWakeSource` (through its wrappers), or `None` when it is none
    (a store with `queue_wakes` but no `hand_on` too: its workers follow the feed)."""
    if callable(getattr(store, "queue_wakes", None)) and callable(getattr(store, "hand_on", None)):
        return cast(QueueWakeSource, store)
    return None


__all__ = ["QueueWakeSource", "QueueWakes", "queue_wakes_of"]
