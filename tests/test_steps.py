"""Durable steps (`fastmcp_tasks.step`, `server.engine.steps`) through the wire, in memory.

A tool's steps are recorded with its task and replayed by a later run of the same task:
here a `Retry` attempt (the second run of the task in one process), whose replayed
steps' functions are not called again (counters), with the resume status message and
the `resumed` history event. The rules of `step()`: names, JSON results, a function
that raises, the per-task bound, an elicitation inside a step, a call outside a task,
a store without the capability, and a purge that removes the steps with the task.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import anyio
import pytest
from fastmcp import Client, Context, FastMCP

from fastmcp_tasks import Retry, StepLimitExceeded, TasksExtension, step, task_options
from fastmcp_tasks.actions import purge_tasks
from fastmcp_tasks.server.engine import steps as engine_steps
from fastmcp_tasks.server.engine.steps import resume_message
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.stores.steps import StepRecord
from tests.operable import history, kinds, one
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio

FAST_RETRY = Retry(attempts=2, backoff=timedelta(milliseconds=20), jitter=False)


class Flaky(Exception):
    pass


def build(store: MemoryTaskStore, calls: dict[str, int]) -> FastMCP:
    """Tools that count each step function's calls in `calls`."""
    mcp = FastMCP("steps")
    mcp.add_extension(TasksExtension(store=store, shutdown_grace=0))

    def count(name: str) -> None:
        calls[name] = calls.get(name, 0) + 1

    async def copy(table: str) -> int:
        count(f"copy:{table}")
        return len(table)

    def plain(table: str) -> tuple[str, int]:
        count(f"plain:{table}")
        return (table, 1)

    @mcp.tool(task=True)
    @task_options(resumable=True)
    async def migrate(tables: list[str]) -> str:
        total = 0
        for table in tables:
            total += await step(f"copy:{table}", copy, table)
        return f"{total} rows"

    @mcp.tool(task=True)
    @task_options(retry=FAST_RETRY)
    async def flaky(tables: list[str]) -> dict[str, Any]:
        done = [await step(f"plain:{t}", plain, t) for t in tables[:2]]
        count("attempt")
        if calls["attempt"] == 1:
            raise Flaky("the first attempt fails after two steps")
        done += [await step(f"plain:{t}", plain, t) for t in tables[2:]]
        return {"done": done}

    @mcp.tool(task=True)
    async def twice() -> str:
        await step("same", copy, "a")
        await step("same", copy, "b")
        return "never"

    @mcp.tool(task=True)
    async def unencodable() -> str:
        await step("a set", lambda: {1, 2})
        return "never"

    @mcp.tool(task=True)
    async def raising() -> str:
        def boom() -> int:
            count("boom")
            raise RuntimeError("boom inside the step")

        try:
            await step("boom", boom)
        except RuntimeError:
            pass
        return str(await step("boom", lambda: 7))  # the same name again: nothing was recorded

    @mcp.tool(task=True)
    @task_options(retry=FAST_RETRY)
    async def confirm(ctx: Context) -> str:
        async def ask() -> bool:
            count("ask")
            answer = await ctx.elicit("Copy the users table?", bool)
            return bool(answer.data)

        approved = await step("approve", ask)
        count("confirm")
        if calls["confirm"] == 1:
            raise Flaky("fails after the answer")
        return f"approved={approved}"

    return mcp


async def test_a_tool_with_steps_completes_and_records_each_step() -> None:
    store, calls = MemoryTaskStore(), {}
    with anyio.fail_after(10):
        async with memory_wire(build(store, calls)) as wire:
            task_id = (await wire.call_tool("migrate", {"tables": ["users", "orders"]}))["taskId"]
            done = await wire.wait(task_id)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "11 rows"
    recorded = await store.steps(task_id)
    assert [(s.name, s.value_json) for s in recorded] == [("copy:users", "5"), ("copy:orders", "6")]
    assert calls == {"copy:users": 1, "copy:orders": 1}


async def test_through_a_client_the_result_is_the_tools() -> None:
    store, calls = MemoryTaskStore(), {}
    with anyio.fail_after(10):
        async with Client(build(store, calls)) as client:
            result = await client.call_tool("migrate", {"tables": ["a", "bb", "ccc"]})
    assert result.data == "6 rows"
    assert calls == {"copy:a": 1, "copy:bb": 1, "copy:ccc": 1}


async def test_a_retry_replays_the_steps_the_failed_attempt_completed() -> None:
    store, calls = MemoryTaskStore(), {}
    tables = ["users", "orders", "items"]
    with anyio.fail_after(10):
        async with memory_wire(build(store, calls)) as wire:
            task_id = (await wire.call_tool("flaky", {"tables": tables}))["taskId"]
            done = await wire.wait(task_id)
            events = await history(store, task_id)
    assert done["status"] == "completed", done
    # a tuple comes back as a list, on the first run as on the replay
    assert done["result"]["structuredContent"] == {"done": [[t, 1] for t in tables]}
    assert calls == {"plain:users": 1, "plain:orders": 1, "plain:items": 1, "attempt": 2}
    assert [s.name for s in await store.steps(task_id)] == [f"plain:{t}" for t in tables]
    assert kinds(events).count("started") == 2
    resumed = one(events, "resumed")
    assert resumed.details == {"steps": 2, "last": "plain:orders"}
    started = [e for e in events if e.kind == "started"]
    assert started[0].at < started[1].at <= resumed.at
    messages = [e.details["message"] for e in events if e.kind == "message"]
    assert "Resuming after 2 completed steps (last: plain:orders)" in messages


def test_the_resume_message() -> None:
    assert resume_message(1, "a") == "Resuming after 1 completed step (last: a)"
    assert resume_message(3, "copy:users") == "Resuming after 3 completed steps (last: copy:users)"
    assert resume_message(2, "x" * 500).endswith("x…)")


async def test_a_name_used_twice_in_one_run_is_an_error_naming_it() -> None:
    store, calls = MemoryTaskStore(), {}
    with anyio.fail_after(10):
        async with memory_wire(build(store, calls)) as wire:
            task_id = (await wire.call_tool("twice"))["taskId"]
            done = await wire.wait(task_id)
    assert done["result"]["isError"] is True
    assert "'same' is used twice" in done["result"]["content"][0]["text"]
    assert [s.name for s in await store.steps(task_id)] == ["same"]


async def test_a_result_that_is_not_json_is_a_type_error_and_nothing_is_recorded() -> None:
    store, calls = MemoryTaskStore(), {}
    with anyio.fail_after(10):
        async with memory_wire(build(store, calls)) as wire:
            task_id = (await wire.call_tool("unencodable"))["taskId"]
            done = await wire.wait(task_id)
    text = done["result"]["content"][0]["text"]
    assert done["result"]["isError"] is True
    assert "step 'a set' returned a set that is not JSON" in text
    assert await store.steps(task_id) == []


async def test_a_function_that_raises_records_nothing_and_its_error_propagates() -> None:
    store, calls = MemoryTaskStore(), {}
    with anyio.fail_after(10):
        async with memory_wire(build(store, calls)) as wire:
            task_id = (await wire.call_tool("raising"))["taskId"]
            done = await wire.wait(task_id)
    assert done["result"]["content"][0]["text"] == "7"
    assert calls == {"boom": 1}
    assert [(s.name, s.value_json) for s in await store.steps(task_id)] == [("boom", "7")]


async def test_the_step_limit_fails_the_task_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("fastmcp_tasks.stores.steps.MAX_STEPS", 2)
    store, calls = MemoryTaskStore(), {}
    mcp = build(store, calls)
    with anyio.fail_after(10):
        async with memory_wire(mcp) as wire:
            task_id = (await wire.call_tool("migrate", {"tables": ["a", "b", "c"]}))["taskId"]
            done = await wire.wait(task_id)
    assert done["result"]["isError"] is True
    assert done["result"]["content"][0]["text"] == (
        "Step 'copy:c' was not recorded: the task has 2 recorded steps; the most is 2"
    )
    assert [s.name for s in await store.steps(task_id)] == ["copy:a", "copy:b"]


async def test_the_step_limit_message_survives_masked_error_details(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("fastmcp_tasks.stores.steps.MAX_STEPS", 1)
    store = MemoryTaskStore()
    mcp = FastMCP("masked", mask_error_details=True)
    mcp.add_extension(TasksExtension(store=store))
    caught: list[BaseException] = []

    @mcp.tool(task=True)
    async def two() -> str:
        await step("one", lambda: 1)
        try:
            await step("two", lambda: 2)
        except StepLimitExceeded as exc:  # the store's error type, as documented
            caught.append(exc)
            raise
        return "never"

    with anyio.fail_after(10):
        async with memory_wire(mcp) as wire:
            done = await wire.wait((await wire.call_tool("two"))["taskId"])
    assert len(caught) == 1
    assert done["result"]["content"][0]["text"].startswith("Step 'two' was not recorded")


async def test_an_answer_given_inside_a_step_is_replayed_without_asking_again() -> None:
    store, calls = MemoryTaskStore(), {}
    with anyio.fail_after(10):
        async with memory_wire(build(store, calls)) as wire:
            task_id = (await wire.call_tool("confirm"))["taskId"]
            parked = await wire.wait(task_id, {"input_required"})
            (key,) = parked["inputRequests"]
            await wire.update(task_id, {key: {"action": "accept", "content": {"value": True}}})
            done = await wire.wait(task_id)
            events = await history(store, task_id)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "approved=True"
    assert calls == {"ask": 1, "confirm": 2}
    assert kinds(events).count("input_requested") == 1
    assert one(events, "resumed").details == {"steps": 1, "last": "approve"}


async def test_outside_a_task_step_just_calls_the_function() -> None:
    calls: dict[str, int] = {}

    async def work(n: int, *, more: int = 0) -> tuple[int, int]:
        calls["work"] = calls.get("work", 0) + 1
        return (n, more)

    assert await step("x", work, 1, more=2) == (1, 2)  # no task: the value as it is
    assert await step("x", work, 1) == (1, 0)  # no name checks either
    assert await step("", lambda: "sync") == "sync"
    with pytest.raises(TypeError, match="must be a str"):
        await step(3, work, 1)  # type: ignore[arg-type]

    mcp = FastMCP("sync")
    mcp.add_extension(TasksExtension())

    @mcp.tool
    async def direct() -> list[int]:
        return list(await step("x", work, 5)) + list(await step("x", work, 6))

    with anyio.fail_after(10):
        async with Client(mcp) as client:
            assert (await client.call_tool("direct", {})).data == [5, 0, 6, 0]
    assert calls["work"] == 4


async def test_a_bad_name_in_a_task_is_a_value_error() -> None:
    mcp = FastMCP("names")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def named(name: str) -> str:
        return str(await step(name, lambda: 1))

    with anyio.fail_after(10):
        async with memory_wire(mcp) as wire:
            empty = await wire.wait((await wire.call_tool("named", {"name": ""}))["taskId"])
            long = await wire.wait((await wire.call_tool("named", {"name": "n" * 201}))["taskId"])
    assert "1 to 200 characters, got 0" in empty["result"]["content"][0]["text"]
    assert "1 to 200 characters, got 201" in long["result"]["content"][0]["text"]


class Stepless(MemoryTaskStore):
    """A memory store that does not keep durable steps (a third-party store)."""

    save_step = None  # type: ignore[assignment]
    steps = None  # type: ignore[assignment]


async def test_a_store_without_steps_warns_once_and_just_calls(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(engine_steps, "_warned", False)
    calls: dict[str, int] = {}
    mcp = FastMCP("stepless")
    mcp.add_extension(TasksExtension(store=Stepless()))

    @mcp.tool(task=True)
    async def work() -> int:
        def one() -> int:
            calls["one"] = calls.get("one", 0) + 1
            return 1

        return int(await step("a", one)) + int(await step("a", one))

    with caplog.at_level(logging.WARNING, "fastmcp_tasks.steps"), anyio.fail_after(10):
        async with memory_wire(mcp) as wire:
            for _ in range(2):
                done = await wire.wait((await wire.call_tool("work"))["taskId"])
                assert done["result"]["content"][0]["text"] == "2"
    assert calls == {"one": 4}
    warnings = [r for r in caplog.records if "keeps no durable steps" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_thousand_recorded_steps_are_read_once() -> None:
    store, calls = MemoryTaskStore(), {}
    reads: list[str] = []
    original = store.steps

    async def counted(task_id: str) -> list[StepRecord]:
        reads.append(task_id)
        return await original(task_id)

    store.steps = counted  # type: ignore[method-assign]
    tables = [f"t{i}" for i in range(1000)]
    with anyio.fail_after(20):
        async with memory_wire(build(store, calls)) as wire:
            task_id = (await wire.call_tool("migrate", {"tables": tables}))["taskId"]
            done = await wire.wait(task_id, within=20)
    assert done["status"] == "completed"
    assert reads == [task_id]
    assert len(await original(task_id)) == 1000


async def test_a_purge_removes_the_steps_with_the_task() -> None:
    store, calls = MemoryTaskStore(), {}
    with anyio.fail_after(10):
        async with memory_wire(build(store, calls)) as wire:
            task_id = (await wire.call_tool("migrate", {"tables": ["a"]}))["taskId"]
            await wire.wait(task_id)
            assert len(await store.steps(task_id)) == 1
            assert await purge_tasks(store, [task_id], "test") == 1
    assert await store.steps(task_id) == []
