"""The core of the `TaskStore` contract: create and get, the state machine, input, cancel.

Also retention (expiry, purge, the `max_tasks` cap), batched reads, applications
and the queue's wake-ups. Every rule of `fastmcp_tasks.stores.base` has a test here
or in the sibling contract modules.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from fastmcp_tasks.errors import DuplicateTask, TaskLimitExceeded
from fastmcp_tasks.stores.base import UNCHANGED, TaskChange, TaskStore, active_leases, get_many
from fastmcp_tasks.testing.base import ContractBase, make_record


async def _next_queued(feed: AsyncIterator[TaskChange]) -> TaskChange:
    with anyio.fail_after(5):
        async for change in feed:
            if change.kind == "queued":
                return change
    raise AssertionError("feed ended")


class CoreContract(ContractBase):
    """Create, read, change and expire tasks."""

    async def test_create_then_get(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        got = await store.get(task.task_id)
        assert got is not None and got.task_id == task.task_id and got.status == "working"
        assert await store.get("missing") is None

    async def test_terminal_states_are_immutable(self, store: TaskStore) -> None:
        for terminal in ("completed", "failed", "cancelled"):
            task = make_record()
            await store.create(task)
            done = await store.transition(
                task.task_id, terminal, result={"content": []}, error={"code": 1, "message": "x"}
            )
            assert done is not None and done.status == terminal
            assert done.terminal_at is not None
            for other in ("working", "input_required", "completed", "failed", "cancelled"):
                assert await store.transition(task.task_id, other) is None
            assert await store.set_status_message(task.task_id, "late") is None
            assert await store.request_input(task.task_id, {"k": {}}) is None
            final = await store.get(task.task_id)
            assert final is not None and final.status == terminal
            assert final.status_message is None

    async def test_payload_goes_with_its_status(self, store: TaskStore) -> None:
        completed, failed = make_record(), make_record()
        await store.create(completed)
        await store.create(failed)
        await store.transition(completed.task_id, "completed", result={"content": [1]})
        await store.transition(failed.task_id, "failed", error={"code": -1, "message": "m"})
        a, b = await store.get(completed.task_id), await store.get(failed.task_id)
        assert a is not None and a.result == {"content": [1]} and a.error is None
        assert b is not None and b.error == {"code": -1, "message": "m"} and b.result is None

    async def test_transition_honours_expect(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        refused = await store.transition(
            task.task_id, "completed", expect=frozenset({"input_required"})
        )
        assert refused is None
        accepted = await store.transition(task.task_id, "completed", expect=frozenset({"working"}))
        assert accepted is not None

    async def test_concurrent_terminal_transitions_have_one_winner(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        winners: list[str] = []

        async def attempt(status: str) -> None:
            if await store.transition(task.task_id, status) is not None:  # type: ignore[arg-type]
                winners.append(status)

        async with anyio.create_task_group() as group:
            for status in ("completed", "cancelled", "failed") * 5:
                group.start_soon(attempt, status)
        assert len(winners) == 1

    async def test_status_message_changes_bump_last_updated_only_on_change(
        self, store: TaskStore
    ) -> None:
        task = make_record()
        await store.create(task)
        first = await store.set_status_message(task.task_id, "step 1")
        assert first is not None
        stamp = first.updated_at
        again = await store.set_status_message(task.task_id, "step 1")
        assert again is not None and again.updated_at == stamp
        kept = await store.transition(task.task_id, "completed", status_message=UNCHANGED)
        assert kept is not None and kept.status_message == "step 1"

    async def test_input_requests_and_answers(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        parked = await store.request_input(task.task_id, {"a": {"method": "elicitation/create"}})
        assert parked is not None and parked.status == "input_required"
        parked = await store.request_input(task.task_id, {"b": {"method": "elicitation/create"}})
        assert parked is not None and set(parked.input_requests or {}) == {"a", "b"}
        accepted = await store.answer_input(task.task_id, {"a": {"action": "accept"}, "zz": {}})
        assert accepted == {"a": {"action": "accept"}}  # unknown keys are ignored (C35)
        partial = await store.get(task.task_id)
        assert partial is not None and partial.status == "input_required"
        assert set(partial.input_requests or {}) == {"b"}
        assert (
            await store.answer_input(task.task_id, {"a": {"action": "decline"}}) == {}
        )  # answered
        await store.answer_input(task.task_id, {"b": {"action": "cancel"}})
        resumed = await store.get(task.task_id)
        assert resumed is not None and resumed.status == "working" and not resumed.input_requests
        taken = await store.take_answers(task.task_id, frozenset({"a", "b"}))
        assert taken == {"a": {"action": "accept"}, "b": {"action": "cancel"}}
        assert await store.take_answers(task.task_id, frozenset({"a"})) == {}

    async def test_withdrawn_requests_leave_the_snapshot(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        await store.request_input(task.task_id, {"a": {}, "b": {}})
        await store.withdraw_input(task.task_id, frozenset({"a"}))
        current = await store.get(task.task_id)
        assert current is not None and set(current.input_requests or {}) == {"b"}
        assert await store.answer_input(task.task_id, {"a": {"action": "accept"}}) == {}
        await store.withdraw_input(task.task_id, frozenset({"b"}))
        current = await store.get(task.task_id)
        assert current is not None and current.status == "working"

    async def test_cancel_requests_reach_the_change_feed(self, store: TaskStore) -> None:
        active, finished = make_record(), make_record()
        await store.create(active)
        await store.create(finished)
        await store.transition(finished.task_id, "completed", result={})
        seen: list[TaskChange] = []
        async with store.changes() as feed:
            marked = await store.request_cancel(active.task_id)
            assert marked is not None and marked.cancel_requested
            untouched = await store.request_cancel(finished.task_id)
            assert untouched is not None and untouched.status == "completed"
            assert await store.request_cancel("missing") is None
            with anyio.fail_after(5):
                async for change in feed:
                    seen.append(change)
                    if change.kind == "cancel_requested":
                        break
        assert seen[-1].task_id == active.task_id
        assert not any(c.task_id == finished.task_id and c.kind == "cancel_requested" for c in seen)

    async def test_expired_tasks_are_gone_and_purged(self, store: TaskStore) -> None:
        brief, kept, running = (
            make_record(retention_ms=0),
            make_record(),
            make_record(retention_ms=0),
        )
        for task in (brief, kept, running):
            await store.create(task)
        await store.transition(brief.task_id, "completed", result={})
        await store.transition(kept.task_id, "completed", result={})
        assert await store.get(brief.task_id) is None  # expired at once
        removed = await store.purge_expired(time.time() + 1)
        assert removed in (0, 1)  # `get` may already have dropped it
        assert await store.get(kept.task_id) is not None
        assert await store.get(running.task_id) is not None  # active tasks never expire
        assert await store.purge_expired(time.time() + 3600) >= 1
        assert await store.get(kept.task_id) is None

    async def test_retained_task_cap_refuses_new_tasks(self, store: TaskStore) -> None:
        cap = self.needs_cap()
        created = [make_record() for _ in range(cap)]
        for task in created:
            await store.create(task)
        refused = make_record()
        with pytest.raises(TaskLimitExceeded) as info:
            await store.create(refused)
        assert info.value.limit == "max_tasks" and info.value.value == cap
        assert await store.get(refused.task_id) is None  # nothing stored
        for task in created[:5]:
            await store.transition(task.task_id, "completed", result={})
        # finished-but-retained tasks still count; expired ones make room
        with pytest.raises(TaskLimitExceeded):
            await store.create(make_record())

    async def test_expired_tasks_make_room_under_the_cap(self, store: TaskStore) -> None:
        created = [make_record(retention_ms=0) for _ in range(self.needs_cap())]
        for task in created:
            await store.create(task)
        await store.transition(created[0].task_id, "completed", result={})
        await store.create(make_record())  # the expired one was swept to make room

    async def test_get_many_reads_the_live_tasks_at_once(self, store: TaskStore) -> None:
        kept, gone = make_record(), make_record(retention_ms=0)
        await store.create(kept)
        await store.create(gone)
        await store.transition(gone.task_id, "completed", result={})  # expires at once
        ids = [kept.task_id, gone.task_id, "missing", *(f"none-{i}" for i in range(600))]
        found = await get_many(store, ids)
        assert list(found) == [kept.task_id] and found[kept.task_id].status == "working"
        assert await get_many(store, []) == {}

    async def test_app_round_trips(self, store: TaskStore) -> None:
        billing, plain = make_record(app="billing"), make_record()
        await store.create(billing)
        await store.create(plain)
        got, other = await store.get(billing.task_id), await store.get(plain.task_id)
        assert got is not None and got.app == "billing"
        assert other is not None and other.app is None

    async def test_claim_queued_takes_only_its_apps_tasks(self, store: TaskStore) -> None:
        a, b, c = make_record(app="a"), make_record(app="b"), make_record(app="c")
        for task in (a, b, c):
            await store.create(task)
        later = time.time() + 60
        assert [r.task_id for r in await store.claim_queued("wa", later, 5, app="a")] == [a.task_id]
        assert await store.claim_queued("wa", later, 5, app="a") == []
        assert await store.claim_queued("wz", later, 5, app="z") == []
        taken = await store.claim_queued("any", later, 5)  # `app=None`: any application's
        assert [r.task_id for r in taken] == [b.task_id, c.task_id]
        got = await store.get(b.task_id)
        assert got is not None and got.lease_owner == "any" and got.app == "b"

    async def test_unleased_creates_and_requeues_announce_queued(self, store: TaskStore) -> None:
        leased = make_record(app="a", lease_owner="front", lease_expires=time.time() + 60)
        queued = make_record(app="a")
        async with store.changes() as feed:
            await store.create(leased)  # runs where it was created: nothing to announce
            await store.create(queued)
            first = await _next_queued(feed)
            assert first.task_id == queued.task_id and first.details == {"app": "a"}
            await store.claim(queued.task_id, "w", time.time() + 60)
            await store.requeue(queued.task_id, "w")
            again = await _next_queued(feed)
            assert again.task_id == queued.task_id and again.details == {"app": "a"}

    async def test_active_leases_are_the_apps_active_tasks_without_payloads(
        self, store: TaskStore
    ) -> None:
        mine = make_record(app="a", phase="running", attempts=1)
        theirs, done = make_record(app="b"), make_record(app="a")
        for task in (mine, theirs, done):
            await store.create(task)
        until = time.time() + 60
        await store.claim(mine.task_id, "w", until)
        await store.transition(done.task_id, "completed", result={})
        (lease,) = await active_leases(store, "a")
        assert lease.task_id == mine.task_id and lease.tool == "tool" and lease.status == "working"
        assert lease.app == "a" and lease.lease_owner == "w" and lease.attempts == 1
        assert lease.phase == "running"
        assert lease.lease_expires == pytest.approx(until)
        assert lease.arguments is None and lease.context is None and lease.result_json is None
        assert lease.input_requests is None and lease.answers is None
        every = {r.task_id for r in await active_leases(store, None)}
        assert every == {mine.task_id, theirs.task_id}
        assert (await store.get(mine.task_id)).arguments == {"a": 1}  # type: ignore[union-attr]

    async def test_duplicate_create_is_refused(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        with pytest.raises(DuplicateTask):
            await store.create(dataclasses.replace(task, tool="other"))
        got = await store.get(task.task_id)
        assert got is not None and got.tool == "tool"
