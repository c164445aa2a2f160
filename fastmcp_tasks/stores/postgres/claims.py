"""The statements of `claim_queued` (`ClaimStatements`, one set per application filter).

The ungated claim is one statement: the oldest claimable tasks, `FOR NO KEY UPDATE
SKIP LOCKED` (`postgres.sql`, "Row locks"), leased and their runs begun as `start_run`
would (`stores.phases`: `phase` running, one more attempt, the waiting message
cleared, unless the task waits to restart, whose message says which attempt it is,
with a `message` change when one is cleared), unless some gate has a claimable task
and room: then it leases nothing and names those gates, for the fair, serialised path
(`postgres.gates`, which uses `rooms_of` and `candidates`). Whether a task waits is
its `phase`, never its message.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmcp_tasks.stores.postgres.schema import COLUMNS, GATED, HOLDING, READY

_NULLS = ", ".join(["NULL"] * len(COLUMNS))
#: The longest statement (bytes) whose conversion psycopg caches: a longer one is parsed
#: again each time it is sent (its `MAX_CACHED_STATEMENT_LENGTH`). Every statement of the
#: store stays within it for any schema name PostgreSQL allows (63 bytes); the longest
#: (the ungated claim, `start_run`, a paused tool's hold) name their many columns
#: through a short alias.
CACHED_LENGTH = 4096
DUE = "(not_before IS NULL OR not_before <= %(now)s)"


@dataclass(frozen=True, slots=True)
class ClaimStatements:
    """The statements of `claim_queued` for one application filter (`Statements.of_app`)."""

    #: The ungated claim, one statement: `(NULL, task...)` rows leased, or, when some gate
    #: has a claimable task and room, nothing leased and one `(those gates, NULL...)` row.
    claim_ready: str
    #: The gates among `%(gates)s` with a claimable task and a free slot, as `(gate, cap,
    #: running)` (read once their locks are held).
    rooms_of: str
    #: The oldest claimable ungated tasks, locked (`FOR NO KEY UPDATE SKIP LOCKED`).
    ready_ids: str
    #: Each owner's oldest `%(per)s` claimable tasks in the gate `%(gate)s` (a loose scan
    #: of the owners waiting in it, then a range per owner).
    candidates: str


def claim_statements(t: str, app: str, change: str, note: str) -> ClaimStatements:
    """`change`: the INSERT of change rows; `note`: the CTE that notifies (`Statements`)."""
    gates = f"""gates AS (
    (SELECT gate FROM {t} WHERE {GATED} ORDER BY gate LIMIT 1)
    UNION ALL
    SELECT (SELECT gate FROM {t} WHERE {GATED} AND gate > g.gate ORDER BY gate LIMIT 1)
    FROM gates g WHERE g.gate IS NOT NULL
)"""
    rooms = f"""SELECT gate, cap, running FROM (
    SELECT g.gate,
        (SELECT COALESCE(NULLIF(c.gate_limit, 0), 1) FROM {t} c WHERE {GATED}
            AND c.gate = g.gate {app}AND {DUE} ORDER BY c.created_at LIMIT 1) AS cap,
        (SELECT count(*) FROM {t} h WHERE {HOLDING} AND h.gate = g.gate) AS running
    FROM gates g WHERE g.gate IS NOT NULL {{only}}
) r WHERE cap IS NOT NULL AND cap > running"""
    ready = f"SELECT task_id{{more}} FROM {t} WHERE {READY} {app}AND {DUE} {{extra}}" + (
        "ORDER BY created_at LIMIT %(limit)s FOR NO KEY UPDATE SKIP LOCKED"
    )
    # The leased rows are returned through the alias `x`: named by the table, 27 columns
    # would make the statement longer than psycopg caches the parsing of
    # (`CACHED_LENGTH`) for a long schema name, and it would be parsed at every claim.
    returning = ", ".join(f"x.{c}" for c in COLUMNS)
    # Each task's run begins with its claim (`stores.phases`): an unleased task always waits
    # (a NULL phase too: a row from before phases). Its message is cleared, with its
    # `message` change, unless it waits to restart (the engine then writes nothing when
    # the task starts); `note` runs for its notify.
    clears = "(phase IS DISTINCT FROM 'restart' AND status_message IS NOT NULL)"
    fast = f"""WITH RECURSIVE {gates},
room AS (SELECT array_agg(r.gate) AS gates FROM ({rooms.format(only="")}) r),
picked AS ({
        ready.format(
            more=f", {clears} AS clears",
            extra="AND (SELECT gates FROM room) IS NULL ",
        )
    }),
u AS (
    UPDATE {t} AS x SET lease_owner = %(owner)s, lease_expires = %(until)s,
        attempts = x.attempts + 1, not_before = NULL, phase = 'running',
        status_message = CASE WHEN picked.clears THEN NULL ELSE x.status_message END,
        updated_at = CASE WHEN picked.clears THEN %(now)s ELSE x.updated_at END
    FROM picked WHERE x.task_id = picked.task_id
    RETURNING {returning}, picked.clears
),
ch AS ({change} SELECT task_id, 'message', status, '{{}}', %(now)s FROM u
    WHERE clears RETURNING seq, kind),
{note}
SELECT NULL::text[], {", ".join(COLUMNS)} FROM u WHERE (SELECT count(*) FROM note) >= 0
UNION ALL
SELECT gates, {_NULLS} FROM room WHERE gates IS NOT NULL"""
    who = "COALESCE(owner, '')"  # `stores.flow.ANONYMOUS` for tasks without an owner
    candidates = f"""WITH RECURSIVE o AS (
    (SELECT {who} AS who FROM {t} WHERE {GATED} AND gate = %(gate)s ORDER BY {who} LIMIT 1)
    UNION ALL
    SELECT (SELECT {who} FROM {t} WHERE {GATED} AND gate = %(gate)s AND {who} > o.who
        ORDER BY {who} LIMIT 1)
    FROM o WHERE o.who IS NOT NULL
)
SELECT c.task_id, c.created_at, c.owner, c.gate, c.gate_limit FROM o, LATERAL (
    SELECT task_id, created_at, owner, gate, gate_limit FROM {t}
    WHERE {GATED} AND gate = %(gate)s AND {who} = o.who {app}AND {DUE}
    ORDER BY created_at LIMIT %(per)s
) c WHERE o.who IS NOT NULL"""
    return ClaimStatements(
        claim_ready=fast,
        rooms_of=f"WITH RECURSIVE {gates}\n"
        f"{rooms.format(only='AND g.gate = ANY(%(gates)b::text[])')}",
        ready_ids=ready.format(more=", created_at", extra=""),
        candidates=candidates,
    )


__all__ = ["CACHED_LENGTH", "DUE", "ClaimStatements", "claim_statements"]
