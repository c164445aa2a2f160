"""The flow-control store contract (`fastmcp_tasks.testing.flow.FlowContract`) on every
built-in store: gates and fair turns, retry waits, deduplication (lifetime
deduplication too, raced across two instances of the store), tombstones."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fastmcp_tasks import MemoryTaskStore, TaskStore
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.testing.flow import FlowContract
from tests.test_store_contract import POSTGRES_URL, REDIS_URL, STORE_FACTORIES


def twin_of(store: TaskStore) -> TaskStore:
    """A second store on `store`'s data: the same SQLite file, Redis prefix or PostgreSQL
    schema, over its own connections (the original's `close()` cleans up; this one's
    does not). Two `MemoryTaskStore`s cannot share: the memory store is its own twin."""
    if isinstance(store, MemoryTaskStore):
        return store
    if isinstance(store, SQLiteTaskStore):
        return SQLiteTaskStore(store.path, max_tasks=FlowContract.max_tasks)
    if getattr(store, "scheme", None) == "redis":
        from fastmcp_tasks.stores.redis import RedisTaskStore

        prefix = store.keys.prefix  # type: ignore[attr-defined]
        return RedisTaskStore(REDIS_URL, prefix=prefix, max_tasks=FlowContract.max_tasks)
    from fastmcp_tasks.stores.postgres import PostgresTaskStore

    schema = store.schema  # type: ignore[attr-defined]
    return PostgresTaskStore(POSTGRES_URL, schema=schema, max_tasks=FlowContract.max_tasks)


class TestBuiltinFlow(FlowContract):
    @pytest.fixture(params=sorted(STORE_FACTORIES))
    async def store(self, request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
        instance = STORE_FACTORIES[request.param]()
        await instance.open()
        try:
            yield instance
        finally:
            await instance.close()

    @pytest.fixture
    async def peer(self, store: TaskStore) -> AsyncIterator[TaskStore]:
        twin = twin_of(store)
        if twin is store:
            yield store
            return
        await twin.open()
        try:
            yield twin
        finally:
            await twin.close()
