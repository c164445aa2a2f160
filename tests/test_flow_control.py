"""Flow control through the wire, in one process (memory store, and SQLite where it says):
per-tool concurrency and keys, fair shares between principals, deduplicated retries of
identical calls, retries with backoff, cancelling a waiting task.

The multi-process versions (two server processes on one SQLite file or Redis) are in
`tests/test_flow_processes.py`.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from mcp_types import CallToolResult, TextContent

from fastmcp_tasks import Retry, TasksExtension, task_options
from fastmcp_tasks.errors import ConfigurationError
from tests.test_store_contract import (
    POSTGRES_URL,
    REDIS_URL,
    drop_schema,
    postgres_available,
    redis_store,
)
from tests.wire import Wire, connect, http_server, http_wire_for

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A store URL for one server: memory, a SQLite file, a Redis prefix or a PostgreSQL
    schema (both cleaned up)."""
    if request.param == "memory":
        yield None
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tasks.db'}"
    elif request.param == "postgres":
        postgres_available()  # skips without PostgreSQL (fails when CI=true)
        schema = f"test_{uuid.uuid4().hex[:16]}"
        try:
            yield f"{POSTGRES_URL}?schema={schema}"
        finally:
            drop_schema(schema)
    else:
        store = redis_store()  # skips without Redis (fails when CI=true)
        yield f"{REDIS_URL}?prefix={store.keys.prefix}"  # type: ignore[attr-defined]
        await store.open()
        await store.close()  # deletes the prefix's keys


TOKENS = {
    "alice-token": {"client_id": "app", "sub": "alice", "scopes": []},
    "bob-token": {"client_id": "app", "sub": "bob", "scopes": []},
}
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}


class Overlap:
    """Records how many runs of a tool overlap (the maximum is what a test asserts)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.started: list[str] = []
        self.opened = anyio.Event()  # `serial` runs wait for it: the queue fills first

    def enter(self, label: str) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        self.started.append(label)

    def leave(self) -> None:
        self.now -= 1


def limited_server(url: str | None = None, **extension: Any) -> tuple[FastMCP, Overlap]:
    mcp = FastMCP(
        "flow", auth=StaticTokenVerifier(tokens=TOKENS) if extension.pop("auth", False) else None
    )
    mcp.add_extension(TasksExtension(url, **extension))
    overlap = Overlap()

    @mcp.tool(task=True)
    @task_options(concurrency=2)
    async def render(n: int) -> int:
        overlap.enter(str(n))
        try:
            await overlap.opened.wait()  # every task exists before any ends
            await anyio.sleep(0.01)
        finally:
            overlap.leave()
        return n

    @mcp.tool(task=True)
    @task_options(concurrency=1, concurrency_key=lambda args: args["service"])
    async def deploy(service: str, n: int) -> str:
        overlap.enter(f"{service}{n}")
        try:
            await overlap.opened.wait()
            await anyio.sleep(0.01)
        finally:
            overlap.leave()
        return service

    @mcp.tool(task=True)
    @task_options(concurrency=1)
    async def serial(who: str, n: int) -> str:
        overlap.enter(f"{who}{n}")
        try:
            await overlap.opened.wait()
        finally:
            overlap.leave()
        return who

    return mcp, overlap


async def create_all(wire: Wire, name: str, calls: list[dict[str, Any]], **kw: Any) -> list[str]:
    return [(await wire.call_tool(name, args, **kw))["taskId"] for args in calls]


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_a_concurrency_limit_holds_and_waiting_tasks_say_why(
    transport: str, store_url: str | None
) -> None:
    mcp, overlap = limited_server(store_url)
    with anyio.fail_after(30):
        async with connect(mcp, transport) as wire:
            ids = await create_all(wire, "render", [{"n": n} for n in range(8)])
            while overlap.now < 2:  # noqa: ASYNC110 - the limit's two tasks have started
                await anyio.sleep(0.005)
            first = [await wire.get(task_id) for task_id in ids]
            queued = [t for t in first if t.get("statusMessage", "").startswith("Queued: ")]
            assert len(queued) == 6, "6 of 8 tasks wait behind a limit of 2"
            assert "at most 2 tasks at once" in queued[0]["statusMessage"]
            overlap.opened.set()
            done = [await wire.wait(task_id) for task_id in ids]
    assert [t["status"] for t in done] == ["completed"] * 8
    assert [t["result"]["structuredContent"]["result"] for t in done] == list(range(8))
    assert overlap.most == 2


async def test_a_concurrency_key_limits_per_key() -> None:
    mcp, overlap = limited_server()
    with anyio.fail_after(30):
        async with connect(mcp, "memory") as wire:
            calls = [{"service": s, "n": n} for n in range(3) for s in ("api", "web")]
            ids = await create_all(wire, "deploy", calls)
            while overlap.now < 2:  # noqa: ASYNC110 - one deploy per service has started
                await anyio.sleep(0.005)
            waiting = [(await wire.get(task_id)).get("statusMessage", "") for task_id in ids]
            assert sum("for 'api'" in m for m in waiting) == 2  # one api deploy runs
            overlap.opened.set()
            for task_id in ids:
                assert (await wire.wait(task_id))["status"] == "completed"
    assert overlap.most == 2  # one per service, two services


async def test_a_single_task_of_another_principal_is_not_starved() -> None:
    mcp, overlap = limited_server(auth=True)
    with anyio.fail_after(60):
        async with http_server(mcp) as url, http_wire_for(url) as wire:
            alice = await create_all(
                wire, "serial", [{"who": "a", "n": n} for n in range(20)], headers=ALICE
            )
            (bob,) = await create_all(wire, "serial", [{"who": "b", "n": 0}], headers=BOB)
            overlap.opened.set()
            assert (await wire.wait(bob, headers=BOB))["status"] == "completed"
            for task_id in alice:
                await wire.wait(task_id, headers=ALICE)
    assert overlap.most == 1
    assert overlap.started.index("b0") <= 1, overlap.started[:5]


async def test_cancelling_a_task_waiting_for_its_gate_ends_it_at_once(
    store_url: str | None,
) -> None:
    mcp = FastMCP("gate")
    mcp.add_extension(TasksExtension(store_url))
    release = anyio.Event()

    @mcp.tool(task=True)
    @task_options(concurrency=1)
    async def hold() -> str:
        await release.wait()
        return "done"

    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            running, waiting = await create_all(wire, "hold", [{}, {}])
            await wire.wait_for(running, lambda t: "statusMessage" not in t)
            await wire.cancel(waiting)
            assert (await wire.wait(waiting))["status"] == "cancelled"
            release.set()
            assert (await wire.wait(running))["status"] == "completed"


# --- dedupe -------------------------------------------------------------------------


def dedupe_server(url: str | None = None) -> tuple[FastMCP, list[int]]:
    mcp = FastMCP("dedupe", auth=StaticTokenVerifier(tokens=TOKENS))
    mcp.add_extension(TasksExtension(url))
    runs: list[int] = []

    @mcp.tool(task=True)
    @task_options(dedupe=timedelta(minutes=5))
    async def expensive(n: int) -> int:
        runs.append(n)
        await anyio.sleep(0.05)
        return n

    return mcp, runs


async def test_identical_concurrent_calls_make_one_task(store_url: str | None) -> None:
    mcp, runs = dedupe_server(store_url)
    with anyio.fail_after(30):
        async with http_server(mcp) as url_, http_wire_for(url_) as wire:
            answers: list[str] = []

            async def call() -> None:
                answers.append(
                    (await wire.call_tool("expensive", {"n": 1}, headers=ALICE))["taskId"]
                )

            async with anyio.create_task_group() as group:
                for _ in range(10):
                    group.start_soon(call)
            other = (await wire.call_tool("expensive", {"n": 2}, headers=ALICE))["taskId"]
            bobs = (await wire.call_tool("expensive", {"n": 1}, headers=BOB))["taskId"]
            assert len(set(answers)) == 1 and other not in answers and bobs not in answers
            done = await wire.wait(answers[0], headers=ALICE)
            again = (await wire.call_tool("expensive", {"n": 1}, headers=ALICE))["taskId"]
            await wire.wait(other, headers=ALICE)
            await wire.wait(bobs, headers=BOB)
    assert done["status"] == "completed" and again == answers[0]  # still within the window
    assert sorted(runs) == [1, 1, 2]  # alice's n=1 once, bob's n=1 once, alice's n=2 once


# --- retries ------------------------------------------------------------------------


class Flaky(Exception):
    pass


def flaky_server(url: str | None = None, failures: int = 2) -> tuple[FastMCP, list[int]]:
    mcp = FastMCP("retry")
    mcp.add_extension(TasksExtension(url))
    attempts: list[int] = []

    @mcp.tool(task=True)
    @task_options(retry=Retry(attempts=3, backoff=timedelta(milliseconds=300), on=(Flaky,)))
    async def fetch() -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) <= failures:
            raise Flaky(f"upstream said no ({len(attempts)})")
        return f"ok after {len(attempts)}"

    @mcp.tool(task=True)
    @task_options(retry=Retry(attempts=3, backoff=timedelta(milliseconds=10), on=(Flaky,)))
    async def wrong() -> str:
        attempts.append(-1)
        raise ValueError("not retried")

    @mcp.tool(task=True)
    @task_options(retry=Retry(attempts=3, backoff=timedelta(milliseconds=10)))
    async def on_purpose() -> CallToolResult:
        attempts.append(0)
        return CallToolResult(content=[TextContent(type="text", text="bad")], is_error=True)

    return mcp, attempts


async def messages_until_done(wire: Wire, task_id: str) -> tuple[dict[str, Any], list[str]]:
    seen: list[str] = []
    with anyio.fail_after(20):
        while True:
            task = await wire.get(task_id)
            message = task.get("statusMessage")
            if message and (not seen or seen[-1] != message):
                seen.append(message)
            if task["status"] in ("completed", "failed", "cancelled"):
                return task, seen
            await anyio.sleep(0.01)


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_a_flaky_tool_completes_on_its_third_attempt(
    transport: str, store_url: str | None
) -> None:
    mcp, attempts = flaky_server(store_url)
    async with connect(mcp, transport) as wire:
        task_id = (await wire.call_tool("fetch"))["taskId"]
        done, seen = await messages_until_done(wire, task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "ok after 3"
    assert "statusMessage" not in done  # the retry's message ended when its attempt began
    assert attempts == [1, 2, 3]
    retrying = [m for m in seen if m.startswith("Retrying")]
    assert retrying[0].startswith("Retrying (attempt 2 of 3) after: ")
    assert "upstream said no (1)" in retrying[0]
    assert any(m.startswith("Retrying (attempt 3 of 3) after: ") for m in retrying)


async def test_the_last_attempt_decides_and_only_listed_errors_retry() -> None:
    mcp, attempts = flaky_server(failures=5)
    async with connect(mcp, "memory") as wire:
        exhausted, _ = await messages_until_done(wire, (await wire.call_tool("fetch"))["taskId"])
        assert attempts == [1, 2, 3]
        attempts.clear()
        other, _ = await messages_until_done(wire, (await wire.call_tool("wrong"))["taskId"])
        assert attempts == [-1]
        attempts.clear()
        chosen, _ = await messages_until_done(wire, (await wire.call_tool("on_purpose"))["taskId"])
        assert attempts == [0]  # an isError result the tool returned is never retried
    for task in (exhausted, other, chosen):
        assert task["status"] == "completed" and task["result"]["isError"] is True
    assert "upstream said no (3)" in exhausted["result"]["content"][0]["text"]


async def test_cancelling_a_retry_during_its_backoff(store_url: str | None) -> None:
    mcp = FastMCP("retry")
    mcp.add_extension(TasksExtension(store_url))
    attempts: list[int] = []

    @mcp.tool(task=True)
    @task_options(retry=Retry(attempts=5, backoff=timedelta(minutes=10), jitter=False))
    async def slow_to_retry() -> str:
        attempts.append(1)
        raise RuntimeError("boom")

    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            task_id = (await wire.call_tool("slow_to_retry"))["taskId"]
            await wire.wait_for(
                task_id, lambda t: t.get("statusMessage", "").startswith("Retrying")
            )
            await wire.cancel(task_id)
            assert (await wire.wait(task_id))["status"] == "cancelled"
    assert attempts == [1]


def test_options_are_checked_when_the_tool_is_defined() -> None:
    with pytest.raises(ConfigurationError):
        task_options(concurrency=0)
    with pytest.raises(ConfigurationError):
        task_options(concurrency_key=lambda a: a)
    with pytest.raises(ConfigurationError):
        task_options(dedupe=timedelta(0))
    with pytest.raises(ConfigurationError):
        Retry(attempts=0)
    with pytest.raises(ConfigurationError):
        Retry(on=ValueError)  # type: ignore[arg-type]


def test_show_says_what_flow_control_holds_a_task_for() -> None:
    import time

    from fastmcp_tasks.cli.views import describe
    from fastmcp_tasks.testing import make_record

    now = time.time()
    record = make_record(gate="deploy\x1fapi", gate_limit=1, retries=2, not_before=now + 30)
    fields = dict(describe(record, now))
    assert fields["Concurrency"] == "deploy / key api (at most 1 at once)"
    assert fields["Retries"] == "2"
    assert "30s" in fields["Retry due"] or "29s" in fields["Retry due"]


async def test_this_process_shares_its_own_slots_between_principals() -> None:
    mcp = FastMCP("slots", auth=StaticTokenVerifier(tokens=TOKENS))
    mcp.add_extension(TasksExtension(concurrency=1))  # the process-wide limit, no gate
    overlap = Overlap()

    @mcp.tool(task=True)
    async def work(who: str, n: int) -> str:
        overlap.enter(f"{who}{n}")
        try:
            await overlap.opened.wait()
        finally:
            overlap.leave()
        return who

    with anyio.fail_after(60):
        async with http_server(mcp) as url, http_wire_for(url) as wire:
            alice = await create_all(
                wire, "work", [{"who": "a", "n": n} for n in range(20)], headers=ALICE
            )
            (bob,) = await create_all(wire, "work", [{"who": "b", "n": 0}], headers=BOB)
            overlap.opened.set()
            assert (await wire.wait(bob, headers=BOB))["status"] == "completed"
            for task_id in alice:
                await wire.wait(task_id, headers=ALICE)
    assert overlap.most == 1
    assert overlap.started.index("b0") <= 1, overlap.started[:5]


async def test_without_authentication_dedupe_starts_new_work() -> None:
    mcp = FastMCP("anonymous")
    mcp.add_extension(TasksExtension())
    runs: list[int] = []

    @mcp.tool(task=True)
    @task_options(dedupe=timedelta(minutes=5))
    async def report(n: int) -> int:
        runs.append(n)
        return n

    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            first = (await wire.call_tool("report", {"n": 1}))["taskId"]
            second = (await wire.call_tool("report", {"n": 1}))["taskId"]
            for task_id in (first, second):
                await wire.wait(task_id)
    assert first != second and runs == [1, 1]  # no principal: nobody is handed another's task


async def test_applications_sharing_a_store_never_share_a_gate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    release = anyio.Event()
    running: set[str] = set()
    both = anyio.Event()
    servers = []
    for app in ("app-a", "app-b"):
        mcp = FastMCP(app)
        mcp.add_extension(TasksExtension(url))

        @mcp.tool(task=True)
        @task_options(concurrency=1)
        async def deploy(who: str) -> str:
            running.add(who)
            if len(running) == 2:
                both.set()
            await release.wait()
            return who

        servers.append(mcp)
    with anyio.fail_after(30):
        async with connect(servers[0], "memory") as a, connect(servers[1], "memory") as b:
            one = (await a.call_tool("deploy", {"who": "a"}))["taskId"]
            two = (await b.call_tool("deploy", {"who": "b"}))["taskId"]
            await both.wait()  # each application's one slot, at the same time
            release.set()
            assert (await a.wait(one))["status"] == (await b.wait(two))["status"] == "completed"


async def test_a_cancel_heard_while_the_task_is_being_claimed_is_kept(
    store_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastmcp_tasks.server.engine import leases

    mcp = FastMCP("claiming")
    extension = TasksExtension(store_url)
    mcp.add_extension(extension)
    ran: list[int] = []

    @mcp.tool(task=True)
    @task_options(concurrency=5)
    async def job(n: int) -> int:
        ran.append(n)
        return n

    entered, go = anyio.Event(), anyio.Event()
    find_tool = leases.LeaseKeeper.find_tool

    async def held_lookup(self: Any, record: Any, *seen: Any) -> Any:  # awaits (a mount)
        entered.set()
        await go.wait()
        return await find_tool(self, record, *seen)

    monkeypatch.setattr(leases.LeaseKeeper, "find_tool", held_lookup)
    with anyio.fail_after(20):
        async with connect(mcp, "memory") as wire:
            task_id = (await wire.call_tool("job", {"n": 1}))["taskId"]
            await entered.wait()  # claimed (leased), not yet submitted
            await wire.cancel(task_id)
            runner = extension.runner
            assert runner is not None
            while task_id not in runner.missed_cancels:  # noqa: ASYNC110 - engine state
                await anyio.sleep(0.005)
            go.set()
            assert (await wire.wait(task_id))["status"] == "cancelled"
    assert ran == []
