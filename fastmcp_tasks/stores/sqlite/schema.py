"""The SQLite store's file format: schema, migrations, open-time checks, rows.

A task store file is marked twice: `PRAGMA application_id` holds `APPLICATION_ID`
and `PRAGMA user_version` the schema version, mirrored by the `meta` table
(`schema_version`, `application`). Opening classifies the file before touching it:

- missing or empty (no tables, no marker): gets the current schema;
- ours at an older version: migrated in one transaction, step by step (`MIGRATIONS`);
- ours at a newer version, another program's database, or not SQLite at all:
  `ConfigurationError` naming the file; nothing is written to it.

Versions: 1 the tables; 2 the listing, purging and per-principal indexes; 3 the
`app` column and the index of queued tasks; 4 flow control (`stores.flow`): the
`gate`, `gate_limit`, `not_before`, `retries` and `dedupe_key` columns, the
`gate_turns` and `tombstones` tables, and the indexes `claim_queued`, dedupe and
tombstone pruning range over (the queued index becomes the *ungated* queued index);
5 the `phase` column (`stores.phases`); 6 the operator records (`stores.operations`):
the `task_events`, `workers`, `pauses` and `audit` tables, and the trigger that deletes
a task's events with the task; 7 the `steps` table (`stores.steps`), with its trigger.
Rows are mapped by `sqlite.rows`; the statements a transaction runs on these tables
are `sqlite.tx.Tx`, `sqlite.flow`, `sqlite.operations` and `sqlite.steps`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.sqlite.rows import dumps as dumps
from fastmcp_tasks.stores.sqlite.rows import from_row as from_row
from fastmcp_tasks.stores.sqlite.rows import to_row as to_row
from fastmcp_tasks.stores.urls import refuse_unknown

#: `PRAGMA application_id` of a task store file: "FMTT" in ASCII.
APPLICATION_ID = 0x464D5454
APPLICATION_NAME = "fastmcp-tasks"
SCHEMA_VERSION = 7

_HEADER_MAGIC = b"SQLite format 3\x00"

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
SELECT_TASK = f"SELECT {', '.join(COLUMNS)} FROM tasks"
INSERT_TASK = (
    f"INSERT INTO tasks ({', '.join(COLUMNS)}, expires_at) "
    f"VALUES ({', '.join('?' * (len(COLUMNS) + 1))})"
)

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);
CREATE TABLE tasks (
    task_id TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    arguments TEXT,
    status_message TEXT,
    poll_interval_ms INTEGER,
    retention_ms INTEGER,
    terminal_at REAL,
    expires_at REAL,
    result_json TEXT,
    error TEXT,
    input_requests TEXT,
    answers TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    context TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires REAL
);
CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX tasks_active ON tasks (status) WHERE status IN ('working', 'input_required');
CREATE TABLE changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT,
    details TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX changes_created ON changes (created_at);
CREATE TRIGGER tasks_counted AFTER INSERT ON tasks
BEGIN UPDATE meta SET value = value + 1 WHERE key = 'task_count'; END;
CREATE TRIGGER tasks_uncounted AFTER DELETE ON tasks
BEGIN UPDATE meta SET value = value - 1 WHERE key = 'task_count'; END;
INSERT INTO meta (key, value) VALUES ('application', 'fastmcp-tasks'), ('task_count', 0);
"""


def _v0_to_v1(conn: sqlite3.Connection) -> None:
    for statement in _V1.split(";\n"):
        if statement.strip():
            conn.execute(statement)


def _v1_to_v2(conn: sqlite3.Connection) -> None:
    """Indexes for the operator commands (listing newest first, purging by end time) and
    for the per-principal active-task cap (one principal's active tasks)."""
    conn.execute("CREATE INDEX tasks_created ON tasks (created_at, task_id)")
    conn.execute("CREATE INDEX tasks_ended ON tasks (terminal_at) WHERE terminal_at IS NOT NULL")
    conn.execute(
        "CREATE INDEX tasks_owner_active ON tasks (owner) "
        "WHERE status IN ('working', 'input_required')"
    )


ACTIVE = "status IN ('working', 'input_required')"
UNLEASED = f"{ACTIVE} AND lease_owner IS NULL"


def _v2_to_v3(conn: sqlite3.Connection) -> None:
    """The application a task belongs to (`TaskRecord.app`, NULL for older tasks) and the
    index of queued tasks per application (replaced by version 4's `READY_INDEX`)."""
    conn.execute("ALTER TABLE tasks ADD COLUMN app TEXT")
    conn.execute(f"CREATE INDEX tasks_queued ON tasks (app, created_at) WHERE {UNLEASED}")


#: The ungated active tasks nobody has leased, by application then age (`not_before` is
#: in the entries so a waiting retry is skipped without reading its row): the ungated part
#: of `claim_queued` is a range of it (`INDEXED BY` when any application's are taken).
READY_INDEX = "tasks_ready"
READY = f"{UNLEASED} AND gate IS NULL"
#: Queued gated tasks, per gate then owner then age: the owners waiting in a gate and
#: each one's oldest tasks (the fair turns of `plan_claims`).
GATE_OWNERS_INDEX = "tasks_gate_owners"
#: Queued gated tasks, per gate then age: which gates have queued tasks, and each
#: gate's oldest (whose `gate_limit` counts).
GATE_HEADS_INDEX = "tasks_gate_heads"
GATED = f"{UNLEASED} AND gate IS NOT NULL"
#: Leased active gated tasks, per gate: the slots a gate has in use.
GATE_HOLDERS_INDEX = "tasks_gate_holders"
HOLDING = f"{ACTIVE} AND lease_owner IS NOT NULL AND gate IS NOT NULL"
#: Tasks with a dedupe key, by key then age: the task holding a key is the newest.
DEDUPE_INDEX = "tasks_dedupe"
#: A queued task whose retry wait is over (one parameter: now).
DUE = "(not_before IS NULL OR not_before <= ?)"

_V4 = f"""
ALTER TABLE tasks ADD COLUMN gate TEXT;
ALTER TABLE tasks ADD COLUMN gate_limit INTEGER;
ALTER TABLE tasks ADD COLUMN not_before REAL;
ALTER TABLE tasks ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN dedupe_key TEXT;
DROP INDEX tasks_queued;
CREATE INDEX {READY_INDEX} ON tasks (app, created_at, not_before) WHERE {READY};
CREATE INDEX {GATE_OWNERS_INDEX} ON tasks (gate, owner, created_at, app, not_before)
    WHERE {GATED};
CREATE INDEX {GATE_HEADS_INDEX} ON tasks (gate, created_at, app, not_before) WHERE {GATED};
CREATE INDEX {GATE_HOLDERS_INDEX} ON tasks (gate) WHERE {HOLDING};
CREATE INDEX {DEDUPE_INDEX} ON tasks (dedupe_key, created_at) WHERE dedupe_key IS NOT NULL;
CREATE TABLE gate_turns (
    gate TEXT NOT NULL,
    owner TEXT NOT NULL,
    turn INTEGER NOT NULL,
    PRIMARY KEY (gate, owner)
) WITHOUT ROWID;
CREATE TABLE tombstones (
    key TEXT PRIMARY KEY,
    owner TEXT,
    at REAL NOT NULL,
    reason TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX tombstones_at ON tombstones (at);
INSERT OR IGNORE INTO meta (key, value) VALUES ('next_turn', 0)
"""


def _v3_to_v4(conn: sqlite3.Connection) -> None:
    """Flow control (`stores.flow`): the record's gate, retry and dedupe columns (NULL, and
    no retries, for older tasks), the gate indexes, the turns (`gate_turns`, the owner
    key `stores.flow.ANONYMOUS` for tasks without one; the counter is `meta.next_turn`)
    and the tombstones of removed tasks (keyed by `stores.flow.tombstone_key`)."""
    for statement in _V4.split(";\n"):
        conn.execute(statement)


def _v4_to_v5(conn: sqlite3.Connection) -> None:
    """Where each task's run stands (`TaskRecord.phase`, `stores.phases`). Older rows keep
    NULL: an unleased task waits, a leased one counts as started (fails rather than runs
    twice, if its process is gone)."""
    conn.execute("ALTER TABLE tasks ADD COLUMN phase TEXT")


_V6 = """
CREATE TABLE task_events (
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    details TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
CREATE TRIGGER tasks_forget_events AFTER DELETE ON tasks
BEGIN DELETE FROM task_events WHERE task_id = OLD.task_id; END;
CREATE TABLE workers (
    worker_id TEXT PRIMARY KEY,
    last_seen REAL NOT NULL,
    info TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE pauses (
    app TEXT NOT NULL,
    tool TEXT NOT NULL,
    since REAL NOT NULL,
    paused_by TEXT NOT NULL,
    PRIMARY KEY (app, tool)
) WITHOUT ROWID;
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    count INTEGER NOT NULL,
    details TEXT NOT NULL
)
"""


def _v5_to_v6(conn: sqlite3.Connection) -> None:
    """The operator records (`stores.operations`, `sqlite.operations`): each task's history
    (`task_events`, keyed by task then its place in the history, 0 up, so a history is one
    range; deleted with its task by the `tasks_forget_events` trigger, whatever deletes
    it), the workers' heartbeats (`info`: `WorkerInfo` as JSON), the pauses (`app` ""
    for tasks without one) and the audit log (`seq` its order). Nothing is added to
    `tasks`: a task without events costs no more than before."""
    for statement in _V6.split(";\n"):
        conn.execute(statement)


_V7 = """
CREATE TABLE steps (task_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL,
    value TEXT NOT NULL, size INTEGER NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (task_id, name)) WITHOUT ROWID;
CREATE UNIQUE INDEX steps_order ON steps (task_id, seq);
CREATE TRIGGER tasks_forget_steps AFTER DELETE ON tasks
BEGIN DELETE FROM steps WHERE task_id = OLD.task_id; END
"""


def _v6_to_v7(conn: sqlite3.Connection) -> None:
    """The durable steps (`sqlite.steps`): a row per step, keyed by task then name, `seq`
    its recording order, `size` its value's UTF-8 bytes; deleted with its task by the
    `tasks_forget_steps` trigger, whatever deletes it."""
    for statement in _V7.split(";\n"):
        conn.execute(statement)


#: from-version -> the step that brings a file to from-version + 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    0: _v0_to_v1,
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
}


def check_header(path: Path) -> None:
    """Refuse a non-empty file whose header is not SQLite's, or is another program's.

    Reads 100 bytes and opens no connection, so a refused file is left untouched.

    Raises:
        ConfigurationError: the file is not a SQLite database or carries a foreign marker.
    """
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigurationError(f"SQLite task store {str(path)!r}: cannot read: {exc}") from exc
    if not header:
        return
    if len(header) < 100 or not header.startswith(_HEADER_MAGIC):
        raise ConfigurationError(
            f"SQLite task store {str(path)!r} is not a SQLite database; refusing to use it"
        )
    app_id = int.from_bytes(header[68:72], "big")
    if app_id not in (0, APPLICATION_ID):
        raise ConfigurationError(
            f"SQLite task store {str(path)!r} belongs to another program "
            f"(application_id {app_id:#x}); refusing to use it"
        )


def prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Check the file's marker and version, creating or migrating the schema.

    Runs inside the caller's `BEGIN IMMEDIATE` transaction and writes only when
    the file is empty or ours at an older version.

    Raises:
        ConfigurationError: not SQLite, another program's database, or a newer schema.
    """
    shown = str(path)
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as exc:
        raise ConfigurationError(
            f"SQLite task store {shown!r} is not a valid SQLite database ({exc})"
        ) from exc
    if app_id == 0 and version == 0 and not tables:
        pass  # a new file
    elif app_id != APPLICATION_ID:
        raise ConfigurationError(
            f"SQLite task store {shown!r} is another program's database "
            f"(tables {sorted(tables)[:5]}, no {APPLICATION_NAME} marker); refusing to use it"
        )
    elif version > SCHEMA_VERSION:
        raise ConfigurationError(
            f"SQLite task store {shown!r} has schema version {version}, newer than this "
            f"fastmcp-tasks supports ({SCHEMA_VERSION}); upgrade fastmcp-tasks"
        )
    elif version > 0:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or row[0] != version:
            raise ConfigurationError(
                f"SQLite task store {shown!r} is damaged: user_version {version} but meta "
                f"schema_version {None if row is None else row[0]}"
            )
    for step in range(version, SCHEMA_VERSION):
        MIGRATIONS[step](conn)
    if version < SCHEMA_VERSION:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
            (SCHEMA_VERSION,),
        )


def is_busy(exc: sqlite3.Error) -> bool:
    """True for SQLITE_BUSY / SQLITE_LOCKED (and their extended codes)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def path_from_url(url: str) -> str:
    """The file a `sqlite:///relative.db` or `sqlite:////absolute.db` URL names.

    Raises:
        ConfigurationError: an in-memory database, a host, a query (its options are
            named: a `sqlite://` URL takes none) or no path.
    """
    prefix = "sqlite:///"
    if ":memory:" in url:
        raise ConfigurationError(
            f"SQLite task store URL {url!r} names an in-memory database, which cannot be "
            "shared between processes or survive a restart; give a file path"
        )
    refuse_unknown(url, [k for k, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)])
    path = unquote(url[len(prefix) :])
    if not url.startswith(prefix) or "?" in url or "#" in url or not path:
        raise ConfigurationError(
            "SQLite task store URL must be sqlite:///relative.db or sqlite:////abs/path.db "
            f"(no host, query or fragment), got {url!r}"
        )
    return path
