"""The PostgreSQL store behind a real PgBouncer in transaction pooling mode.

What docs/how-to/proxies.md says, tested: with `?prepare=false&listen_url=<a session
address>` the pool's connections go through PgBouncer `pool_mode = transaction`
(`tests/pgbouncer.py`: a private PgBouncer in front of the shared server, `test` with
3 server connections shared by more clients), while the change feed LISTENs on the
server itself. Through it: the whole store contract and flow contract; creates, reads,
transitions, caps raced by two instances, claims; the feed carrying a cancel and a
completion between two instances; an MCP server on it (`Client(mcp)`).

And why the docs say so, measured on the pooler itself (database `test_one`, ONE
server connection, so which backend runs what is deterministic):

- a LISTEN through the pooler is lost: the backend that ran it goes back to the pool,
  and the NOTIFY that reaches it is delivered to whichever client holds it then (here
  the notifying client itself), never to the listener;
- prepared statements collide: psycopg's `_pg3_0` of one client "already exists" for
  the next, and a client can run a statement another client prepared under its name.

The store proves a session at open (`postgres.sessions`): without `listen_url` behind
the pooler, or with prepared statements on (the default) through it, `open` is a
`ConfigurationError` naming `listen_url` or `prepare=false`, not a feed that hears
nothing or a "prepared statement already exists" some calls later. Each test uses a
fresh schema and drops it. Without the `pgbouncer` binary these skip (fail when
`CI=true`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from urllib.parse import quote

import anyio
import psycopg
import pytest
from fastmcp import Client

from fastmcp_tasks.client import TasksClientExtension
from fastmcp_tasks.errors import ConfigurationError, StoreError, TaskLimitExceeded
from fastmcp_tasks.stores.base import ActiveCaps, TaskChange, TaskStore
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.testing import StoreContract
from fastmcp_tasks.testing.flow import FlowContract
from tests.pgbouncer import POOL_SIZE, PrivateBouncer
from tests.servers import make_server
from tests.test_store_contract import POSTGRES_URL, drop_schema, postgres_available, record
from tests.wire import connect

pytestmark = pytest.mark.anyio

WAIT = 10.0
DIRECT = POSTGRES_URL.partition("?")[0]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PrivateBouncer]:
    postgres_available()
    pooler = PrivateBouncer()
    pooler.start()
    try:
        pooler.ready()
        yield pooler
    finally:
        pooler.stop()


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"test_{uuid.uuid4().hex[:16]}"
    try:
        yield name
    finally:
        drop_schema(name)


def pooled_url(bouncer: PrivateBouncer, schema: str, *, listen: bool = True, **more: str) -> str:
    """The store URL through the transaction pooler: `prepare=false` and the feed's
    `listen_url` the server itself, unless told otherwise."""
    options = {"schema": schema, "prepare": "false", **more}
    if listen:
        options["listen_url"] = DIRECT
    query = "&".join(f"{key}={quote(value, safe='')}" for key, value in options.items())
    return f"{bouncer.url()}?{query}"


@pytest.fixture
async def pooled(bouncer: PrivateBouncer, schema: str) -> AsyncIterator[PostgresTaskStore]:
    store = PostgresTaskStore(pooled_url(bouncer, schema))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def next_change(feed: AsyncIterator[TaskChange], task_id: str, kind: str) -> TaskChange:
    with anyio.fail_after(WAIT):
        async for change in feed:
            if change.task_id == task_id and change.kind == kind:
                return change
    raise AssertionError("the feed ended")


# --- the contracts, through the pooler ------------------------------------------------


@pytest.fixture
async def contract_store(bouncer: PrivateBouncer, schema: str) -> AsyncIterator[TaskStore]:
    store = PostgresTaskStore(pooled_url(bouncer, schema), max_tasks=StoreContract.max_tasks)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


class TestContractThroughPgBouncer(StoreContract):
    @pytest.fixture
    async def store(self, contract_store: TaskStore) -> TaskStore:
        return contract_store


class TestFlowThroughPgBouncer(FlowContract):
    @pytest.fixture
    async def store(self, contract_store: TaskStore) -> TaskStore:
        return contract_store


# --- the store through the pooler ------------------------------------------------------


async def test_the_pool_goes_through_pgbouncer_and_the_feed_does_not(
    bouncer: PrivateBouncer, pooled: PostgresTaskStore
) -> None:
    tasks = [record() for _ in range(12)]  # more than psycopg's prepare threshold (5)
    for task in tasks:
        await pooled.create(task)
    for task in tasks:
        got = await pooled.get(task.task_id)
        assert got is not None and got.status == "working"
    async with (
        pooled.changes() as feed,
        await psycopg.AsyncConnection.connect(DIRECT, autocommit=True) as raw,
    ):
        await pooled.set_status_message(tasks[0].task_id, "hello")
        await next_change(feed, tasks[0].task_id, "message")
        cur = await raw.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = %s",
            (pooled._feed.listener_pid,),
        )
        listener = await cur.fetchall()
        clients = bouncer.admin("SHOW CLIENTS")
    assert listener == [(f"fastmcp-tasks-feed:{pooled.schema}",)]  # the feed: on the server
    ours = [c for c in clients if c["application_name"] == f"fastmcp-tasks:{pooled.schema}"]
    assert ours and all(c["database"] == "test" for c in ours)  # the pool: through PgBouncer
    assert not [c for c in clients if str(c["application_name"]).startswith("fastmcp-tasks-feed")]
    pools = {p["database"]: p for p in bouncer.admin("SHOW POOLS")}
    assert pools["test"]["pool_mode"] == "transaction"


async def test_transitions_caps_and_claims_work_through_the_pooler(
    bouncer: PrivateBouncer, schema: str
) -> None:
    a = PostgresTaskStore(pooled_url(bouncer, schema))
    b = PostgresTaskStore(pooled_url(bouncer, schema))
    await a.open()
    await b.open()
    try:
        first = record()
        await a.create(first)
        assert (await b.transition(first.task_id, "input_required")) is not None
        done = await a.transition(first.task_id, "completed", result={"content": []})
        assert done is not None and done.status == "completed"
        assert await b.transition(first.task_id, "failed") is None  # terminal stays
        caps = ActiveCaps(total=3)
        outcomes: list[str] = []

        async def create(store: PostgresTaskStore) -> None:
            try:
                await store.create(record(), caps=caps)
                outcomes.append("created")
            except TaskLimitExceeded:
                outcomes.append("refused")

        async with anyio.create_task_group() as tg:  # 16 racing on 3 server connections
            for i in range(16):
                tg.start_soon(create, a if i % 2 else b)
        assert sorted(outcomes) == ["created"] * 3 + ["refused"] * 13
        later = time.time() + 60
        claimed_a = await a.claim_queued("wa", later, 2)
        claimed_b = await b.claim_queued("wb", later, 5)
        ids = [r.task_id for r in claimed_a + claimed_b]
        assert len(ids) == len(set(ids)) == 3  # each queued task to exactly one worker
    finally:
        await b.close()
        await a.close()
    assert POOL_SIZE < a.pool_max + b.pool_max  # the clients really shared the backends


async def test_the_feed_carries_a_cancel_and_a_completion_between_instances(
    bouncer: PrivateBouncer, schema: str
) -> None:
    runner = PostgresTaskStore(pooled_url(bouncer, schema))
    front = PostgresTaskStore(pooled_url(bouncer, schema))
    await runner.open()
    await front.open()
    try:
        task, other = record(), record()
        await front.create(task)
        await front.create(other)
        async with runner.changes(task_ids=frozenset({task.task_id})) as cancels:
            await front.request_cancel(task.task_id)
            await next_change(cancels, task.task_id, "cancel_requested")
        async with front.changes() as feed:
            await runner.transition(other.task_id, "completed", result={"content": []})
            change = await next_change(feed, other.task_id, "status")
        assert change.status == "completed"
    finally:
        await front.close()
        await runner.close()


async def test_an_mcp_server_runs_and_cancels_tasks_through_the_pooler(
    bouncer: PrivateBouncer, schema: str
) -> None:
    url = pooled_url(bouncer, schema)
    # a lease of 120 s heartbeats every 40 s: the cancel cannot arrive that way in time
    runner, probes = make_server(url=url, lease=timedelta(seconds=120))
    front, _ = make_server(url=url, concurrency=0)
    async with Client(runner, extensions=[TasksClientExtension()]) as client:
        result = await client.call_tool("echo", {"text": "through pgbouncer"})
    assert result.data == "through pgbouncer"
    async with connect(runner, "memory") as run_wire, connect(front, "memory") as wire:
        created = await run_wire.call_tool("blocker", {"key": "bounced"})
        await probes.event("started", "bounced").wait()
        await wire.cancel(created["taskId"])  # another server: reaches the runner by the feed
        await probes.event("cancelled", "bounced").wait()
        done = await wire.wait(created["taskId"])
    assert done["status"] == "cancelled"


# --- why: LISTEN and prepared statements through a transaction pooler --------------------


async def test_a_listen_through_the_pooler_is_delivered_to_another_client(
    bouncer: PrivateBouncer,
) -> None:
    channel = f"probe_{uuid.uuid4().hex[:12]}"
    one = bouncer.url("test_one")  # one server connection behind every client
    async with (
        await psycopg.AsyncConnection.connect(one, autocommit=True) as listener,
        await psycopg.AsyncConnection.connect(one, autocommit=True) as notifier,
    ):
        await listener.execute(f"LISTEN {channel}")  # succeeds, on the shared backend
        heard: list[str] = []
        notifier.add_notify_handler(lambda n: heard.append(n.payload))
        await notifier.execute("SELECT pg_notify(%s, 'for the listener')", (channel,))
        assert heard == ["for the listener"]  # the backend's one delivery went to the notifier
        await listener.execute("SELECT 1")  # the listener's next turn on that backend
        assert [n async for n in listener.notifies(timeout=0)] == []  # nothing, ever


async def test_prepared_statements_through_the_pooler_collide_and_cross(
    bouncer: PrivateBouncer,
) -> None:
    url, query = bouncer.url("test"), "SELECT %s::text || ' from {}'"
    connect_ = psycopg.AsyncConnection.connect
    async with (
        await connect_(url, autocommit=True) as a,
        await connect_(url, autocommit=True) as b,
        await connect_(url, autocommit=True) as c,
    ):
        async with a.transaction(), b.transaction():  # two backends held: a on S1, b on S2
            await a.execute(query.format("a"), ("1",), prepare=True)  # _pg3_0 on S1
            await b.execute(query.format("b"), ("2",), prepare=True)  # _pg3_0 on S2
            await c.execute("SELECT 1")  # waits for a backend: gets S3
        async with c.transaction():
            await c.execute("SELECT 1")
            with pytest.raises(psycopg.errors.DuplicatePreparedStatement, match="_pg3_0"):
                await c.execute(query.format("c"), ("3",), prepare=True)
        async with b.transaction():  # holds one backend while a runs "its" statement
            await b.execute("SELECT 1")
            rows = await (await a.execute(query.format("a"), ("4",), prepare=True)).fetchall()
    assert rows == [("4 from b",)]  # a's parameters, b's statement: no error at all


#: The store timeout of an open that must be refused: the session probe waits half of it
#: for a notification that never comes, and the whole open (connecting, the probe, the
#: schema check) must fit in it on a loaded machine too (1 s did not, once).
REFUSAL_TIMEOUT = "4"


async def test_open_refuses_a_feed_through_the_pooler_naming_listen_url(
    bouncer: PrivateBouncer, schema: str
) -> None:
    store = PostgresTaskStore(pooled_url(bouncer, schema, listen=False, timeout=REFUSAL_TIMEOUT))
    with pytest.raises(ConfigurationError, match="listen_url=") as info:
        await store.open()
    assert "prepare=false" not in str(info.value)  # it has that already
    await store.close()


async def test_open_refuses_prepared_statements_through_the_pooler_naming_prepare_false(
    bouncer: PrivateBouncer, schema: str
) -> None:
    url = pooled_url(bouncer, schema, timeout=REFUSAL_TIMEOUT)
    url = url.replace("prepare=false", "prepare=true")
    store = PostgresTaskStore(url)
    with pytest.raises(ConfigurationError, match="prepare=false") as info:
        await store.open()
    assert "listen_url=" not in str(info.value)  # its feed has a session
    await store.close()
    bare = PostgresTaskStore(f"{bouncer.url()}?schema={schema}&timeout={REFUSAL_TIMEOUT}")
    with pytest.raises(ConfigurationError, match=r"listen_url=.*prepare=false"):
        await bare.open()
    await bare.close()


async def test_a_session_mode_pooler_is_fine_for_everything(
    bouncer: PrivateBouncer, schema: str
) -> None:
    store = PostgresTaskStore(f"{bouncer.url('test_session')}?schema={schema}")
    await store.open()
    try:
        task = record()
        await store.create(task)
        async with store.changes() as feed:
            await store.request_cancel(task.task_id)
            await next_change(feed, task.task_id, "cancel_requested")
    finally:
        await store.close()


async def test_an_unreachable_listen_url_is_a_store_error_at_open(schema: str) -> None:
    postgres_available()
    dead = "postgresql://app:s3cret@127.0.0.1:1/test"
    store = PostgresTaskStore(f"{DIRECT}?schema={schema}&timeout=2&listen_url={quote(dead)}")
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/test is unreachable") as info:
        await store.open()
    assert "s3cret" not in str(info.value)
    await store.close()
