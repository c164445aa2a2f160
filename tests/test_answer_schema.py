"""Elicitation answers are checked as JSON Schema reads `requestedSchema` (inputs.py, issue 14).

A `tasks/update` answer may carry a field the requested schema's `properties`
does not name, as JSON Schema allows, unless the schema says
`"additionalProperties": false` (then -32602 naming the field, and the task
keeps waiting); an `additionalProperties` schema constrains such fields. What
the tool receives is what the same `ctx.elicit(message, response_type)` returns
in the foreground for the same answer: compared with a real foreground call over
a 2025-11-25 (legacy) connection, where server-pushed elicitation still exists,
and with FastMCP's own `handle_elicit_accept` on the same content.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.server.elicitation import handle_elicit_accept, parse_elicit_response_type
from pydantic import BaseModel, ConfigDict

from fastmcp_tasks import TasksExtension
from tests.wire import Wire, WireError, connect, http_server

pytestmark = pytest.mark.anyio


@dataclass
class Person:
    name: str
    age: int


class Ticket(BaseModel):  # pydantic's default: extra fields are ignored
    title: str


class Loose(BaseModel):  # keeps extra fields; its schema says `additionalProperties: true`
    model_config = ConfigDict(extra="allow")
    title: str


class Strict(BaseModel):  # its schema says `additionalProperties: false`
    model_config = ConfigDict(extra="forbid")
    title: str


class Counted(BaseModel):  # its schema says `additionalProperties: {"type": "integer"}`
    model_config = ConfigDict(extra="allow")
    title: str
    __pydantic_extra__: dict[str, int]


#: name: (response_type, answer content with a field the schema does not name, data repr)
KINDS: dict[str, tuple[Any, dict[str, Any], str]] = {
    "dataclass": (Person, {"name": "Ada", "age": 36, "note": "x"}, "Person(name='Ada', age=36)"),
    "model": (Ticket, {"title": "Fix", "note": "x"}, "Ticket(title='Fix')"),
    "model-allow": (Loose, {"title": "Fix", "note": "x"}, "Loose(title='Fix', note='x')"),
    "scalar": (int, {"value": 7, "note": "x"}, "7"),
    "choices": (["low", "high"], {"value": "high", "note": "x"}, "'high'"),
    "multi-choices": ([["x", "y", "z"]], {"value": ["x", "z"], "note": "x"}, "['x', 'z']"),
    "model-typed-extras": (Counted, {"title": "Fix", "n": 3}, "Counted(title='Fix', n=3)"),
}
RESPONSE_TYPES: dict[str, Any] = {kind: spec[0] for kind, spec in KINDS.items()}
RESPONSE_TYPES["strict"] = Strict


def schema_server() -> FastMCP:
    mcp = FastMCP("answers")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def ask_task(kind: str, ctx: Context) -> str:
        return repr(await ctx.elicit(f"Give me a {kind}", RESPONSE_TYPES[kind]))

    @mcp.tool
    async def ask_now(kind: str, ctx: Context) -> str:
        return repr(await ctx.elicit(f"Give me a {kind}", RESPONSE_TYPES[kind]))

    return mcp


def answering(content: dict[str, Any], seen: list[dict[str, Any]]) -> Any:
    """A FastMCP elicitation handler that accepts with `content` and records the schema."""

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        seen.append(params.requested_schema)
        return dict(content)

    return handler


@asynccontextmanager
async def task_client(server: FastMCP, transport: str, handler: Any) -> AsyncIterator[Client]:
    """A default `fastmcp.Client` (it resolves tasks) over `transport`, answering with `handler`."""
    if transport == "memory":
        async with Client(server, elicitation_handler=handler) as client:
            yield client
    else:
        async with (
            http_server(server) as url,
            Client(url, elicitation_handler=handler) as client,
        ):
            yield client


async def parked_key(wire: Wire, task_id: str) -> str:
    task = await wire.wait_for(task_id, lambda t: t["status"] == "input_required")
    (key,) = task["inputRequests"]
    return str(key)


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_the_task_receives_what_the_foreground_elicit_returns(
    transport: str, kind: str
) -> None:
    response_type, content, data = KINDS[kind]
    config = parse_elicit_response_type(response_type)
    assert not set(content) <= set(config.schema["properties"])  # an extra field is sent
    assert config.schema.get("additionalProperties") is not False
    mcp = schema_server()
    task_schemas: list[dict[str, Any]] = []
    async with task_client(mcp, transport, answering(content, task_schemas)) as client:
        in_task = await client.call_tool("ask_task", {"kind": kind})
    foreground_schemas: list[dict[str, Any]] = []
    async with Client(
        mcp, mode="legacy", elicitation_handler=answering(content, foreground_schemas)
    ) as legacy:
        foreground = await legacy.call_tool("ask_now", {"kind": kind})
    expected = f"AcceptedElicitation[Any](action='accept', data={data})"
    assert task_schemas == foreground_schemas == [config.schema]  # the same question
    assert in_task.data == foreground.data == repr(handle_elicit_accept(config, content))
    assert in_task.data == expected


async def test_an_extra_field_is_accepted_when_the_schema_does_not_forbid_it(
    transport: str,
) -> None:
    async with connect(schema_server(), transport) as wire:
        created = await wire.call_tool("ask_task", {"kind": "model"})
        key = await parked_key(wire, created["taskId"])
        content = {"title": "Fix", "labels": ["a", "b"], "count": 2, "seen": True}
        ack = await wire.update(created["taskId"], {key: {"action": "accept", "content": content}})
        done = await wire.wait(created["taskId"])
    assert ack["resultType"] == "complete"
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == (
        "AcceptedElicitation[Any](action='accept', data=Ticket(title='Fix'))"
    )


@pytest.mark.parametrize(
    ("kind", "extra", "problem"),
    [
        ("strict", {"note": "x"}, "content has unknown field 'note'"),
        ("model-typed-extras", {"n": "three"}, "content field 'n' must be a integer"),
    ],
)
async def test_a_field_the_schema_forbids_is_refused_and_the_task_keeps_waiting(
    transport: str, kind: str, extra: dict[str, Any], problem: str
) -> None:
    config = parse_elicit_response_type(RESPONSE_TYPES[kind])
    with pytest.raises(ValueError):  # the foreground conversion refuses it too
        handle_elicit_accept(config, {"title": "Fix", **extra})
    async with connect(schema_server(), transport) as wire:
        created = await wire.call_tool("ask_task", {"kind": kind})
        task_id = created["taskId"]
        key = await parked_key(wire, task_id)
        refused = {key: {"action": "accept", "content": {"title": "Fix", **extra}}}
        with pytest.raises(WireError) as info:
            await wire.update(task_id, refused)
        assert info.value.code == -32602
        assert key in info.value.message and problem in info.value.message
        still = await wire.get(task_id)
        assert still["status"] == "input_required" and key in still["inputRequests"]
        await wire.update(task_id, {key: {"action": "accept", "content": {"title": "Fix"}}})
        done = await wire.wait(task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == (
        f"AcceptedElicitation[Any](action='accept', data={kind_class(kind)}(title='Fix'))"
    )


def kind_class(kind: str) -> str:
    return str(RESPONSE_TYPES[kind].__name__)


async def test_the_strict_schema_is_what_the_tool_asked_for() -> None:
    """The refusal above is the schema's, not ours: `Strict` says `additionalProperties: false`."""
    assert parse_elicit_response_type(Strict).schema["additionalProperties"] is False
    assert parse_elicit_response_type(Loose).schema["additionalProperties"] is True
    assert "additionalProperties" not in parse_elicit_response_type(Ticket).schema
    async with connect(schema_server(), "memory") as wire:
        created = await wire.call_tool("ask_task", {"kind": "strict"})
        task = await wire.wait_for(created["taskId"], lambda t: t["status"] == "input_required")
        await wire.cancel(created["taskId"])
    ((_, request),) = task["inputRequests"].items()
    assert request["params"]["requestedSchema"] == parse_elicit_response_type(Strict).schema
