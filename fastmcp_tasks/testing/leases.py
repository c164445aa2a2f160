"""The lease part of the `TaskStore` contract: claim, renew, requeue, the queue, active tasks."""

from __future__ import annotations

import time

import anyio
import pytest

from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.testing.base import ContractBase, make_record


class LeaseContract(ContractBase):
    """Run leases: exclusive while they live, takeable once expired, one winner under races."""

    async def test_claim_is_exclusive_while_the_lease_lives(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        later = time.time() + 60
        first = await store.claim(task.task_id, "a", later)
        assert first is not None and first.lease_owner == "a"
        assert await store.claim(task.task_id, "b", later) is None
        again = await store.claim(task.task_id, "a", later)  # the owner may re-claim
        assert again is not None and again.lease_owner == "a"
        assert again.attempts == 0  # a lease is not a run (`stores.phases`)
        taken = await store.claim(task.task_id, "b", later, expect_owner="a")  # recovery
        assert taken is not None and taken.lease_owner == "b"

    async def test_an_expired_lease_can_be_taken(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        await store.claim(task.task_id, "a", time.time() - 1)
        taken = await store.claim(task.task_id, "b", time.time() + 60)
        assert taken is not None and taken.lease_owner == "b"

    async def test_terminal_tasks_cannot_be_claimed(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        await store.transition(task.task_id, "completed", result={})
        assert await store.claim(task.task_id, "a", time.time() + 60) is None
        assert await store.claim("missing", "a", time.time() + 60) is None

    async def test_renew_extends_only_the_owners_leases(self, store: TaskStore) -> None:
        mine, theirs = make_record(), make_record()
        await store.create(mine)
        await store.create(theirs)
        soon = time.time() + 1
        await store.claim(mine.task_id, "me", soon)
        await store.claim(theirs.task_id, "them", soon)
        await store.renew("me", frozenset({mine.task_id, theirs.task_id}), soon + 100)
        a, b = await store.get(mine.task_id), await store.get(theirs.task_id)
        assert a is not None and a.lease_expires == pytest.approx(soon + 100)
        assert b is not None and b.lease_expires == pytest.approx(soon)

    async def test_active_tasks_lists_working_and_parked(self, store: TaskStore) -> None:
        working, parked, done = make_record(), make_record(), make_record()
        for task in (working, parked, done):
            await store.create(task)
        await store.request_input(parked.task_id, {"k": {"method": "elicitation/create"}})
        await store.transition(done.task_id, "failed", error={"code": 1, "message": "x"})
        active = {r.task_id: r.status for r in await store.active_tasks()}
        assert active.get(working.task_id) == "working"
        assert active.get(parked.task_id) == "input_required"
        assert done.task_id not in active

    async def test_concurrent_claims_have_one_winner(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        winners: list[str] = []

        async def attempt(owner: str) -> None:
            if await store.claim(task.task_id, owner, time.time() + 60) is not None:
                winners.append(owner)

        async with anyio.create_task_group() as group:
            for owner in "abcdefgh":
                group.start_soon(attempt, owner)
        assert len(winners) == 1

    async def test_claim_queued_hands_each_unleased_task_to_one_caller(
        self, store: TaskStore
    ) -> None:
        unleased = [make_record() for _ in range(3)]
        leased = make_record()
        for task in [*unleased, leased]:
            await store.create(task)
        await store.claim(leased.task_id, "front", time.time() + 60)
        later = time.time() + 60
        first = await store.claim_queued("w1", later, 2)
        second = await store.claim_queued("w2", later, 5)
        assert [r.task_id for r in first] == [t.task_id for t in unleased[:2]]  # oldest first
        assert [r.task_id for r in second] == [unleased[2].task_id]
        assert await store.claim_queued("w3", later, 5) == []
        got = await store.get(unleased[0].task_id)
        assert got is not None and got.lease_owner == "w1"

    async def test_contending_claim_queued_hand_out_each_task_once(self, store: TaskStore) -> None:
        """Eight workers claiming at once, in small batches, until the queue is empty:
        every task goes to exactly one of them, leased to it, and no run is counted
        twice (a store whose claim begins the run counts one attempt per task)."""
        tasks = [
            make_record(phase="queued", status_message="Queued: for a worker") for _ in range(40)
        ]
        for task in tasks:
            await store.create(task)
        later = time.time() + 60
        taken: dict[str, list[TaskRecord]] = {}

        async def worker(owner: str) -> None:
            while records := await store.claim_queued(owner, later, 3):
                taken.setdefault(owner, []).extend(records)

        async with anyio.create_task_group() as group:
            for owner in ("w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8"):
                group.start_soon(worker, owner)
        handed = [(owner, r.task_id) for owner, records in taken.items() for r in records]
        assert sorted(task_id for _, task_id in handed) == sorted(t.task_id for t in tasks)
        for owner, task_id in handed:
            got = await store.get(task_id)
            assert got is not None and got.lease_owner == owner
            assert got.attempts <= 1 and (got.phase == "running") == (got.attempts == 1)

    async def test_requeue_gives_a_held_task_back(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        await store.claim(task.task_id, "a", time.time() + 60)
        assert await store.requeue(task.task_id, "b") is None  # not b's to give back
        back = await store.requeue(task.task_id, "a")
        assert back is not None and back.lease_owner is None
        (taken,) = await store.claim_queued("w", time.time() + 60, 5)
        assert taken.task_id == task.task_id and taken.lease_owner == "w"
