"""The flow-control part of the store contract (`stores.flow`): gates and fair turns,
retry waits, deduplication (with the lifetime deduplication of
`testing.idempotency.IdempotencyContract`, and its `peer` fixture), tombstones. Only for
stores that set `flow_control = True`.
"""

from __future__ import annotations

import time

import anyio

from fastmcp_tasks.stores.base import TaskChange, TaskRecord, TaskStore
from fastmcp_tasks.stores.flow import FlowControlStore
from fastmcp_tasks.testing.base import make_record
from fastmcp_tasks.testing.idempotency import IdempotencyContract

LATER = 3600.0


def _gated(
    gate: str = "deploy", limit: int = 1, owner: str | None = None, app: str | None = None
) -> TaskRecord:
    return make_record(gate=gate, gate_limit=limit, owner=owner, app=app)


async def _ids(store: TaskStore, owner: str, limit: int = 10) -> list[str]:
    return [r.task_id for r in await store.claim_queued(owner, time.time() + 60, limit)]


class FlowContract(IdempotencyContract):
    """Gates, fair turns, retry waits, deduplication and tombstones."""

    # --- gates ------------------------------------------------------------------

    async def test_a_gate_hands_out_at_most_its_limit(self, store: FlowControlStore) -> None:
        tasks = [_gated(limit=2) for _ in range(4)]
        for task in tasks:
            await store.create(task)
        assert await _ids(store, "w1") == [tasks[0].task_id, tasks[1].task_id]
        assert await _ids(store, "w2") == []  # both slots are leased, to anyone
        await store.transition(tasks[0].task_id, "completed", result={})
        assert await _ids(store, "w2") == [tasks[2].task_id]
        await store.requeue(tasks[1].task_id, "w1")  # given back: no longer holds a slot
        assert await _ids(store, "w2") == [tasks[1].task_id]
        assert await _ids(store, "w2") == []

    async def test_gates_are_independent_and_ungated_tasks_pass(
        self, store: FlowControlStore
    ) -> None:
        a1, a2, b1, free = _gated("deploy|a"), _gated("deploy|a"), _gated("deploy|b"), make_record()
        for task in (a1, a2, b1, free):
            await store.create(task)
        assert await _ids(store, "w") == [a1.task_id, b1.task_id, free.task_id]

    async def test_a_gated_task_that_ends_frees_its_slot_on_the_feed(
        self, store: FlowControlStore
    ) -> None:
        task = _gated(app="app")
        await store.create(task)
        await _ids(store, "w")
        async with store.changes(frozenset({task.task_id}), frozenset({"queued"})) as feed:
            await store.transition(task.task_id, "completed", result={})
            with anyio.fail_after(5):
                change = await feed.__anext__()
        assert change.kind == "queued"
        assert change.details.get("gate") == "deploy" and change.details.get("app") == "app"

    async def test_a_gated_retry_frees_its_slot_while_it_waits(
        self, store: FlowControlStore
    ) -> None:
        first, second = _gated(app="app"), _gated(app="app")
        for task in (first, second):
            await store.create(task)
        assert await _ids(store, "w") == [first.task_id]
        async with store.changes(frozenset({first.task_id}), frozenset({"queued"})) as feed:
            await store.retry_later(first.task_id, "w", time.time() + LATER, "Retrying")
            freed = []
            with anyio.fail_after(5):
                async for change in feed:
                    if "not_before" not in change.details:
                        freed.append(change)
                        break
        assert freed[0].details.get("gate") == "deploy"
        assert await _ids(store, "w") == [second.task_id]  # the slot is free, the retry waits

    async def test_a_gate_serves_owners_in_turn(self, store: FlowControlStore) -> None:
        many = [_gated(owner="alice") for _ in range(5)]
        for task in many:
            await store.create(task)
        one = _gated(owner="bob")
        await store.create(one)
        order: list[str] = []
        for _ in range(3):
            (taken,) = await _ids(store, "w")
            order.append(taken)
            await store.transition(taken, "completed", result={})
        assert order == [many[0].task_id, one.task_id, many[1].task_id]

    async def test_one_claim_shares_free_slots_between_owners(
        self, store: FlowControlStore
    ) -> None:
        alice = [_gated(limit=2, owner="alice") for _ in range(3)]
        for task in alice:
            await store.create(task)
        bob = _gated(limit=2, owner="bob")
        await store.create(bob)
        assert sorted(await _ids(store, "w")) == sorted([alice[0].task_id, bob.task_id])

    # --- retry waits --------------------------------------------------------------

    async def test_retry_later_waits_out_not_before(self, store: FlowControlStore) -> None:
        task = make_record(phase="running", attempts=1)
        await store.create(task)
        await store.claim(task.task_id, "w", time.time() + 60)
        assert await store.retry_later(task.task_id, "other", time.time(), "x") is None
        back = await store.retry_later(task.task_id, "w", time.time() + LATER, "Retrying")
        assert back is not None and back.lease_owner is None and back.retries == 1
        assert back.status_message == "Retrying" and back.status == "working"
        assert back.phase == "retry" and back.attempts == 1
        assert await _ids(store, "w") == []  # not before its time
        again = await store.get(task.task_id)
        assert again is not None and again.not_before is not None and again.retries == 1

    async def test_a_due_retry_is_claimed_and_cleared(self, store: FlowControlStore) -> None:
        task = make_record(phase="running", attempts=1)
        await store.create(task)
        await store.claim(task.task_id, "w", time.time() + 60)
        await store.retry_later(task.task_id, "w", time.time() - 0.001, "Retrying")
        (taken,) = await store.claim_queued("v", time.time() + 60, 5)
        assert taken.task_id == task.task_id and taken.lease_owner == "v"
        assert taken.not_before is None and taken.retries == 1
        # waiting to retry until its run begins (a store may begin it as it hands it out)
        assert (taken.phase, taken.attempts) in {("retry", 1), ("running", 2)}

    async def test_retry_later_is_refused_after_cancel_or_end(
        self, store: FlowControlStore
    ) -> None:
        cancelled, ended = make_record(), make_record()
        for task in (cancelled, ended):
            await store.create(task)
            await store.claim(task.task_id, "w", time.time() + 60)
        await store.request_cancel(cancelled.task_id)
        await store.transition(ended.task_id, "failed", error={"code": 1, "message": "x"})
        assert await store.retry_later(cancelled.task_id, "w", time.time(), "r") is None
        assert await store.retry_later(ended.task_id, "w", time.time(), "r") is None
        assert await store.retry_later("missing", "w", time.time(), "r") is None

    async def test_retry_later_unparks_and_announces(self, store: FlowControlStore) -> None:
        task = make_record(app="app")
        await store.create(task)
        await store.claim(task.task_id, "w", time.time() + 60)
        await store.request_input(task.task_id, {"k": {"method": "elicitation/create"}})
        due = time.time() + LATER
        seen: list[TaskChange] = []
        async with store.changes(frozenset({task.task_id})) as feed:
            back = await store.retry_later(task.task_id, "w", due, "Retrying")
            assert back is not None and back.status == "working" and not back.input_requests
            with anyio.fail_after(5):
                async for change in feed:
                    seen.append(change)
                    if change.kind == "queued":
                        break
        queued = seen[-1]
        assert queued.details.get("app") == "app"
        assert abs(float(queued.details["not_before"]) - due) < 0.01

    # --- deduplication ----------------------------------------------------------

    async def test_dedupe_returns_the_active_task(self, store: FlowControlStore) -> None:
        first, second = make_record(dedupe_key="k"), make_record(dedupe_key="k")
        assert await store.create(first, dedupe_window=60) is None
        found = await store.create(second, dedupe_window=60)
        assert found is not None and found.task_id == first.task_id
        assert await store.get(second.task_id) is None  # nothing created
        other = make_record(dedupe_key="other")
        assert await store.create(other, dedupe_window=60) is None

    async def test_dedupe_counts_from_creation(self, store: FlowControlStore) -> None:
        old = make_record(dedupe_key="old")
        old.created_at -= 120  # active, but created two minutes ago
        await store.create(old, dedupe_window=60)
        fresh = make_record(dedupe_key="old")
        assert await store.create(fresh, dedupe_window=60) is None
        assert await store.get(fresh.task_id) is not None
        found = await store.create(make_record(dedupe_key="old"), dedupe_window=60)
        assert found is not None and found.task_id == fresh.task_id

    async def test_dedupe_covers_a_recent_outcome_but_not_a_cancel(
        self, store: FlowControlStore
    ) -> None:
        done, cancelled = make_record(dedupe_key="d"), make_record(dedupe_key="c")
        await store.create(done, dedupe_window=60)
        await store.create(cancelled, dedupe_window=60)
        await store.transition(done.task_id, "completed", result={})
        await store.transition(cancelled.task_id, "cancelled")
        found = await store.create(make_record(dedupe_key="d"), dedupe_window=60)
        assert found is not None and found.task_id == done.task_id
        again = make_record(dedupe_key="c")
        assert await store.create(again, dedupe_window=60) is None  # a cancel starts over
        assert await store.get(again.task_id) is not None

    async def test_dedupe_ends_with_its_window(self, store: FlowControlStore) -> None:
        done = make_record(dedupe_key="w")
        await store.create(done, dedupe_window=60)
        ended = await store.transition(done.task_id, "failed", error={"code": 1, "message": "x"})
        assert ended is not None and ended.terminal_at is not None
        # the wall clock, not an event, is what is awaited (bounded by the test's fail_after)
        while time.time() <= ended.terminal_at + 0.002:  # noqa: ASYNC110
            await anyio.sleep(0.001)
        fresh = make_record(dedupe_key="w")
        assert await store.create(fresh, dedupe_window=0.001) is None
        found = await store.create(make_record(dedupe_key="w"), dedupe_window=60)
        assert found is not None and found.task_id == fresh.task_id  # the key moved

    async def test_concurrent_duplicates_make_one_task(self, store: FlowControlStore) -> None:
        records = [make_record(dedupe_key="same") for _ in range(10)]
        answers: list[str | None] = []

        async def create(index: int) -> None:
            found = await store.create(records[index], dedupe_window=60)
            answers.append(None if found is None else found.task_id)

        async with anyio.create_task_group() as group:
            for index in range(10):
                group.start_soon(create, index)
        created = [r.task_id for r in records if await store.get(r.task_id) is not None]
        assert len(created) == 1 and answers.count(None) == 1
        assert {a for a in answers if a is not None} == set(created)

    # --- tombstones --------------------------------------------------------------

    async def test_an_expired_task_leaves_a_tombstone(self, store: FlowControlStore) -> None:
        task = make_record(retention_ms=0, owner="alice")
        await store.create(task)
        await store.transition(task.task_id, "completed", result={})
        await store.purge_expired(time.time() + 1)
        assert await store.get(task.task_id) is None
        stone = await store.tombstone(task.task_id)
        assert stone is not None and stone.reason == "expired" and stone.owner == "alice"
        assert stone.at <= time.time() + 1

    async def test_a_purged_task_leaves_a_tombstone(self, store: FlowControlStore) -> None:
        purge = getattr(store, "purge_finished", None)
        task = make_record()
        await store.create(task)
        await store.transition(task.task_id, "failed", error={"code": 1, "message": "x"})
        if purge is None:
            return
        assert await purge(time.time() + 1) == 1
        stone = await store.tombstone(task.task_id)
        assert stone is not None and stone.reason == "purged" and stone.owner is None

    async def test_no_tombstone_for_live_or_unknown_tasks(self, store: FlowControlStore) -> None:
        task = make_record()
        await store.create(task)
        assert await store.tombstone(task.task_id) is None
        await store.transition(task.task_id, "completed", result={})
        assert await store.tombstone(task.task_id) is None  # retained: still readable
        assert await store.tombstone("never-existed") is None
