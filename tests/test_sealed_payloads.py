"""`seal="all"`: every payload sealed at rest, the same values on the wire (`server.payloads`).

Each test runs one tool both ways, sealed and not, and compares what the client sees;
then it reads the record the store keeps (under the wrapper) and finds none of the
payload's text there. A server without the key, or with another, refuses clearly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import astuple
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.server.payloads import SEAL_ENV, SEALED_HINT, Payloads, for_operators
from fastmcp_tasks.server.sealed_store import SealedStore
from fastmcp_tasks.server.sealing import KEY_ENV, Sealer
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.memory import MemoryTaskStore
from fastmcp_tasks.stores.outcomes import outcome_of
from fastmcp_tasks.stores.sealed import is_sealed
from fastmcp_tasks.testing import make_record
from fastmcp_tasks.wire.names import IDEMPOTENCY_META_KEY
from tests.wire import Wire, WireError, memory_wire

pytestmark = pytest.mark.anyio

MARKER = "marker-5d1e-personal"
ANSWER = "answer-77c4-personal"
FAST = TaskConfig(poll_interval=timedelta(milliseconds=20))
SCRIPT = Path(sys.executable).parent / "fastmcp-tasks"


def server(url: str = "memory://", **extension: Any) -> tuple[FastMCP, TasksExtension]:
    mcp = FastMCP("sealed-payloads")
    tasks = TasksExtension(url=url, **extension)
    mcp.add_extension(tasks)

    @mcp.tool(task=FAST)
    async def echo(text: str) -> dict[str, Any]:
        return {"echo": text}

    @mcp.tool(task=FAST)
    async def ask(question: str, ctx: Context) -> str:
        answer = await ctx.elicit(question, str)
        return f"{answer.action}:{getattr(answer, 'data', None)}"

    @mcp.tool(task=FAST)
    async def refuse(text: str) -> str:
        raise MCPError(code=-32050, message=f"refused {text}", data={"text": text})

    @mcp.tool(task=FAST)
    async def tool_error(text: str) -> str:
        raise ToolError(f"tool error {text}")

    return mcp, tasks


SEALED = {"seal": "all", "encryption_key": "key A"}


async def raw_text(tasks: TasksExtension, task_id: str) -> str:
    """Every field of the task as its store keeps it (under the sealing wrapper)."""
    record = await tasks.store.get(task_id)
    assert record is not None
    return json.dumps([str(value) for value in astuple(record)])


@asynccontextmanager
async def wire_of(**extension: Any) -> AsyncIterator[tuple[Wire, TasksExtension]]:
    mcp, tasks = server(**extension)
    async with memory_wire(mcp) as wire:
        yield wire, tasks


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
async def test_a_sealed_task_answers_as_a_plain_one_and_keeps_no_payload_readable(
    sealed: bool,
) -> None:
    with anyio.fail_after(20):
        async with wire_of(**(SEALED if sealed else {})) as (wire, tasks):
            foreground = await wire.call_tool("echo", {"text": MARKER}, opt_in=False)
            created = await wire.call_tool("echo", {"text": MARKER})
            done = await wire.wait(created["taskId"])
            at_rest = await raw_text(tasks, created["taskId"])
            raw = await tasks.store.get(created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == foreground["structuredContent"]
    assert done["result"]["content"] == foreground["content"]
    assert raw is not None
    # the control run proves the scan sees the payloads when they are not sealed
    assert (MARKER in at_rest) is not sealed
    assert is_sealed(raw.arguments) is sealed
    assert "echo" in at_rest and "completed" in at_rest  # what stays readable


async def test_input_requests_and_answers_are_sealed_and_the_client_sees_them() -> None:
    question = f"What is {MARKER}?"
    with anyio.fail_after(20):
        async with wire_of(**SEALED) as (wire, tasks):
            created = await wire.call_tool("ask", {"question": question})
            parked = await wire.wait(created["taskId"], {"input_required"})
            at_rest = await raw_text(tasks, created["taskId"])
            [(key, request)] = parked["inputRequests"].items()
            await wire.update(
                created["taskId"], {key: {"action": "accept", "content": {"value": ANSWER}}}
            )
            done = await wire.wait(created["taskId"])
            after = await raw_text(tasks, created["taskId"])
    assert request["params"]["message"] == question
    assert MARKER not in at_rest
    assert done["result"]["content"][0]["text"] == f"accept:{ANSWER}"
    assert MARKER not in after and ANSWER not in after


async def test_answers_waiting_in_the_store_are_sealed() -> None:
    inner = MemoryTaskStore()
    store = SealedStore(inner, Payloads(Sealer(["key A"]), seal_all=True))
    record = make_record(status="input_required")
    record.input_requests = {"k": {"method": "elicitation/create", "params": {"message": MARKER}}}
    await store.create(record)
    assert await store.answer_input(record.task_id, {"k": {"action": "accept"}}) == {
        "k": {"action": "accept"}
    }
    raw = await inner.get(record.task_id)
    assert raw is not None and is_sealed(raw.answers["k"]) and MARKER not in str(raw)  # type: ignore[index]
    assert await store.take_answers(record.task_id, frozenset({"k"})) == {"k": {"action": "accept"}}


async def test_an_error_is_sealed_but_its_code_and_a_tool_error_flag_stay_readable() -> None:
    with anyio.fail_after(20):
        async with wire_of(**SEALED) as (wire, tasks):
            failed = await wire.wait((await wire.call_tool("refuse", {"text": MARKER}))["taskId"])
            errored = await wire.wait(
                (await wire.call_tool("tool_error", {"text": MARKER}))["taskId"]
            )
            raw_failed = await tasks.store.get(failed["taskId"])
            raw_errored = await tasks.store.get(errored["taskId"])
            await tasks.history.flush()
            history = await tasks.store.events(errored["taskId"])  # type: ignore[attr-defined]
    assert failed["error"] == {
        "code": -32050,
        "message": f"refused {MARKER}",
        "data": {"text": MARKER},
    }
    assert (
        errored["result"]["isError"] is True and MARKER in errored["result"]["content"][0]["text"]
    )
    assert raw_failed is not None and raw_errored is not None
    assert raw_failed.error is not None and raw_failed.error["code"] == -32050
    assert MARKER not in str(raw_failed) and MARKER not in str(raw_errored)
    assert outcome_of(raw_errored) == "error"  # operators count tool errors without the key
    finished = [event for event in history if event.kind == "finished"]
    assert finished and finished[0].details == {"outcome": "error"}  # no error text kept


async def test_idempotency_keys_work_on_sealed_arguments() -> None:
    key = "k" * 30
    params = {"name": "echo", "arguments": {"text": MARKER}}
    meta = {"_meta": {IDEMPOTENCY_META_KEY: key}}
    with anyio.fail_after(20):
        async with wire_of(**SEALED) as (wire, _):
            keyed = await wire.request("tools/call", {**params, **meta})
            again = await wire.request("tools/call", {**params, **meta})
            with pytest.raises(WireError) as reused:
                await wire.request(
                    "tools/call", {"name": "echo", "arguments": {"text": "x"}, **meta}
                )
    assert keyed["taskId"] == again["taskId"]
    assert reused.value.code == -32602


async def test_step_values_are_sealed_at_rest() -> None:
    inner = MemoryTaskStore()
    store = SealedStore(inner, Payloads(Sealer(["key A"]), seal_all=True))
    record = make_record()
    await store.create(record)
    assert await store.save_step(record.task_id, "copy", json.dumps(MARKER), 1.0)
    [raw] = await inner.steps(record.task_id)
    assert MARKER not in raw.value_json
    [opened] = await store.steps(record.task_id)
    assert json.loads(opened.value_json) == MARKER


async def test_a_sealed_value_does_not_open_on_another_task_or_field() -> None:
    payloads = Payloads(Sealer(["key A"]), seal_all=True)
    one, two = make_record(arguments={"text": MARKER}), make_record()
    sealed = payloads.record(one)
    moved = payloads.opened(make_record(task_id=two.task_id, arguments=sealed.arguments))
    assert is_sealed(moved.arguments)
    swapped = payloads.opened(make_record(task_id=one.task_id, error=sealed.arguments))
    assert is_sealed(swapped.error)
    assert payloads.opened(sealed).arguments == {"text": MARKER}


def test_seal_all_needs_a_key_and_a_known_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ConfigurationError, match="needs an encryption key"):
        TasksExtension(seal="all")
    with pytest.raises(ConfigurationError, match="seal must be one of"):
        TasksExtension(seal="everything", encryption_key="k")
    monkeypatch.setenv(SEAL_ENV, "all")
    monkeypatch.setenv(KEY_ENV, "key A")
    assert TasksExtension().seal_all


# --- processes that share a SQLite file: keys, no key, another key, rotation --------------


async def run_on_shared_file(db: Path, worker_key: str | list[str] | None) -> dict[str, Any]:
    """A sealing front end that runs nothing and a worker server with `worker_key`."""
    url = f"sqlite:///{db}"
    front, _ = server(url, concurrency=0, **SEALED)
    extension: dict[str, Any] = {"encryption_key": worker_key} if worker_key else {}
    worker, _ = server(url, **extension)
    os.environ.pop(KEY_ENV, None)
    async with memory_wire(front) as wire:
        created = await wire.call_tool("echo", {"text": MARKER})
        async with memory_wire(worker):
            return await wire.wait(created["taskId"], within=20)


@pytest.mark.parametrize(
    ("key", "reason"),
    [(None, "this process has no encryption key"), ("key B", "cannot decrypt")],
)
async def test_a_worker_that_cannot_open_the_arguments_fails_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str | None, reason: str
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with anyio.fail_after(30):
        done = await run_on_shared_file(tmp_path / "tasks.db", key)
    assert done["status"] == "failed", done
    message = done["error"]["message"]
    assert message.startswith("Task not run: the task's ") and reason in message, message
    assert KEY_ENV in message


async def test_a_worker_with_the_old_key_among_its_keys_runs_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with anyio.fail_after(30):
        done = await run_on_shared_file(tmp_path / "tasks.db", ["key B", "key A"])
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"] == {"echo": MARKER}


async def test_a_server_without_the_key_answers_tasks_get_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    sealing, _ = server(url, **SEALED)
    keyless, _ = server(url, concurrency=0)
    with anyio.fail_after(30):
        async with memory_wire(sealing) as wire:
            done = await wire.wait((await wire.call_tool("echo", {"text": MARKER}))["taskId"])
        async with memory_wire(keyless) as other:
            with pytest.raises(WireError) as refused:
                await other.get(done["taskId"])
    assert refused.value.code == -32603
    assert "sealed and this server cannot open them" in refused.value.message
    assert KEY_ENV in refused.value.message


# --- operators: the CLI and the dashboard show values with the key, "sealed" without ------


def show(url: str, task_id: str, key: str | None, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (KEY_ENV, "FASTMCP_TASKS_URL")}
    env.update(COLUMNS="200", NO_COLOR="1")
    if key is not None:
        env[KEY_ENV] = key
    return subprocess.run(
        [str(SCRIPT), "show", task_id, "--url", url, *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


async def test_show_opens_payloads_with_the_key_and_says_sealed_without(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    mcp, _ = server(url, **SEALED)
    with anyio.fail_after(30):
        async with memory_wire(mcp) as wire:
            done = await wire.wait((await wire.call_tool("refuse", {"text": MARKER}))["taskId"])
        keyed, keyless = await anyio.to_thread.run_sync(
            lambda: (
                show(url, done["taskId"], "key A", "--json"),
                show(url, done["taskId"], None, "--json"),
            )
        )
        text = await anyio.to_thread.run_sync(show, url, done["taskId"], None)
    assert keyed.returncode == 0 and keyless.returncode == 0, keyed.stderr + keyless.stderr
    opened, sealed = json.loads(keyed.stdout), json.loads(keyless.stdout)
    assert opened["arguments"] == {"text": MARKER}
    assert opened["error"]["data"] == {"text": MARKER}
    assert sealed["arguments"] == {"sealed": SEALED_HINT}
    assert sealed["error"] == {"code": -32050, "message": SEALED_HINT}
    assert MARKER not in keyless.stdout and MARKER not in text.stdout
    assert SEALED_HINT in text.stdout


async def test_operator_views_keep_a_tool_errors_flag_without_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with anyio.fail_after(20):
        async with wire_of(**SEALED) as (wire, tasks):
            done = await wire.wait((await wire.call_tool("tool_error", {"text": MARKER}))["taskId"])
            store: TaskStore = tasks.store
            raw = await store.get(done["taskId"])
    assert raw is not None
    monkeypatch.delenv(KEY_ENV, raising=False)
    shown = for_operators(raw)
    assert shown.result == {"content": [{"type": "text", "text": SEALED_HINT}], "isError": True}
    monkeypatch.setenv(KEY_ENV, "key A")
    assert MARKER in for_operators(raw).result["content"][0]["text"]  # type: ignore[index]


async def test_the_dashboard_opens_payloads_with_the_key_and_says_sealed_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastmcp_tasks.dashboard import app as dashboard_app
    from tests.test_dashboard_http import client_of

    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    mcp, _ = server(url, **SEALED)
    seen: dict[str | None, tuple[str, dict[str, Any]]] = {}
    with anyio.fail_after(30):
        async with memory_wire(mcp) as wire:
            done = await wire.wait((await wire.call_tool("echo", {"text": MARKER}))["taskId"])
        for key in (None, "key A"):
            if key is None:
                monkeypatch.delenv(KEY_ENV, raising=False)
            else:
                monkeypatch.setenv(KEY_ENV, key)
            async with client_of(dashboard_app(url)) as http:
                page = (await http.get(f"/tasks/{done['taskId']}")).text
                document = (await http.get(f"/api/tasks/{done['taskId']}")).json()
            seen[key] = (page, document)
    page, document = seen[None]
    assert MARKER not in page and MARKER not in json.dumps(document)
    assert SEALED_HINT in page
    assert document["arguments"] == {"sealed": SEALED_HINT}
    page, document = seen["key A"]
    assert MARKER in page
    assert document["arguments"] == {"text": MARKER}
    assert document["result"]["structuredContent"] == {"echo": MARKER}
