"""The PostgreSQL store while its server is away: calls fail at once, not after a wait.

A `Gate` relays 127.0.0.1:<port> to the shared server (`POSTGRES_URL`, never stopped)
and can go away as a stopped server does: it stops listening (new connections are
refused) and closes every connection it relays (the store's pooled ones see EOF), then
come back on the same port. Through it: while the server refuses, every call is a
`StoreError` well within the timeout, round after round (not only the first after the
stop); once it is back the first calls work, on fresh connections, without reopening
the store; stale pooled connections are never handed out after a restart. A busy pool
on a healthy server still waits its whole timeout. Plus the per-connection settings
(keepalives, `statement_timeout`) and whether the URL's own win. Each test uses a fresh
random schema and drops it; without a server at `POSTGRES_URL` they skip.

And a black hole (`tests.private_servers.blackhole_proxy`): a server that stops answering
without closing anything. Each request through the extension still answers within one
`store_timeout`, even when the store's own timeout is longer, however the driver cleans
up the statement it was cancelled in.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from anyio.abc import SocketStream, TaskGroup, TaskStatus

from fastmcp_tasks.errors import StoreError, StoreTimeout
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.liveness import session_defaults
from tests.private_servers import answers_within_one_bound, blackhole_proxy
from tests.test_store_contract import (
    POSTGRES_URL,
    drop_schema,
    postgres_available,
    postgres_store,
    record,
)
from tests.wire import free_port

pytestmark = pytest.mark.anyio

WAIT = 10.0
#: How long a call may take to fail while the server refuses connections.
FAST = 0.5


class Gate:
    """A TCP relay to the shared server that can go away and come back (module doc)."""

    def __init__(self) -> None:
        target = urlsplit(POSTGRES_URL)
        self.host, self.target = target.hostname or "127.0.0.1", target.port or 5432
        self.port = free_port()
        self.url = urlunsplit(
            target._replace(netloc=f"{target.username or 'postgres'}@127.0.0.1:{self.port}")
        )
        self._group: TaskGroup | None = None
        self._scope: anyio.CancelScope | None = None
        self._ended = anyio.Event()

    async def open(self, group: TaskGroup | None = None) -> None:
        """Listen (again, on the same port: in the task group of the first open) and relay."""
        self._group = group or self._group
        assert self._group is not None
        self._ended = anyio.Event()
        await self._group.start(self._serve)

    async def shut(self) -> None:
        """Stop listening and close every relayed connection; returns once all are closed."""
        assert self._scope is not None
        self._scope.cancel()
        await self._ended.wait()

    async def _serve(self, *, task_status: TaskStatus[None]) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                listener = await anyio.create_tcp_listener(
                    local_host="127.0.0.1", local_port=self.port
                )
                async with listener:
                    task_status.started()
                    await listener.serve(self._relay)
        finally:
            self._ended.set()

    async def _relay(self, client: SocketStream) -> None:
        async with client:
            try:
                server = await anyio.connect_tcp(self.host, self.target)
            except OSError:
                return
            async with server, anyio.create_task_group() as pumps:
                pumps.start_soon(self._pump, client, server)
                pumps.start_soon(self._pump, server, client)

    @staticmethod
    async def _pump(source: SocketStream, sink: SocketStream) -> None:
        try:
            async for chunk in source:
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            await sink.aclose()


@asynccontextmanager
async def through_gate(**options: Any) -> AsyncIterator[tuple[PostgresTaskStore, Gate]]:
    """An open store in a fresh schema, connected through an open `Gate`."""
    postgres_available()
    gate = Gate()
    schema = f"test_{uuid.uuid4().hex[:16]}"
    store = PostgresTaskStore(gate.url, schema=schema, **options)
    async with anyio.create_task_group() as group:
        await gate.open(group)
        try:
            with anyio.fail_after(WAIT):
                await store.open()
            yield store, gate
        finally:
            with anyio.CancelScope(shield=True):
                await store.close()
                drop_schema(schema)
            group.cancel_scope.cancel()


async def fails_fast(call: Callable[[], Awaitable[object]]) -> StoreError:
    """The `StoreError` `call` fails with, asserted to come within `FAST` seconds."""
    started = anyio.current_time()
    with anyio.fail_after(WAIT), pytest.raises(StoreError) as info:
        await call()
    took = anyio.current_time() - started
    assert took < FAST, f"failed after {took:.2f} s: {info.value}"
    return info.value


async def test_calls_fail_at_once_while_the_server_refuses_and_work_when_it_is_back() -> None:
    async with through_gate(timeout=5.0) as (store, gate):
        task = record()
        await store.create(task)
        await gate.shut()
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "get": lambda: store.get(task.task_id),
            "create": lambda: store.create(record()),
            "request_cancel": lambda: store.request_cancel(task.task_id),
            "set_status_message": lambda: store.set_status_message(task.task_id, "down"),
            "answer_input": lambda: store.answer_input(task.task_id, {"k": 1}),
        }
        for _ in range(3):  # the first round meets the dead connections, the next none
            for call in calls.values():
                error = await fails_fast(call)
                assert not isinstance(error, StoreTimeout)
                assert "unreachable" in str(error)
        await gate.open()
        with anyio.fail_after(WAIT):  # the very first calls work: nothing to retry
            assert await store.get(task.task_id) is not None
            got = await store.set_status_message(task.task_id, "back")
            assert got is not None and got.status_message == "back"
            await store.create(record())


async def test_no_stale_pooled_connection_is_handed_out_after_a_restart() -> None:
    async with through_gate(timeout=5.0, pool_min=3, pool_max=3) as (store, gate):
        task = record()
        await store.create(task)
        with anyio.fail_after(WAIT):
            await store._require().wait(WAIT)  # three idle connections
        await gate.shut()  # every pooled connection is now closed by its "server"
        await gate.open()
        with anyio.fail_after(WAIT):  # writes are not retried: each must get a live one
            for n in range(4):
                got = await store.set_status_message(task.task_id, f"after restart {n}")
                assert got is not None


async def test_a_busy_pool_on_a_healthy_server_waits_its_whole_timeout() -> None:
    store = postgres_store(pool_min=1, pool_max=1, timeout=1.0)
    assert isinstance(store, PostgresTaskStore)
    await store.open()
    try:
        pool = store._require()
        with anyio.fail_after(WAIT):
            busy = await pool.getconn()  # the only connection, in use
            try:
                started = anyio.current_time()
                with pytest.raises(StoreTimeout):
                    await store.get("x")
                assert anyio.current_time() - started >= 0.9
            finally:
                await pool.putconn(busy)
            assert await store.get("x") is None
    finally:
        await store.close()


def test_keepalives_and_a_statement_timeout_unless_the_url_sets_them() -> None:
    options, limit = session_defaults("postgresql://h/db", 5.0)
    assert options == {
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }
    assert limit == "SET statement_timeout = 6000"
    options, limit = session_defaults(
        "postgresql://h/db?keepalives_idle=60&options=-c%20statement_timeout%3D100", 5.0
    )
    assert "keepalives_idle" not in options and options["keepalives_count"] == 3
    assert limit is None
    assert session_defaults("postgresql://h/db", 5.0, sessions=False)[1] is None


async def test_pooled_connections_bound_their_statements_on_the_server() -> None:
    store = postgres_store(timeout=2.0)
    assert isinstance(store, PostgresTaskStore)
    await store.open()
    try:
        with anyio.fail_after(WAIT):
            assert await store._query("SHOW statement_timeout", read=True) == [("3s",)]
    finally:
        await store.close()


async def test_a_black_holed_server_answers_each_request_within_one_store_timeout() -> None:
    """psycopg cancels a statement by asking the server (another connection) and waiting
    for the reply: the bound must end that wait too, not only the statement."""
    postgres_available()
    target = urlsplit(POSTGRES_URL)
    schema = f"test_{uuid.uuid4().hex[:16]}"
    host, port = target.hostname or "127.0.0.1", target.port or 5432
    try:
        async with blackhole_proxy(port, target_host=host) as hole:
            netloc = f"{target.username or 'postgres'}@127.0.0.1:{hole.port}"
            url = urlunsplit(target._replace(netloc=netloc, query=f"schema={schema}&timeout=30"))
            await answers_within_one_bound(url, hole)
    finally:
        drop_schema(schema)
