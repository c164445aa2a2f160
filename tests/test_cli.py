"""The client commands of `fastmcp-tasks` (call, get, wait, cancel) without a terminal.

Every test drives the real console script (`.venv/bin/fastmcp-tasks`) in a subprocess,
with stdin, stdout and stderr not terminals (pipes or /dev/null), against
`tests/durable_server.py` served over HTTP in another one, or `tests/cli_server.py`
loaded in memory. `test_cli_terminal.py` runs it in a pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client, FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import TasksExtension
from fastmcp_tasks.cli.target import parse_arguments
from fastmcp_tasks.client.handles import ToolTask, call_tool_task
from tests.test_auth import TOKENS
from tests.test_durability import Server, release, started_in
from tests.wire import http_server

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent
COMMAND = [str(Path(sys.executable).parent / "fastmcp-tasks")]


@dataclass
class Live:
    url: str
    markers: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    base = tmp_path_factory.mktemp("cli")
    markers = base / "markers"
    markers.mkdir()
    server = Server(base / "tasks.db", markers)
    try:
        anyio.run(server.ready)
        yield Live(server.url, markers)
    finally:
        server.stop()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


async def create(live: Live, tool: str, arguments: dict[str, Any]) -> str:
    async with Client(live.url) as client:
        task = await call_tool_task(client, tool, arguments)
    assert task.task_id is not None
    return task.task_id


async def status_becomes(live: Live, task_id: str, status: str) -> dict[str, Any]:
    with anyio.fail_after(15):
        async with Client(live.url) as client:
            task = await ToolTask.resume(client, task_id)
            while task.state["status"] != status:
                await anyio.sleep(0.05)
                await task.status()
            return task.state


def test_arguments_are_json_when_they_parse() -> None:
    assert parse_arguments(["a=1", "b=x y", 'c={"k": [1]}', "d=true", "e=", "f=a=b"]) == {
        "a": 1,
        "b": "x y",
        "c": {"k": [1]},
        "d": True,
        "e": "",
        "f": "a=b",
    }
    with pytest.raises(SystemExit):
        parse_arguments(["novalue"])


def test_call_prints_the_task_id_the_status_and_the_result(live: Live) -> None:
    done = cli("call", live.url, "quick", "text=hello")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("task ") and len(lines[0].split()[1]) >= 16
    assert lines[-1] == "quick hello"
    assert any(line.startswith("[completed]") for line in lines[1:-1])
    assert "\r" not in done.stdout  # not a terminal: plain lines
    assert done.stderr == ""


def test_call_runs_a_server_file_in_memory() -> None:
    done = cli("call", "tests/cli_server.py", "render", "pages=2", "delay=0.05")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("task ")
    shown = [line.rsplit(" (", 1)[0] for line in lines[1:-1]]
    assert "[working] Rendering page 1/2" in shown
    assert shown[-1] == "[completed] Rendering page 2/2"
    assert lines[-1] == "rendered 2 pages"
    assert "\x1b" not in done.stdout and done.stderr == ""


def test_an_elicitation_without_a_terminal_is_cancelled(live: Live) -> None:
    done = cli("call", live.url, "ask", "question=Deploy?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "Deploy? -> cancel:None"
    assert done.stderr == (
        "fastmcp-tasks: the task asks 'Deploy?'; stdin is not a terminal, "
        "so the request is cancelled\n"
    )


def test_a_tool_error_exits_1_with_the_message(live: Live) -> None:
    done = cli("call", live.url, "quick", "text=42")  # 42 is JSON: not the string the tool takes
    assert done.returncode == 1
    assert "the tool reported an error" in done.stderr and "valid string" in done.stderr


async def test_get_and_wait_show_a_task(live: Live) -> None:
    task_id = await create(live, "plain_job", {"key": "waited"})
    got = await anyio.run_process([*COMMAND, "get", live.url, task_id], cwd=ROOT)
    state = json.loads(got.stdout)
    assert state["taskId"] == task_id and state["status"] == "working"
    await started_in(live.markers, "waited")
    async with await anyio.open_process([*COMMAND, "wait", live.url, task_id], cwd=ROOT) as proc:
        release(live.markers, "waited")
        assert proc.stdout is not None
        out = b"".join([chunk async for chunk in proc.stdout]).decode()
        assert await proc.wait() == 0
    assert out == "plain waited\n"
    state = await status_becomes(live, task_id, "completed")
    assert state["result"]["content"][0]["text"] == "plain waited"


async def test_cancel_then_wait_reports_the_cancellation(live: Live) -> None:
    task_id = await create(live, "plain_job", {"key": "doomed"})
    done = await anyio.run_process([*COMMAND, "cancel", live.url, task_id], cwd=ROOT)
    assert done.stdout.decode() == f"cancel requested for task {task_id}\n"
    await status_becomes(live, task_id, "cancelled")
    again = await anyio.run_process([*COMMAND, "cancel", live.url, task_id], cwd=ROOT, check=False)
    assert again.returncode == 1 and b"already cancelled" in again.stderr
    waited = await anyio.run_process([*COMMAND, "wait", live.url, task_id], cwd=ROOT, check=False)
    assert waited.returncode == 1 and b"was cancelled" in waited.stderr


def test_errors_are_clear_and_exit_nonzero(live: Live) -> None:
    unknown = cli("get", live.url, "no-such-task")
    assert unknown.returncode == 1 and "Task not found" in unknown.stderr
    assert unknown.stdout == ""
    unreachable = cli("wait", "http://127.0.0.1:9/mcp", "x", "--reconnect-timeout", "0")
    assert (
        unreachable.returncode == 1 and "cannot reach http://127.0.0.1:9/mcp" in unreachable.stderr
    )
    not_a_url = cli("get", "server.py", "x")
    assert not_a_url.returncode == 2 and "http(s) URL or path/to/server.py" in not_a_url.stderr
    in_memory = cli("get", "tests/cli_server.py", "no-such-task")
    assert in_memory.returncode == 1 and "Task not found" in in_memory.stderr


async def test_call_timeout_cancels_the_task(live: Live) -> None:
    args = [*COMMAND, "call", live.url, "plain_job", "key=slow", "--timeout", "1"]
    done = await anyio.run_process(args, cwd=ROOT, check=False)
    assert done.returncode == 1 and b"timed out; the task was cancelled" in done.stderr
    task_id = done.stdout.decode().splitlines()[0].split()[1]
    await status_becomes(live, task_id, "cancelled")


async def test_wait_timeout_leaves_the_task_running(live: Live) -> None:
    task_id = await create(live, "plain_job", {"key": "outwaited"})
    args = [*COMMAND, "wait", live.url, task_id, "--timeout", "0.5"]
    done = await anyio.run_process(args, cwd=ROOT, check=False)
    assert done.returncode == 1
    assert done.stderr.decode() == f"fastmcp-tasks: timed out; task {task_id} keeps running\n"
    await status_becomes(live, task_id, "working")
    release(live.markers, "outwaited")
    await status_becomes(live, task_id, "completed")


async def test_ctrl_c_cancels_the_task(live: Live) -> None:
    args = [*COMMAND, "call", live.url, "plain_job", "key=interrupted"]
    async with await anyio.open_process(args, cwd=ROOT) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        seen = b""
        while b"\n" not in seen:  # the first line is the task id
            seen += await proc.stdout.receive()
        task_id = seen.decode().splitlines()[0].split()[1]
        await started_in(live.markers, "interrupted")
        proc.send_signal(signal.SIGINT)
        assert await proc.wait() == 130
        err = b"".join([chunk async for chunk in proc.stderr]).decode()
    assert f"interrupted: cancelled task {task_id}" in err
    await status_becomes(live, task_id, "cancelled")


def authed_cli_server() -> FastMCP:
    mcp = FastMCP("authed", auth=StaticTokenVerifier(tokens=TOKENS))
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=TaskConfig(poll_interval=timedelta(milliseconds=50)))
    async def whoami(text: str) -> str:
        return f"ok {text}"

    return mcp


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [*COMMAND, *args],
        cwd=ROOT,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.bound(90)  # seven command lines: fresh interpreters with FASTMCP_TASKS_TEST_EXEC=1
async def test_a_token_reaches_an_authenticated_server() -> None:
    async with http_server(authed_cli_server()) as url:
        with anyio.fail_after(60):
            code, out, err = await run_cli(
                "call", url, "whoami", "text=hi", "--token", "alice-token"
            )
            assert code == 0, err
            assert out.splitlines()[-1] == "ok hi"
            task_id = out.split()[1]
            # the environment variable works too, and the task is alice's alone (C14)
            code, out, err = await run_cli(
                "get", url, task_id, env={"FASTMCP_TASKS_TOKEN": "alice-token"}
            )
            assert code == 0 and json.loads(out)["status"] == "completed", err
            code, out, err = await run_cli("get", url, task_id, "--token", "bob-token")
            assert code == 1 and "not found" in err.lower()
            code, out, err = await run_cli(
                "get", url, task_id, "--header", "Authorization: Bearer alice-token"
            )
            assert code == 0, err
            code, out, err = await run_cli("call", url, "whoami", "text=hi")
            assert code == 1 and "HTTP 401" in err and "--token" in err
            code, out, err = await run_cli("call", url, "whoami", "--token", "mallory-token")
            assert code == 1 and "HTTP 401" in err and "token was refused" in err
            assert "mallory-token" not in out + err  # a token is never printed
            code, out, err = await run_cli("call", url, "whoami", "--header", "no colon")
            assert code == 2 and "Name: value" in err
