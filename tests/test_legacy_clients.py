"""Real 2025-11-25 clients against our V1 tasks surface, with a 2026 client beside them.

FastMCP 3's `Client`, the `mcp` 1.x SDK's experimental tasks client and the
TypeScript SDK 1.x (the one VS Code builds on) are installed from their registries
into `.interop/` by `scripts/interop_envs.sh` (once per session; pinned versions,
rebuilt only when they change). Each test serves `tests/legacy_server.py` over
Streamable HTTP in a subprocess (one per module), runs one client's script from
`tests/interop/` with that client's own interpreter or Node on one scenario
(`complete`, `error`, `cancel`, `elicit`), and reads what it saw as JSON lines.

Meanwhile FastMCP 4's `Client` (2026-07-28) holds a task on the same server that
the V1 client reads with its own `tasks/get`, and the V1 client's task is read
with raw 2026 `tasks/get` (`tests/wire.py`): live (while the client is paused
inside a scenario) and at the end, as the 2026 generation shows it. Then input
put to a client that then died unanswered reaches the next client's `tasks/result`.

Last, progress (`progress`): a task reports it three times while the client waits,
each once the test saw the client's handler get the one before, and each client's
handler gets every report once, in order. Which handler that is, is each client's
own design (`HEARD_BY`): the TypeScript SDK keeps the call's `onprogress` for the
task's life; the `mcp` 1.x SDK forgets the call's `progress_callback` with the
`CreateTaskResult`, so only its `message_handler` gets them; FastMCP 3 never sends
a `progressToken` nor registers a `progress_handler` for a task, so its application
puts the token in the call's `meta` and hears them in `MessageHandler.on_progress`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client

from fastmcp_tasks.client import call_tool_task
from fastmcp_tasks.wire.legacy import CAPABILITY, RELATED_TASK
from tests.interop_runs import ClientRun, Seen
from tests.wire import free_port, http_wire_for

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
INTEROP = Path(os.environ.get("INTEROP_DIR", ROOT / ".interop"))
SCRIPTS = ROOT / "tests" / "interop"
COMMANDS = {
    "fastmcp3": [str(INTEROP / "fastmcp3/bin/python"), str(SCRIPTS / "fastmcp3_client.py")],
    "mcp1": [str(INTEROP / "mcp1/bin/python"), str(SCRIPTS / "mcp1_client.py")],
    "ts": ["node", str(SCRIPTS / "ts_client.mjs"), "--sdk", str(INTEROP / "ts")],
}
SCENARIOS = ("complete", "error", "cancel", "elicit")
V1_FINAL = {
    "complete": "completed",
    "error": "failed",
    "cancel": "cancelled",
    "elicit": "completed",
}
ORDERED = "3 large tea"  # what `order` answers for common.ANSWER
BUILD_TIMEOUT = 900.0
RUN_TIMEOUT = 20.0  # one client script; the whole test stays under ASYNC_TEST_TIMEOUT


@pytest.fixture(scope="session")
def interop_envs() -> Path:
    """Build (or find cached) the clients' environments; skip loudly if a registry is out
    of reach, but fail in CI."""

    def unavailable(why: str) -> None:
        message = f"INTEROP CLIENTS NOT AVAILABLE, the real-client tests did not run: {why}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)

    if shutil.which("node") is None or shutil.which("npm") is None:
        unavailable("node/npm is not installed")
    try:
        built = subprocess.run(
            ["bash", str(ROOT / "scripts" / "interop_envs.sh")],
            env={**os.environ, "INTEROP_DIR": str(INTEROP)},
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        unavailable(f"scripts/interop_envs.sh took over {BUILD_TIMEOUT:.0f} s")
    if built.returncode != 0:
        unavailable(f"scripts/interop_envs.sh failed:\n{(built.stdout + built.stderr)[-3000:]}")
    return INTEROP


@dataclass
class Served:
    url: str
    markers: Path
    log: Path

    async def marker(self, name: str, within: float = 10.0) -> None:
        """Wait (bounded) until the server's tools wrote `MARKERS/<name>`."""
        with anyio.fail_after(within):
            while not (self.markers / name).exists():  # noqa: ASYNC110 - a file signal
                await anyio.sleep(0.02)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`tests/legacy_server.py` on a free port, until the module is done."""
    where = tmp_path_factory.mktemp("legacy-clients")
    markers, log = where / "markers", where / "server.log"
    markers.mkdir()
    port, pythonpath = free_port(), os.environ.get("PYTHONPATH", "")
    command = [sys.executable, str(ROOT / "tests/legacy_server.py"), "--port", str(port)]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command, "--dir", str(markers)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), pythonpath])),
            },
        )
    try:
        deadline = time.monotonic() + 20
        while True:  # listening yet? (bounded; the server's own log says why not)
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield Served(f"http://127.0.0.1:{port}/mcp", markers, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def created_by(run: ClientRun, scenario: str) -> str:
    """The id of the task the client creates. In `elicit` the question can reach the
    client's handler before the `CreateTaskResult` does (the server puts it on the
    session's own stream at once), and a paused handler of the Python SDK holds back
    the rest of what the client reads: the id comes from the question's related-task
    `_meta` then."""
    if scenario == "elicit":
        return str((await run.next("elicited"))["related"]["taskId"])
    return str((await run.next("created"))["task_id"])


def v1_task(seen: Seen, event: str) -> dict[str, Any]:
    """The V1 `Task` a client printed (the Python clients print their model's dump)."""
    return seen.one(event)["task"]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("client", sorted(COMMANDS))
async def test_a_real_v1_client_beside_a_2026_client(
    client: str, scenario: str, interop_envs: Path, served: Served
) -> None:
    key = f"{client}-{scenario}"
    async with Client(served.url) as modern, http_wire_for(served.url) as wire:
        peer = await call_tool_task(modern, "hold", {"key": f"{key}-peer"})  # a 2026 task
        await served.marker(f"{key}-peer.started")
        command = COMMANDS[client] + [served.url, scenario, "--key", key, "--peer", peer.task_id]
        async with ClientRun.start(command, RUN_TIMEOUT, served.log) as run:
            task_id = await created_by(run, scenario)
            assert (await wire.get(task_id))["taskId"] == task_id  # the 2026 side sees it
            if scenario == "cancel":
                await run.next("paused")
                await served.marker(f"{key}.started")
                assert (await wire.get(task_id))["status"] == "working"
                run.resume()
            elif scenario == "elicit":
                await run.next("paused")  # inside the client's elicitation handler
                live = await wire.get(task_id)
                assert live["status"] == "input_required", live
                [request] = live["inputRequests"].values()
                assert request["method"] == "elicitation/create"
                assert request["params"]["message"] == "Your order of tea?"
                run.resume()
            seen = await run.finish()
        if scenario == "cancel":
            await served.marker(f"{key}.cancelled")  # the tool itself was stopped
        final = await wire.get(task_id)
        (served.markers / f"{key}-peer.go").touch()
        assert (await peer.result()).data == f"held {key}-peer"

    initialized = seen.one("initialized")
    assert initialized["protocol"] == "2025-11-25", initialized
    assert initialized["tasks"] == CAPABILITY
    shown_peer = v1_task(seen, "peer")  # the 2026 task, through the V1 client's get
    assert (shown_peer["taskId"], shown_peer["status"]) == (peer.task_id, "working")
    assert "ttl" in shown_peer and "ttlMs" not in shown_peer
    assert not seen.all("client-error")  # every message of ours parsed as the client reads it
    notified = seen.one("notified")["statuses"]  # notifications/tasks/status, as handed on
    if client != "fastmcp3" or scenario in ("cancel", "elicit"):  # (see fastmcp3_client.py)
        assert notified[-1:] == [V1_FINAL[scenario]], notified
    if client != "fastmcp3" and scenario == "elicit":
        assert "input_required" in notified, notified
    if scenario == "complete":  # tasks/list: the session's own tasks, not the 2026 client's
        assert peer.task_id not in seen.one("listed")["task_ids"]
    EXPECT[client](scenario, seen, task_id)
    EXPECT_2026[scenario](final)


@pytest.mark.parametrize("resumer", ["mcp1", "ts"])
@pytest.mark.bound(2 * RUN_TIMEOUT + 15)  # two client runs, each with its own bound
async def test_input_goes_to_the_next_client_when_the_asked_one_is_gone(
    resumer: str, interop_envs: Path, served: Served
) -> None:
    """FastMCP 3 creates a task that asks for input and dies inside its elicitation
    handler (killed: no answer, no DELETE). Another real client's `tasks/result` on the
    task (a new session, as after a reconnect) is asked the same question on its own
    stream, answers it, and gets the result."""
    command = COMMANDS["fastmcp3"] + [served.url, "elicit", "--key", f"resume-{resumer}"]
    async with ClientRun.start(command, RUN_TIMEOUT, served.log) as first:
        task_id = await created_by(first, "elicit")
        await first.next("paused")  # the question reached FastMCP 3's handler
    # leaving the block killed it, unanswered
    async with http_wire_for(served.url) as wire:
        assert (await wire.get(task_id))["status"] == "input_required"
        command = COMMANDS[resumer] + [served.url, "resume", "--peer", task_id]
        async with ClientRun.start(command, RUN_TIMEOUT, served.log) as run:
            await run.next("paused")  # in the resumer's handler, from its tasks/result
            run.resume()
            seen = await run.finish()
        final = await wire.get(task_id)
    assert v1_task(seen, "peer")["status"] == "input_required"
    elicited_for(seen, task_id)
    result = call_result(
        seen.one("result" if resumer == "mcp1" else "task-result")["result"], task_id
    )
    assert result["structuredContent"] == {"result": ORDERED}
    assert v1_task(seen, "status" if resumer == "mcp1" else "got")["status"] == "completed"
    expect_2026_elicit(final)


STEPS = 3  # tests/legacy_server.py `steps`
#: the handler each client hands a task's progress to (see the module docstring)
HEARD_BY = {"fastmcp3": "on_progress", "mcp1": "message_handler", "ts": "onprogress"}


@pytest.mark.parametrize("scenario", ["progress", "counted"])  # ctx.report_progress, Progress
@pytest.mark.parametrize("client", sorted(COMMANDS))
async def test_a_real_v1_client_hears_a_tasks_progress(
    client: str, scenario: str, interop_envs: Path, served: Served
) -> None:
    """The tool reports each step once the client's handler got the step before: none is
    lost (the run would stall), none doubled, in order, with the original token and the
    related-task `_meta`; and the steps also show as `statusMessage` in the status pushes."""
    key = f"{client}-{scenario}"
    command = COMMANDS[client] + [served.url, scenario, "--key", key]
    async with ClientRun.start(command, RUN_TIMEOUT, served.log) as run:
        task_id = str((await run.next("created"))["task_id"])
        (served.markers / f"{key}.go").touch()  # the client waits on the task from here
        for step in range(1, STEPS + 1):
            heard = await run.next("progress")
            assert (heard["via"], heard["progress"]) == (HEARD_BY[client], step), heard
            (served.markers / f"{key}.heard-{step}").touch()
        seen = await run.finish()

    messages = [f"step {n} of {STEPS}" for n in range(1, STEPS + 1)]
    progress = seen.all("progress")
    assert [(p["via"], p["progress"], p["total"], p["message"]) for p in progress] == [
        (HEARD_BY[client], n, STEPS, message) for n, message in enumerate(messages, 1)
    ]
    assert all(p["related"] == {"taskId": task_id} for p in progress), progress
    if client == "fastmcp3":
        assert {p["token"] for p in progress} == {"fastmcp3-steps"}  # its own, from `meta`
    elif client == "mcp1":  # the tools/call's request id, as the SDK made it the token
        assert len({p["token"] for p in progress}) == 1 and type(progress[0]["token"]) is int
    assert not seen.all("client-error")  # no progress for a token the client does not know
    notified = seen.one("notified")
    assert notified["statuses"][-1:] == ["completed"], notified
    heard = notified["messages"]  # a step's message once (as it changed), in order
    changes = [m for i, m in enumerate(heard) if m in messages and heard[i - 1 : i] != [m]]
    assert changes == [m for m in messages if m in changes], notified
    if client == "fastmcp3":
        assert seen.one("result")["data"] == f"{STEPS} steps"
    else:
        key_ = "result" if client == "mcp1" else "task-result"
        result = call_result(seen.all(key_)[-1]["result"], task_id)
        assert result["structuredContent"] == {"result": f"{STEPS} steps"}


def expect_2026_complete(task: dict[str, Any]) -> None:
    assert task["status"] == "completed" and task["result"]["structuredContent"] == {"result": 42}


def expect_2026_error(task: dict[str, Any]) -> None:
    # an error result: `failed` on V1, `completed` on 2026
    assert task["status"] == "completed" and task["result"]["isError"] is True
    assert task["result"]["content"] == [{"type": "text", "text": "refused: no"}]


def expect_2026_cancel(task: dict[str, Any]) -> None:
    assert task["status"] == "cancelled"


def expect_2026_elicit(task: dict[str, Any]) -> None:
    assert task["status"] == "completed"
    assert task["result"]["structuredContent"] == {"result": ORDERED}


EXPECT_2026 = {
    "complete": expect_2026_complete,
    "error": expect_2026_error,
    "cancel": expect_2026_cancel,
    "elicit": expect_2026_elicit,
}


def elicited_for(seen: Seen, task_id: str) -> None:
    elicited = seen.one("elicited")
    assert elicited["message"] == "Your order of tea?"
    assert elicited["related"] == {"taskId": task_id}  # the related-task `_meta`


def call_result(result: dict[str, Any], task_id: str) -> dict[str, Any]:
    """A `tasks/result` answer: the related-task `_meta`, then the tool's own fields."""
    assert result["_meta"][RELATED_TASK] == {"taskId": task_id}, result
    return result


def expect_fastmcp3(scenario: str, seen: Seen, task_id: str) -> None:
    """`ToolTask`: `result()` waits on status notifications and `tasks/get`, then
    `tasks/result`; an error result raises `ToolError`; input arrives while it polls."""
    assert seen.one("created")["immediate"] is False
    status = v1_task(seen, "status") if scenario != "cancel" else None
    if scenario == "complete":
        assert seen.one("result") == {"event": "result", "data": 42, "is_error": False}
        assert status is not None and status["status"] == "completed"
        assert task_id in seen.one("listed")["task_ids"]
    elif scenario == "error":
        raised = seen.one("raised")
        assert (raised["type"], raised["message"]) == ("ToolError", "refused: no")
        assert status is not None and status["status"] == "failed"
    elif scenario == "cancel":
        before, after = (s["task"] for s in seen.all("status"))
        assert (before["status"], after["status"]) == ("working", "cancelled")
        assert seen.one("refused")["code"] == -32602  # a terminal task refuses
    else:
        elicited_for(seen, task_id)
        assert seen.one("result")["data"] == ORDERED
        assert status is not None and status["status"] == "completed"


def expect_mcp1(scenario: str, seen: Seen, task_id: str) -> None:
    """`session.experimental`: `poll_task`, then `get_task_result` (on `input_required`
    too, where the elicitation is answered)."""
    created = v1_task(seen, "created")
    assert created["status"] == "working" and "ttl" in created
    if scenario == "cancel":
        before, after = (s["task"] for s in seen.all("status"))
        assert (before["status"], after["status"]) == ("working", "cancelled")
        assert v1_task(seen, "cancelled")["status"] == "cancelled"
        assert seen.one("refused")["code"] == -32602
        return
    final = {"complete": "completed", "error": "failed", "elicit": "completed"}[scenario]
    assert seen.one("polled")["statuses"][-1] == final
    assert v1_task(seen, "status")["status"] == final
    result = call_result(seen.all("result")[-1]["result"], task_id)
    if scenario == "complete":
        assert result["structuredContent"] == {"result": 42} and result["isError"] is False
        assert task_id in seen.one("listed")["task_ids"]
    elif scenario == "error":
        assert result["isError"] is True
        assert result["content"] == [{"type": "text", "text": "refused: no"}]
    else:
        elicited_for(seen, task_id)
        assert result["structuredContent"] == {"result": ORDERED}


def expect_ts(scenario: str, seen: Seen, task_id: str) -> None:
    """`callToolStream`: taskCreated, taskStatus polls, then `result` (from `tasks/result`)
    or an `error` for a failed or cancelled task; then the manual controller."""
    assert seen.one("tools")["support"]["double"] == "optional"
    created = v1_task(seen, "created")
    assert created["status"] == "working" and "ttl" in created
    got = v1_task(seen, "got")
    if scenario == "cancel":
        assert v1_task(seen, "cancelled")["status"] == "cancelled"
        assert seen.one("stream-error")["message"].endswith(f"Task {task_id} was cancelled")
        assert got["status"] == "cancelled"
        cancelled = call_result(seen.one("task-result")["result"], task_id)  # no payload
        assert not cancelled.get("content") and "structuredContent" not in cancelled
        assert seen.one("refused")["code"] == -32602
        return
    result = call_result(seen.one("task-result")["result"], task_id)
    if scenario == "error":
        assert seen.one("stream-error")["message"].endswith(f"Task {task_id} failed")
        assert got["status"] == "failed" and result["isError"] is True
        return
    streamed = call_result(seen.one("result")["result"], task_id)
    assert streamed == result and got["status"] == "completed"
    if scenario == "complete":
        assert result["structuredContent"] == {"result": 42}
        assert task_id in seen.one("listed")["task_ids"]
    else:
        elicited_for(seen, task_id)
        assert result["structuredContent"] == {"result": ORDERED}


EXPECT = {"fastmcp3": expect_fastmcp3, "mcp1": expect_mcp1, "ts": expect_ts}
