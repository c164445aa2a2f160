"""The statements of the PostgreSQL store's operator records (`OperationStatements`).

Written once per schema, like `postgres.sql.Statements`, whose change-row INSERT and
notify CTE the statements that change tasks reuse, and whose `delete_finished`
(`purge_finished` of a chosen set) serves here. `postgres.operations` runs them.

- `add_events`: a batch of events of any tasks, one statement. It finds each named task
  by its primary key, one lookup per task (a lateral join): a plan the server cached for
  the prepared statement while the table was small would otherwise scan the whole table
  for every batch until the table is analyzed again. It locks each named
  live task `FOR KEY SHARE`: a DELETE of the task waits for the append to commit and
  its trigger then deletes what was appended, and an append that meets a task deleted
  meanwhile drops its events, so none is ever left behind. Claims and loads lock
  `FOR NO KEY UPDATE`, which does not conflict with it: a claim never skips a task
  whose history is being written. Per task it keeps what `keeps_event` allows (the
  first `MAX_EVENTS - 1`, then one `finished`), counting the history already stored
  (a range of the primary key) and the batch's earlier events of that task (window
  functions over the batch, in its order).
- `hold`: `hold_paused` as one compare-and-set statement. Its `old` CTE locks the
  task `FOR NO KEY UPDATE` and its pause `FOR KEY SHARE`: `resume`'s DELETE of the
  pause waits for the hold to commit (and then releases the task), and a hold that
  meets a pause deleted meanwhile finds no row and holds nothing.
- `release`: `resume`'s second statement, run after the pause's DELETE in the same
  transaction, so its snapshot sees every hold that committed before the DELETE got
  the pause row: no task stays held for a pause that is gone. Each released task
  gets `RESUMED_MESSAGE` (passed as `message`) and its `message` and `queued` changes:
  a claim here begins the run without a message, so the pause's would otherwise stay.

Two batches appending to one task's history at once each count it without the
other's events, so at the bound a history may take one more event per racing batch:
the bound limits storage (as `max_tasks` does), it is not exact under such races.
"""

from __future__ import annotations

from fastmcp_tasks.stores.operations import MAX_AUDIT, MAX_EVENTS
from fastmcp_tasks.stores.postgres.schema import ACTIVE, COLUMNS, SELECT_COLUMNS, UNLEASED
from fastmcp_tasks.stores.postgres.sql import LIVE, Statements


class OperationStatements:
    """Every statement of the operator records of one store schema (module doc)."""

    def __init__(self, sql: Statements) -> None:
        s, t = sql.schema, f"{sql.schema}.tasks"
        change, note = sql.change, sql.note
        events = f"{s}.task_events"
        self.add_events = f"""
WITH e AS (
    SELECT * FROM unnest(%(ids)b::text[], %(ats)b::float8[], %(kinds)b::text[],
        %(details)b::text[]) WITH ORDINALITY AS e(task_id, at, kind, details, i)
),
live AS (
    SELECT k.task_id, (SELECT count(*) FROM {events} x WHERE x.task_id = k.task_id) AS stored
    FROM (SELECT DISTINCT task_id FROM e) d CROSS JOIN LATERAL (
        SELECT task_id FROM {t} WHERE task_id = d.task_id AND {LIVE} FOR KEY SHARE
    ) k
),
ranked AS (
    SELECT e.*, live.stored, row_number() OVER (PARTITION BY e.task_id ORDER BY e.i) - 1 AS k
    FROM e JOIN live USING (task_id)
),
judged AS (
    SELECT *, count(*) FILTER (WHERE kind = 'finished' AND stored + k >= {MAX_EVENTS - 1})
        OVER (PARTITION BY task_id ORDER BY i) AS late
    FROM ranked
)
INSERT INTO {events} (task_id, at, kind, details)
SELECT task_id, at, kind, details::json FROM judged
WHERE stored + k < {MAX_EVENTS - 1}
    OR (kind = 'finished' AND stored < {MAX_EVENTS} AND late = 1
        AND stored + k >= {MAX_EVENTS - 1})
ORDER BY i"""
        self.events = (
            f"SELECT at, kind, details FROM {events} WHERE task_id = %(id)s "
            f"AND EXISTS (SELECT 1 FROM {t} WHERE task_id = %(id)s AND {LIVE}) ORDER BY seq"
        )

        #: Upsert a worker and forget the silent ones, its own stale row included.
        self.beat = f"""
WITH gone AS (
    DELETE FROM {s}.workers WHERE last_seen < %(horizon)s
        AND (worker_id <> %(id)s OR %(last_seen)s < %(horizon)s)
)
INSERT INTO {s}.workers (worker_id, last_seen, info)
SELECT %(id)s, %(last_seen)s, %(info)s::json WHERE %(last_seen)s >= %(horizon)s
ON CONFLICT (worker_id) DO UPDATE SET last_seen = excluded.last_seen, info = excluded.info"""
        self.workers = f"SELECT info FROM {s}.workers WHERE last_seen >= %(horizon)s"

        self.pause = (
            f"INSERT INTO {s}.pauses (app, tool, since, paused_by) "
            "VALUES (%(app)s, %(tool)s, %(since)s, %(by)s) ON CONFLICT DO NOTHING RETURNING 1"
        )
        self.paused = (
            f"SELECT app, tool, since, paused_by FROM {s}.pauses ORDER BY since, app, tool"
        )
        self.unpause = f"DELETE FROM {s}.pauses WHERE app = %(app)s AND tool = %(tool)s RETURNING 1"
        self.release = f"""
WITH u AS (
    UPDATE {t} SET not_before = NULL, status_message = %(message)s::text, updated_at = %(now)s
    WHERE {UNLEASED} AND tool = %(tool)s AND not_before = %(held)s
        AND COALESCE(app, '') = %(app)s
    RETURNING task_id, status, app
),
ch AS (
    {change}
    SELECT task_id, 'message', status, '{{}}', %(now)s FROM u
    UNION ALL
    SELECT task_id, 'queued', status, json_build_object('app', app)::text, %(now)s FROM u
    RETURNING seq, kind
),
{note}
SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM note)"""
        #: `rules.hold_back`, `not_before` PAUSED_UNTIL and the message, on a task leased to
        #: `owner`, active, not cancelled, whose tool is paused (for its application).
        self.hold = f"""
WITH old AS (
    SELECT k.task_id, k.status_message IS DISTINCT FROM %(message)s::text AS changed
    FROM {t} k JOIN {s}.pauses p ON p.app = COALESCE(k.app, '') AND p.tool = k.tool
    WHERE k.task_id = %(id)s AND k.{ACTIVE} AND (k.expires_at IS NULL OR k.expires_at > %(now)s)
        AND k.lease_owner = %(owner)s AND NOT k.cancel_requested
    FOR NO KEY UPDATE OF k FOR KEY SHARE OF p
),
u AS (
    UPDATE {t} AS x SET lease_owner = NULL, lease_expires = NULL, not_before = %(held)s,
        phase = CASE WHEN x.phase = 'running' AND x.attempts <= 1 THEN 'queued'
            WHEN x.phase IS NULL OR x.phase = 'running' THEN 'restart'
            ELSE x.phase END,
        attempts = CASE WHEN x.phase = 'running' THEN GREATEST(x.attempts - 1, 0)
            ELSE x.attempts END,
        status_message = %(message)s::text,
        updated_at = CASE WHEN old.changed THEN %(now)s ELSE x.updated_at END
    FROM old WHERE x.task_id = old.task_id
    RETURNING {", ".join(f"x.{c}" for c in COLUMNS)}, old.changed
),
ch AS (
    {change}
    SELECT task_id, 'message', status, '{{}}', %(now)s FROM u WHERE changed
    UNION ALL
    SELECT task_id, 'queued', status, json_build_object('app', app, 'gate', gate)::text,
        %(now)s FROM u WHERE gate IS NOT NULL
    RETURNING seq, kind
),
{note}
SELECT {SELECT_COLUMNS}, (SELECT count(*) FROM note) FROM u"""

        #: Append an audit entry and drop those older than the newest `MAX_AUDIT` (a
        #: range of the key: a sequence gap, after a rollback, only keeps fewer).
        self.add_audit = f"""
WITH a AS (
    INSERT INTO {s}.audit (at, actor, action, count, details)
    VALUES (%(at)s, %(actor)s, %(action)s, %(count)s, %(details)s::json) RETURNING seq
)
DELETE FROM {s}.audit WHERE seq <= (SELECT seq FROM a) - {MAX_AUDIT}"""
        self.audit = (
            f"SELECT at, actor, action, count, details FROM {s}.audit "
            "ORDER BY seq DESC LIMIT %(limit)s"
        )


__all__ = ["OperationStatements"]
