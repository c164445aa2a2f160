"""PostgreSQL notifies a quiet change only while some reader wants quiet changes.

Seen from a raw LISTEN connection on the store's channel: with no reader registered, a
status or message change sends no notification, while a cancel request still does. A
reader with a subscriber of quiet kinds registers before that subscriber starts (also
when it joins a reader whose row has not lapsed yet but that nobody renews), renews its
row while it has one without waking anyone, and deletes it when the store closes. A
quiet change whose notification was skipped (its statement began before the
registration) still reaches the subscriber, by the read that comes with each renewal.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.feed_parts import QUIET
from tests import test_postgres_store
from tests.test_postgres_store import WAIT, next_change
from tests.test_store_contract import POSTGRES_URL, record

pytestmark = pytest.mark.anyio

pair = test_postgres_store.pair  # the fixture: two store instances on one schema


@pytest.fixture
async def raw(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection that LISTENs on the pair's channel."""
    conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True)
    async with conn:
        await conn.execute(f'LISTEN "{pair[0].sql.channel}"')
        yield conn


async def payloads_until(conn: psycopg.AsyncConnection[Any], last: str) -> list[str]:
    """The notification payloads heard, up to and including one starting with `last`."""
    heard: list[str] = []
    with anyio.fail_after(WAIT):
        async for notify in conn.notifies():
            heard.append(notify.payload)
            if notify.payload.startswith(last):
                return heard
    raise AssertionError("the notifications ended")


async def registered(store: PostgresTaskStore) -> list[tuple[str, float]]:
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        cur = await conn.execute(f"SELECT reader, until FROM {store.schema}.quiet_readers")
        return [(str(reader), float(until)) for reader, until in await cur.fetchall()]


async def test_no_reader_wants_them_so_a_quiet_change_notifies_nobody(
    pair: tuple[PostgresTaskStore, PostgresTaskStore], raw: psycopg.AsyncConnection[Any]
) -> None:
    _, writer = pair
    task = record(app="app")
    await writer.create(task)
    for step in range(3):
        await writer.set_status_message(task.task_id, f"step {step}")
    await writer.request_cancel(task.task_id)  # waking: notified whoever listens
    newest = await writer._newest_change()
    heard = await payloads_until(raw, str(newest))
    assert not [payload for payload in heard if payload.endswith(QUIET)], heard
    assert heard[-1] == str(newest)
    assert await registered(writer) == []


async def test_a_reader_with_a_quiet_subscriber_registers_renews_and_leaves(
    pair: tuple[PostgresTaskStore, PostgresTaskStore], raw: psycopg.AsyncConnection[Any]
) -> None:
    listener, writer = pair
    listener._feed.quiet.ttl = 1.0  # renewed every 0.5 s
    task = record(app="app")
    await writer.create(task)
    with anyio.fail_after(WAIT):
        async with listener.changes(kinds=frozenset({"message"})) as feed:
            ((reader, first),) = await registered(listener)
            assert reader == listener._feed.quiet.reader
            while (await registered(listener))[0][1] <= first:  # noqa: ASYNC110 - a table
                await anyio.sleep(0.1)  # renewed by its reader
            await writer.set_status_message(task.task_id, "now")
            change = await next_change(feed)
            assert (change.kind, change.task_id) == ("message", task.task_id)
        newest = await writer._newest_change()
        heard = await payloads_until(raw, f"{newest}{QUIET}")
        assert heard.count("quiet-readers") == 1  # the registration woke readers; renewals not
    await listener._feed.close()  # as the store's close does first
    assert await registered(listener) == []


async def test_a_change_whose_notification_was_skipped_still_arrives_by_the_renewal_read(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    listener, writer = pair
    listener._feed.quiet.ttl = 1.0
    task = record(app="app")
    await writer.create(task)
    with anyio.fail_after(WAIT):
        async with listener.changes(kinds=frozenset({"message"})) as feed:
            async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as conn:
                # as a statement that began before the registration committed: no row
                await conn.execute(f"DELETE FROM {listener.schema}.quiet_readers")
                await conn.commit()
            started = time.monotonic()
            await writer.set_status_message(task.task_id, "unnotified")
            change = await next_change(feed)
            assert (change.kind, change.task_id) == ("message", task.task_id)
            assert time.monotonic() - started < WAIT


async def test_a_quiet_subscriber_joining_a_waiting_worker_reader_hears_at_once(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    listener, writer = pair
    task = record(app="app")
    await writer.create(task)
    with anyio.fail_after(WAIT):
        async with listener.changes(kinds=frozenset({"cancel_requested"})):
            await anyio.sleep(0.2)  # its reader now waits, wanting no quiet change
            async with listener.changes(kinds=frozenset({"message"})) as feed:
                await writer.set_status_message(task.task_id, "now")
                change = await next_change(feed)
                assert (change.kind, change.task_id) == ("message", task.task_id)


async def test_a_quiet_subscriber_joining_while_the_last_row_has_not_lapsed_registers(
    pair: tuple[PostgresTaskStore, PostgresTaskStore],
) -> None:
    """A row nobody renews any more lapses: the next quiet subscriber registers at once,
    even though that row's renewal is not due yet."""
    listener, writer = pair
    listener._feed.quiet.ttl = 1.0
    task = record(app="app")
    await writer.create(task)
    with anyio.fail_after(WAIT):
        async with listener.changes(kinds=frozenset({"cancel_requested"})) as cancels:
            async with listener.changes(kinds=frozenset({"message"})):
                pass  # registered until 1 s from now; renewal due in 0.5 s
            await writer.request_cancel(task.task_id)
            await next_change(cancels)  # its reader has read it, and now waits wanting none
            async with listener.changes(kinds=frozenset({"message"})) as feed:
                await anyio.sleep(1.5)  # the first row would have lapsed by now
                await writer.set_status_message(task.task_id, "late")
                change = await next_change(feed)
                assert (change.kind, change.task_id) == ("message", task.task_id)
