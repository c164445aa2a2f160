"""A task's completed `result` is the very `CallToolResult` a blocking call returns (C27).

Every return shape FastMCP supports is defined once as a `task=True` tool and
called twice over the same wire: without the tasks opt-in (the synchronous
result) and with it (a task, polled until `completed`, its inline `result`).
The two must be equal as JSON values *and* as serialized JSON (same key order):
content, structuredContent, isError, `_meta` (serverInfo included) and error
masking, so a client decodes both the same way.

`test_client_decodes_task_result_like_sync` then proves it through FastMCP's own
client: `fastmcp.Client.call_tool` is the reference, and the task's raw inline
result is fed through the same decode path the client uses for a `tools/call`
answer (`mcp_types.methods.parse_server_result`, the SDK session's
`validate_tool_result`, and `Client._parse_call_tool_result`).
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

import anyio
import anyio.lowlevel
import httpx
import mcp_types
import pytest
from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.tools.base import ToolResult
from fastmcp.utilities.types import Audio, File, Image
from mcp_types import methods as mcp_methods
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from fastmcp_tasks import TasksExtension
from tests.wire import MODERN, Wire, connect

pytestmark = pytest.mark.anyio

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
WAV = b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00D\xac\x00\x00"
PDF = b"%PDF-1.4\n%tiny\n"


class Point(BaseModel):
    x: int
    y: int
    label: str | None = None


@dataclass
class Pair:
    left: str
    right: float


class Movie(TypedDict):
    title: str
    year: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def _core_runs_async_generator_tasks() -> bool:
    """Whether the installed FastMCP accepts `task=True` on an async-generator tool.

    Cores before 4.1.8 reject it when the tool is registered (a ValueError: "uses a
    sync function"); the package supports those cores, so the parity cases leave that
    one tool out there (skipped, with the reason) instead of failing on a core limit.
    Probed on a throwaway server, not read from the version string.
    """

    async def probe() -> AsyncIterator[int]:
        yield 1

    try:
        FastMCP("probe").tool(task=True)(probe)
    except ValueError:
        return False
    return True


ASYNC_GENERATOR_TASKS = _core_runs_async_generator_tasks()


def make_parity_server(*, mask_error_details: bool = False) -> FastMCP:
    mcp = FastMCP("parity", mask_error_details=mask_error_details)
    mcp.add_extension(TasksExtension())

    # --- plain Python values ------------------------------------------------------

    @mcp.tool(task=True)
    async def ret_str(text: str = "hello") -> str:
        return text

    @mcp.tool(task=True)
    async def ret_int(n: int = 41) -> int:
        return n + 1

    @mcp.tool(task=True)
    async def ret_float() -> float:
        return 3.5

    @mcp.tool(task=True)
    async def ret_bool() -> bool:
        return True

    @mcp.tool(task=True)
    async def ret_dict() -> dict[str, Any]:
        return {"a": 1, "b": [1, 2], "c": {"d": None}, "é": "ünïcödé ☃"}

    @mcp.tool(task=True)
    async def ret_list() -> list[int]:
        return [3, 1, 2]

    @mcp.tool(task=True)
    async def ret_tuple() -> tuple[int, str]:
        return (1, "x")

    @mcp.tool(task=True)
    async def ret_model(x: int = 1, y: int = 2) -> Point:
        return Point(x=x, y=y)

    @mcp.tool(task=True)
    async def ret_dataclass() -> Pair:
        return Pair(left="l", right=0.25)

    @mcp.tool(task=True)
    async def ret_typeddict() -> Movie:
        return Movie(title="Alien", year=1979)

    @mcp.tool(task=True)
    async def ret_none() -> None:
        return None

    @mcp.tool(task=True)
    async def ret_optional() -> int | None:
        return None

    @mcp.tool(task=True)
    async def ret_union() -> int | str:
        return "seven"

    @mcp.tool(task=True)
    async def ret_datetime() -> datetime:
        return datetime(2026, 7, 28, 12, 30, tzinfo=UTC)

    @mcp.tool(task=True)
    async def ret_uuid() -> UUID:
        return UUID("12345678-1234-5678-1234-567812345678")

    @mcp.tool(task=True)
    async def ret_enum() -> Color:
        return Color.BLUE

    @mcp.tool(task=True)
    async def ret_unannotated():  # type: ignore[no-untyped-def]
        return {"free": "form"}

    @mcp.tool(task=True)
    async def ret_bytes() -> bytes:
        return b"\x00\x01binary\xff"

    @mcp.tool(task=True)
    async def ret_annotated() -> Annotated[int, Field(description="the answer")]:
        return 42

    @mcp.tool(task=True)
    async def ret_annotated_model() -> Annotated[Point, Field(description="a point")]:
        return Point(x=5, y=6, label="p")

    if ASYNC_GENERATOR_TASKS:

        @mcp.tool(task=True)
        async def ret_async_gen() -> AsyncIterator[int]:
            yield 1
            await anyio.lowlevel.checkpoint()
            yield 2

    # --- media helpers and content blocks -------------------------------------------

    @mcp.tool(task=True)
    async def ret_image() -> Image:
        return Image(data=PNG, format="png")

    @mcp.tool(task=True)
    async def ret_audio() -> Audio:
        return Audio(data=WAV, format="wav")

    @mcp.tool(task=True)
    async def ret_file() -> File:
        return File(data=PDF, format="pdf", name="doc")

    @mcp.tool(task=True)
    async def ret_mixed() -> list[str | Image]:
        return ["a caption", Image(data=PNG, format="png")]

    @mcp.tool(task=True)
    async def ret_text_content() -> mcp_types.TextContent:
        return mcp_types.TextContent(type="text", text="direct text")

    @mcp.tool(task=True)
    async def ret_image_content() -> mcp_types.ImageContent:
        data = base64.b64encode(PNG).decode()
        return mcp_types.ImageContent(type="image", data=data, mime_type="image/png")

    @mcp.tool(task=True)
    async def ret_content_list() -> list[mcp_types.ContentBlock]:
        return [
            mcp_types.TextContent(type="text", text="first"),
            mcp_types.ImageContent(
                type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"
            ),
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.TextResourceContents(
                    uri="file:///notes.txt", mime_type="text/plain", text="notes"
                ),
            ),
            mcp_types.ResourceLink(type="resource_link", uri="file:///big.bin", name="big"),
        ]

    # --- explicit results ---------------------------------------------------------

    @mcp.tool(task=True)
    async def ret_tool_result() -> ToolResult:
        return ToolResult(
            content=[mcp_types.TextContent(type="text", text="summary")],
            structured_content={"rows": 3, "ok": True},
            meta={"custom": {"trace": "abc"}, "fastmcp": {"note": 1}},
        )

    @mcp.tool(task=True)
    async def ret_tool_result_error() -> ToolResult:
        return ToolResult(
            content=[mcp_types.TextContent(type="text", text="soft failure")],
            meta={"why": "quota"},
            is_error=True,
        )

    @mcp.tool(task=True)
    async def ret_call_tool_result() -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text="raw")],
            structured_content={"raw": True},
            _meta={"origin": "proxy"},  # type: ignore[call-arg]
        )

    # --- output schemas -------------------------------------------------------------

    @mcp.tool(
        task=True,
        output_schema={
            "type": "object",
            "properties": {"n": {"type": "integer"}, "tag": {"type": "string"}},
            "required": ["n"],
        },
    )
    async def explicit_schema() -> dict[str, Any]:
        return {"n": 7, "tag": "t"}

    @mcp.tool(task=True, output_schema=None)
    async def no_schema_dict() -> dict[str, Any]:
        return {"k": "v"}

    @mcp.tool(task=True, output_schema=None)
    async def no_schema_int() -> int:
        return 9

    @mcp.tool(task=True, output_schema=None)
    async def no_schema_model() -> Point:
        return Point(x=0, y=0)

    @mcp.tool(
        task=True,
        output_schema={
            "type": "object",
            "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
            "required": ["result"],
            "x-fastmcp-wrap-result": True,
        },
    )
    async def explicit_wrapped_schema() -> list[int]:
        return [4, 5]

    # --- errors -------------------------------------------------------------------------

    @mcp.tool(task=True)
    async def raise_tool_error() -> str:
        raise ToolError("the job could not finish")

    @mcp.tool(task=True)
    async def raise_crash() -> str:
        raise RuntimeError("boom: secret detail")

    @mcp.tool(task=True)
    async def raise_body_validation() -> Point:
        return Point.model_validate({"x": "not a number", "y": 1})

    @mcp.tool(task=True)
    async def raise_rate_limited() -> str:
        request = httpx.Request("GET", "https://upstream.invalid/")
        response = httpx.Response(429, request=request)
        raise httpx.HTTPStatusError("too many", request=request, response=response)

    @mcp.tool(task=True)
    async def raise_upstream_timeout() -> str:
        raise httpx.ReadTimeout("slow upstream")

    @mcp.tool(task=True)
    async def raise_unserializable() -> Point:
        return object()  # type: ignore[return-value]

    @mcp.tool(task=True, timeout=0.05)
    async def tool_timeout() -> str:
        await anyio.sleep(5)
        return "late"

    return mcp


def no_structured(result: dict[str, Any]) -> None:
    assert "structuredContent" not in result and result["isError"] is False


def structured(value: Any) -> Callable[[dict[str, Any]], None]:
    def check(result: dict[str, Any]) -> None:
        assert result["structuredContent"] == value and result["isError"] is False

    return check


def error_text(text: str) -> Callable[[dict[str, Any]], None]:
    def check(result: dict[str, Any]) -> None:
        assert result["isError"] is True
        assert result["content"][0]["text"] == text

    return check


def error_prefix(prefix: str) -> Callable[[dict[str, Any]], None]:
    def check(result: dict[str, Any]) -> None:
        assert result["isError"] is True
        assert result["content"][0]["text"].startswith(prefix)

    return check


def content_types(*kinds: str) -> Callable[[dict[str, Any]], None]:
    def check(result: dict[str, Any]) -> None:
        assert [block["type"] for block in result["content"]] == list(kinds)

    return check


# (tool, arguments, a sanity check on the synchronous result so that two equally
# wrong answers cannot pass)
SUCCESS_CASES: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], None]]] = [
    ("ret_str", {"text": "héllo ☃ 𝄞"}, structured({"result": "héllo ☃ 𝄞"})),
    ("ret_int", {"n": 1}, structured({"result": 2})),
    ("ret_float", {}, structured({"result": 3.5})),
    ("ret_bool", {}, structured({"result": True})),
    ("ret_dict", {}, structured({"a": 1, "b": [1, 2], "c": {"d": None}, "é": "ünïcödé ☃"})),
    ("ret_list", {}, structured({"result": [3, 1, 2]})),
    ("ret_tuple", {}, structured({"result": [1, "x"]})),
    ("ret_model", {"x": 3, "y": 4}, structured({"x": 3, "y": 4, "label": None})),
    ("ret_dataclass", {}, structured({"left": "l", "right": 0.25})),
    ("ret_typeddict", {}, structured({"title": "Alien", "year": 1979})),
    ("ret_none", {}, structured({"result": None})),
    ("ret_optional", {}, structured({"result": None})),
    ("ret_union", {}, structured({"result": "seven"})),
    ("ret_datetime", {}, structured({"result": "2026-07-28T12:30:00Z"})),
    ("ret_uuid", {}, structured({"result": "12345678-1234-5678-1234-567812345678"})),
    ("ret_enum", {}, structured({"result": "blue"})),
    ("ret_unannotated", {}, structured({"free": "form"})),
    ("ret_bytes", {}, no_structured),
    ("ret_annotated", {}, structured({"result": 42})),
    ("ret_annotated_model", {}, structured({"x": 5, "y": 6, "label": "p"})),
    ("ret_async_gen", {}, content_types("text")),
    ("ret_image", {}, content_types("image")),
    ("ret_audio", {}, content_types("audio")),
    ("ret_file", {}, content_types("resource")),
    ("ret_mixed", {}, content_types("text", "image")),
    ("ret_text_content", {}, content_types("text")),
    ("ret_image_content", {}, content_types("image")),
    ("ret_content_list", {}, content_types("text", "image", "resource", "resource_link")),
    ("ret_tool_result", {}, structured({"rows": 3, "ok": True})),
    ("ret_call_tool_result", {}, structured({"raw": True})),
    ("explicit_schema", {}, structured({"n": 7, "tag": "t"})),
    ("no_schema_dict", {}, structured({"k": "v"})),
    ("no_schema_int", {}, no_structured),
    ("no_schema_model", {}, structured({"x": 0, "y": 0, "label": None})),
    ("explicit_wrapped_schema", {}, structured({"result": [4, 5]})),
]

ERROR_CASES: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], None]]] = [
    ("ret_tool_result_error", {}, error_text("soft failure")),
    ("raise_tool_error", {}, error_text("the job could not finish")),
    ("raise_crash", {}, error_text("Error calling tool 'raise_crash': boom: secret detail")),
    ("raise_body_validation", {}, error_prefix("Error calling tool 'raise_body_validation'")),
    ("raise_rate_limited", {}, error_text("Rate limited by upstream API, please retry later")),
    ("raise_upstream_timeout", {}, error_text("Upstream request timed out, please retry")),
    ("raise_unserializable", {}, error_prefix("")),
]

MASKED_CASES: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], None]]] = [
    ("raise_tool_error", {}, error_text("the job could not finish")),  # never masked
    ("raise_crash", {}, error_text("Error calling tool 'raise_crash'")),
    ("raise_body_validation", {}, error_text("Error calling tool 'raise_body_validation'")),
    ("raise_rate_limited", {}, error_text("Rate limited by upstream API, please retry later")),
    ("raise_upstream_timeout", {}, error_text("Upstream request timed out, please retry")),
    ("ret_tool_result_error", {}, error_text("soft failure")),
    ("ret_model", {}, structured({"x": 1, "y": 2, "label": None})),
]


_CORE_LIMITS = (
    {}
    if ASYNC_GENERATOR_TASKS
    else {
        "ret_async_gen": pytest.mark.skip(
            reason="the installed FastMCP rejects task=True on an async generator (< 4.1.8)"
        )
    }
)


def _params(cases: list[tuple[str, dict[str, Any], Any]]) -> list[Any]:
    """The cases as pytest params, each named by its tool; a core-limited one skipped."""
    return [pytest.param(*case, id=case[0], marks=_CORE_LIMITS.get(case[0], ())) for case in cases]


async def sync_and_task(
    wire: Wire, name: str, arguments: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The blocking result and the task's inline result of the same call."""
    sync = await wire.call_tool(name, arguments, opt_in=False)
    assert sync["resultType"] == "complete" and "taskId" not in sync
    created = await wire.call_tool(name, arguments, opt_in=True)
    assert created["resultType"] == "task", created
    done = await wire.wait(created["taskId"])
    assert done["status"] == "completed", done
    return sync, done["result"]


def assert_identical(sync: dict[str, Any], task: dict[str, Any]) -> None:
    assert task == sync
    assert json.dumps(task, ensure_ascii=False) == json.dumps(sync, ensure_ascii=False)
    assert task["resultType"] == "complete"
    assert task["_meta"]["io.modelcontextprotocol/serverInfo"] == {
        "name": "parity",
        "version": sync["_meta"]["io.modelcontextprotocol/serverInfo"]["version"],
    }


@pytest.mark.parametrize(
    ("name", "arguments", "check"),
    _params([*SUCCESS_CASES, *ERROR_CASES]),
)
async def test_result_parity(
    transport: str, name: str, arguments: dict[str, Any], check: Callable[..., None]
) -> None:
    """Every return type and every tool error: the task's result equals the sync one."""
    async with connect(make_parity_server(), transport) as wire:
        sync, task = await sync_and_task(wire, name, arguments)
    check(sync)
    assert_identical(sync, task)


@pytest.mark.parametrize(("name", "arguments", "check"), _params(MASKED_CASES))
async def test_masked_error_parity(
    transport: str, name: str, arguments: dict[str, Any], check: Callable[..., None]
) -> None:
    async with connect(make_parity_server(mask_error_details=True), transport) as wire:
        sync, task = await sync_and_task(wire, name, arguments)
    check(sync)
    assert "secret" not in json.dumps(task)
    assert_identical(sync, task)


async def test_tool_timeout_is_the_documented_exception(transport: str) -> None:
    """FastMCP's own `timeout=` raises MCPError(-32000). A blocking call masks it into
    `isError`; a task ends `failed` with that JSON-RPC error (C28), as
    docs/explanation/task-flow.md says."""
    async with connect(make_parity_server(), transport) as wire:
        sync = await wire.call_tool("tool_timeout", {}, opt_in=False)
        created = await wire.call_tool("tool_timeout", {}, opt_in=True)
        done = await wire.wait(created["taskId"])
    assert sync["isError"] is True
    assert done["status"] == "failed"
    assert done["error"]["code"] == -32000
    assert "timed out" in done["error"]["message"]
    assert done["error"]["message"] in sync["content"][0]["text"]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("ret_model", {"x": "not a number"}),  # argument validation
        ("ret_int", {"n": 1, "extra": True}),
        ("no_such_tool", {}),
    ],
    ids=["bad-arguments", "extra-argument", "unknown-tool"],
)
async def test_rejected_call_answers_the_same_with_the_opt_in(
    transport: str, name: str, arguments: dict[str, Any]
) -> None:
    async with connect(make_parity_server(), transport) as wire:
        sync = await wire.call_tool(name, arguments, opt_in=False)
        opted = await wire.call_tool(name, arguments, opt_in=True)
    assert opted == sync
    assert json.dumps(opted) == json.dumps(sync)


async def test_task_results_are_stable_across_polls(transport: str) -> None:
    async with connect(make_parity_server(), transport) as wire:
        created = await wire.call_tool("ret_tool_result", {}, opt_in=True)
        first = await wire.wait(created["taskId"])
        again = await wire.get(created["taskId"])
    assert again["result"] == first["result"]


# --- decoded by a real FastMCP client ------------------------------------------------------


async def decode_like_client(client: Client, name: str, raw: dict[str, Any]) -> Any:
    """Decode a raw `tools/call` result dict the way `Client.call_tool` does."""
    parsed = mcp_methods.parse_server_result("tools/call", MODERN, raw)
    assert isinstance(parsed, mcp_types.CallToolResult)
    if not parsed.is_error:
        await client.session.validate_tool_result(name, parsed)  # as the SDK session does
    return await client._parse_call_tool_result(name, parsed, raise_on_error=False)


@pytest.mark.parametrize(
    ("name", "arguments", "check"),
    _params(SUCCESS_CASES + ERROR_CASES),
)
async def test_client_decodes_task_result_like_sync(
    name: str, arguments: dict[str, Any], check: Callable[..., None]
) -> None:
    mcp = make_parity_server()
    async with Client(mcp) as client, connect(mcp, "memory") as wire:
        reference = await client.call_tool(name, arguments, raise_on_error=False)
        sync_raw, task_raw = await sync_and_task(wire, name, arguments)
        from_sync = await decode_like_client(client, name, sync_raw)
        from_task = await decode_like_client(client, name, task_raw)
    for decoded in (from_sync, from_task):
        assert decoded.content == reference.content
        assert decoded.structured_content == reference.structured_content
        assert decoded.meta == reference.meta
        assert decoded.is_error == reference.is_error
        assert type(decoded.data) is type(reference.data)
        assert repr(decoded.data) == repr(reference.data)
        assert decoded.data == reference.data or _same_fields(decoded.data, reference.data)


def _same_fields(left: Any, right: Any) -> bool:
    """Generated dataclasses compare by identity of class; compare their fields instead."""
    return type(left) is type(right) and vars(left) == vars(right)
