"""The operator part of the store contract (`stores.operations.OperableTaskStore`):
histories kept with their task and bounded, arguments kept after the end, workers'
heartbeats, pauses that hold and release tasks, the audit log, purging a chosen set.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.operations import (
    FORGET_AFTER,
    MAX_EVENTS,
    PAUSED_UNTIL,
    RESUMED_MESSAGE,
    AuditEntry,
    OperableTaskStore,
    Pause,
    TaskEvent,
    WorkerInfo,
)
from fastmcp_tasks.testing.base import ContractBase, make_record
from fastmcp_tasks.testing.feed import next_change


def _operable(store: TaskStore) -> OperableTaskStore:
    if not isinstance(store, OperableTaskStore):
        pytest.skip("the store under test keeps no operator records (OperableTaskStore)")
    return store


def _worker(worker_id: str, last_seen: float, **fields: object) -> WorkerInfo:
    values: dict[str, object] = {
        "worker_id": worker_id,
        "app": "app",
        "host": "host",
        "pid": 42,
        "version": "1.0",
        "concurrency": 4,
        "tools": ("a", "b"),
        "running": 0,
        "started_at": last_seen - 10,
        "last_seen": last_seen,
        "interval": 5.0,
    }
    values.update(fields)
    return WorkerInfo(**values)  # type: ignore[arg-type]


class OperationsContract(ContractBase):
    """Histories, kept arguments, workers, pauses, audit, purging a chosen set."""

    async def test_arguments_are_kept_after_every_ending(self, store: TaskStore) -> None:
        for status, extra in (
            ("completed", {"result": {"content": []}}),
            ("failed", {"error": {"code": -32603, "message": "boom"}}),
            ("cancelled", {}),
        ):
            task = dataclasses.replace(make_record(), arguments={"n": 7, "text": "é"})
            await store.create(task)
            await store.transition(task.task_id, status, **extra)  # type: ignore[arg-type]
            ended = await store.get(task.task_id)
            assert ended is not None and ended.status == status
            assert ended.arguments == {"n": 7, "text": "é"}

    async def test_a_history_is_kept_in_order_and_only_for_live_tasks(
        self, store: TaskStore
    ) -> None:
        ops = _operable(store)
        task = make_record()
        await store.create(task)
        now = time.time()
        await ops.add_events(
            [
                (task.task_id, TaskEvent(now, "created", {"by": "front", "queued": True})),
                ("no-such-task", TaskEvent(now, "created")),
                (task.task_id, TaskEvent(now + 0.001, "taken", {"worker": "w1"})),
            ]
        )
        await ops.add_events([(task.task_id, TaskEvent(now + 0.002, "message", {"message": "é"}))])
        got = await ops.events(task.task_id)
        assert [e.kind for e in got] == ["created", "taken", "message"]
        assert got[0].details == {"by": "front", "queued": True}
        assert got[2].details == {"message": "é"} and got[2].at == pytest.approx(now + 0.002)
        assert await ops.events("no-such-task") == []

    async def test_a_history_is_bounded_and_keeps_its_end(self, store: TaskStore) -> None:
        ops = _operable(store)
        task = make_record()
        await store.create(task)
        now = time.time()
        chatty = [
            (task.task_id, TaskEvent(now + i / 1000, "message", {"i": i})) for i in range(150)
        ]
        await ops.add_events(chatty)
        await ops.add_events([(task.task_id, TaskEvent(now + 1, "finished", {"outcome": "x"}))])
        got = await ops.events(task.task_id)
        assert len(got) == MAX_EVENTS
        assert [e.details.get("i") for e in got[:3]] == [0, 1, 2]
        assert got[-2].details == {"i": MAX_EVENTS - 2}
        assert got[-1].kind == "finished"

    async def test_a_history_goes_with_its_task(self, store: TaskStore) -> None:
        ops = _operable(store)
        purged, chosen, expiring = make_record(), make_record(), make_record(retention_ms=0)
        for task in (purged, chosen, expiring):
            await store.create(task)
            await ops.add_events([(task.task_id, TaskEvent(time.time(), "created"))])
            await store.transition(task.task_id, "completed", result={"content": []})
        purge = getattr(store, "purge_finished", None)
        if purge is not None:
            await purge(time.time() + 1)
            assert await ops.events(purged.task_id) == []
        assert await ops.events(expiring.task_id) == []
        await store.purge_expired(time.time() + 1)
        late = make_record()
        await store.create(late)
        await store.transition(late.task_id, "cancelled")
        assert await ops.delete_finished([late.task_id]) == 1
        await ops.add_events([(late.task_id, TaskEvent(time.time(), "finished"))])
        assert await ops.events(late.task_id) == []
        # the id reused: a fresh, empty history
        again = dataclasses.replace(make_record(), task_id=late.task_id)
        await store.create(again)
        assert await ops.events(again.task_id) == []

    async def test_delete_finished_deletes_only_terminal_tasks_of_the_set(
        self, store: TaskStore
    ) -> None:
        ops = _operable(store)
        active, done, other = make_record(), make_record(), make_record()
        for task in (active, done, other):
            await store.create(task)
        await store.transition(done.task_id, "completed", result={"content": []})
        await store.transition(other.task_id, "failed", error={"code": 1, "message": "x"})
        ids = [active.task_id, done.task_id, done.task_id, "missing"]
        assert await ops.delete_finished(ids) == 1
        assert await store.get(done.task_id) is None
        assert await store.get(active.task_id) is not None
        assert await store.get(other.task_id) is not None
        assert await ops.delete_finished([]) == 0

    async def test_workers_beat_list_and_are_forgotten(self, store: TaskStore) -> None:
        ops = _operable(store)
        now = time.time()
        await ops.beat(_worker("w1", now - 1))
        await ops.beat(_worker("w1", now, running=3, tools=("a",)))
        await ops.beat(_worker("w2", now, app=None, stopped=True))
        await ops.beat(_worker("old", now - FORGET_AFTER - 5))
        found = {w.worker_id: w for w in await ops.workers()}
        assert set(found) == {"w1", "w2"}
        assert found["w1"].running == 3 and found["w1"].tools == ("a",)
        assert found["w1"].last_seen == pytest.approx(now) and found["w1"].alive(now)
        assert found["w2"].app is None and found["w2"].stopped and not found["w2"].alive(now)
        assert not found["w1"].alive(now + 60)

    async def test_a_paused_tool_holds_its_tasks_until_resumed(self, store: TaskStore) -> None:
        ops = _operable(store)
        paused, other = make_record(app="app"), make_record(app="app", tool="other")
        await store.create(paused)
        await store.create(other)
        assert await ops.resume("app", "tool") is None
        taken = {r.task_id for r in await store.claim_queued("w1", time.time() + 60, 10)}
        assert taken == {paused.task_id, other.task_id}
        assert await ops.hold_paused(paused.task_id, "w1", "Paused") is None  # not paused
        assert await ops.pause(Pause("app", "tool", time.time(), "cli"))
        assert not await ops.pause(Pause("app", "tool", time.time(), "someone else"))
        assert [(p.app, p.tool, p.by) for p in await ops.paused()] == [("app", "tool", "cli")]
        assert await ops.hold_paused(paused.task_id, "w2", "Paused") is None  # not w2's
        assert await ops.hold_paused(other.task_id, "w1", "Paused") is None  # not paused
        held = await ops.hold_paused(paused.task_id, "w1", "Paused by an operator")
        assert held is not None and held.lease_owner is None and held.status == "working"
        assert held.not_before == PAUSED_UNTIL
        assert held.status_message == "Paused by an operator"
        assert held.attempts == 0  # held before its tool body: no run counted (`hold_back`)
        assert await store.claim_queued("w2", time.time() + 60, 10) == []
        wanted = frozenset({paused.task_id})
        async with store.changes(wanted, frozenset({"message"})) as feed:
            assert await ops.resume("app", "tool") == 1
            change = await next_change(feed)
        assert change.task_id == paused.task_id and change.kind == "message"
        assert await ops.paused() == []
        released = await store.get(paused.task_id)
        assert released is not None and released.not_before is None
        assert released.status_message == RESUMED_MESSAGE  # not the pause's, whatever claims
        assert released.updated_at > held.updated_at
        (again,) = await store.claim_queued("w2", time.time() + 60, 10)
        assert again.task_id == paused.task_id and again.lease_owner == "w2"
        assert again.attempts <= 1  # one run at most, counted once

    async def test_a_held_restart_keeps_its_count_of_runs(self, store: TaskStore) -> None:
        """A task that waits to restart after one run, claimed (whose claim may begin the
        second run) and held for a pause: one run counted, still waiting to restart."""
        ops = _operable(store)
        task = make_record(app="app", phase="restart", attempts=1)
        await store.create(task)
        (taken,) = await store.claim_queued("w1", time.time() + 60, 10)
        assert taken.attempts in (1, 2)
        await ops.pause(Pause("app", "tool", time.time(), "cli"))
        held = await ops.hold_paused(task.task_id, "w1", "Paused")
        assert held is not None and (held.phase, held.attempts) == ("restart", 1)

    async def test_a_cancelled_task_is_not_held(self, store: TaskStore) -> None:
        ops = _operable(store)
        task = make_record()
        await store.create(task)
        await store.claim_queued("w1", time.time() + 60, 10)
        await ops.pause(Pause("", "tool", time.time(), "cli"))
        await store.request_cancel(task.task_id)
        assert await ops.hold_paused(task.task_id, "w1", "Paused") is None
        assert await ops.resume("", "tool") == 0

    async def test_the_audit_log_lists_newest_first(self, store: TaskStore) -> None:
        ops = _operable(store)
        now = time.time()
        for i, action in enumerate(("cancel", "purge", "pause")):
            details = {"filter": {"tool": "é"}, "ids": ["a"]}
            await ops.add_audit(AuditEntry(now + i, "ops-team", action, i + 1, details))
        newest = await ops.audit(limit=2)
        assert [e.action for e in newest] == ["pause", "purge"]
        assert newest[0].actor == "ops-team" and newest[0].count == 3
        assert newest[0].details == {"filter": {"tool": "é"}, "ids": ["a"]}
        assert len(await ops.audit()) == 3


__all__ = ["OperationsContract"]
