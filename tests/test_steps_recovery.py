"""Recovery of a resumable tool (`task_options(resumable=True)`, `engine.leases`), in process.

A task left `running` by a process that died (its lease ran out) on a store that says
it is durable (`tests.operable.SharedMemoryStore`): a resumable tool is run again and
replays the steps recorded before (`fastmcp_tasks.step`), saying so in its status
message and its history; a tool neither resumable nor idempotent fails "interrupted".
The same through real SIGKILLed processes: `test_steps_processes`. And the other way a
tool body runs again within one run: a guard round. And the store as the engine uses it
(`MonitoredStore`): a step refused at its bound is an answer, not an outage; under
`seal="all"` (`SealedStore`) a step's value is sealed at rest and replayed opened.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import anyio
import mcp_types
import pytest
from fastmcp import Context, FastMCP

from fastmcp_tasks import (
    MemoryTaskStore,
    Retry,
    StepLimitExceeded,
    TasksExtension,
    step,
    task_options,
)
from fastmcp_tasks.server.health import HealthMonitor
from fastmcp_tasks.server.monitored_store import BOUNDED, MonitoredStore, innermost
from fastmcp_tasks.testing import make_record
from tests.operable import SharedMemoryStore, history, one
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio


async def test_recovery_resumes_a_resumable_tool_and_fails_a_plain_one() -> None:
    """A task left `running` by a dead process: a resumable tool runs again from its
    recorded steps (said in its status and history); a plain one fails "interrupted"."""
    store = SharedMemoryStore()  # says it is durable: recovery applies
    now = time.time()
    for task_id, tool in (("left-resumable", "resumable"), ("left-plain", "plain")):
        orphan = make_record(
            task_id=task_id,
            tool=tool,
            status="working",
            arguments={},
            attempts=1,
            phase="running",
            app="recovering",
            lease_owner="elsewhere:1:gone",
            lease_expires=now - 1,
        )
        await store.create(orphan)
        for name in ("a", "b"):
            assert await store.save_step(task_id, name, json.dumps(name.upper()), now)
    calls: list[str] = []

    async def record(name: str) -> str:
        calls.append(name)
        return name.upper()

    mcp = FastMCP("recovering")
    mcp.add_extension(TasksExtension(store=store, lease=timedelta(seconds=1)))

    @mcp.tool(task=True)
    @task_options(resumable=True)
    async def resumable() -> str:
        return "".join([await step(n, record, n) for n in ("a", "b", "c")])

    @mcp.tool(task=True)
    async def plain() -> str:
        return "".join([await step(n, record, n) for n in ("a", "b", "c")])

    with anyio.fail_after(15):
        async with memory_wire(mcp) as wire:
            done = await wire.wait("left-resumable")
            lost = await wire.wait("left-plain")
            events = await history(store, "left-resumable")
    assert done["result"]["content"][0]["text"] == "ABC"
    assert calls == ["c"]
    assert lost["status"] == "failed"
    assert "nor task_options(resumable=True)" in lost["error"]["message"]
    assert one(events, "resumed").details == {"steps": 2, "last": "b"}
    messages = [e.details["message"] for e in events if e.kind == "message"]
    assert "Resuming after 2 completed steps (last: b)" in messages


async def test_a_guard_round_replays_the_steps_of_the_round_before() -> None:
    """A tool body run again by a state-only guard round (`call.run_rounds`) may use its
    step names again: the steps the round before recorded are replayed."""
    calls: list[str] = []

    async def record(name: str) -> str:
        calls.append(name)
        return name

    mcp = FastMCP("rounds")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def rounds(ctx: Context) -> str:
        first = await step("first", record, "first")
        if ctx.request_state is None:
            return mcp_types.InputRequiredResult(request_state="again")  # type: ignore[return-value]
        return first + await step("second", record, "second")

    with anyio.fail_after(10):
        async with memory_wire(mcp) as wire:
            done = await wire.wait((await wire.call_tool("rounds"))["taskId"])
    assert done["result"]["content"][0]["text"] == "firstsecond"
    assert calls == ["first", "second"]


async def test_a_step_refused_at_its_bound_is_an_answer_not_an_outage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the engine's `MonitoredStore`: `save_step` is bounded by `store_timeout`, and
    `StepLimitExceeded` is the store answering (health stays up), as `TaskLimitExceeded` is."""
    monkeypatch.setattr("fastmcp_tasks.stores.steps.MAX_STEPS", 1)
    inner = MemoryTaskStore()
    health = HealthMonitor()
    store: Any = MonitoredStore(inner, health, timeout=5.0)
    task = make_record()
    await inner.create(task)
    assert await store.save_step(task.task_id, "one", "1", time.time())
    with pytest.raises(StepLimitExceeded):
        await store.save_step(task.task_id, "two", "2", time.time())
    assert health.degraded_since is None and health.errors == 0
    assert [s.name for s in await store.steps(task.task_id)] == ["one"]
    assert {"save_step", "steps"} <= BOUNDED


async def test_sealed_step_values_are_replayed_opened() -> None:
    """Under `seal="all"` a step's value is sealed at rest (`SealedStore`) and a retry
    replays it opened, the same value the first attempt returned."""
    marker = "step-marker-3b9f-personal"
    calls: list[str] = []

    async def secret() -> dict[str, str]:
        calls.append("secret")
        return {"text": marker}

    mcp = FastMCP("sealed-steps")
    tasks = TasksExtension(seal="all", encryption_key="key A")
    mcp.add_extension(tasks)
    retry = Retry(attempts=2, backoff=timedelta(milliseconds=20), jitter=False)

    @mcp.tool(task=True)
    @task_options(retry=retry)
    async def sealed() -> str:
        value = await step("secret", secret)
        calls.append("body")
        if calls.count("body") == 1:
            raise RuntimeError("the first attempt fails after its step")
        return str(value["text"])

    with anyio.fail_after(10):
        async with memory_wire(mcp) as wire:
            task_id = (await wire.call_tool("sealed"))["taskId"]
            done = await wire.wait(task_id)
            (kept,) = await innermost(tasks.store).steps(task_id)  # type: ignore[attr-defined]
    assert done["result"]["content"][0]["text"] == marker
    assert calls == ["secret", "body", "body"]
    assert marker not in kept.value_json
