"""The PostgreSQL store's statements, written once per schema (`Statements`).

Each hot path is ONE statement (autocommit, prepared): `get`, `create` (the insert,
its `queued` change row and `pg_notify`, and the retained-task count in one CTE), a
status transition (the compare-and-set UPDATE, its change rows and the notify), a
message change, a run's start (`start_run`), a cancel request, `claim`, `requeue`,
`renew` and the ungated `claim_queued` (`postgres.claims`: `FOR NO KEY UPDATE SKIP
LOCKED`, which also tells whether a gate has room, so the gated path, `postgres.gates`,
runs only then). The rest load a row `FOR NO KEY UPDATE` in a transaction, apply
`stores.rules` and write it back with `SAVE_EMIT` (the row, the change rows and the
notify in one statement). Row locks: no statement changes a task's key, so none
takes `FOR UPDATE` (a DELETE's), which would conflict with the `FOR KEY SHARE` of an
append to the task's history (`postgres.operations_sql`).

A change statement notifies the store's channel (`channel`) once, with the highest
`seq` it wrote, followed by ` quiet` when none of its rows is of a `WAKING_KINDS` kind
(a creation's by `QUEUED_ONLY`: its rows are only new tasks' `queued` rows; the
creations of one batch of statements share one notification instead,
`postgres.created_notes`), and a quiet one only while some reader wants them
(`postgres.quiet_readers`); the feed reads the rows themselves (`postgres.feed`), and a
reader none of whose subscribers wants other kinds reads nothing on a quiet notification.
"""

from __future__ import annotations

from typing import Any

from fastmcp_tasks.stores.base import TaskRecord, encode_json
from fastmcp_tasks.stores.postgres.caps_batched import CAPS_CHECK
from fastmcp_tasks.stores.postgres.claims import claim_statements
from fastmcp_tasks.stores.postgres.created_notes import created
from fastmcp_tasks.stores.postgres.feed_parts import QUIET, WAKING_KINDS
from fastmcp_tasks.stores.postgres.quiet_readers import wanted as quiet_wanted
from fastmcp_tasks.stores.postgres.schema import (
    ACTIVE,
    COLUMNS,
    COUNT_SHARDS,
    GATED,
    HOLDING,
    SELECT_COLUMNS,
    UNLEASED,
    clean_text,
    dumps,
)

#: The SQL type of each `tasks` column, for the casts of an INSERT ... SELECT.
_TYPES = {
    "created_at": "float8",
    "updated_at": "float8",
    "poll_interval_ms": "bigint",
    "retention_ms": "bigint",
    "terminal_at": "float8",
    "cancel_requested": "boolean",
    "attempts": "integer",
    "lease_expires": "float8",
    "gate_limit": "integer",
    "not_before": "float8",
    "retries": "integer",
    "arguments": "json",
    "error": "json",
    "input_requests": "json",
    "answers": "json",
    "context": "json",
}
LIVE = "(expires_at IS NULL OR expires_at > %(now)s)"
#: The tombstone key of a task id in SQL (`stores.flow.tombstone_key`).
TOMB_KEY = "left(encode(sha256(convert_to(task_id, 'UTF8')), 'hex'), 32)"


class Statements:
    """Every statement of one store schema, as text (formatted once, prepared per connection)."""

    def __init__(self, schema: str) -> None:
        s = schema
        self.schema = s
        self.channel = f"{s}:changes"[:63]
        t = f"{s}.tasks"
        waking = ", ".join(f"'{kind}'" for kind in WAKING_KINDS)
        quiet = f"CASE WHEN bool_or(kind IN ({waking})) THEN '' ELSE '{QUIET}' END"
        notify = f"pg_notify('{self.channel}', max(seq)::text || {quiet})"
        heard = f"bool_or(kind IN ({waking})) OR {quiet_wanted(s)}"  # `postgres.quiet_readers`
        note = f"note AS (SELECT {notify} FROM ch HAVING count(*) > 0 AND ({heard}))"
        created_note = f"note AS (SELECT {created(self.channel)} FROM ch HAVING count(*) > 0)"
        change = f"INSERT INTO {s}.changes (task_id, kind, status, details, created_at)"
        #: For the statements of other modules: the change-row INSERT and the notify CTE.
        self.change, self.note = change, note
        values = ", ".join(f"%({c})s::{_TYPES.get(c, 'text')}" for c in COLUMNS)
        count = (
            f"INSERT INTO {s}.task_counts (shard, n) SELECT pg_backend_pid() %% {COUNT_SHARDS}, "
            "{n} FROM {src} HAVING count(*) > 0 "
            f"ON CONFLICT (shard) DO UPDATE SET n = {s}.task_counts.n + excluded.n"
        )
        #: Move the active-task counters (`active_counts`: the total, `t`, and the owner's,
        #: `o:<owner>`) of the rows of `{src}` matching `{where}` by `{n}`.
        actives = (
            f"INSERT INTO {s}.active_counts (key, shard, n) "
            f"SELECT k, pg_backend_pid() %% {COUNT_SHARDS}, {{n}} FROM {{src}}, "
            "LATERAL (VALUES ('t'), ('o:' || {src}.owner)) AS v(k) "
            "WHERE k IS NOT NULL AND {where} "
            f"ON CONFLICT (key, shard) DO UPDATE SET n = {s}.active_counts.n + excluded.n"
        )

        self.get = f"SELECT {SELECT_COLUMNS} FROM {t} WHERE task_id = %(id)s AND {LIVE}"
        self.load = f"{self.get} FOR NO KEY UPDATE"
        self.lock = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"

        insert = f"""
ins AS (
    INSERT INTO {t} ({SELECT_COLUMNS}, expires_at)
    SELECT {values}, %(expires_at)s::float8
    WHERE (%(max)s::bigint IS NULL OR (SELECT n FROM room) < %(max)s::bigint) {{caps}}
    ON CONFLICT (task_id) DO NOTHING
    RETURNING task_id, status, owner
),
cnt AS ({count.format(n="count(*)", src="ins")}),
act AS ({actives.format(n="1", src="ins", where=f"ins.{ACTIVE}")}),
ch AS ({change} SELECT task_id, 'queued', status, %(details)s, %(now)s FROM ins
    WHERE %(queued)s RETURNING seq, kind),
{created_note}"""
        room = f"room AS (SELECT COALESCE(sum(n), 0) AS n FROM {s}.task_counts)"
        self.create = (
            f"WITH {room}, {insert.format(caps='')}\n"
            "SELECT (SELECT count(*) FROM ins), (SELECT n FROM room), (SELECT count(*) FROM note)"
        )
        #: `create`, unless a live task holds the record's dedupe key (an idempotency key,
        #: matched for the task's lifetime): `key_free` takes the key's advisory lock first.
        unheld = f"AND {s}.key_free(%(key_lock)s::text, %(dedupe_key)s::text, %(now)s::float8)"
        self.create_unheld = (
            f"WITH {room}, {insert.format(caps=unheld)}\n"
            "SELECT (SELECT count(*) FROM ins), (SELECT n FROM room), (SELECT count(*) FROM note)"
        )
        #: The caps lock and counts, read after it is granted (`schema.CAPS_FUNCTION`);
        #: `retry`: run the statement again with `exclusive` (nothing was inserted).
        caps = (
            f"caps AS (SELECT active, owned, retry FROM {s}.{CAPS_CHECK}(%(lock)s::text, "
            "%(total)s::bigint, CASE WHEN %(per_owner)s::bigint IS NULL "
            "OR %(owner)s::text IS NULL THEN NULL ELSE 'o:' || %(owner)s::text END, "
            "%(per_owner)s::bigint, %(exclusive)s::boolean))"
        )
        cap_terms = (
            "AND NOT (SELECT retry FROM caps) "
            "AND (%(total)s::bigint IS NULL OR (SELECT active FROM caps) < %(total)s::bigint) "
            "AND (%(per_owner)s::bigint IS NULL OR %(owner)s::text IS NULL "
            "OR (SELECT owned FROM caps) < %(per_owner)s::bigint)"
        )
        self.create_capped = (
            f"WITH {room}, {caps}, {insert.format(caps=cap_terms)}\n"
            "SELECT (SELECT count(*) FROM ins), (SELECT n FROM room), (SELECT count(*) FROM note), "
            "(SELECT active FROM caps), (SELECT owned FROM caps), (SELECT retry FROM caps)"
        )
        #: `create_capped`, unless a live task holds the record's dedupe key.
        self.create_capped_unheld = (
            f"WITH {room}, {caps}, {insert.format(caps=cap_terms + ' ' + unheld)}\n"
            "SELECT (SELECT count(*) FROM ins), (SELECT n FROM room), (SELECT count(*) FROM note), "
            "(SELECT active FROM caps), (SELECT owned FROM caps), (SELECT retry FROM caps)"
        )
        self.holder = (
            f"SELECT {SELECT_COLUMNS} FROM {t} WHERE dedupe_key = %(key)s AND {LIVE} "
            "ORDER BY created_at DESC LIMIT 1"
        )

        terminal = "%(terminal)s"
        self.transition = f"""
WITH u AS (
    UPDATE {t} SET status = %(status)s, updated_at = %(now)s,
        status_message = CASE WHEN %(keep)s THEN status_message ELSE %(message)s::text END,
        terminal_at = CASE WHEN {terminal} THEN %(now)s ELSE terminal_at END,
        expires_at = CASE WHEN {terminal} THEN %(now)s + retention_ms::float8 / 1000
            ELSE expires_at END,
        result_json = CASE WHEN {terminal} THEN %(result)s::text ELSE result_json END,
        error = CASE WHEN {terminal} THEN %(error)s::json ELSE error END,
        input_requests = CASE WHEN {terminal} OR %(status)s = 'working' THEN NULL
            ELSE input_requests END,
        answers = CASE WHEN {terminal} THEN NULL ELSE answers END,
        context = CASE WHEN {terminal} THEN NULL ELSE context END
    WHERE task_id = %(id)s AND status = ANY(%(sources)b::text[])
    RETURNING {SELECT_COLUMNS}
),
ch AS (
    {change}
    SELECT task_id, 'status', status, '{{}}', %(now)s FROM u
    UNION ALL
    SELECT task_id, 'queued', status, json_build_object('app', app, 'gate', gate)::text,
        %(now)s FROM u WHERE {terminal} AND gate IS NOT NULL
    RETURNING seq, kind
),
act AS ({actives.format(n="-1", src="u", where=terminal)}),
{note}
SELECT {SELECT_COLUMNS}, (SELECT count(*) FROM note) FROM u"""

        self.set_message = f"""
WITH u AS (
    UPDATE {t} SET status_message = %(message)s::text, updated_at = %(now)s
    WHERE task_id = %(id)s AND {ACTIVE} AND status_message IS DISTINCT FROM %(message)s::text
    RETURNING {SELECT_COLUMNS}
),
ch AS ({change} SELECT task_id, 'message', status, '{{}}', %(now)s FROM u RETURNING seq, kind),
{note}
SELECT {SELECT_COLUMNS}, (SELECT count(*) FROM note) FROM u
UNION ALL
SELECT {SELECT_COLUMNS}, 0 FROM {t}
WHERE task_id = %(id)s AND {ACTIVE} AND NOT EXISTS (SELECT 1 FROM u)"""

        self.request_cancel = f"""
WITH u AS (
    UPDATE {t} SET cancel_requested = true WHERE task_id = %(id)s AND {ACTIVE}
    RETURNING {SELECT_COLUMNS}
),
ch AS ({change} SELECT task_id, 'cancel_requested', status, '{{}}', %(now)s FROM u
    RETURNING seq, kind),
{note}
SELECT {SELECT_COLUMNS}, (SELECT count(*) FROM note) FROM u
UNION ALL
SELECT {SELECT_COLUMNS}, 0 FROM {t}
WHERE task_id = %(id)s AND {LIVE} AND NOT EXISTS (SELECT 1 FROM u)"""

        #: Write back a loaded record's mutable fields and append its change rows.
        self.save_emit = f"""
WITH u AS (
    UPDATE {t} SET status = %(status)s, status_message = %(message)s::text,
        updated_at = %(updated_at)s, input_requests = %(input_requests)s::json,
        answers = %(answers)s::json, cancel_requested = %(cancel_requested)s,
        attempts = %(attempts)s, lease_owner = %(lease_owner)s::text,
        lease_expires = %(lease_expires)s::float8, not_before = %(not_before)s::float8,
        retries = %(retries)s, phase = %(phase)s::text
    WHERE task_id = %(id)s RETURNING 1
),
ch AS ({change}
    SELECT %(id)s, e.kind, %(status)s, e.details, %(now)s
    FROM unnest(%(kinds)b::text[], %(details)b::text[]) WITH ORDINALITY AS e(kind, details, i)
    ORDER BY e.i RETURNING seq, kind),
{note}
SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM note)"""

        #: A lease, not a run: `phase` and `attempts` stay (`stores.phases`).
        self.claim = f"""
UPDATE {t} SET lease_owner = %(owner)s, lease_expires = %(until)s
WHERE task_id = %(id)s AND {ACTIVE} AND (lease_owner IS NULL OR lease_owner = %(owner)s
    OR lease_owner = %(expect)s::text OR COALESCE(lease_expires, 0) <= %(now)s)
RETURNING {SELECT_COLUMNS}"""
        self.renew = (
            f"UPDATE {t} SET lease_expires = %(until)s WHERE task_id = ANY(%(ids)b::text[]) "
            f"AND lease_owner = %(owner)s AND {ACTIVE}"
        )
        #: A run that had begun (`phase` running, or none) waits to restart (`rules.give_back`).
        self.requeue = f"""
WITH u AS (
    UPDATE {t} SET lease_owner = NULL, lease_expires = NULL,
        phase = CASE WHEN phase IS NULL OR phase = 'running' THEN 'restart' ELSE phase END
    WHERE task_id = %(id)s AND {ACTIVE} AND lease_owner = %(owner)s
    RETURNING {SELECT_COLUMNS}
),
ch AS ({change} SELECT task_id, 'queued', status, json_build_object('app', app)::text,
    %(now)s FROM u RETURNING seq, kind),
{note}
SELECT {SELECT_COLUMNS}, (SELECT count(*) FROM note) FROM u"""
        #: `rules.begin`: the run of a waiting task leased to `owner` begins (`phase`
        #: running, one more attempt, the message it starts with, its change); a task
        #: already running is returned as it is (no change row); refused: no row.
        self.start_run = f"""
WITH old AS (
    SELECT task_id, phase IS DISTINCT FROM 'running' AS begins,
        status_message IS DISTINCT FROM %(message)s::text AS changed
    FROM {t} WHERE task_id = %(id)s AND {ACTIVE} AND lease_owner = %(owner)s
    FOR NO KEY UPDATE
),
u AS (
    UPDATE {t} AS x SET phase = 'running', attempts = x.attempts + 1,
        status_message = %(message)s::text,
        updated_at = CASE WHEN old.changed THEN %(now)s ELSE x.updated_at END
    FROM old WHERE x.task_id = old.task_id AND old.begins
    RETURNING {", ".join(f"x.{c}" for c in COLUMNS)}, old.changed
),
ch AS ({change} SELECT task_id, 'message', status, '{{}}', %(now)s FROM u WHERE changed
    RETURNING seq, kind),
{note}
SELECT {SELECT_COLUMNS}, (SELECT count(*) FROM note) FROM u
UNION ALL
SELECT {SELECT_COLUMNS}, 0 FROM {t} WHERE task_id = (SELECT task_id FROM old WHERE NOT begins)"""
        self.active_tasks = f"SELECT {SELECT_COLUMNS} FROM {t} WHERE {ACTIVE}"
        lease_columns = (
            "task_id, tool, status, created_at, updated_at, status_message, attempts, app, "
            "lease_owner, lease_expires, cancel_requested, phase"
        )
        self.active_leases = f"SELECT {lease_columns} FROM {t} WHERE {ACTIVE}"
        self.active_leases_of = f"{self.active_leases} AND app = %(app)s"

        # --- claim_queued ---------------------------------------------------------------
        #: The claim statements for one application's tasks, and for any application's.
        self.of_app = claim_statements(t, "AND app = %(app)s ", change, note)
        self.any_app = claim_statements(t, "", change, note)
        self.lease_many = f"""
UPDATE {t} SET lease_owner = %(owner)s, lease_expires = %(until)s, not_before = NULL
WHERE task_id = ANY(%(ids)b::text[]) AND {UNLEASED}
RETURNING {SELECT_COLUMNS}"""
        #: Each gate's lock, taken in one order by every claimer (no deadlock between two).
        self.lock_gates = (
            "SELECT pg_advisory_xact_lock(hashtextextended(%(prefix)s || g, 0)) FROM "
            '(SELECT g FROM unnest(%(gates)b::text[]) AS g ORDER BY g COLLATE "C") o'
        )
        self.turns = (
            f"SELECT gate, owner, turn FROM {s}.gate_turns WHERE gate = ANY(%(gates)b::text[])"
        )
        self.save_turns = (
            f"INSERT INTO {s}.gate_turns (gate, owner, turn) "
            "SELECT * FROM unnest(%(gates)b::text[], %(owners)b::text[], %(turns)b::bigint[]) "
            "ON CONFLICT (gate, owner) DO UPDATE SET turn = excluded.turn"
        )
        self.forget_turns = (
            f"DELETE FROM {s}.gate_turns x WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE {GATED} "
            f"AND gate = x.gate) AND NOT EXISTS (SELECT 1 FROM {t} WHERE {HOLDING} "
            "AND gate = x.gate)"
        )

        # --- retention, tombstones, the feed --------------------------------------------
        self.purge = f"""
WITH gone AS (DELETE FROM {t} WHERE expires_at <= %(now)s RETURNING task_id, owner, expires_at),
cnt AS ({count.format(n="-count(*)", src="gone")}),
stones AS (
    INSERT INTO {s}.tombstones (key, owner, at, reason)
    SELECT {TOMB_KEY}, owner, expires_at, 'expired' FROM gone WHERE %(bury)s
    ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, at = excluded.at,
        reason = excluded.reason
)
SELECT count(*) FROM gone"""
        ended = "terminal_at < %(before)s AND status IN ('completed', 'failed', 'cancelled')"
        self.count_finished = f"SELECT count(*) FROM {t} WHERE {ended}"
        removal = f"""
WITH gone AS (DELETE FROM {t} WHERE {{where}} RETURNING task_id, owner),
cnt AS ({count.format(n="-count(*)", src="gone")}),
stones AS (
    INSERT INTO {s}.tombstones (key, owner, at, reason)
    SELECT {TOMB_KEY}, owner, %(now)s, 'purged' FROM gone WHERE %(bury)s
    ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, at = excluded.at,
        reason = excluded.reason
)
SELECT count(*) FROM gone"""
        self.purge_finished = removal.format(where=ended)
        #: `purge_finished` of the live terminal tasks among `%(ids)s` (`delete_finished`).
        chosen = f"task_id = ANY(%(ids)b::text[]) AND {LIVE} AND {ended[ended.index('status') :]}"
        self.delete_finished = removal.format(where=chosen)
        self.tombstone = f"""
SELECT owner, expires_at, 'expired', true FROM {t} WHERE task_id = %(id)s
UNION ALL
SELECT owner, at, reason, false FROM {s}.tombstones WHERE key = %(key)s"""
        self.forget_all_tombstones = f"DELETE FROM {s}.tombstones"
        self.forget_tombstones = f"DELETE FROM {s}.tombstones WHERE at < %(before)s"
        self.trim_tombstones = (
            f"DELETE FROM {s}.tombstones WHERE at < (SELECT at FROM {s}.tombstones "
            "ORDER BY at DESC OFFSET %(keep)s LIMIT 1)"
        )
        self.trim_changes = (
            f"DELETE FROM {s}.changes WHERE (created_at < %(before)s "
            f"OR seq <= (SELECT max(seq) FROM {s}.changes) - %(keep)s) "
            f"AND seq < (SELECT max(seq) FROM {s}.changes)"
        )
        self.last_seq = f"SELECT COALESCE(max(seq), 0) FROM {s}.changes"
        self.changes_after = (
            f"SELECT seq, task_id, kind, status, details FROM {s}.changes WHERE seq > %s "
            "ORDER BY seq LIMIT %s"
        )
        self.listen = f'LISTEN "{self.channel}"'
        #: The last `seq` issued, then whether any other session may still be inserting
        #: change rows (read in that order: see `postgres.feed`, "Commit order").
        self.writers = f"""
SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END,
    NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'relation'
        AND relation = '{s}.changes'::regclass AND mode = 'RowExclusiveLock'
        AND pid <> pg_backend_pid())
FROM {s}.changes_seq_seq"""


def save_params(
    record: TaskRecord, emits: list[tuple[str, dict[str, Any]]], now: float
) -> dict[str, Any]:
    """The parameters of `save_emit`: a loaded record's mutable fields and its change rows."""
    return {
        "id": record.task_id,
        "status": record.status,
        "message": clean_text(record.status_message),
        "updated_at": record.updated_at,
        "input_requests": dumps(record.input_requests),
        "answers": dumps(record.answers),
        "cancel_requested": bool(record.cancel_requested),
        "attempts": record.attempts,
        "lease_owner": record.lease_owner,
        "lease_expires": record.lease_expires,
        "not_before": record.not_before,
        "retries": record.retries,
        "phase": record.phase,
        "kinds": [kind for kind, _ in emits],
        "details": [encode_json(details) for _, details in emits],
        "now": now,
    }


__all__ = ["LIVE", "QUIET", "TOMB_KEY", "WAKING_KINDS", "Statements", "save_params"]
