"""The real processes of the browser tests, and the store data they start from.

- `McpServer`: `tests/browser/task_server.py` on a store URL, served over Streamable
  HTTP by uvicorn on a free port (ready once it answers HTTP);
- `Dashboard`: `python -m fastmcp_tasks ui --url URL --port 0 [--read-only]` (the
  token, when set, through `$FASTMCP_TASKS_UI_TOKEN`; labelled tokens through
  `--token-file`), ready once it prints the URL it serves;
- `seed(url)`: tasks written straight through the store API (several tools, owners,
  ages and outcomes, a live and a stale lease of another application), so the
  filters, the charts, the workers page and the purge have something to act on;
- `store_ids(url)`, `task_count(url)`: what a store holds now, read through its API.

Every process is stopped by its own pid (terminate, then kill after `grace` seconds); its stderr
goes to a file under the test's directory and is shown when it fails to start.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
from fastmcp import Client

from fastmcp_tasks import TaskRecord, ToolTask, call_tool_task, store_from_url
from fastmcp_tasks.stores.listing import ListableTaskStore
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
TASK_SERVER = Path(__file__).with_name("task_server.py")
START_TIMEOUT = 30.0
HOUR = 3600.0
DAY = 86_400.0
WEEK_MS = 7 * 86_400_000
OTHER_APP = "nightly-batch"  # seeded tasks belong to another application: never recovered
STALE_WORKER = "batch-7.internal:4242:9f3c2a"
LIVE_WORKER = "batch-8.internal:5151:77ab01"
#: Long enough that the detail page truncates them (and offers all of them).
STALE_ARGUMENTS = {
    "folder": "/srv/photos/2026",
    "size": 1024,
    "files": [f"img-{n:05d}.jpg" for n in range(1, 401)],
}


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if "PYTHONPATH" in env else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("FASTMCP_TASKS_UI_TOKEN", None)
    env.pop("FASTMCP_TASKS_UI_TOKEN_FILE", None)
    env.update(extra)
    return env


class Process:
    """A child process stopped by its own pid; stderr kept in a file for diagnosis."""

    process: subprocess.Popen[bytes]
    log: Path

    def spawn(self, command: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        with log.open("wb") as err:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                cwd=ROOT,
            )

    def problem(self) -> str:
        return f"{self.log.name}: exit {self.process.poll()}\n{self.log.read_text()[-3000:]}"

    #: Seconds between SIGTERM and SIGKILL.
    grace = 10.0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


class McpServer(Process):
    # its SIGTERM drain waits up to 30 s for the tasks still running or asking (by design);
    # the store keeps them, and nothing here checks what happens after the tests
    grace = 2.0

    def __init__(self, store_url: str, markers: Path, logs: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.markers = markers
        command = [sys.executable, str(TASK_SERVER), "--url", store_url]
        command += ["--port", str(self.port), "--dir", str(markers)]
        self.spawn(command, logs / f"mcp-{self.port}.log", child_env())

    async def ready(self) -> None:
        with anyio.fail_after(START_TIMEOUT):
            async with httpx.AsyncClient() as http:
                while True:
                    assert self.process.poll() is None, self.problem()
                    try:
                        await http.get(self.url.replace("/mcp", "/"), timeout=1)
                        return
                    except httpx.TransportError:
                        await anyio.sleep(0.05)


class Dashboard(Process):
    """`fastmcp-tasks ui` in a subprocess; `base` is the URL it printed (ends with `/`)."""

    base: str

    def __init__(
        self,
        store_url: str,
        logs: Path,
        *,
        token: str | None = None,
        read_only: bool = False,
        token_file: Path | None = None,
    ) -> None:
        command = [sys.executable, "-m", "fastmcp_tasks", "ui", "--url", store_url, "--port", "0"]
        if read_only:
            command.append("--read-only")
        if token_file is not None:
            command += ["--token-file", str(token_file)]
        extra = {} if token is None else {"FASTMCP_TASKS_UI_TOKEN": token}
        self.token = token
        self.spawn(command, logs / f"ui-{uuid.uuid4().hex[:6]}.log", child_env(**extra))
        self._printed: list[str] = []
        self._url_seen = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            self._printed.append(line)
            if re.search(r"http://\S+/", line):
                self._url_seen.set()
        self._url_seen.set()  # the process ended: stop waiting

    async def ready(self) -> None:
        seen = await anyio.to_thread.run_sync(self._url_seen.wait, START_TIMEOUT)
        printed = "".join(self._printed)
        assert seen and self.process.poll() is None, f"{printed}\n{self.problem()}"
        match = re.search(r"(http://\S+/)", printed)
        assert match is not None, printed
        self.base = match.group(1)


# --- store data ----------------------------------------------------------------------------


async def _opened(url: str) -> ListableTaskStore:
    store = store_from_url(url)
    assert isinstance(store, ListableTaskStore)
    await store.open()
    return store


def _task(tool: str, status: str, created: float, **fields: object) -> TaskRecord:
    record = TaskRecord(
        task_id=f"{tool[:3]}-{uuid.uuid4().hex[:16]}",
        tool=tool,
        status=status,  # type: ignore[arg-type]
        created_at=created,
        updated_at=created,
        retention_ms=WEEK_MS,
        poll_interval_ms=1000,
        app=OTHER_APP,
    )
    for name, value in fields.items():
        setattr(record, name, value)
    if status in ("completed", "failed", "cancelled"):
        record.terminal_at = record.updated_at = fields.get("terminal_at", created + 20)  # type: ignore[assignment]
    return record


def seed_records(now: float) -> dict[str, TaskRecord]:
    """The seeded tasks by role: finished ones over the last hour and three days ago,
    two working ones leased by workers of another application (one lease stale)."""
    made: dict[str, TaskRecord] = {}
    for i in range(24):  # the last hour: a few a minute-ish, mixed outcomes
        tool = ("render_report", "sync_invoices", "resize_images")[i % 3]
        created = now - HOUR + i * 140
        owner = ("app|alice", "app|bob")[i % 2]
        if i % 7 == 3:
            made[f"failed{i}"] = _task(
                tool,
                "failed",
                created,
                owner=owner,
                terminal_at=created + 5 + i,
                error={"code": -32603, "message": f"upstream timed out after {5 + i}s"},
                attempts=1,
            )
        else:
            result = {"content": [{"type": "text", "text": f"{tool} #{i} done"}]}
            made[f"done{i}"] = _task(
                tool,
                "completed",
                created,
                owner=owner,
                terminal_at=created + 3 + (i * 7) % 50,
                result_json=json.dumps(result),
                attempts=1,
            )
    for i in range(3):  # old enough to purge at "1d"
        made[f"old{i}"] = _task(
            "sync_invoices",
            "completed",
            now - 3 * DAY - i * 60,
            owner="app|alice",
            terminal_at=now - 3 * DAY,
            result_json=json.dumps({"content": []}),
        )
    made["old_active"] = _task(  # old but active: never purged
        "sync_invoices",
        "working",
        now - 3 * DAY,
        owner="app|bob",
        status_message="waiting for the bank",
        lease_owner=LIVE_WORKER,
        lease_expires=now + 27,
        attempts=1,
    )
    made["stale"] = _task(
        "resize_images",
        "working",
        now - 600,
        owner="app|bob",
        status_message="resizing 412/1000",
        lease_owner=STALE_WORKER,
        lease_expires=now - 90,
        attempts=2,
        arguments=STALE_ARGUMENTS,
    )
    return made


async def seed(url: str) -> dict[str, str]:
    """Write `seed_records` into the store at `url`; their ids by role."""
    store = await _opened(url)
    try:
        made = seed_records(time.time())
        for record in made.values():
            await store.create(record)
        return {role: record.task_id for role, record in made.items()}
    finally:
        await store.close()


async def store_tasks(url: str) -> dict[str, TaskRecord]:
    """Every live task in the store, by id (paged through `list_tasks`)."""
    store = await _opened(url)
    try:
        found: dict[str, TaskRecord] = {}
        before = None
        while True:
            page = await store.list_tasks(limit=1000, before=before)
            found.update((t.task_id, t) for t in page)
            if len(page) < 1000:
                return found
            before = (page[-1].created_at, page[-1].task_id)
    finally:
        await store.close()


async def clear_redis(url: str) -> None:
    store = store_from_url(url)
    await store.open()
    try:
        await store.clear()  # type: ignore[attr-defined]
    finally:
        await store.close()


# --- an MCP client of the server, and what the tests measured ----------------------------

#: Numbers the tests measured, printed at the end of the run (`conftest`).
MEASURED: dict[str, object] = {}


@contextlib.asynccontextmanager
async def mcp_client(server: McpServer) -> AsyncIterator[Client[Any]]:
    """A client that declares elicitation (so `ask` parks in `input_required`) and never
    answers: nothing here drives a task to its end."""

    async def unanswered(*_: Any) -> Any:
        raise AssertionError("the browser tests never answer input through the client")

    async with Client(server.url, elicitation_handler=unanswered) as client:
        yield client


async def start(client: Client[Any], tool: str, **arguments: Any) -> ToolTask:
    """`tools/call` as a task (returns once the task is stored); polls only (`push=False`)."""
    return await call_tool_task(client, tool, arguments, push=False)


async def reaches(task: ToolTask, status: str, timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Poll `tasks/get` until the task is in `status` (fails on another terminal status)."""
    seen = None
    with anyio.fail_after(timeout):
        while True:
            seen = (await task.status()).status
            if seen == status:
                return
            assert seen not in ("completed", "failed", "cancelled"), (task.task_id, seen)
            await anyio.sleep(0.05)
