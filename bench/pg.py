"""The PostgreSQL helpers of a bench run: the server (`POSTGRES_URL`, set from
`--postgres-url`), one fresh schema per bench server (`postgres_schema`, dropped when
the server is down), whether it answers (`postgres_answers`), untimed reads of a
store's tables on a connection of the harness's own (`postgres_counts`,
`postgres_records`, `postgres_cpu_seconds`), the bulk insert of retained tasks
(`postgres_fill`) and the end-of-run sweep of any schema of this run left behind
(`postgres_leftovers`).

Read the URL as `pg.POSTGRES_URL`, never import the name (`bench.run` sets it).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import anyio.to_thread

from fastmcp_tasks.stores.base import TaskRecord

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"  # set from --postgres-url
#: Every schema of this run starts with it (one schema per server, `postgres_schema`).
POSTGRES_RUN = f"fastmcp_tasks_bench_{os.getpid()}_{secrets.token_hex(3)}"
_schemas = itertools.count(1)


def _connect(url: str | None = None, **options: Any) -> Any:
    """A blocking psycopg connection of the harness's own (autocommit)."""
    import psycopg

    return psycopg.connect(url or POSTGRES_URL, autocommit=True, **options)


def postgres_answers(url: str) -> str | None:
    """`None` when PostgreSQL at `url` runs `SELECT 1` within 2 s, else why not."""
    try:
        import psycopg
    except ImportError as exc:
        return f"the psycopg package is missing ({exc})"
    try:
        with contextlib.closing(psycopg.connect(url, connect_timeout=2)) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return None


def store_url_of(schema: str) -> str:
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}schema={schema}"


def drop_schema(schema: str) -> None:
    with contextlib.closing(_connect()) as conn:
        conn.execute("SET lock_timeout = '30s'")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@asynccontextmanager
async def postgres_schema() -> AsyncIterator[str]:
    """The store URL of a fresh schema (`POSTGRES_RUN-n`), dropped afterwards."""
    schema = f"{POSTGRES_RUN}_{next(_schemas)}"
    try:
        yield store_url_of(schema)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(drop_schema, schema)


def postgres_leftovers() -> int:
    """Untimed, at the end: drop any schema of this run still there; how many there were."""
    with contextlib.closing(_connect()) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (POSTGRES_RUN,)
        ).fetchall()
    for (schema,) in rows:
        drop_schema(schema)
    return len(rows)


def schema_of(store: Any) -> str:
    """The schema a `PostgresTaskStore` keeps its tables in."""
    for holder in (store, getattr(store, "_db", None), getattr(store, "connections", None)):
        schema = getattr(holder, "schema", None)
        if isinstance(schema, str):
            return schema
    raise AttributeError(f"{type(store).__name__}: no schema attribute")


def postgres_counts(store: Any) -> dict[str, int]:
    """Tasks of the store's schema: `active` (working, input_required), `queued` (active
    and leased to nobody), `terminal`; counted on a connection of our own."""
    s = schema_of(store)
    with contextlib.closing(_connect()) as conn:
        active, queued, terminal = conn.execute(
            "SELECT count(*) FILTER (WHERE status IN ('working', 'input_required')),"
            " count(*) FILTER (WHERE status IN ('working', 'input_required')"
            "  AND lease_owner IS NULL),"
            f" count(*) FILTER (WHERE status NOT IN ('working', 'input_required')) FROM {s}.tasks"
        ).fetchone()
    return {"active": int(active), "queued": int(queued), "terminal": int(terminal)}


def postgres_records(store: Any, ids: Sequence[str]) -> list[tuple[str, str, float, float]]:
    """(status, lease owner, created_at, terminal_at) of each of `ids`, read directly."""
    s = schema_of(store)
    with contextlib.closing(_connect()) as conn:
        rows = conn.execute(
            f"SELECT status, lease_owner, created_at, terminal_at FROM {s}.tasks "
            "WHERE task_id = ANY(%s)",
            (list(ids),),
        ).fetchall()
    return [(str(a), str(b), float(c), float(d or 0.0)) for a, b, c, d in rows]


def postgres_mib(store: Any) -> float:
    """The size of the store's `tasks` table with its indexes and TOAST, in MiB."""
    s = schema_of(store)
    with contextlib.closing(_connect()) as conn:
        (size,) = conn.execute(f"SELECT pg_total_relation_size('{s}.tasks')").fetchone()
    return round(int(size) / 2**20, 1)


def postgres_cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by every `postgres` process of this host
    (the postmaster and all backends; `/proc/<pid>/stat`). Backends that ended are not
    counted, so read it around a window in which the store's connections stay open."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/stat") as f:
                head, _, rest = f.read().rpartition(")")
            if head.partition("(")[2] == "postgres":
                fields = rest.split()
                total += int(fields[11]) + int(fields[12])
    return total / tick


async def postgres_fill(store: Any, ids: list[str], template: TaskRecord) -> None:
    """Insert a completed copy of `template` per id into the store's `tasks` table, in one
    transaction on a connection of the harness's own (`executemany` of the store's own
    row encoding, `schema.to_params`), and add them to its retained-task count."""
    from fastmcp_tasks.stores.postgres import schema as pg_schema

    s = schema_of(store)
    columns = [*pg_schema.COLUMNS, "expires_at"]
    insert = (
        f"INSERT INTO {s}.tasks ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
    )

    def insert_all() -> None:
        rows = []
        for task_id in ids:
            now = time.time()
            record = replace(
                template, task_id=task_id, created_at=now, updated_at=now, terminal_at=now
            )
            rows.append(pg_schema.to_params(record))
        with contextlib.closing(_connect()) as conn, conn.transaction():
            with conn.cursor() as cur:
                cur.executemany(insert, rows)
            count_retained(conn, s, len(ids))

    await anyio.to_thread.run_sync(insert_all)


def count_retained(conn: Any, schema: str, added: int) -> None:
    """Add `added` tasks to the store's retained-task count (its `task_counts` shards)."""
    conn.execute(
        f"INSERT INTO {schema}.task_counts (shard, n) VALUES (0, %s) "
        "ON CONFLICT (shard) DO UPDATE SET n = task_counts.n + excluded.n",
        (added,),
    )
