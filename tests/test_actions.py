"""Operator actions on a store (`fastmcp_tasks.actions`): selection, cancel, purge, pause,
each audited, on every built-in store (the shared `store` fixture of the contract)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from fastmcp_tasks import actions
from fastmcp_tasks.actions import TaskFilter
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.outcomes import outcome_of, tool_error_text
from tests.test_store_contract import record, store  # noqa: F401  (the fixture)

pytestmark = pytest.mark.anyio

ERROR_RESULT = {"content": [{"type": "text", "text": "bad   input\nhere"}], "isError": True}


async def _ended(store: TaskStore, tool: str, **outcome: object) -> str:  # noqa: F811
    task = record(tool=tool)
    await store.create(task)
    status = "failed" if "error" in outcome else "completed"
    await store.transition(task.task_id, status, **outcome)
    return task.task_id


async def test_a_tool_error_is_its_own_outcome(store: Any) -> None:  # noqa: F811
    bad = await _ended(store, "a", result=ERROR_RESULT)
    good = await _ended(store, "a", result={"content": [], "isError": False})
    crashed = await _ended(store, "a", error={"code": -32603, "message": "boom"})
    got = {tid: await store.get(tid) for tid in (bad, good, crashed)}
    assert [outcome_of(r) for r in got.values() if r] == ["error", "completed", "failed"]
    assert tool_error_text(got[bad]) == "bad   input\nhere"  # type: ignore[arg-type]
    assert tool_error_text(got[good]) is None
    errors = await actions.select(store, TaskFilter(outcomes=frozenset({"error"})))
    assert errors.task_ids == (bad,)
    clean = await actions.select(store, TaskFilter(outcomes=frozenset({"completed"})))
    assert clean.task_ids == (good,)
    with pytest.raises(ValueError, match="unknown task status"):
        TaskFilter(outcomes=frozenset({"done"}))


async def test_a_message_cannot_make_a_tool_error(store: TaskStore) -> None:  # noqa: F811
    text = json.dumps({"isError": True})
    fake = await _ended(store, "a", result={"content": [{"type": "text", "text": text}]})
    found = await store.get(fake)
    assert found is not None and outcome_of(found) == "completed"


async def test_bulk_cancel_acts_on_the_selected_set_and_is_audited(
    store: Any,  # noqa: F811
) -> None:
    tasks = [record(tool="build") for _ in range(3)] + [record(tool="other")]
    for task in tasks:
        await store.create(task)
    chosen = await actions.select(store, TaskFilter(tool="build"))
    assert chosen.count == 3 and not chosen.truncated
    late = record(tool="build")  # matches the filter, created after the preview
    await store.create(late)
    await store.transition(tasks[0].task_id, "completed", result={"content": []})
    report = await actions.cancel_tasks(store, chosen.task_ids, "alice")
    assert (report.requested, report.finished, report.missing) == (2, 1, 0)
    for task in (late, tasks[3]):
        left = await store.get(task.task_id)
        assert left is not None and not left.cancel_requested
    events = await store.events(tasks[1].task_id)
    assert [(e.kind, e.details) for e in events] == [
        ("cancel_requested", {"by": "operator", "who": "alice"})
    ]
    (entry,) = await store.audit()
    assert (entry.actor, entry.action, entry.count) == ("alice", "cancel", 2)
    assert entry.details["selected"] == 3


async def test_purge_pause_and_resume_are_audited(store: Any) -> None:  # noqa: F811
    done = await _ended(store, "a", result={"content": []})
    active = record(tool="a")
    await store.create(active)
    assert await actions.purge_tasks(store, [done, active.task_id], "cli") == 1
    assert await store.get(done) is None and await store.get(active.task_id) is not None
    assert await actions.pause_tool(store, "app", "a", "cli")
    assert not await actions.pause_tool(store, "app", "a", "cli")
    assert await actions.resume_tool(store, "app", "a", "cli") == 0
    assert await actions.resume_tool(store, "app", "a", "cli") is None
    newest = await store.audit()
    assert [(e.action, e.count) for e in newest] == [("resume", 1), ("pause", 1), ("purge", 1)]
    assert newest[0].details == {"app": "app", "tool": "a", "released": 0}
    assert time.time() - newest[0].at < 60


async def test_a_context_joins_the_audit_details(store: Any) -> None:  # noqa: F811
    task = record(tool="a")
    await store.create(task)
    context = {"user": "alice", "host": "box", "selected": "not this"}
    await actions.cancel_tasks(store, [task.task_id], "cli", context=context)
    (entry,) = await store.audit()
    assert (entry.details["user"], entry.details["host"]) == ("alice", "box")
    assert entry.details["selected"] == 1  # the action's own details win


async def test_a_history_reads_in_time_order_whatever_order_it_arrived_in(
    store: Any,  # noqa: F811
) -> None:
    from fastmcp_tasks.stores.operations import TaskEvent, history_of

    task = record()
    await store.create(task)
    at = time.time()
    late_batch = [(task.task_id, TaskEvent(at + 1, "started", {"worker": "w"}))]
    early_batch = [(task.task_id, TaskEvent(at, "created", {"by": "front"}))]
    await store.add_events(late_batch)  # a worker's batch reached the store first
    await store.add_events(early_batch)
    events = await history_of(store, task.task_id)
    assert events is not None and [e.kind for e in events] == ["created", "started"]
