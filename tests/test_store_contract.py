"""The `TaskStore` contract (`fastmcp_tasks.testing.StoreContract`) run on the built-in stores.

`TestBuiltinStores` parametrizes the contract's `store` fixture over
`STORE_FACTORIES` (memory, SQLite, Redis and PostgreSQL: the last two skipped loudly
without a server, failed when `CI=true`); a new built-in backend adds itself there.
The module-level `store` fixture, `record`, `redis_store` and `postgres_store` serve
the other store tests.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from fastmcp_tasks import MemoryTaskStore, TaskStore
from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.stores.sqlite import SQLiteTaskStore
from fastmcp_tasks.testing import StoreContract, make_record

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@functools.cache
def _redis_problem() -> str | None:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=2).ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def redis_store(**options: Any) -> TaskStore:
    """A Redis store under a fresh key prefix; its `close()` deletes the prefix's keys.

    Skips when no Redis answers at `REDIS_URL`, and fails instead when `CI=true`.
    """
    problem = _redis_problem()
    if problem is not None:
        message = f"REDIS UNREACHABLE at REDIS_URL={REDIS_URL} ({problem}): Redis store untested"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from fastmcp_tasks.stores.redis import RedisTaskStore

    options.setdefault("prefix", f"test-{uuid.uuid4().hex[:16]}")
    store = RedisTaskStore(REDIS_URL, **options)
    close = store.close

    async def clean_then_close() -> None:
        with contextlib.suppress(StoreError):  # never opened: nothing to delete
            await store.clear()
        await close()

    store.close = clean_then_close  # type: ignore[method-assign]
    return store


@functools.cache
def _postgres_problem() -> str | None:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def postgres_available() -> None:
    """Skip when no PostgreSQL answers at `POSTGRES_URL`; fail instead when `CI=true`."""
    problem = _postgres_problem()
    if problem is not None:
        message = (
            f"POSTGRESQL UNREACHABLE at POSTGRES_URL={POSTGRES_URL} ({problem}): "
            "PostgreSQL store untested"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def drop_schema(schema: str) -> None:
    """Drop a test schema and everything in it (a plain connection of its own)."""
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def postgres_store(**options: Any) -> TaskStore:
    """A PostgreSQL store in a fresh random schema; its `close()` drops the schema.

    Skips when no PostgreSQL answers at `POSTGRES_URL`, and fails instead when `CI=true`.
    Pass `schema=` to share one schema between instances (the first to close drops it).
    """
    postgres_available()
    from fastmcp_tasks.stores.postgres import PostgresTaskStore

    options.setdefault("schema", f"test_{uuid.uuid4().hex[:16]}")
    store = PostgresTaskStore(POSTGRES_URL, **options)
    close = store.close

    async def close_then_drop() -> None:
        await close()
        drop_schema(store.schema)

    store.close = close_then_drop  # type: ignore[method-assign]
    return store


STORE_FACTORIES: dict[str, Callable[[], TaskStore]] = {
    "memory": lambda: MemoryTaskStore(max_tasks=StoreContract.max_tasks),
    "sqlite": lambda: SQLiteTaskStore(
        Path(tempfile.mkdtemp()) / "tasks.db", max_tasks=StoreContract.max_tasks
    ),
    "redis": lambda: redis_store(max_tasks=StoreContract.max_tasks),
    "postgres": lambda: postgres_store(max_tasks=StoreContract.max_tasks),
}


@pytest.fixture(params=sorted(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    instance = STORE_FACTORIES[request.param]()
    await instance.open()
    try:
        yield instance
    finally:
        await instance.close()


#: The contract's task factory, under the name the other store tests import.
record = make_record


class TestBuiltinStores(StoreContract):
    """The whole contract, once per built-in store."""

    @pytest.fixture(params=sorted(STORE_FACTORIES))
    async def store(self, request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
        instance = STORE_FACTORIES[request.param]()
        await instance.open()
        try:
            yield instance
        finally:
            await instance.close()

    async def test_builtin_stores_batch_reads_and_narrow_scans(self, store: TaskStore) -> None:
        assert getattr(store, "get_many", None) is not None
        assert getattr(store, "active_leases", None) is not None
