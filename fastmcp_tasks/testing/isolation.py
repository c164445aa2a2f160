"""Record isolation in the `TaskStore` contract: records go in and come out as copies.

Mutating the record passed to `create`, or any record a method returns, never
changes what the store returns next; and a record already returned is a snapshot
that later changes to the task leave alone.
"""

from __future__ import annotations

from fastmcp_tasks.stores.base import TaskRecord, TaskStore, get_many
from fastmcp_tasks.testing.base import ContractBase, make_record

SCRIBBLED = "scribbled"


def scribble(record: TaskRecord) -> None:
    """Change every field a caller might be tempted to touch."""
    record.tool = SCRIBBLED
    record.status = "failed"
    record.status_message = SCRIBBLED
    record.lease_owner = SCRIBBLED
    record.attempts = 99
    record.cancel_requested = True
    record.arguments = {SCRIBBLED: True}
    record.owner = SCRIBBLED


async def assert_untouched(store: TaskStore, task_id: str, *, cancelled: bool = False) -> None:
    """The store's next read of `task_id` shows none of `scribble`'s changes."""
    got = await store.get(task_id)
    assert got is not None
    assert got.tool == "tool" and got.status != "failed" and got.owner != SCRIBBLED
    assert got.status_message != SCRIBBLED and got.lease_owner != SCRIBBLED
    assert got.attempts < 99 and got.cancel_requested is cancelled
    assert got.arguments == {"a": 1}


class IsolationContract(ContractBase):
    """No caller holds the store's own objects."""

    async def test_the_record_passed_to_create_stays_the_callers(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        scribble(task)
        await assert_untouched(store, task.task_id)

    async def test_records_returned_by_reads_are_copies(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        for read in (
            await store.get(task.task_id),
            (await get_many(store, [task.task_id]))[task.task_id],
            *(r for r in await store.active_tasks() if r.task_id == task.task_id),
        ):
            assert read is not None
            scribble(read)
            await assert_untouched(store, task.task_id)

    async def test_records_returned_by_changes_are_copies(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        for change in (
            lambda: store.set_status_message(task.task_id, "new"),
            lambda: store.request_input(task.task_id, {"k": {"method": "elicitation/create"}}),
            lambda: store.withdraw_input(task.task_id, frozenset({"k"})),
            lambda: store.transition(task.task_id, "input_required"),
            lambda: store.transition(task.task_id, "working"),
        ):
            returned = await change()
            assert returned is not None
            scribble(returned)
            await assert_untouched(store, task.task_id)
        cancelled = await store.request_cancel(task.task_id)
        assert cancelled is not None
        scribble(cancelled)
        await assert_untouched(store, task.task_id, cancelled=True)

    async def test_records_returned_by_leases_are_copies(self, store: TaskStore) -> None:
        import time

        task = make_record()
        await store.create(task)
        until = time.time() + 60
        (queued,) = [r for r in await store.claim_queued("w", until, 5) if r is not None]
        scribble(queued)
        await assert_untouched(store, task.task_id)
        claimed = await store.claim(task.task_id, "w", until)
        assert claimed is not None
        scribble(claimed)
        await assert_untouched(store, task.task_id)
        back = await store.requeue(task.task_id, "w")
        assert back is not None
        scribble(back)
        await assert_untouched(store, task.task_id)

    async def test_a_terminal_record_returned_is_a_copy(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        done = await store.transition(task.task_id, "completed", result={"content": []})
        assert done is not None
        done.status = "working"
        done.result_json = None
        got = await store.get(task.task_id)
        assert got is not None and got.status == "completed" and got.result == {"content": []}

    async def test_a_returned_record_is_a_snapshot(self, store: TaskStore) -> None:
        task = make_record()
        await store.create(task)
        await store.request_input(task.task_id, {"k": {"method": "elicitation/create"}})
        await store.answer_input(task.task_id, {"k": {"action": "accept"}})
        before = await store.get(task.task_id)
        assert before is not None and before.answers == {"k": {"action": "accept"}}
        assert await store.take_answers(task.task_id, frozenset({"k"})) == {
            "k": {"action": "accept"}
        }
        await store.set_status_message(task.task_id, "later")
        await store.request_cancel(task.task_id)
        assert before.answers == {"k": {"action": "accept"}}  # not popped from under it
        assert before.status_message is None and before.cancel_requested is False
