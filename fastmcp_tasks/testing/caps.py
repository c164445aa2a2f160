"""The caps part of the `TaskStore` contract: `ActiveCaps` checked atomically with `create`.

A refusal raises `TaskLimitExceeded` naming the limit (`ActiveCaps.TOTAL`,
`ActiveCaps.PER_OWNER`, or `max_tasks` in `core`) and its value, and stores nothing.
Only active tasks count against `ActiveCaps`; concurrent creates never overshoot.
"""

from __future__ import annotations

import anyio
import pytest

from fastmcp_tasks.errors import TaskLimitExceeded
from fastmcp_tasks.stores.base import ActiveCaps, TaskStore
from fastmcp_tasks.testing.base import ContractBase, make_record


class CapsContract(ContractBase):
    """`create(record, caps=...)`: the active-task caps."""

    async def test_the_total_cap_names_itself_and_stores_nothing(self, store: TaskStore) -> None:
        caps = ActiveCaps(total=2)
        first, second, refused = make_record(), make_record(owner="alice"), make_record()
        await store.create(first, caps=caps)
        await store.create(second, caps=caps)
        with pytest.raises(TaskLimitExceeded) as info:
            await store.create(refused, caps=caps)
        assert (info.value.limit, info.value.value) == (ActiveCaps.TOTAL, 2)
        assert await store.get(refused.task_id) is None
        await store.transition(first.task_id, "completed", result={})  # ended: counts no more
        await store.create(refused, caps=caps)
        assert await store.get(refused.task_id) is not None

    async def test_the_per_owner_cap_names_itself_and_stores_nothing(
        self, store: TaskStore
    ) -> None:
        caps = ActiveCaps(per_owner=1)
        mine, again = make_record(owner="alice"), make_record(owner="alice")
        await store.create(mine, caps=caps)
        with pytest.raises(TaskLimitExceeded) as info:
            await store.create(again, caps=caps)
        assert (info.value.limit, info.value.value) == (ActiveCaps.PER_OWNER, 1)
        assert await store.get(again.task_id) is None
        await store.create(make_record(owner="bob"), caps=caps)  # another principal
        await store.create(make_record(), caps=caps)  # no owner: no per-owner cap
        await store.create(make_record(), caps=caps)
        await store.transition(mine.task_id, "cancelled")
        await store.create(again, caps=caps)

    async def test_the_total_cap_is_checked_before_the_per_owner_cap(
        self, store: TaskStore
    ) -> None:
        caps = ActiveCaps(total=1, per_owner=1)
        await store.create(make_record(owner="alice"), caps=caps)
        with pytest.raises(TaskLimitExceeded) as info:
            await store.create(make_record(owner="alice"), caps=caps)
        assert info.value.limit == ActiveCaps.TOTAL

    async def test_without_caps_nothing_is_counted(self, store: TaskStore) -> None:
        await store.create(make_record(owner="alice"), caps=ActiveCaps())
        await store.create(make_record(owner="alice"), caps=ActiveCaps())
        await store.create(make_record(owner="alice"))

    async def test_concurrent_creates_never_overshoot_a_cap(self, store: TaskStore) -> None:
        caps = ActiveCaps(total=3)
        accepted: list[str] = []
        refused: list[str] = []

        async def attempt() -> None:
            task = make_record()
            try:
                await store.create(task, caps=caps)
            except TaskLimitExceeded:
                refused.append(task.task_id)
            else:
                accepted.append(task.task_id)

        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(attempt)
        assert len(accepted) == 3 and len(refused) == 7
        for task_id in refused:
            assert await store.get(task_id) is None
