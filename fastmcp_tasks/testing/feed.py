"""The change-feed part of the `TaskStore` contract: filtering, ordering, who receives what.

A subscription (`store.changes(task_ids, kinds)`) receives only the changes made
after its context is entered, only to the tasks and of the kinds it asked for,
and the changes of one task in the order they were made. Several subscriptions
each receive every change they select.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from fastmcp_tasks.stores.base import TaskChange, TaskStore
from fastmcp_tasks.testing.base import ContractBase, make_record

#: The kinds a task engine's runner subscribes to (`engine.watcher.WATCHED`); a store may
#: serve such a subscription from a narrower feed (Redis: its wake stream).
RUNNER_KINDS = frozenset({"cancel_requested", "answered", "queued"})

#: Seconds to wait for a change that must arrive.
FEED_WAIT = 5.0


async def next_change(feed: AsyncIterator[TaskChange]) -> TaskChange:
    """The next change on `feed`; fails when none comes within `FEED_WAIT`."""
    with anyio.fail_after(FEED_WAIT):
        return await feed.__anext__()


async def changes_until(
    feed: AsyncIterator[TaskChange], task_id: str, status: str
) -> list[TaskChange]:
    """Every change read up to and including `task_id`'s `status` change to `status`."""
    seen: list[TaskChange] = []
    while True:
        change = await next_change(feed)
        seen.append(change)
        if change.task_id == task_id and change.kind == "status" and change.status == status:
            return seen


class FeedContract(ContractBase):
    """`changes()`: what a subscription selects and in which order it arrives."""

    async def test_feed_filters_by_task_id(self, store: TaskStore) -> None:
        followed, other = make_record(), make_record()
        await store.create(followed)
        await store.create(other)
        async with store.changes(frozenset({followed.task_id})) as feed:
            await store.set_status_message(other.task_id, "not followed")
            await store.request_cancel(other.task_id)
            await store.transition(other.task_id, "completed", result={})
            await store.set_status_message(followed.task_id, "followed")
            first = await next_change(feed)
        assert first.task_id == followed.task_id and first.kind == "message"

    async def test_feed_filters_by_kind(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        async with store.changes(kinds=frozenset({"cancel_requested"})) as feed:
            await store.set_status_message(task.task_id, "a message")
            await store.request_input(task.task_id, {"k": {"method": "elicitation/create"}})
            await store.answer_input(task.task_id, {"k": {"action": "accept"}})
            await store.request_cancel(task.task_id)
            first = await next_change(feed)
        assert first.task_id == task.task_id and first.kind == "cancel_requested"

    async def test_feed_filters_by_task_id_and_kind_together(self, store: TaskStore) -> None:
        followed, other = make_record(), make_record()
        await store.create(followed)
        await store.create(other)
        wanted = frozenset({followed.task_id})
        async with store.changes(wanted, frozenset({"status"})) as feed:
            await store.transition(other.task_id, "failed", error={"code": 1, "message": "x"})
            await store.set_status_message(followed.task_id, "not a status change")
            await store.transition(followed.task_id, "completed", result={})
            first = await next_change(feed)
        assert (first.task_id, first.kind, first.status) == (
            followed.task_id,
            "status",
            "completed",
        )

    async def test_feed_delivers_only_changes_made_after_subscribing(
        self, store: TaskStore
    ) -> None:
        task = make_record()
        await store.create(task)  # `queued`: before the subscription
        await store.request_cancel(task.task_id)  # `cancel_requested`: before it too
        async with store.changes(frozenset({task.task_id})) as feed:
            await store.set_status_message(task.task_id, "after")
            first = await next_change(feed)
        assert first.kind == "message"

    async def test_changes_of_one_task_arrive_in_the_order_made(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        async with store.changes(frozenset({task.task_id})) as feed:
            await store.set_status_message(task.task_id, "step")
            await store.request_input(task.task_id, {"k": {"method": "elicitation/create"}})
            await store.answer_input(task.task_id, {"k": {"action": "accept"}})
            await store.request_cancel(task.task_id)
            await store.transition(task.task_id, "cancelled")
            seen = await changes_until(feed, task.task_id, "cancelled")
        kinds: list[str] = [change.kind for change in seen]
        made: list[str] = ["message", "inputs", "answered", "cancel_requested", "status"]
        assert all(kind in kinds for kind in made), kinds
        firsts = [kinds.index(kind) for kind in made[:-1]] + [len(kinds) - 1]
        assert firsts == sorted(firsts), kinds  # a store may add changes, never reorder them

    async def test_many_messages_arrive_complete_and_in_order(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        async with store.changes(frozenset({task.task_id}), frozenset({"message"})) as feed:
            for step in range(20):
                await store.set_status_message(task.task_id, f"step {step}")
            seen = [await next_change(feed) for _ in range(20)]
        assert [change.kind for change in seen] == ["message"] * 20

    async def test_every_subscription_receives_what_it_selects(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        ids = frozenset({task.task_id})
        async with store.changes(ids) as one, store.changes() as every:
            await store.request_cancel(task.task_id)
            got_one = await next_change(one)
            got_every = await next_change(every)
        assert got_one.kind == got_every.kind == "cancel_requested"
        assert got_one.task_id == got_every.task_id == task.task_id

    async def test_a_runners_kinds_arrive_alone_in_order_as_on_the_whole_feed(
        self, store: TaskStore
    ) -> None:
        async with store.changes(kinds=RUNNER_KINDS) as runner, store.changes() as every:
            task = make_record()
            await store.create(task)  # `queued` (unleased)
            await store.set_status_message(task.task_id, "not for a runner")
            await store.request_input(task.task_id, {"k": {"method": "elicitation/create"}})
            await store.answer_input(task.task_id, {"k": {"action": "accept"}})
            await store.request_cancel(task.task_id)
            got = [await next_change(runner) for _ in range(3)]
            seen: list[TaskChange] = []
            while not seen or seen[-1].kind != "cancel_requested":
                change = await next_change(every)
                if change.task_id == task.task_id:
                    seen.append(change)
        assert [c.kind for c in got] == ["queued", "answered", "cancel_requested"]
        assert all(c.task_id == task.task_id for c in got)
        whole = [c for c in seen if c.kind in RUNNER_KINDS]
        assert [(c.kind, c.status, c.details) for c in whole] == [
            (c.kind, c.status, c.details) for c in got
        ]
