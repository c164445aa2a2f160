"""The contract under concurrency: calls made at once each get their own answer.

A networked store may send the calls one process makes at the same moment together
(the Redis and PostgreSQL stores batch them: `stores.call_batching`). Whatever a store
does, each concurrent call must behave as if it had been made alone: its own record,
its own refusal or error, never another call's; a call whose caller stopped waiting
takes nobody else's answer with it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import anyio.lowlevel

from fastmcp_tasks.errors import DuplicateTask
from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.testing.base import ContractBase, make_record


class ConcurrencyContract(ContractBase):
    """Concurrent creates, reads and transitions of one store object."""

    async def test_concurrent_calls_each_get_their_own_answer(self, store: TaskStore) -> None:
        tasks = [make_record(arguments={"n": n}, status_message=f"task {n}") for n in range(24)]
        created: dict[str, TaskRecord | None] = {}

        async def create(task: TaskRecord) -> None:
            created[task.task_id] = await store.create(task)

        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(create, task)
        read: dict[str, TaskRecord | None] = {}
        ended: dict[str, TaskRecord | None] = {}

        async def get(task_id: str) -> None:
            read[task_id] = await store.get(task_id)

        async def end(n: int, task: TaskRecord) -> None:
            if n % 3 == 0:
                ended[task.task_id] = await store.transition(
                    task.task_id, "completed", result={"content": [{"n": n}]}
                )
            elif n % 3 == 1:
                error = {"code": -n, "message": f"failed {n}"}
                ended[task.task_id] = await store.transition(task.task_id, "failed", error=error)
            else:  # refused: no such edge from `working` when only `input_required` may move
                ended[task.task_id] = await store.transition(
                    task.task_id, "completed", expect=frozenset({"input_required"})
                )

        async with anyio.create_task_group() as group:
            for n, task in enumerate(tasks):
                group.start_soon(get, task.task_id)
                group.start_soon(end, n, task)
                group.start_soon(get, "missing-" + task.task_id)
        for n, task in enumerate(tasks):
            got = read[task.task_id]
            assert got is not None and got.task_id == task.task_id
            assert got.arguments == {"n": n} and got.status_message == f"task {n}"
            assert read["missing-" + task.task_id] is None
            done = ended[task.task_id]
            final = await store.get(task.task_id)
            assert final is not None
            if n % 3 == 0:
                assert done is not None and done.task_id == task.task_id
                assert done.status == final.status == "completed"
                assert final.result == {"content": [{"n": n}]}
            elif n % 3 == 1:
                assert done is not None and done.task_id == task.task_id
                assert done.status == final.status == "failed"
                assert final.error == {"code": -n, "message": f"failed {n}"}
            else:
                assert done is None and final.status == "working"

    async def test_a_refused_call_among_concurrent_ones_fails_only_itself(
        self, store: TaskStore
    ) -> None:
        first = make_record()
        await store.create(first)
        others = [make_record(arguments={"n": n}) for n in range(12)]
        outcomes: dict[str, Any] = {}

        async def create(task: TaskRecord, key: str) -> None:
            try:
                await store.create(task)
                outcomes[key] = "created"
            except DuplicateTask as exc:
                outcomes[key] = exc

        async with anyio.create_task_group() as group:
            for n, task in enumerate(others):
                group.start_soon(create, task, task.task_id)
                if n == 5:
                    group.start_soon(create, dataclasses.replace(first, tool="other"), "dup")
        assert isinstance(outcomes.pop("dup"), DuplicateTask)
        assert outcomes == {task.task_id: "created" for task in others}
        for n, task in enumerate(others):
            got = await store.get(task.task_id)
            assert got is not None and got.arguments == {"n": n}
        kept = await store.get(first.task_id)
        assert kept is not None and kept.tool == "tool"

    async def test_callers_that_stop_waiting_leave_the_others_answered(
        self, store: TaskStore
    ) -> None:
        tasks = [make_record(arguments={"n": n}) for n in range(16)]
        for task in tasks:
            await store.create(task)
        answered: dict[str, TaskRecord | None] = {}

        async def get(task_id: str) -> None:
            answered[task_id] = await store.get(task_id)

        scopes: list[anyio.CancelScope] = []

        async def abandoned(task_id: str) -> None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                await store.get(task_id)

        async with anyio.create_task_group() as group:
            for n, task in enumerate(tasks):
                group.start_soon(abandoned if n % 2 else get, task.task_id)
            await anyio.lowlevel.checkpoint()  # every call made: sent, or waiting to be
            for scope in scopes:
                scope.cancel()
        assert sorted(answered) == sorted(t.task_id for t in tasks[::2])
        for n, task in enumerate(tasks[::2]):
            got = answered[task.task_id]
            assert got is not None and got.arguments == {"n": 2 * n}
        for task in tasks:  # and the store serves on
            assert await store.get(task.task_id) is not None


__all__ = ["ConcurrencyContract"]
