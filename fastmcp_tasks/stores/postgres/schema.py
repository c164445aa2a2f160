"""The PostgreSQL store's schema: tables, indexes, the version marker, migrations.

Every object lives in the store's own schema (`?schema=`, default `fastmcp_tasks`),
created when absent. Its `meta` table marks it as fastmcp-tasks' (`application`) and
records `schema_version`. `prepare` classifies the schema before touching it, in
one transaction under an advisory lock (two processes opening at once do not race):

- absent or empty: gets the current schema;
- ours at an older version: migrated step by step (`MIGRATIONS`) in that transaction;
- ours at a newer version, or holding other tables and no marker:
  `ConfigurationError` naming it; nothing is written (the transaction is rolled back).

Payloads. `arguments`, `context`, `error`, `input_requests` and `answers` are `json`,
not `jsonb`: jsonb refuses what clients legitimately send (a NUL, `\\u0000`, in any
string, and lone UTF-16 surrogates, which `base.encode_json` writes as `\\udXXX`
escapes) and re-sorts object keys, which would reorder an elicitation form's fields
(`requestedSchema.properties`) compared with every other store. `json` is validated
JSON kept as the exact text written (our compact `encode_json` output), so a record
reads back exactly as it went in, and it stays queryable (`->`, `->>`, `::jsonb` in an
ad hoc query for the values jsonb accepts); it is also cheaper to write and read than
jsonb, which we never index into. The completed result is `result_json text`: the
record keeps it as compact JSON text, encoded once, returned as is. The change
feed's `details` is JSON text too. A plain text column (`status_message`) cannot hold
NUL at all: NUL becomes U+FFFD there, as a lone surrogate does (`clean_text`).

Version 1: `meta`, `tasks` (with its indexes), `changes` (the feed), `task_counts`
(the retained-task count in shards, for `max_tasks`), `active_counts` (the active
tasks, in total (`t`) and per owner (`o:<owner>`), in shards each, for `ActiveCaps`),
`gate_turns`, `tombstones`. The counters are moved by the statements that insert,
end and delete tasks; a writer adds to its backend's shard (`pg_backend_pid() %
COUNT_SHARDS`), so concurrent writers rarely touch one row (one that does waits for the
other's commit: `COUNT_SHARDS`). Every `prepare` also (re)creates the
functions `caps_check_8x8` (`CAPS_FUNCTION`), `caps_check_batched_8x8`
(`postgres.caps_batched`, whose names carry the batch bounds their margin is made for)
and `key_free` (`KEY_FREE_FUNCTION`), which need no version of their own.
Version 2: the `phase` column of `tasks` (`stores.phases`).
Version 3: the operator records (`stores.operations`): the tables `task_events` (with
the trigger deleting a task's events with it), `workers`, `pauses` and `audit`
(`postgres.operations_schema`).
Version 4: the durable steps (`stores.steps`): the table `steps`, with the trigger
deleting a task's steps with it (`postgres.steps_schema`).
Version 5: `quiet_readers`, the readers that want quiet notifications
(`postgres.quiet_readers`); a schema migrated to it from an older version also gets
the upgrade's grace row.
Rows are mapped by `postgres.rows` (re-exported here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.postgres.caps_batched import (
    CAPS_BATCHED_FUNCTION,
    CAPS_CHECK,
    caps_function,
)
from fastmcp_tasks.stores.postgres.operations_schema import V3 as OPERATIONS_V3
from fastmcp_tasks.stores.postgres.quiet_readers import GRACE as QUIET_GRACE
from fastmcp_tasks.stores.postgres.quiet_readers import TABLE as QUIET_TABLE
from fastmcp_tasks.stores.postgres.rows import clean_text as clean_text
from fastmcp_tasks.stores.postgres.rows import dumps as dumps
from fastmcp_tasks.stores.postgres.rows import from_row as from_row
from fastmcp_tasks.stores.postgres.rows import to_params as to_params
from fastmcp_tasks.stores.postgres.steps_schema import V4 as STEPS_V4

if TYPE_CHECKING:
    from psycopg import AsyncConnection

APPLICATION_NAME = "fastmcp-tasks"
SCHEMA_VERSION = 5

#: `tasks` columns in `TaskRecord` field order (`expires_at` is kept apart, for the index).
COLUMNS = (
    "task_id",
    "tool",
    "status",
    "created_at",
    "updated_at",
    "arguments",
    "status_message",
    "poll_interval_ms",
    "retention_ms",
    "terminal_at",
    "result_json",
    "error",
    "input_requests",
    "answers",
    "cancel_requested",
    "owner",
    "context",
    "attempts",
    "lease_owner",
    "lease_expires",
    "app",
    "gate",
    "gate_limit",
    "not_before",
    "retries",
    "dedupe_key",
    "phase",
)
JSON_COLUMNS = frozenset({"arguments", "error", "input_requests", "answers", "context"})
SELECT_COLUMNS = ", ".join(COLUMNS)

ACTIVE = "status IN ('working', 'input_required')"
#: Active tasks nobody has leased (claimable by `claim_queued`, gates and waits aside).
UNLEASED = f"{ACTIVE} AND lease_owner IS NULL"
READY = f"{UNLEASED} AND gate IS NULL"
GATED = f"{UNLEASED} AND gate IS NOT NULL"
HOLDING = f"{ACTIVE} AND lease_owner IS NOT NULL AND gate IS NOT NULL"
#: Shards of `task_counts` and `active_counts` (a writer adds to its backend's shard). Two
#: backends on one shard take turns: the second waits for the first's commit (a WAL
#: flush), so with 16 a pool of ten connections had about three such pairs on average and
#: its creates queued behind each other's commits; with 128 about a third of one, and a
#: read sums at most 128 rows per counter (an owner's counter too; rows written under
#: another number are summed as well).
COUNT_SHARDS = 128

_V1 = f"""
CREATE TABLE {{s}}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE {{s}}.tasks (
    task_id text PRIMARY KEY,
    tool text NOT NULL,
    status text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    arguments json,
    status_message text,
    poll_interval_ms bigint,
    retention_ms bigint,
    terminal_at double precision,
    expires_at double precision,
    result_json text,
    error json,
    input_requests json,
    answers json,
    cancel_requested boolean NOT NULL DEFAULT false,
    owner text,
    context json,
    attempts integer NOT NULL DEFAULT 0,
    lease_owner text,
    lease_expires double precision,
    app text,
    gate text,
    gate_limit integer,
    not_before double precision,
    retries integer NOT NULL DEFAULT 0,
    dedupe_key text
);
CREATE INDEX tasks_expiry ON {{s}}.tasks (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX tasks_active ON {{s}}.tasks (owner) WHERE {ACTIVE};
CREATE INDEX tasks_created ON {{s}}.tasks (created_at, task_id);
CREATE INDEX tasks_ended ON {{s}}.tasks (terminal_at) WHERE terminal_at IS NOT NULL;
CREATE INDEX tasks_ready ON {{s}}.tasks (app, created_at) WHERE {READY};
CREATE INDEX tasks_ready_any ON {{s}}.tasks (created_at) WHERE {READY};
CREATE INDEX tasks_gated ON {{s}}.tasks (gate, (COALESCE(owner, '')), created_at) WHERE {GATED};
CREATE INDEX tasks_gate_heads ON {{s}}.tasks (gate, created_at) WHERE {GATED};
CREATE INDEX tasks_holding ON {{s}}.tasks (gate) WHERE {HOLDING};
CREATE INDEX tasks_dedupe ON {{s}}.tasks (dedupe_key, created_at) WHERE dedupe_key IS NOT NULL;
CREATE TABLE {{s}}.changes (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id text NOT NULL,
    kind text NOT NULL,
    status text,
    details text NOT NULL,
    created_at double precision NOT NULL
);
CREATE INDEX changes_created ON {{s}}.changes (created_at);
CREATE TABLE {{s}}.task_counts (shard integer PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE {{s}}.active_counts (
    key text NOT NULL,
    shard integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (key, shard)
);
CREATE TABLE {{s}}.gate_turns (
    gate text NOT NULL,
    owner text NOT NULL,
    turn bigint NOT NULL,
    PRIMARY KEY (gate, owner)
);
CREATE TABLE {{s}}.tombstones (
    key text PRIMARY KEY,
    owner text,
    at double precision NOT NULL,
    reason text NOT NULL
);
CREATE INDEX tombstones_at ON {{s}}.tombstones (at);
INSERT INTO {{s}}.meta (key, value) VALUES ('application', '{APPLICATION_NAME}')
"""

#: from-version -> the statements that bring a schema to from-version + 1 (`{s}`: the
#: schema); `prepare` runs every step from the found version up in one transaction and
#: then records the new `schema_version`. Version 2: `phase` (`stores.phases`), NULL on
#: older rows (an unleased task waits, a leased one counts as started). Version 3: the
#: operator records' tables (`postgres.operations_schema`). Version 4: the durable
#: steps' table (`postgres.steps_schema`). Version 5: `quiet_readers`
#: (`postgres.quiet_readers`).
MIGRATIONS: dict[int, list[str]] = {
    0: [statement.strip() for statement in _V1.split(";\n") if statement.strip()],
    1: ["ALTER TABLE {s}.tasks ADD COLUMN phase text"],
    2: OPERATIONS_V3,
    3: STEPS_V4,
    4: [QUIET_TABLE],
}

#: The caps check of a capped `create` (`sql.create_capped` calls it in its `caps` CTE).
#: Creates far from every cap take the advisory lock `lock_key` shared, so they never
#: wait for each other; a create near a cap takes it exclusive and so waits for every
#: shared holder to commit. The counters are read in a snapshot of their own, taken
#: after the lock is granted (a volatile function's statements each take one).
#:
#: Why the shared path cannot overshoot: at most `max_connections` +
#: `max_prepared_transactions` transactions are in flight at once, each with one
#: create, but for at most `BATCH_SLOTS` batches with up to `BATCH_CREATES` each
#: (`postgres.caps_batched`): at most `margin` creates in all. Take the create Z
#: with the newest decision snapshot among those committed by some time T: every
#: other create committed between Z's snapshot and T took its snapshot before Z's, so
#: it was in flight at Z's snapshot, and an exclusive holder cannot be (Z held the
#: lock shared). So the count at T is at most Z's count + `margin`, under the cap
#: when Z passed with count + `margin` < cap. An exclusive holder sees every create
#: that held the lock before it, and none holds it meanwhile: its check is exact.
#:
#: `retry`: the counters moved into the margin between the unlocked look that chose
#: the shared mode and the locked read; nothing may be inserted, and the caller runs
#: the statement again with `exclusive` (a shared holder that waited for the lock
#: exclusive could deadlock with another). (Re)created by every `prepare`, under its
#: lock: it is no table, needs no version.
CAPS_FUNCTION = caps_function(
    CAPS_CHECK,
    """        IF pass = 2 THEN
            RETURN QUERY SELECT a, o, NOT exclusive AND near;
            RETURN;
        END IF;
        exclusive := exclusive OR near;
        IF exclusive THEN
            PERFORM pg_advisory_xact_lock(hashtextextended(lock_key, 0));
        ELSE
            PERFORM pg_advisory_xact_lock_shared(hashtextextended(lock_key, 0));
        END IF;
""",
)

#: Whether no live task holds dedupe key `held_key`, asked under the key's advisory lock:
#: a function, so its query's snapshot is taken after the lock is granted (a waiting create
#: sees what the holder committed), and one statement is lock, check and insert.
KEY_FREE_FUNCTION = """
CREATE OR REPLACE FUNCTION {s}.key_free(lock_key text, held_key text, at float8)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(lock_key, 0));
    RETURN NOT EXISTS (SELECT 1 FROM {s}.tasks t WHERE t.dedupe_key = held_key
        AND (t.expires_at IS NULL OR t.expires_at > at));
END
$fn$"""

_CLASSIFY = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
"""


async def prepare(conn: AsyncConnection[Any], schema: str, where: str) -> None:
    """Check the schema's marker and version, creating or migrating it (module doc).

    Raises:
        ConfigurationError: another program's schema, or a newer (or damaged) one.
    """
    async with conn.transaction():
        key = f"fastmcp_tasks:schema:{schema}"
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
        cur = await conn.execute(_CLASSIFY, (schema,))
        tables = {row[0] for row in await cur.fetchall()}
        version = 0
        if tables and "meta" not in tables:
            raise ConfigurationError(
                f"PostgreSQL task store {where}: schema {schema!r} belongs to another program "
                f"(tables {sorted(tables)[:5]}, no {APPLICATION_NAME} marker); refusing to use it"
            )
        if tables:
            cur = await conn.execute(f"SELECT key, value FROM {schema}.meta")
            meta = {str(k): str(v) for k, v in await cur.fetchall()}
            if meta.get("application") != APPLICATION_NAME:
                raise ConfigurationError(
                    f"PostgreSQL task store {where}: schema {schema!r} has a meta table but no "
                    f"{APPLICATION_NAME} marker; refusing to use it"
                )
            try:
                version = int(meta.get("schema_version", ""))
            except ValueError:
                raise ConfigurationError(
                    f"PostgreSQL task store {where}: schema {schema!r} is damaged: schema_version "
                    f"{meta.get('schema_version')!r}; refusing to use it"
                ) from None
            if version > SCHEMA_VERSION:
                raise ConfigurationError(
                    f"PostgreSQL task store {where}: schema {schema!r} has version {version}, "
                    f"newer than this fastmcp-tasks supports ({SCHEMA_VERSION}); upgrade "
                    "fastmcp-tasks"
                )
        if version != SCHEMA_VERSION:
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    await conn.execute(statement.format(s=schema))
            if 0 < version < 5:  # older readers may be running: notify them all for a while
                await conn.execute(QUIET_GRACE.format(s=schema))
            await conn.execute(
                f"INSERT INTO {schema}.meta (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
        await conn.execute(CAPS_FUNCTION.format(s=schema))
        await conn.execute(CAPS_BATCHED_FUNCTION.format(s=schema))
        await conn.execute(KEY_FREE_FUNCTION.format(s=schema))


__all__ = [
    "ACTIVE",
    "CAPS_FUNCTION",
    "COLUMNS",
    "GATED",
    "HOLDING",
    "KEY_FREE_FUNCTION",
    "MIGRATIONS",
    "READY",
    "SCHEMA_VERSION",
    "SELECT_COLUMNS",
    "UNLEASED",
    "clean_text",
    "dumps",
    "from_row",
    "prepare",
    "to_params",
]
