"""Size limits: clear errors that name the limit, nothing stored; big documents work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Context, FastMCP

from fastmcp_tasks import Limits, TasksExtension, task_options
from fastmcp_tasks.server import limits
from fastmcp_tasks.stores import text
from tests.wire import WireError, connect

pytestmark = pytest.mark.anyio

DOCUMENT = "x" * (3 * 1024 * 1024)  # a 3 MiB document


def sized_server(limits: Limits | None = None) -> FastMCP:
    mcp = FastMCP("sizes")
    mcp.add_extension(TasksExtension(limits=limits))

    @mcp.tool(task=True)
    async def echo_document(text: str) -> str:
        return text

    @mcp.tool(task=True)
    async def grow(n: int) -> str:
        return "y" * n

    @mcp.tool(task=True)
    async def ask(ctx: Context) -> str:
        return (await ctx.elicit("?", str)).action

    return mcp


async def test_a_multi_megabyte_document_works_by_default(transport: str) -> None:
    async with connect(sized_server(), transport) as wire:
        created = await wire.call_tool("echo_document", {"text": DOCUMENT})
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == DOCUMENT


async def test_arguments_over_the_cap_are_refused(transport: str) -> None:
    mcp = sized_server(Limits(max_argument_bytes=1000))
    async with connect(mcp, transport) as wire:
        with pytest.raises(WireError) as info:
            await wire.call_tool("echo_document", {"text": "z" * 2000})
        assert info.value.code == -32602
        assert "max_argument_bytes=1000" in info.value.message
        assert info.value.data["limit"] == "max_argument_bytes"
        small = await wire.call_tool("echo_document", {"text": "fits"})
        await wire.wait(small["taskId"])
    assert len(mcp._extensions["io.modelcontextprotocol/tasks"].store) == 1  # type: ignore[attr-defined]


async def test_answers_over_the_cap_are_refused_and_stay_outstanding(transport: str) -> None:
    async with connect(sized_server(Limits(max_input_bytes=500)), transport) as wire:
        created = await wire.call_tool("ask")
        parked = await wire.wait(created["taskId"], {"input_required"})
        (key,) = parked["inputRequests"]
        with pytest.raises(WireError) as info:
            await wire.update(
                created["taskId"], {key: {"action": "accept", "content": {"value": "v" * 600}}}
            )
        assert info.value.code == -32602 and "max_input_bytes=500" in info.value.message
        still = await wire.get(created["taskId"])
        assert still["status"] == "input_required" and key in still["inputRequests"]
        await wire.update(created["taskId"], {key: {"action": "decline"}})
        done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "decline"


async def test_a_result_over_the_cap_fails_the_task(transport: str) -> None:
    async with connect(sized_server(Limits(max_result_bytes=10_000)), transport) as wire:
        created = await wire.call_tool("grow", {"n": 20_000})
        done = await wire.wait(created["taskId"])
    assert done["status"] == "failed"
    assert done["error"]["code"] == -32603
    assert "max_result_bytes=10000" in done["error"]["message"]


async def test_sizes_of_hostile_text_are_measured_not_crashed_on() -> None:
    from fastmcp_tasks.server.limits import json_size

    assert json_size({"\ud800": None}) > 0  # a lone surrogate, as a hostile client may send


class CountingJson:
    """`json` for the modules that encode payloads, counting the encodings of `marker`."""

    def __init__(self, marker: str) -> None:
        self.marker, self.encoded = marker, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)

    def dumps(self, value: Any, **options: Any) -> str:
        text = json.dumps(value, **options)
        self.encoded += self.marker in text
        return text


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_arguments_and_result_are_each_encoded_once(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size limits measure the JSON the store then keeps: a task's arguments are
    encoded once when it is created, its result once when it completes."""
    marker = "marker-" + "m" * 64
    counting = CountingJson(marker)
    for module in (text, limits):
        monkeypatch.setattr(module, "json", counting)
    url = None if store == "memory" else f"sqlite:///{tmp_path / 'tasks.db'}"
    mcp = FastMCP("once")
    mcp.add_extension(TasksExtension(url=url))

    @mcp.tool(task=True)
    async def echo(words: str) -> str:
        return words

    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            created = await wire.call_tool("echo", {"words": marker})
            assert counting.encoded == 1  # the arguments: sized and stored
            done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == marker
    assert counting.encoded == 2  # and the result


async def test_arguments_a_concurrency_key_changed_are_stored_as_changed(tmp_path: Path) -> None:
    """A `concurrency_key` runs after the arguments were sized: whatever it does to them
    is what the store keeps and the tool gets, as before the arguments carried their text."""
    mcp = FastMCP("keyed")
    mcp.add_extension(TasksExtension(url=f"sqlite:///{tmp_path / 'tasks.db'}"))

    @mcp.tool(task=True)
    @task_options(concurrency=1, concurrency_key=lambda args: args.pop("tenant", "none"))
    async def echo(text: str, tenant: str = "none") -> str:
        return f"{text} for {tenant}"

    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            created = await wire.call_tool("echo", {"text": "x", "tenant": "acme"})
            done = await wire.wait(created["taskId"])
    assert done["result"]["content"][0]["text"] == "x for none"
