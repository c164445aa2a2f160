"""The task engine never dies: every store failure the engine meets, injected by `FaultyStore`.

Each test runs over the memory, SQLite and Redis stores (Redis skips loudly without a
server, fails under `CI=true`), with the extension built on `FaultyStore(inner)`; the
tests wait on the store's "fault fired" events and poll with deadlines, never sleep.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from fastmcp_tasks import TaskRecord, TasksExtension, TaskStore
from fastmcp_tasks.errors import ConfigurationError, StoreError
from tests.fault_server import (
    NAME,
    assert_unavailable,
    call_until_created,
    completes,
    exception_tree,
    fault_server,
    health,
    health_until,
    healthy,
    nothing_stuck,
    served,
    store_factory,
)
from tests.faults import FaultyStore, message_write, outcome_write, to
from tests.test_listen import _listen_params, http_listen
from tests.wire import WireError, http_server, http_wire_for, memory_wire

pytestmark = pytest.mark.anyio

TIMEOUT = timedelta(seconds=1)  # store_timeout where a test needs the bound
Inner = Callable[[], TaskStore]


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def inner(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Inner]:
    """A factory of unopened stores, all on the same data (same file, same Redis prefix)."""
    factory, cleanup = store_factory(str(request.param), tmp_path)
    yield factory
    await cleanup()


@pytest.fixture
def durable(inner: Inner) -> Inner:
    if not inner().durable:
        pytest.skip("memory:// is not shared: nothing to recover or queue for a worker")
    return inner


# --- the runner's writes -------------------------------------------------------------


@pytest.mark.parametrize("lost", ["refused", "lost_reply"])
@pytest.mark.parametrize("outcome", ["completed", "failed", "cancelled"])
async def test_an_outcome_write_that_fails_once_still_ends_right(
    inner: Inner, outcome: str, lost: str
) -> None:
    store = FaultyStore(inner())
    plan = store.fail if lost == "refused" else store.fail_after_apply
    write = outcome_write(store.inner)
    plan(write, when=to(outcome))
    async with served(store) as (wire, tasks, probes):
        if outcome == "completed":
            task_id = (await wire.call_tool("quick", {"text": "x"}))["taskId"]
        elif outcome == "failed":
            task_id = (await wire.call_tool("refuse", {"reason": "no"}))["taskId"]
        else:
            task_id = (await wire.call_tool("blocker", {"key": "c"}))["taskId"]
            await probes.event("c.started").wait()
            await wire.cancel(task_id)
        done = await wire.wait(task_id)
        assert store.faults_fired[write] == 1
        assert done["status"] == outcome, done
        if outcome == "completed":
            assert done["result"]["content"][0]["text"] == "quick x"
        elif outcome == "failed":
            assert done["error"]["code"] == -32050
        else:
            assert probes.event("c.cancelled").is_set()
        await completes(wire, "quick", {"text": "after"}, "quick after")
        assert healthy(await health_until(tasks, healthy))


async def test_a_programming_error_in_the_outcome_write_fails_only_that_task(
    inner: Inner,
) -> None:
    store = FaultyStore(inner())
    write = outcome_write(store.inner)
    store.fail(write, error=TypeError("unexpected keyword"), when=to("completed"))
    async with served(store) as (wire, tasks, _):
        done = await wire.wait((await wire.call_tool("quick", {"text": "bug"}))["taskId"])
        assert done["status"] == "failed", done
        assert done["error"]["code"] == -32603 and done["error"]["message"]
        await completes(wire, "quick", {"text": "next"}, "quick next")
        state = await health(tasks)
        assert state.loops and all(state.loops.values()), state.loops


async def test_failing_status_message_writes_never_fail_the_task(inner: Inner) -> None:
    store = FaultyStore(inner())
    write = message_write(store.inner)
    store.fail(write, times=50)
    async with served(store) as (wire, _, _):
        await completes(wire, "progress", {"steps": 3}, "counted 3")
        await completes(wire, "reporting", {}, "reported")
        assert store.faults_fired[write] >= 2


@pytest.mark.parametrize("lost", ["refused", "lost_reply"])
@pytest.mark.parametrize("method", ["request_input", "take_answers"])
async def test_an_input_round_survives_a_failed_write(inner: Inner, method: str, lost: str) -> None:
    store = FaultyStore(inner())
    if lost == "lost_reply" and not store.durable:
        pytest.skip("the memory store cannot lose a reply")
    (store.fail if lost == "refused" else store.fail_after_apply)(method)
    async with served(store) as (wire, _, probes):
        task_id = (await wire.call_tool("ask", {"question": "ship?"}))["taskId"]
        parked = await wire.wait_for(task_id, lambda t: t.get("inputRequests"))
        (key,) = parked["inputRequests"]
        await wire.update(task_id, {key: {"action": "accept", "content": {"value": True}}})
        done = await wire.wait(task_id)
        assert store.faults_fired[method] == 1
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "ship? -> accept:True"
        assert probes.runs.count("ask ship?") == 1


async def test_a_created_task_whose_reply_was_lost_is_never_stuck(durable: Inner) -> None:
    store = FaultyStore(durable())  # (the memory store cannot lose a reply)
    store.fail_after_apply("create")
    async with served(store, lease=timedelta(seconds=1)) as (wire, _, _):
        try:
            created = await wire.call_tool("quick", {"text": "lost"})
        except WireError as error:
            assert_unavailable(error, store.inner)
        else:
            assert (await wire.wait(created["taskId"]))["status"] == "completed"
        await nothing_stuck(store.inner)  # run, or ended: never `working` for ever


# --- the change feed -----------------------------------------------------------------


async def test_a_cancel_and_an_answer_made_while_the_feed_was_broken_apply_once(
    inner: Inner,
) -> None:
    store = FaultyStore(inner())
    async with served(store) as (wire, _, probes):
        running = (await wire.call_tool("blocker", {"key": "feed"}))["taskId"]
        asked = (await wire.call_tool("ask", {"question": "feed?"}))["taskId"]
        await probes.event("feed.started").wait()
        (key,) = (await wire.wait_for(asked, lambda t: t.get("inputRequests")))["inputRequests"]
        assert store.break_feed(keep_down=True) >= 1
        await store.fired("changes.next").wait()  # the engine's feed broke
        await store.fired("changes").wait()  # and it tried to subscribe again
        await wire.cancel(running)
        await wire.update(asked, {key: {"action": "accept", "content": {"value": False}}})
        store.restore_feed()
        cancelled = await wire.wait(running, within=15)
        answered = await wire.wait(asked, within=15)
        assert cancelled["status"] == "cancelled", cancelled
        assert probes.event("feed.cancelled").is_set()
        assert answered["result"]["content"][0]["text"] == "feed? -> accept:False"
        assert probes.runs.count("feed") == 1 and probes.runs.count("ask feed?") == 1
        # the new subscription works: a cancel made now arrives through it
        later = (await wire.call_tool("blocker", {"key": "later"}))["taskId"]
        await probes.event("later.started").wait()
        await wire.cancel(later)
        assert (await wire.wait(later))["status"] == "cancelled"


async def test_listen_survives_a_broken_feed(inner: Inner) -> None:
    store = FaultyStore(inner())
    mcp, _, probes = fault_server(store=store)
    async with http_server(mcp) as url, http_wire_for(url) as wire:
        task_id = (await wire.call_tool("blocker", {"key": "pushed"}))["taskId"]
        await probes.event("pushed.started").wait()
        async with http_listen(url, _listen_params([task_id])) as frames:
            await frames.next()  # the ack
            store.break_feed()
            await store.fired("changes.next").wait()
            probes.release("pushed")
            final = await frames.until(lambda f: f.get("params", {}).get("status") == "completed")
        assert final["params"]["result"]["content"][0]["text"] == "released pushed"


# --- the background loops ------------------------------------------------------------


async def test_the_sweeper_keeps_sweeping(inner: Inner) -> None:
    store = FaultyStore(inner())
    store.fail("purge_expired", times=5)
    every = timedelta(milliseconds=20)
    async with served(store, sweep_interval=every) as (wire, tasks, _):
        await store.wait_fired("purge_expired", 5)
        await store.wait_calls("purge_expired", 8)  # it went on after the failures
        await completes(wire, "quick", {"text": "swept"}, "quick swept")
        state = await health(tasks)
        assert state.loops and all(state.loops.values()), state.loops


async def test_the_heartbeat_keeps_renewing(inner: Inner) -> None:
    store = FaultyStore(inner())
    async with served(store, lease=timedelta(milliseconds=600)) as (wire, _, probes):
        task_id = (await wire.call_tool("blocker", {"key": "beat"}))["taskId"]
        await probes.event("beat.started").wait()
        await store.wait_calls("renew", 1)
        store.fail("renew", times=3)
        await store.wait_fired("renew", 3)
        renewed = store.calls["renew"]
        await store.wait_calls("renew", renewed + 2)
        if store.durable:
            record = await store.inner.get(task_id)
            assert record is not None and (record.lease_expires or 0) > time.time()
        probes.release("beat")
        assert (await wire.wait(task_id))["status"] == "completed"


async def test_the_recovery_scan_retries(durable: Inner) -> None:
    store = FaultyStore(durable())
    now = time.time()
    orphan = TaskRecord(
        task_id=secrets.token_urlsafe(24).replace("-", "x"),
        tool="again",
        status="working",
        created_at=now - 20,
        updated_at=now - 20,
        arguments={"text": "orphan"},
        poll_interval_ms=50,
        retention_ms=60_000,
        context={"inputKinds": []},
        attempts=1,
        lease_owner="elsewhere:1:gone",
        lease_expires=now - 10,
        app=NAME,
    )
    await store.inner.open()
    await store.inner.create(orphan)
    for method in ("active_leases", "active_tasks"):
        store.fail(method, times=2)
    async with served(store, lease=timedelta(seconds=1)) as (wire, _, _):
        done = await wire.wait(orphan.task_id, within=15)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "again orphan"
        assert store.total_fired >= 2


@pytest.mark.parametrize("lost", ["refused", "lost_reply"])
async def test_a_worker_keeps_taking_queued_tasks(durable: Inner, lost: str) -> None:
    worker_store, lease = FaultyStore(durable()), timedelta(seconds=1)
    front, _, _ = fault_server(store=durable(), concurrency=0, lease=lease)
    worker, _, _ = fault_server(store=worker_store, concurrency=2, lease=lease)
    async with memory_wire(front) as wire:
        task_id = (await wire.call_tool("quick", {"text": "queued"}))["taskId"]  # no worker yet
        if lost == "refused":
            worker_store.fail("claim_queued", times=3)
        else:  # the first claim takes the task (and begins its run), and its reply is
            # lost: the worker takes it back at once, so nobody recovers it as interrupted
            worker_store.fail_after_apply("claim_queued")
        async with worker._lifespan_manager():
            await worker_store.wait_fired("claim_queued", 3 if lost == "refused" else 1)
            done = await wire.wait(task_id, within=15)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "quick queued"


# --- the store unreachable -----------------------------------------------------------


@pytest.mark.parametrize("hang", [False, True], ids=["refused", "black-holed"])
async def test_a_full_outage_answers_promptly_then_resumes(
    inner: Inner, hang: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fastmcp_tasks")
    store = FaultyStore(inner())
    async with served(store, store_timeout=TIMEOUT) as (wire, tasks, probes):
        running = (await wire.call_tool("blocker", {"key": "out"}))["taskId"]
        await probes.event("out.started").wait()
        caplog.clear()
        store.outage(hang=hang)
        for request in (
            lambda: wire.call_tool("quick", {"text": "refused"}),
            lambda: wire.get(running),
            lambda: wire.cancel(running),
            lambda: wire.update(running, {"k": {"action": "cancel"}}),
        ):
            with anyio.fail_after(TIMEOUT.total_seconds() + 2):
                with pytest.raises(WireError) as refused:
                    await request()
            assert_unavailable(refused.value, store.inner)
        with anyio.fail_after(2):
            assert (await wire.call_tool("plain", {"x": 1}))["content"][0]["text"] == "2"
        state = await health_until(tasks, lambda s: s.status == "degraded")
        assert not state.store_reachable and isinstance(state.degraded_since, float)
        assert state.last_error
        probes.release("out")  # it finishes while the store is out: kept in memory
        await health_until(tasks, lambda s: s.pending_outcomes >= 1)
        store.restore()
        state = await health_until(tasks, healthy, within=15)
        assert state.degraded_since is None and state.as_dict()["status"] == "ok"
        logged = [r.getMessage() for r in caplog.records if r.name.startswith("fastmcp_tasks")]
        assert 1 <= len(logged) <= 2, logged  # once per outage (and once when it is over)
        done = await store.inner.get(running)
        assert done is not None and done.status == "completed"
        assert (await wire.get(running))["result"]["content"][0]["text"] == "released out"
        await completes(wire, "quick", {"text": "back"}, "quick back")
        await nothing_stuck(store.inner)


async def test_an_outcome_pending_at_shutdown_is_left_to_recovery(durable: Inner) -> None:
    store, lease = FaultyStore(durable()), timedelta(seconds=1)
    async with served(store, lease=lease, store_timeout=TIMEOUT) as (wire, tasks, probes):
        task_id = (await wire.call_tool("blocker", {"key": "last"}))["taskId"]
        await probes.event("last.started").wait()
        store.outage()
        probes.release("last")
        await health_until(tasks, lambda s: s.pending_outcomes >= 1)
    store.restore()  # the server stopped with the outcome unwritten; another one starts
    async with served(FaultyStore(durable()), lease=lease) as (wire, _, _):
        done = await wire.wait(task_id, within=15)
    assert done["status"] in ("completed", "failed"), done
    assert done["status"] == "completed" or "interrupted" in done["error"]["message"], done


async def test_startup_degraded_serves_then_heals(inner: Inner) -> None:
    store = FaultyStore(inner())
    store.outage()
    starting = anyio.current_time()
    async with served(store, store_timeout=TIMEOUT) as (wire, tasks, _):
        assert anyio.current_time() - starting < 10  # startup did not wait for the store
        assert (await wire.call_tool("plain", {"x": 41}))["content"][0]["text"] == "42"
        with anyio.fail_after(TIMEOUT.total_seconds() + 2), pytest.raises(WireError) as refused:
            await wire.call_tool("quick", {"text": "early"})
        assert_unavailable(refused.value, store.inner)
        state = await health(tasks)
        assert state.status in ("degraded", "starting") and not state.store_reachable
        store.restore()
        task_id = await call_until_created(wire, "quick", {"text": "healed"})
        assert (await wire.wait(task_id))["status"] == "completed"
        assert healthy(await health_until(tasks, healthy))


async def test_startup_wait_blocks_until_the_store_answers(inner: Inner) -> None:
    store = FaultyStore(inner())
    store.outage()
    up = anyio.Event()

    async def serve() -> None:
        async with served(store, startup="wait") as (wire, _, _):
            up.set()
            await completes(wire, "quick", {"text": "waited"}, "quick waited")

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        await store.wait_fired(None, 2)  # it tried, twice, and is still waiting
        assert not up.is_set()
        store.restore()
        with anyio.fail_after(15):
            await up.wait()


async def test_startup_fail_raises(inner: Inner) -> None:
    store = FaultyStore(inner())
    store.outage()
    with anyio.fail_after(10), pytest.raises(BaseException) as failed:
        async with served(store, startup="fail"):
            pass
    assert any(isinstance(e, StoreError) for e in exception_tree(failed.value)), repr(failed.value)


async def test_a_bad_url_or_a_foreign_file_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        TasksExtension(url="redis://127.0.0.1:6379/not-a-db")
    foreign = tmp_path / "theirs.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.close()
    mcp, _, _ = fault_server(url=f"sqlite:///{foreign}")
    with anyio.fail_after(5), pytest.raises(BaseException) as failed:
        async with memory_wire(mcp):
            pass
    assert any(
        isinstance(e, ConfigurationError) and "theirs.db" in str(e)
        for e in exception_tree(failed.value)
    ), repr(failed.value)
