"""Durability with real processes: SIGKILL and restart, and two servers on one store (a
SQLite file, a Redis prefix, or a PostgreSQL schema)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.private_postgres import shared_schema
from tests.test_listen import _listen_params, http_listen
from tests.test_store_contract import POSTGRES_URL, REDIS_URL, postgres_available, redis_store
from tests.wire import Wire, free_port, http_wire_for

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).parent / "durable_server.py"


class Server:
    def __init__(
        self,
        db: Path | str,
        markers: Path,
        concurrency: int = 100,
        port: int | None = None,
        lease: float = 2.0,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(SERVER),
                "--db",
                str(db),
                "--port",
                str(self.port),
                "--dir",
                str(markers),
                "--concurrency",
                str(concurrency),
                "--lease",
                str(lease),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    async def ready(self) -> None:
        with anyio.fail_after(20):
            async with httpx.AsyncClient() as http:
                while True:
                    assert self.process.poll() is None, self.process.stderr.read().decode()  # type: ignore[union-attr]
                    try:
                        await http.get(self.url.replace("/mcp", "/"), timeout=1)
                        return
                    except httpx.TransportError:
                        await anyio.sleep(0.05)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process.stderr is not None:
            self.process.stderr.close()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
async def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """Where the servers keep their tasks: a SQLite file, a Redis prefix (cleaned up), or
    a fresh schema on the shared PostgreSQL (dropped afterwards)."""
    if request.param == "sqlite":
        yield str(tmp_path / "tasks.db")
        return
    if request.param == "postgres":
        async with shared_schema() as url:  # skips without PostgreSQL (fails when CI=true)
            yield url
        return
    store = redis_store()  # skips without Redis (fails when CI=true)
    yield f"{REDIS_URL}?prefix={store.keys.prefix}"  # type: ignore[attr-defined]
    await store.open()
    await store.close()  # deletes the prefix's keys


@contextmanager
def servers(
    tmp_path: Path, count: int, concurrency: int = 100, db: Path | str | None = None
) -> Iterator[list[Server]]:
    markers = tmp_path / "markers"
    db = db if db is not None else tmp_path / "tasks.db"
    markers.mkdir(exist_ok=True)
    started = [Server(db, markers, concurrency) for _ in range(count)]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


@asynccontextmanager
async def wire_to(server: Server) -> AsyncIterator[Wire]:
    await server.ready()
    async with http_wire_for(server.url) as wire:
        yield wire


class Worker(Server):
    """`python -m fastmcp_tasks worker tests/durable_server.py`, the real command line."""

    def __init__(
        self,
        db: Path | str,
        markers: Path,
        grace: float = 10.0,
        concurrency: int | None = None,
        server_concurrency: int | None = None,
        lease: float = 2.0,
    ) -> None:
        env = {**os.environ, "DURABLE_DB": str(db), "DURABLE_MARKERS": str(markers)}
        env["DURABLE_LEASE"] = str(lease)
        if server_concurrency is not None:  # the `TasksExtension(concurrency=)` of the file
            env["DURABLE_CONCURRENCY"] = str(server_concurrency)
        self.banner = b""
        command = [sys.executable, "-m", "fastmcp_tasks", "worker", str(SERVER)]
        command += ["--grace", str(grace)]
        if concurrency is not None:
            command += ["--concurrency", str(concurrency)]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=Path(__file__).parent.parent,
        )

    async def ready(self) -> None:
        line = await anyio.to_thread.run_sync(self.process.stdout.readline)  # type: ignore[union-attr]
        self.banner = line
        assert line.startswith(
            (
                b"fastmcp-tasks worker: sqlite://",
                b"fastmcp-tasks worker: redis",
                b"fastmcp-tasks worker: postgres",
            )
        ), line

    def stop(self) -> None:
        super().stop()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _started(markers: Path, key: str, pid: int | None) -> bool:
    names = [p.name for p in markers.glob(f"{key}.started.*")]
    return any(pid is None or name.endswith(f".{pid}") for name in names)


async def started_in(markers: Path, key: str, pid: int | None = None) -> None:
    """Wait (bounded) until the tool wrote its start marker: a cross-process signal."""
    with anyio.fail_after(10):
        while not _started(markers, key, pid):  # noqa: ASYNC110 - the signal is a file
            await anyio.sleep(0.02)


def release(markers: Path, key: str) -> None:
    (markers / f"{key}.go").touch()


def answer(key: str, value: bool = True) -> dict[str, Any]:
    return {key: {"action": "accept", "content": {"value": value}}}


async def test_sigkill_then_restart_keeps_every_task(tmp_path: Path, store_at: str) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 1, db=store_at) as (first,):
        async with wire_to(first) as wire:
            quick = await wire.call_tool("quick", {"text": "hi"})
            quick_done = await wire.wait(quick["taskId"])
            idem = (await wire.call_tool("idempotent_job", {"key": "idem"}))["taskId"]
            plain = (await wire.call_tool("plain_job", {"key": "plain"}))["taskId"]
            await started_in(markers, "idem")
            await started_in(markers, "plain")
            asked = (await wire.call_tool("ask", {"question": "ship?"}))["taskId"]
            again = (await wire.call_tool("ask_again", {"question": "retry?"}))["taskId"]
            parked = await wire.wait(again, {"input_required"})
            (old_key,) = parked["inputRequests"]
            await wire.wait(asked, {"input_required"})
        first.kill()

    with servers(tmp_path, 1, db=store_at) as (second,):
        async with wire_to(second) as wire:
            # a finished task: identical after the crash
            assert await wire.get(quick["taskId"]) == quick_done
            # not idempotent: failed, with a JSON-RPC error saying why
            for task_id in (plain, asked):
                lost = await wire.wait(task_id, {"failed"})
                assert lost["error"]["code"] == -32603
                assert "not marked idempotentHint=True" in lost["error"]["message"]
            # idempotent: run again, attempt visible, then completes on the new process
            rerun = await wire.wait_for(idem, lambda t: "attempt 2" in t.get("statusMessage", ""))
            assert rerun["status"] == "working"
            await started_in(markers, "idem", second.process.pid)
            release(markers, "idem")
            done = await wire.wait(idem)
            assert (
                done["result"]["content"][0]["text"] == f"idempotent idem in {second.process.pid}"
            )
            # an idempotent parked task asks again, under a new key
            reparked = await wire.wait_for(
                again,
                lambda t: t["status"] == "input_required" and old_key not in t["inputRequests"],
            )
            (new_key,) = reparked["inputRequests"]
            await wire.update(again, answer(old_key))  # the old key is ignored
            await wire.update(again, answer(new_key))
            finished = await wire.wait(again)
            assert finished["result"]["content"][0]["text"].startswith("retry? -> accept:True")


async def test_two_processes_share_one_store(tmp_path: Path, store_at: str) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 2, db=store_at) as (a, b):
        async with wire_to(a) as on_a, wire_to(b) as on_b:
            # created on A, read on B
            created = await on_a.call_tool("quick", {"text": "shared"})
            done = await on_b.wait(created["taskId"])
            assert done["result"]["content"][0]["text"] == "quick shared"
            # running on A, cancelled through B: A's tool is stopped
            running = (await on_a.call_tool("plain_job", {"key": "cancel-me"}))["taskId"]
            await started_in(markers, "cancel-me", a.process.pid)
            await on_b.cancel(running)
            cancelled = await on_b.wait(running)
            assert cancelled["status"] == "cancelled"
            # parked on A, answered through B
            asked = (await on_a.call_tool("ask", {"question": "go?"}))["taskId"]
            parked = await on_b.wait(asked, {"input_required"})
            (key,) = parked["inputRequests"]
            await on_b.update(asked, answer(key, False))
            answered = await on_a.wait(asked)
            assert answered["result"]["content"][0]["text"] == "go? -> accept:False"


async def test_a_dead_process_tasks_are_recovered_by_the_live_one(
    tmp_path: Path, store_at: str
) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 2, db=store_at) as (a, b):
        async with wire_to(a) as on_a, wire_to(b) as on_b:
            idem = (await on_a.call_tool("idempotent_job", {"key": "move"}))["taskId"]
            plain = (await on_a.call_tool("plain_job", {"key": "lost"}))["taskId"]
            await started_in(markers, "move", a.process.pid)
            await started_in(markers, "lost", a.process.pid)
            a.kill()
            failed = await on_b.wait(plain, {"failed"}, within=15)
            assert "interrupted" in failed["error"]["message"]
            await started_in(markers, "move", b.process.pid)
            release(markers, "move")
            moved = await on_b.wait(idem, within=15)
            assert moved["result"]["content"][0]["text"] == f"idempotent move in {b.process.pid}"


async def test_front_end_and_workers_through_the_command_line(
    tmp_path: Path, store_at: str
) -> None:
    markers = tmp_path / "markers"
    with servers(tmp_path, 1, concurrency=0, db=store_at) as (front,):
        workers = [Worker(store_at, markers) for _ in range(2)]
        try:
            for worker in workers:
                await worker.ready()
            async with wire_to(front) as wire:
                quick = await wire.call_tool("quick", {"text": "far"})
                assert quick["statusMessage"].startswith("Queued")
                done = await wire.wait(quick["taskId"])
                assert done["result"]["content"][0]["text"] == "quick far"
                # a subscriber on the front end hears a completion made by a worker
                pushed = (await wire.call_tool("plain_job", {"key": "push"}))["taskId"]
                await started_in(markers, "push")
                async with http_listen(front.url, _listen_params([pushed])) as frames:
                    await frames.next()  # the ack
                    release(markers, "push")
                    final = await frames.until(
                        lambda f: f.get("params", {}).get("status") == "completed"
                    )
                assert final["params"]["result"]["content"][0]["text"] == "plain push"
                # SIGTERM drains: the running task may finish within the grace period
                drained = (await wire.call_tool("plain_job", {"key": "drain"}))["taskId"]
                await started_in(markers, "drain")
                runner = next(w for w in workers if _started(markers, "drain", w.process.pid))
                runner.process.send_signal(signal.SIGTERM)
                release(markers, "drain")
                assert (await wire.wait(drained))["status"] == "completed"
                assert await anyio.to_thread.run_sync(runner.process.wait, 15) == 0
                # SIGKILL a worker mid-task: the idempotent task moves to the survivor
                survivor = next(w for w in workers if w is not runner)
                other = Worker(store_at, markers)
                workers.append(other)
                await other.ready()
                moved = (await wire.call_tool("idempotent_job", {"key": "hop"}))["taskId"]
                await started_in(markers, "hop")
                victim = next(
                    w for w in (survivor, other) if _started(markers, "hop", w.process.pid)
                )
                heir = survivor if victim is other else other
                victim.kill()
                await started_in(markers, "hop", heir.process.pid)
                release(markers, "hop")
                final = await wire.wait(moved, within=20)
                text = final["result"]["content"][0]["text"]
                assert text == f"idempotent hop in {heir.process.pid}"
        finally:
            for worker in workers:
                worker.stop()


def test_a_worker_refuses_the_memory_store(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(
        "from fastmcp import FastMCP\nfrom fastmcp_tasks import TasksExtension\n"
        "mcp = FastMCP('m')\nmcp.add_extension(TasksExtension('memory://'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "fastmcp_tasks", "worker", str(app)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "memory:// keeps tasks inside one process" in done.stderr


async def test_a_worker_of_a_front_end_server_file_runs_with_the_default_concurrency(
    tmp_path: Path,
) -> None:
    """The scale-out recipe as written (docs/how-to/scaling-out.md): one server file,
    `concurrency=0`, serves as the front end and, unchanged, as `fastmcp-tasks worker
    server.py`."""
    markers, db = tmp_path / "markers", tmp_path / "tasks.db"
    with servers(tmp_path, 1, concurrency=0, db=db) as (front,):
        worker = Worker(db, markers, server_concurrency=0)
        try:
            await worker.ready()
            assert worker.banner.decode() == (
                f"fastmcp-tasks worker: sqlite:///{db}, concurrency 100 (the server's "
                "TasksExtension has concurrency=0, a front end's setting: the worker runs "
                "the default 100; --concurrency N sets it)\n"
            )
            async with wire_to(front) as wire:
                quick = await wire.call_tool("quick", {"text": "far"})
                done = await wire.wait(quick["taskId"])
                assert done["result"]["content"][0]["text"] == "quick far"
        finally:
            worker.stop()


def test_a_worker_refuses_an_explicit_concurrency_of_zero(tmp_path: Path) -> None:
    env = {**os.environ, "DURABLE_DB": str(tmp_path / "tasks.db"), "DURABLE_MARKERS": "."}
    done = subprocess.run(
        [sys.executable, "-m", "fastmcp_tasks", "worker", str(SERVER), "--concurrency", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr == "fastmcp-tasks: a worker needs --concurrency of at least 1, got 0\n"


def test_the_worker_help_says_what_concurrency_it_defaults_to() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastmcp_tasks", "worker", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert (
        "--concurrency CONCURRENCY tasks at once (default: the server's TasksExtension "
        "concurrency; 100 when that is 0, a front end's setting)"
    ) in " ".join(done.stdout.split())


async def test_the_worker_startup_line_never_shows_the_store_password(tmp_path: Path) -> None:
    async with shared_schema() as url:
        schema = url.rpartition("schema=")[2]
        secret_url = url.replace("postgres@", "postgres:s3cretpw@")  # trust auth ignores it
        worker = Worker(secret_url, tmp_path, concurrency=2)
        try:
            await worker.ready()
        finally:
            worker.stop()
    host = url.partition("postgres@")[2].partition("?")[0]
    assert worker.banner.decode() == (
        f"fastmcp-tasks worker: postgresql://postgres:***@{host} (schema {schema}), concurrency 2\n"
    )


def test_a_worker_on_a_misconfigured_store_exits_saying_what_is_wrong(tmp_path: Path) -> None:
    """A database that does not exist is a configuration error, not an outage to wait out."""
    postgres_available()
    url = f"{POSTGRES_URL.rpartition('/')[0]}/nosuch_{os.getpid()}"
    env = {**os.environ, "DURABLE_DB": url, "DURABLE_MARKERS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "fastmcp_tasks", "worker", str(SERVER)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"fastmcp-tasks: PostgreSQL task store {url} (schema fastmcp_tasks) is misconfigured: "
        f'database "nosuch_{os.getpid()}" does not exist (SQLSTATE 3D000)'
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_a_worker_of_a_server_file_with_a_bad_store_url_says_which_option(tmp_path: Path) -> None:
    url = "redis://127.0.0.1:6379/15?prefx=p"
    env = {**os.environ, "DURABLE_DB": url, "DURABLE_MARKERS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "fastmcp_tasks", "worker", str(SERVER)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"fastmcp-tasks: {SERVER}: Task store URL '{url}': unknown option 'prefx' (did you "
        "mean 'prefix'?); redis:// URLs take prefix (fastmcp-tasks) and redis-py's "
    ), done.stderr
    assert "Traceback" not in done.stderr
