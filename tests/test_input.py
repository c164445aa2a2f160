"""Input in the middle of a task: `ctx.elicit`, the guard pattern, `tasks/update` (C29-C37, C11)."""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import anyio
import mcp_types
import pytest
from fastmcp import Context, FastMCP
from fastmcp.server.elicitation import parse_elicit_response_type
from fastmcp.utilities.tasks import TaskConfig
from pydantic import BaseModel

from fastmcp_tasks import TasksExtension, task_options
from fastmcp_tasks.stores.memory import MemoryTaskStore
from tests.wire import Wire, WireError, connect, validate

pytestmark = pytest.mark.anyio


@dataclass
class Person:
    name: str
    age: int


class Ticket(BaseModel):
    title: str
    urgent: bool = False


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


RESPONSE_TYPES: dict[str, tuple[Any, dict[str, Any], Any]] = {
    # name: (response_type, accepted content, expected data repr)
    "str": (str, {"value": "hello"}, "'hello'"),
    "int": (int, {"value": 7}, "7"),
    "float": (float, {"value": 3.0}, "3.0"),  # the schema types content numbers as integers
    "bool": (bool, {"value": True}, "True"),
    "literal": (Literal["a", "b"], {"value": "b"}, "'b'"),
    "enum": (Color, {"value": "blue"}, "<Color.BLUE: 'blue'>"),
    "options": (["low", "high"], {"value": "high"}, "'high'"),
    "titled": ({"lo": {"title": "Low"}, "hi": {"title": "High"}}, {"value": "hi"}, "'hi'"),
    "multi": ([["x", "y", "z"]], {"value": ["x", "z"]}, "['x', 'z']"),
    "dataclass": (Person, {"name": "Ada", "age": 36}, "Person(name='Ada', age=36)"),
    "model": (Ticket, {"title": "Fix", "urgent": True}, "Ticket(title='Fix', urgent=True)"),
}


def input_server(**extension: Any) -> tuple[FastMCP, dict[str, anyio.Event]]:
    mcp = FastMCP("input")
    mcp.add_extension(TasksExtension(**extension))
    events: dict[str, anyio.Event] = {}

    def event(name: str) -> anyio.Event:
        return events.setdefault(name, anyio.Event())

    @mcp.tool(task=True)
    async def ask(kind: str, ctx: Context) -> str:
        result = await ctx.elicit(f"Give me a {kind}", RESPONSE_TYPES[kind][0])
        data = getattr(result, "data", None)
        return f"{result.action}:{data!r}" if result.action == "accept" else result.action

    @mcp.tool(task=True)
    async def two_questions(ctx: Context) -> str:
        first, second = await asyncio.gather(ctx.elicit("first?", str), ctx.elicit("second?", str))
        return f"{getattr(first, 'data', first.action)}+{getattr(second, 'data', second.action)}"

    @mcp.tool(task=True)
    async def guarded(ctx: Context) -> str:
        """Guard pattern over two rounds; never repeats its side effect."""
        responses = ctx.input_responses or {}
        if "confirm" not in responses:
            event("side-effect").set()
            return mcp_types.InputRequiredResult(  # type: ignore[return-value]
                input_requests={"confirm": _elicit_request("Deploy?", "ok")},
                request_state="round-1",
            )
        if "reason" not in responses and ctx.request_state == "round-1":
            return mcp_types.InputRequiredResult(  # type: ignore[return-value]
                input_requests={
                    "confirm": _elicit_request("Really deploy?", "ok"),
                    "reason": _elicit_request("Why?", "why"),
                },
                request_state="round-2",
            )
        reason = responses["reason"]
        assert isinstance(reason, mcp_types.ElicitResult)
        return f"deployed ({ctx.request_state}): {(reason.content or {}).get('why')}"

    @mcp.tool(task=True)
    async def parked(ctx: Context) -> str:
        try:
            result = await ctx.elicit("Wait for me", str)
        except anyio.get_cancelled_exc_class():
            event("parked-cancelled").set()
            raise
        return result.action

    return mcp, events


def _elicit_request(message: str, field: str) -> mcp_types.ElicitRequest:
    return mcp_types.ElicitRequest(
        params=mcp_types.ElicitRequestFormParams(
            message=message,
            requested_schema={
                "type": "object",
                "properties": {field: {"type": "string"}},
                "required": [field],
            },
        )
    )


async def parked_requests(wire: Wire, task_id: str, count: int = 1) -> dict[str, Any]:
    task = await wire.wait_for(
        task_id,
        lambda t: t["status"] == "input_required" and len(t["inputRequests"]) >= count,
    )
    for request in task["inputRequests"].values():
        validate("InputRequest", request)
    return task["inputRequests"]


@pytest.mark.parametrize("kind", sorted(RESPONSE_TYPES))
async def test_each_response_type_round_trips(transport: str, kind: str) -> None:
    response_type, content, expected = RESPONSE_TYPES[kind]
    mcp, _ = input_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("ask", {"kind": kind})
        requests = await parked_requests(wire, created["taskId"])
        ((key, request),) = requests.items()
        parked = await wire.get(created["taskId"])
        assert parked["statusMessage"] == f"Give me a {kind}"
        ack = await wire.update(created["taskId"], {key: {"action": "accept", "content": content}})
        done = await wire.wait(created["taskId"])
    foreground = parse_elicit_response_type(response_type)
    assert request == {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": f"Give me a {kind}",
            "requestedSchema": foreground.schema,
        },
    }
    assert ack["resultType"] == "complete"
    assert done["result"]["content"][0]["text"] == f"accept:{expected}"


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_and_cancel(transport: str, action: str) -> None:
    mcp, _ = input_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("ask", {"kind": "str"})
        (key,) = await parked_requests(wire, created["taskId"])
        await wire.update(created["taskId"], {key: {"action": action}})
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == action


async def test_two_elicitations_answered_one_at_a_time(transport: str) -> None:
    mcp, _ = input_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("two_questions")
        requests = await parked_requests(wire, created["taskId"], count=2)
        by_message = {r["params"]["message"]: k for k, r in requests.items()}
        first, second = by_message["first?"], by_message["second?"]
        await wire.update(
            created["taskId"], {first: {"action": "accept", "content": {"value": "A"}}}
        )
        partial = await wire.get(created["taskId"])
        assert partial["status"] == "input_required"  # a strict subset was accepted (C36)
        assert list(partial["inputRequests"]) == [second]
        # the answered key is not outstanding any more: answering it again is ignored (C35)
        await wire.update(
            created["taskId"], {first: {"action": "accept", "content": {"value": "Z"}}}
        )
        await wire.update(
            created["taskId"], {second: {"action": "accept", "content": {"value": "B"}}}
        )
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "A+B"


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("yes", "must be a JSON object"),
        ({"action": "maybe"}, "action must be one of"),
        ({"action": "accept", "content": {"value": 5}}, "'value' must be a string"),
        ({"action": "accept", "content": {}}, "missing required field 'value'"),
        ({"action": "accept", "content": [1]}, "content must be an object"),
    ],
)
async def test_malformed_answers_are_rejected_and_stay_outstanding(
    transport: str, answer: Any, problem: str
) -> None:
    mcp, _ = input_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("ask", {"kind": "str"})
        (key,) = await parked_requests(wire, created["taskId"])
        with pytest.raises(WireError) as info:
            await wire.update(created["taskId"], {key: answer}, malformed=True)
        assert info.value.code == -32602
        assert key in info.value.message and problem in info.value.message
        still = await wire.get(created["taskId"])
        assert still["status"] == "input_required" and key in still["inputRequests"]
        await wire.update(
            created["taskId"], {key: {"action": "accept", "content": {"value": "ok"}}}
        )
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "accept:'ok'"


async def test_unknown_keys_are_ignored_next_to_real_answers(transport: str) -> None:
    mcp, _ = input_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("ask", {"kind": "int"})
        (key,) = await parked_requests(wire, created["taskId"])
        await wire.update(
            created["taskId"],
            {"never-issued": {"garbage": True}, key: {"action": "accept", "content": {"value": 3}}},
            malformed=True,
        )
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "accept:3"


async def test_cancel_while_parked_reaches_the_waiting_tool(transport: str) -> None:
    mcp, events = input_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("parked")
        (key,) = await parked_requests(wire, created["taskId"])
        await wire.cancel(created["taskId"])
        await events.setdefault("parked-cancelled", anyio.Event()).wait()
        done = await wire.wait(created["taskId"])
        late = await wire.update(
            created["taskId"], {key: {"action": "accept", "content": {"value": "x"}}}
        )
    assert done["status"] == "cancelled" and "inputRequests" not in done
    assert late["resultType"] == "complete"


async def test_update_racing_cancel_leaves_one_terminal_state(transport: str) -> None:
    mcp, _ = input_server()
    async with connect(mcp, transport) as wire:
        for _ in range(5):
            created = await wire.call_tool("parked")
            (key,) = await parked_requests(wire, created["taskId"])
            async with anyio.create_task_group() as group:
                group.start_soon(wire.cancel, created["taskId"])
                group.start_soon(
                    wire.update,
                    created["taskId"],
                    {key: {"action": "accept", "content": {"value": "x"}}},
                )
            final = await wire.wait(created["taskId"])
            assert final["status"] in ("completed", "cancelled")
            assert await wire.get(created["taskId"]) == final


async def test_input_timeout_cancels_the_elicitation(transport: str) -> None:
    mcp, _ = input_server(input_timeout=timedelta(milliseconds=100))
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("ask", {"kind": "str"})
        (key,) = await parked_requests(wire, created["taskId"])
        done = await wire.wait(created["taskId"])
        late = await wire.update(
            created["taskId"], {key: {"action": "accept", "content": {"value": "x"}}}
        )
    assert done["result"]["content"][0]["text"] == "cancel"
    assert late["resultType"] == "complete"


async def test_per_tool_input_timeout_overrides_the_extension() -> None:
    mcp = FastMCP("timeouts")
    mcp.add_extension(TasksExtension(input_timeout=timedelta(hours=1)))

    @mcp.tool(task=True)
    @task_options(input_timeout=timedelta(milliseconds=50))
    async def hurried(ctx: Context) -> str:
        return (await ctx.elicit("quick?", bool)).action

    async with connect(mcp, "memory") as wire:
        created = await wire.call_tool("hurried")
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "cancel"


async def test_a_parked_task_outlives_its_retention(transport: str, monkeypatch: Any) -> None:
    sweeps, purge = list[float](), MemoryTaskStore.purge_expired  # each sweep's `now`

    async def counted_purge(self: MemoryTaskStore, now: float, real: Any = purge) -> int:
        sweeps.append(now)
        return int(await real(self, now))

    monkeypatch.setattr(MemoryTaskStore, "purge_expired", counted_purge)
    mcp, _ = input_server(
        retention=timedelta(milliseconds=20), sweep_interval=timedelta(milliseconds=10)
    )
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("ask", {"kind": "bool"})
        (key,) = await parked_requests(wire, created["taskId"])
        late = time.time() + 0.04  # sweeps that would purge it by now, were it terminal
        with anyio.fail_after(5):
            while sum(now > late for now in sweeps) < 5:  # noqa: ASYNC110 - counting sweeps
                await anyio.sleep(0.01)
        assert (await wire.get(created["taskId"]))["status"] == "input_required"
        await wire.update(
            created["taskId"], {key: {"action": "accept", "content": {"value": False}}}
        )
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "accept:False"


async def test_elicit_without_the_capability_fails_fast(transport: str) -> None:
    mcp, _ = input_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("ask", {"kind": "str"}, capabilities={})
        done = await wire.wait(created["taskId"])
    assert done["status"] == "completed" and done["result"]["isError"] is True
    assert "did not declare the elicitation capability" in done["result"]["content"][0]["text"]


async def test_guard_pattern_over_two_rounds(transport: str) -> None:
    mcp, events = input_server()
    async with connect(mcp, transport) as wire:
        created = await wire.call_tool("guarded")
        assert "requestState" not in created
        round1 = await parked_requests(wire, created["taskId"])
        (key1,) = round1
        parked = await wire.get(created["taskId"])
        assert "requestState" not in parked
        await wire.update(created["taskId"], {key1: {"action": "accept", "content": {"ok": "y"}}})
        round2 = await wire.wait_for(
            created["taskId"],
            lambda t: t["status"] == "input_required" and len(t.get("inputRequests", {})) == 2,
        )
        keys2 = set(round2["inputRequests"])
        assert key1 not in keys2  # keys are never reused over the task's life (C30)
        # an answer to the superseded round-1 key is ignored
        await wire.update(created["taskId"], {key1: {"action": "decline"}})
        answers = {
            k: {
                "action": "accept",
                "content": {"ok": "y"} if "ok" in str(r) else {"why": "release"},
            }
            for k, r in round2["inputRequests"].items()
        }
        await wire.update(created["taskId"], answers)
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "deployed (round-2): release"
    assert "requestState" not in str(done)
    assert events["side-effect"].is_set()


async def test_mrtr_composition_gathers_in_the_foreground(transport: str) -> None:
    mcp = FastMCP("composition")
    mcp.add_extension(TasksExtension())

    async def need_name(ctx: Context, arguments: dict[str, Any]) -> Any:
        if "name" in (ctx.input_responses or {}):
            return None
        return mcp_types.InputRequiredResult(
            input_requests={"name": _elicit_request("Name?", "name")}, request_state="s1"
        )

    @mcp.tool(task=TaskConfig(mode="required"))
    @task_options(foreground_input=need_name)
    async def greet_later(greeting: str, ctx: Context) -> str:
        answer = (ctx.input_responses or {})["name"]
        assert isinstance(answer, mcp_types.ElicitResult)
        return f"{greeting}, {(answer.content or {})['name']} ({ctx.request_state})"

    async with connect(mcp, transport) as wire:
        round1 = await wire.call_tool("greet_later", {"greeting": "Hi"})
        assert round1["resultType"] == "input_required" and "taskId" not in round1
        retry = {
            "name": "greet_later",
            "arguments": {"greeting": "Hi"},
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Alice"}}},
            "requestState": round1["requestState"],
        }
        created = await wire.request("tools/call", retry)
        assert created["resultType"] == "task"
        assert "requestState" not in created and "inputRequests" not in created
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "Hi, Alice (s1)"
