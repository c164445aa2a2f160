"""The phase part of the `TaskStore` contract: where a task's run stands, and its attempts.

`TaskRecord.phase` and `TaskRecord.attempts` are what recovery decides on
(`stores.phases`): a store keeps them through every read, changes them only as the
contract says (a claim is a lease, not a run, but an ungated `claim_queued` may begin
each run it hands out as `start_run` would, never a gated one's; `start_run` begins a
run once; a `requeue` of a begun run makes it wait to restart) and never from a status message,
whatever text a tool writes there.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import pytest

from fastmcp_tasks.stores.base import TaskChange, TaskStore, active_leases, get_many
from fastmcp_tasks.stores.flow import keeps_flow_control
from fastmcp_tasks.stores.phases import start_message, start_run
from fastmcp_tasks.testing.base import ContractBase, make_record

#: What a tool may write as its own status message: the engine's waiting messages.
LOOKALIKE = "Queued: waiting for a free worker slot"


async def _message_change(feed: AsyncIterator[TaskChange], task_id: str) -> TaskChange:
    with anyio.fail_after(5):
        async for change in feed:
            if change.task_id == task_id and change.kind == "message":
                return change
    raise AssertionError("feed ended")


class PhaseContract(ContractBase):
    """`phase` and `attempts`: written by the engine's calls, never inferred from text."""

    async def test_every_read_keeps_the_phase(self, store: TaskStore) -> None:
        tasks = {
            phase: make_record(phase=phase, attempts=1 if phase == "running" else 0)
            for phase in ("queued", "retry", "restart", "running")
        }
        for task in tasks.values():
            await store.create(task)
        legacy = make_record()  # no phase: a record written before phases
        await store.create(legacy)
        ids = [task.task_id for task in tasks.values()]
        many = await get_many(store, [*ids, legacy.task_id])
        active = {r.task_id: r for r in await store.active_tasks()}
        leases = {r.task_id: r for r in await active_leases(store, None)}
        for phase, task in tasks.items():
            got = await store.get(task.task_id)
            assert got is not None and got.phase == phase
            assert many[task.task_id].phase == phase
            assert active[task.task_id].phase == phase == leases[task.task_id].phase
        got = await store.get(legacy.task_id)
        assert got is not None and got.phase is None and leases[legacy.task_id].phase is None

    async def test_a_claim_is_a_lease_not_a_run(self, store: TaskStore) -> None:
        task = make_record(phase="queued")
        await store.create(task)
        claimed = await store.claim(task.task_id, "w", time.time() + 60)
        assert claimed is not None and (claimed.phase, claimed.attempts) == ("queued", 0)
        taken = await store.claim(task.task_id, "v", time.time() + 60, expect_owner="w")
        assert taken is not None and (taken.phase, taken.attempts) == ("queued", 0)

    async def test_start_run_begins_a_waiting_run_once(self, store: TaskStore) -> None:
        task = make_record(phase="queued", status_message="Queued: behind a gate")
        await store.create(task)
        await store.claim(task.task_id, "w", time.time() + 60)
        assert await start_run(store, task.task_id, "other", None) is None  # not its lease
        async with store.changes(frozenset({task.task_id})) as feed:
            begun = await start_run(store, task.task_id, "w", None)
            assert begun is not None and (begun.phase, begun.attempts) == ("running", 1)
            assert begun.status_message is None
            await _message_change(feed, task.task_id)  # the cleared message is a change
        again = await start_run(store, task.task_id, "w", None)  # a resent call counts once
        assert again is not None and (again.phase, again.attempts) == ("running", 1)
        assert await start_run(store, "missing", "w", None) is None

    async def test_start_run_shows_the_message_it_is_given(self, store: TaskStore) -> None:
        message = "Restarted after an interruption (attempt 2)"
        task = make_record(phase="restart", attempts=1, status_message=message)
        await store.create(task)
        await store.claim(task.task_id, "w", time.time() + 60)
        begun = await start_run(store, task.task_id, "w", message)
        assert begun is not None and begun.status_message == message
        assert (begun.phase, begun.attempts) == ("running", 2)

    async def test_start_run_is_refused_once_the_task_ended(self, store: TaskStore) -> None:
        task = make_record(phase="queued")
        await store.create(task)
        await store.claim(task.task_id, "w", time.time() + 60)
        await store.transition(task.task_id, "cancelled")
        assert await start_run(store, task.task_id, "w", None) is None
        got = await store.get(task.task_id)
        assert got is not None and (got.phase, got.attempts) == ("queued", 0)

    async def test_requeue_makes_a_begun_run_wait_to_restart(self, store: TaskStore) -> None:
        running = make_record(phase="running", attempts=1)
        legacy = make_record()  # no phase: may have been running
        waiting = {phase: make_record(phase=phase) for phase in ("queued", "retry", "restart")}
        for task in (running, legacy, *waiting.values()):
            await store.create(task)
            await store.claim(task.task_id, "w", time.time() + 60)
            back = await store.requeue(task.task_id, "w")
            assert back is not None and back.lease_owner is None
        for task in (running, legacy):
            got = await store.get(task.task_id)
            assert got is not None and got.phase == "restart"
            assert got.attempts == task.attempts  # a requeue counts no run
        for phase, task in waiting.items():
            got = await store.get(task.task_id)
            assert got is not None and got.phase == phase

    async def test_claim_queued_hands_out_waiting_runs(self, store: TaskStore) -> None:
        """A claimed task still waits for its run (the engine's `start_run` begins it), or
        its run began with the claim; either way `start_run` then finds it running once."""
        task = make_record(phase="queued", status_message="Queued: for a worker")
        await store.create(task)
        (taken,) = await store.claim_queued("w", time.time() + 60, 5)
        assert (taken.phase, taken.attempts) in {("queued", 0), ("running", 1)}
        begun = await start_run(store, task.task_id, "w", None)
        assert begun is not None and (begun.phase, begun.attempts) == ("running", 1)
        assert begun.status_message is None

    async def test_a_claim_that_begins_a_run_begins_it_as_start_run_would(
        self, store: TaskStore
    ) -> None:
        """A store's ungated claim may begin each run (`stores.phases`; the memory store's
        does not): then one more attempt, the waiting message cleared with its change,
        unless the task waits to restart, whose message says which attempt it is."""
        message = "Restarted after an interruption (attempt 2)"
        queued = make_record(phase="queued", status_message=LOOKALIKE)
        restart = make_record(phase="restart", attempts=1, status_message=message)
        for task in (queued, restart):
            await store.create(task)
        async with store.changes(frozenset({queued.task_id})) as feed:
            taken = {r.task_id: r for r in await store.claim_queued("w", time.time() + 60, 5)}
            assert taken.keys() == {queued.task_id, restart.task_id}
            first, again = taken[queued.task_id], taken[restart.task_id]
            if first.phase == "running":
                assert (first.attempts, first.status_message) == (1, None)
                await _message_change(feed, queued.task_id)
            else:
                assert (first.phase, first.attempts, first.status_message) == (
                    "queued",
                    0,
                    LOOKALIKE,
                )
        if again.phase == "running":
            assert (again.attempts, again.status_message) == (2, message)
        else:
            assert (again.phase, again.attempts, again.status_message) == ("restart", 1, message)
        for task, got in ((queued, first), (restart, again)):
            stored = await store.get(task.task_id)
            assert stored is not None and stored.lease_owner == "w"
            assert (stored.phase, stored.attempts) == (got.phase, got.attempts)
            assert stored.status_message == got.status_message
            begun = await start_run(store, task.task_id, "w", start_message(got))
            assert begun is not None and begun.phase == "running"
            assert begun.attempts == task.attempts + 1  # the claim and the start: one run

    async def test_a_claim_never_begins_a_gated_run(self, store: TaskStore) -> None:
        """A gated task's run begins with the engine's `start_run`, on every store."""
        if not keeps_flow_control(store):
            pytest.skip("the store under test keeps no flow control (no gates)")
        task = make_record(phase="queued", gate="deploy", gate_limit=1, status_message=LOOKALIKE)
        await store.create(task)
        (taken,) = await store.claim_queued("w", time.time() + 60, 5)
        assert (taken.phase, taken.attempts, taken.status_message) == ("queued", 0, LOOKALIKE)
        stored = await store.get(task.task_id)
        assert stored is not None and (stored.phase, stored.attempts) == ("queued", 0)
        begun = await start_run(store, task.task_id, "w", None)
        assert begun is not None and (begun.phase, begun.attempts) == ("running", 1)

    async def test_a_message_never_changes_the_phase(self, store: TaskStore) -> None:
        """A tool may write the engine's own words as its status: the phase stays."""
        task = make_record(phase="running", attempts=1)
        await store.create(task)
        await store.claim(task.task_id, "w", time.time() + 60)
        await store.set_status_message(task.task_id, LOOKALIKE)
        await store.request_input(task.task_id, {"k": {}}, status_message=LOOKALIKE)
        await store.answer_input(task.task_id, {"k": {"action": "accept"}})
        (lease,) = [r for r in await active_leases(store, None) if r.task_id == task.task_id]
        assert (lease.phase, lease.attempts) == ("running", 1)
        back = await store.requeue(task.task_id, "w")
        assert back is not None and back.phase == "restart"
