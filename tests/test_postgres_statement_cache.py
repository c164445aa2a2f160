"""Every statement a task's life sends is one psycopg parses once per process, whatever
the schema's name, and every list it sends goes in binary.

psycopg turns a statement's `%(name)s` placeholders into PostgreSQL's `$n` through a
cache, but only for a statement of at most `MAX_CACHED_STATEMENT_LENGTH` bytes (and at
most `MAX_CACHED_STATEMENT_PARAMS` parameters); a longer one is parsed again (a regular
expression over its whole text) every time it is sent. The statements name their
tables by the store's schema, so a long schema name once pushed the ungated claim past
the limit and every claim round paid the parse. On a real server, with the longest
schema name PostgreSQL allows (63 bytes), a task is created every way, claimed both ways,
run, changed, cancelled and read, and its history written: nothing may go through
psycopg's uncached parse, and no list may be sent in text: psycopg's text format escapes
each element with a regular expression (about 5 us an element, 20 us a history event,
against 2 us in binary).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from psycopg import _queries
from psycopg.types import array

from fastmcp_tasks.stores.base import ActiveCaps
from fastmcp_tasks.stores.operations import TaskEvent
from fastmcp_tasks.stores.postgres import PostgresTaskStore
from fastmcp_tasks.stores.postgres.claims import CACHED_LENGTH
from fastmcp_tasks.stores.postgres.sql import Statements
from fastmcp_tasks.testing import make_record
from tests.test_store_contract import postgres_store

pytestmark = pytest.mark.anyio

LONGEST_SCHEMA = 63  # PostgreSQL's NAMEDATALEN - 1


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def longest_schema() -> str:
    prefix = f"test_{time.monotonic_ns() % 10**12}_"
    return prefix + "s" * (LONGEST_SCHEMA - len(prefix))


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    made = postgres_store(schema=longest_schema())
    assert isinstance(made, PostgresTaskStore) and len(made.schema) == LONGEST_SCHEMA
    await made.open()
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
def uncached(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements psycopg parses without its cache while the test runs."""
    parsed: list[str] = []
    original = _queries._query2pg_nocache

    def recording(query: bytes, encoding: str) -> Any:
        parsed.append(bytes(query).decode())
        return original(query, encoding)

    monkeypatch.setattr(_queries, "_query2pg_nocache", recording)
    yield parsed


@pytest.fixture
def text_lists(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[Any]]]:
    """The lists psycopg dumps in text while the test runs."""
    dumped: list[list[Any]] = []
    original = array.ListDumper.dump

    def recording(self: array.ListDumper, obj: list[Any]) -> Any:
        dumped.append(obj)
        return original(self, obj)

    monkeypatch.setattr(array.ListDumper, "dump", recording)
    yield dumped


def test_our_limit_is_psycopgs() -> None:
    assert CACHED_LENGTH == _queries.MAX_CACHED_STATEMENT_LENGTH


def statement_texts(schema: str) -> dict[str, str]:
    """Every statement text of the store's statement sets for `schema`, by name."""
    statements = Statements(schema)
    store = PostgresTaskStore("postgresql://localhost/db", schema=schema)
    sets = {
        "": statements,
        "of_app.": statements.of_app,
        "any_app.": statements.any_app,
        "ops.": store.ops_sql,
        "steps.": store.steps_sql,
    }
    texts = {"get_many": store.get_many_sql}
    for prefix, found in sets.items():
        names = getattr(found, "__dataclass_fields__", None) or vars(found)
        texts.update({prefix + n: v for n in names if isinstance(v := getattr(found, n), str)})
    return texts


def test_every_statement_text_fits_the_cache_with_the_longest_schema_name() -> None:
    texts = statement_texts("s" * LONGEST_SCHEMA)
    assert {"claim_ready", "start_run", "hold", "add_events", "create_capped"} <= {
        name.rpartition(".")[2] for name in texts
    }
    sizes = {name: len(text.encode()) for name, text in texts.items()}
    assert {name: size for name, size in sizes.items() if size > CACHED_LENGTH} == {}


async def test_a_tasks_life_is_parsed_from_the_cache_and_sends_lists_in_binary(
    store: PostgresTaskStore, uncached: list[str], text_lists: list[list[Any]]
) -> None:
    with anyio.fail_after(30):
        caps = ActiveCaps(10_000, 1_000)
        await store.create(make_record(app="a"))  # queued: a worker claims it
        await store.create(make_record(owner="alice"), caps=caps)
        await store.create(make_record(dedupe_key="k"), caps=caps, dedupe_window=60.0)
        await store.create(make_record(gate="g", gate_limit=1))
        now = time.time()
        claimed = await store.claim_queued("w1", now + 30, 10, app="a")
        claimed += await store.claim_queued("w2", now + 30, 10)
        assert len(claimed) == 4
        first, *others = claimed
        await store.renew("w1", frozenset({first.task_id}), now + 60)
        await store.set_status_message(first.task_id, "half way")
        await store.start_run(first.task_id, "w1", "half way")
        await store.transition(first.task_id, "completed", result={"content": []})
        await store.add_events([(first.task_id, TaskEvent(now, "completed"))])
        for task in others:
            await store.request_cancel(task.task_id)
            await store.transition(task.task_id, "cancelled")
        for task in claimed:
            assert await store.get(task.task_id) is not None
            assert await store.peek(task.task_id) is not None
        assert len(await store.get_many([t.task_id for t in claimed])) == 4
        assert [e.kind for e in await store.events(first.task_id)] == ["completed"]
    assert uncached == []
    assert text_lists == []
