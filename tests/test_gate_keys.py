"""A client chooses a tool's `concurrency_key`: hostile keys still gate, on every store.

`task_options(concurrency=1, concurrency_key=lambda args: args["k"])` puts the
client's value into the gate's name, which every store keeps. A NUL, a lone
surrogate (valid JSON: `"\\ud800"`), a 10 kB string, the separators the gate name
uses, an int, a dict (in either key order): each runs normally through the wire,
two calls with the same key share one slot while a call with another key runs
beside them, and the server keeps serving. What an operator reads of the gate
(`shown_gate`, the "Queued: ..." message) stays printable and short.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import FastMCP

from fastmcp_tasks import TasksExtension, task_options
from fastmcp_tasks.server.flow import GATE_SEPARATOR, MAX_GATE_KEY, gate_key, shown_gate
from tests.test_flow_control import store_url
from tests.wire import MODERN, TASKS, connect, http_server, http_wire_for, parse_http_response

pytestmark = pytest.mark.anyio

__all__ = ["store_url"]  # the fixture (memory, SQLite, Redis, PostgreSQL), shared

#: 10 kB that do not compress (PostgreSQL would compress a run of one letter into an index)
LONG = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(313))[:10_000]
HOSTILE: dict[str, tuple[Any, Any]] = {  # a key, and the same key as another call sends it
    "nul": ("a\x00b", "a\x00b"),
    "surrogate": ("\ud800", "\ud800"),
    "long": (LONG, LONG),
    "separators": ("x\x1ey\x1fz", "x\x1ey\x1fz"),
    "int": (7, 7),
    "dict": ({"b": "\x00", "a": [1, "\udfff"]}, {"a": [1, "\udfff"], "b": "\x00"}),
}


class Runs:
    """Which keys' runs are in the tool now, and the most at once per gate."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.started: dict[str, anyio.Event] = {}
        self.release = anyio.Event()

    def event(self, label: str) -> anyio.Event:
        return self.started.setdefault(label, anyio.Event())


def gated_server(url: str | None) -> tuple[FastMCP, TasksExtension, Runs]:
    mcp = FastMCP("gate-keys")
    tasks = TasksExtension(url)
    mcp.add_extension(tasks)
    runs = Runs()

    @mcp.tool(task=True)
    @task_options(concurrency=1, concurrency_key=lambda args: args["k"])
    async def hold(k: Any, label: str, group: str) -> str:
        runs.running[group] = runs.running.get(group, 0) + 1
        runs.most[group] = max(runs.most.get(group, 0), runs.running[group])
        runs.event(label).set()
        try:
            await runs.release.wait()
        finally:
            runs.running[group] -= 1
        return label

    @mcp.tool(task=True)
    async def echo(text: str) -> str:
        return text

    return mcp, tasks, runs


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_a_hostile_concurrency_key_gates_and_runs(kind: str, store_url: str | None) -> None:
    key, same = HOSTILE[kind]
    mcp, tasks, runs = gated_server(store_url)
    async with connect(mcp, "memory") as wire:
        first = (await wire.call_tool("hold", {"k": key, "label": "1", "group": "h"}))["taskId"]
        second = (await wire.call_tool("hold", {"k": same, "label": "2", "group": "h"}))["taskId"]
        other = (await wire.call_tool("hold", {"k": "x", "label": "o", "group": "o"}))["taskId"]
        await runs.event("o").wait()  # another key's slot is free: not one gate for all
        await runs.event("1").wait()  # (the first created is the first the gate serves)
        waiting = await wire.get(second)
        assert waiting["status"] == "working" and not runs.event("2").is_set()
        message = waiting["statusMessage"]
        assert message.startswith("Queued: ") and message.isprintable(), message
        assert len(message) < 200, message
        stored = await tasks.store.get(second)
        assert stored is not None and stored.gate is not None
        stored_key = stored.gate.partition(GATE_SEPARATOR)[2]
        assert stored_key == gate_key(key) and stored_key.isprintable()
        assert len(stored_key) <= MAX_GATE_KEY
        assert shown_gate(stored.gate).isprintable()
        runs.release.set()
        for task_id, label in ((first, "1"), (second, "2"), (other, "o")):
            done = await wire.wait(task_id)
            assert done["status"] == "completed", done
            assert done["result"]["structuredContent"]["result"] == label
        assert runs.most == {"h": 1, "o": 1}  # the two same-key calls shared one slot
        echoed = await wire.wait((await wire.call_tool("echo", {"text": "still"}))["taskId"])
        assert echoed["status"] == "completed"  # the server keeps serving


async def test_a_lone_surrogate_sent_as_json_over_http_gates_on_sqlite(tmp_path: Path) -> None:
    """The key as a client really sends it: the JSON escape `"\\ud800"` in an HTTP body."""
    mcp, _, runs = gated_server(f"sqlite:///{tmp_path / 'tasks.db'}")
    runs.release.set()
    async with http_server(mcp) as url, httpx.AsyncClient(timeout=10) as http:
        ids = []
        for n in range(2):
            arguments = {"k": "\ud800", "label": str(n), "group": "h"}
            meta = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
            }
            body = {
                "jsonrpc": "2.0",
                "id": n + 1,
                "method": "tools/call",
                "params": {"name": "hold", "arguments": arguments, "_meta": meta},
            }
            content = json.dumps(body, ensure_ascii=True)
            assert "\\ud800" in content  # valid JSON: an escaped lone surrogate
            response = await http.post(
                url,
                content=content,
                headers={
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                    "MCP-Protocol-Version": MODERN,
                    "Mcp-Method": "tools/call",
                    "Mcp-Name": "hold",
                },
            )
            message = parse_http_response(response)
            assert "result" in message, message
            ids.append(message["result"]["taskId"])
        async with http_wire_for(url) as wire:
            for task_id, label in zip(ids, ("0", "1"), strict=True):
                done = await wire.wait(task_id)
                assert done["status"] == "completed", done
                assert done["result"]["structuredContent"]["result"] == label
    assert runs.most == {"h": 1}


def test_readable_keys_stay_as_they_are_and_unsafe_ones_are_encoded_apart() -> None:
    assert gate_key("eu-west/api") == "eu-west/api"
    assert gate_key("naïve ☃") == "naïve ☃"
    assert gate_key(7) == "7"
    encoded = {gate_key(k) for k in ("a\x00b", "a\x00c", "\ud800", "\udfff", "k" * 10_000)}
    assert len(encoded) == 5  # distinct keys stay distinct gates
    assert all(k.isprintable() and len(k) <= MAX_GATE_KEY for k in encoded)
    assert gate_key({"b": 1, "a": 2}) == gate_key({"a": 2, "b": 1})
    lookalike = gate_key("a\x00b")  # a client sending another key's encoding gets its own
    assert gate_key(lookalike) != lookalike
