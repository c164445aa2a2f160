"""Lifetime deduplication in the store contract: `create(..., dedupe_window=math.inf)`.

The server creates a task carrying an idempotency key (`server.idempotency`) with
`dedupe_window=math.inf`: the task holding the key answers every later create with it
for as long as it is retained, whatever its status (cancelled included), and of any
number of racing creates with one key, in any processes, exactly one creates.

`FlowContract` includes these tests. The `peer` fixture is a second opened instance of
the store under test on the same data (another connection to the same file, prefix or
schema); by default it is the `store` itself, so the races run on one instance.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from fastmcp_tasks.stores.base import TaskStatus, TaskStore
from fastmcp_tasks.stores.flow import FlowControlStore
from fastmcp_tasks.testing.base import ContractBase, make_record

LIFETIME = math.inf
RACERS = 12


class IdempotencyContract(ContractBase):
    """`dedupe_window=math.inf`: the key's task for its whole retained lifetime."""

    @pytest.fixture
    async def peer(self, store: TaskStore) -> AsyncIterator[TaskStore]:
        """Override: yield a second opened store on `store`'s data, close it afterwards."""
        yield store

    async def test_lifetime_dedupe_answers_whatever_the_status(
        self, store: FlowControlStore
    ) -> None:
        statuses: tuple[TaskStatus, ...] = ("working", "completed", "failed", "cancelled")
        for status in statuses:
            key = f"lifetime-{status}"
            first = make_record(dedupe_key=key)
            first.created_at -= 30 * 86400  # long before any finite window
            assert await store.create(first, dedupe_window=LIFETIME) is None
            if status != "working":
                error = {"code": 1, "message": "x"} if status == "failed" else None
                ended = await store.transition(first.task_id, status, result={}, error=error)
                assert ended is not None and ended.status == status
            again = make_record(dedupe_key=key)
            found = await store.create(again, dedupe_window=LIFETIME)
            assert found is not None and found.task_id == first.task_id, status
            assert found.status == status
            assert await store.get(again.task_id) is None  # nothing created

    async def test_lifetime_dedupe_leaves_other_keys_alone(self, store: FlowControlStore) -> None:
        first = make_record(dedupe_key="one")
        assert await store.create(first, dedupe_window=LIFETIME) is None
        other = make_record(dedupe_key="two")
        assert await store.create(other, dedupe_window=LIFETIME) is None
        assert await store.get(other.task_id) is not None

    async def test_a_removed_holder_frees_its_key(self, store: FlowControlStore) -> None:
        gone = make_record(dedupe_key="removed", retention_ms=0)
        await store.create(gone, dedupe_window=LIFETIME)
        await store.transition(gone.task_id, "completed", result={})
        await store.purge_expired(time.time() + 1)
        assert await store.get(gone.task_id) is None
        fresh = make_record(dedupe_key="removed")
        assert await store.create(fresh, dedupe_window=LIFETIME) is None
        assert await store.get(fresh.task_id) is not None

    async def test_racing_instances_make_one_task(
        self, store: FlowControlStore, peer: FlowControlStore
    ) -> None:
        records = [make_record(dedupe_key="raced") for _ in range(RACERS)]
        answers: dict[str, str | None] = {}

        async def create(index: int) -> None:
            on = store if index % 2 == 0 else peer
            found = await on.create(records[index], dedupe_window=LIFETIME)
            answers[records[index].task_id] = None if found is None else found.task_id

        async with anyio.create_task_group() as group:
            for index in range(RACERS):
                group.start_soon(create, index)
        created = [r.task_id for r in records if await store.get(r.task_id) is not None]
        assert len(created) == 1
        (winner,) = created
        assert answers[winner] is None  # the one that created
        assert all(answers[r.task_id] == winner for r in records if r.task_id != winner)
        for on in (store, peer):  # both instances see the one task
            seen = await on.get(winner)
            assert seen is not None and seen.dedupe_key == "raced"
