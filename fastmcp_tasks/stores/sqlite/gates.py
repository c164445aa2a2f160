"""`claim_queued` for the SQLite store: queued tasks through their gates (`stores.flow`).

This module owns the SQL of a claim: which queued tasks one `claim_queued` takes
and leases, in one write transaction, and the read-only probe that decides
whether the write lock is worth taking at all.

The ungated path is what every claim costs, and it stays one range of the
ungated queued-task index (`schema.READY_INDEX`, oldest first, a waiting retry
skipped on the index entry) plus one probe of the gated queued-task index, which
is empty unless some tool has a concurrency gate: with no gated task queued a
claim is one indexed query and one UPDATE per task taken, as before gates existed.

With gated tasks queued, the claim also reads, in the same transaction:

- the gates that have a claimable queued task (a skip-scan of
  `schema.GATE_HEADS_INDEX`, one index seek per gate), each gate's oldest
  claimable task (whose `gate_limit` counts, as in `plan_claims`) and how many of
  its tasks are leased and active (a range of `schema.GATE_HOLDERS_INDEX`), in
  one statement;
- only for gates with a free slot: the owners waiting in it (a skip-scan of
  `schema.GATE_OWNERS_INDEX`) and each owner's oldest `min(limit, free)` tasks,
  as light `Candidate` rows; and the gate's turns (`gate_turns`).

`stores.flow.plan_claims` then chooses; the chosen tasks are leased, their turns
stored and the turn counter (`meta.next_turn`) moved on, before the commit.

Each ungated task's run begins in the same transaction, as `start_run` would
(`stores.phases`, `rules.begin`): `phase` running, one more attempt, its waiting
message cleared with a `message` change unless it waits to restart (whose message says
which attempt it is), as PostgreSQL's claim does, so a worker writes nothing to start
it. A gated task's run begins with the engine's `start_run`, as on every store.
"""

from __future__ import annotations

import time
from typing import Any

from fastmcp_tasks.stores import rules
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import Candidate, plan_claims
from fastmcp_tasks.stores.phases import RUNNING, start_message
from fastmcp_tasks.stores.sqlite.listing import load_many
from fastmcp_tasks.stores.sqlite.schema import (
    DUE,
    GATE_HEADS_INDEX,
    GATE_HOLDERS_INDEX,
    GATE_OWNERS_INDEX,
    GATED,
    HOLDING,
)
from fastmcp_tasks.stores.sqlite.tx import Tx, ready_where

#: Whether any gated task is queued at all (any application's, due or not): one probe.
_ANY_GATED = f"SELECT 1 FROM tasks INDEXED BY {GATE_HEADS_INDEX} WHERE {GATED} LIMIT 1"

#: Every gate with a queued task (a skip-scan: one seek per gate), the capacity its oldest
#: claimable task of the application (`{app}`) gives it (NULL: none claimable), and its
#: leased active tasks. Parameters: [app,] now.
_ROOMS = f"""
WITH RECURSIVE seen(g) AS (
    SELECT (SELECT gate FROM tasks INDEXED BY {GATE_HEADS_INDEX} WHERE {GATED}
        ORDER BY gate LIMIT 1)
    UNION ALL
    SELECT (SELECT gate FROM tasks INDEXED BY {GATE_HEADS_INDEX} WHERE {GATED}
        AND gate > seen.g ORDER BY gate LIMIT 1)
    FROM seen WHERE seen.g IS NOT NULL
)
SELECT g,
    (SELECT COALESCE(NULLIF(gate_limit, 0), 1) FROM tasks INDEXED BY {GATE_HEADS_INDEX}
        WHERE {GATED} AND gate = seen.g {{app}}AND {DUE} ORDER BY created_at LIMIT 1),
    (SELECT COUNT(*) FROM tasks INDEXED BY {GATE_HOLDERS_INDEX}
        WHERE {HOLDING} AND gate = seen.g)
FROM seen WHERE g IS NOT NULL
"""

#: The named owners with tasks queued in a gate (a skip-scan). Parameter: the gate.
_OWNERS = f"""
WITH RECURSIVE seen(o) AS (
    SELECT (SELECT owner FROM tasks INDEXED BY {GATE_OWNERS_INDEX} WHERE {GATED}
        AND gate = ?1 AND owner IS NOT NULL ORDER BY owner LIMIT 1)
    UNION ALL
    SELECT (SELECT owner FROM tasks INDEXED BY {GATE_OWNERS_INDEX} WHERE {GATED}
        AND gate = ?1 AND owner > seen.o ORDER BY owner LIMIT 1)
    FROM seen WHERE seen.o IS NOT NULL
)
SELECT o FROM seen WHERE o IS NOT NULL
"""

#: One owner's oldest claimable tasks in a gate (`{app}`: the application's only), as
#: `Candidate` fields. Parameters: gate, owner, [app,] now, how many.
_OLDEST = (
    f"SELECT task_id, created_at, owner, gate, gate_limit FROM tasks "
    f"INDEXED BY {GATE_OWNERS_INDEX} WHERE {GATED} AND gate = ? AND owner IS ? "
    f"{{app}}AND {DUE} ORDER BY created_at LIMIT ?"
)

_LEASE = "UPDATE tasks SET lease_owner = ?, lease_expires = ?, not_before = NULL WHERE task_id = ?"

#: An ungated task's run begun with its claim (`rules.begin`). Parameters: the message it
#: starts with, `updated_at`, task id.
_BEGIN = (
    "UPDATE tasks SET phase = 'running', attempts = attempts + 1, status_message = ?, "
    "updated_at = ? WHERE task_id = ?"
)


def _app_term(app: str | None) -> tuple[str, tuple[Any, ...]]:
    return ("", ()) if app is None else ("AND app = ? ", (app,))


def rooms(tx: Tx, app: str | None, now: float) -> dict[str, tuple[int, int]]:
    """The gates where a claimable queued task of `app` could be taken now:
    gate -> (free slots, leased active tasks)."""
    term, params = _app_term(app)
    found: dict[str, tuple[int, int]] = {}
    for gate, cap, running in tx.conn.execute(_ROOMS.format(app=term), (*params, now)):
        if cap is not None and cap > running:
            found[gate] = (cap - running, running)
    return found


def probe(tx: Tx, app: str | None, now: float) -> bool:
    """Whether `claim` would take something now (a read; one statement when no gated
    task is queued): a claimable ungated task, or a gate with a slot and a task for it."""
    where, params = ready_where(app, now)
    query = f"SELECT EXISTS (SELECT 1 {where}), EXISTS ({_ANY_GATED})"
    ready, gated = tx.conn.execute(query, params).fetchone()
    return bool(ready) or (bool(gated) and bool(rooms(tx, app, now)))


def candidates(
    tx: Tx, free: dict[str, tuple[int, int]], limit: int, app: str | None, now: float
) -> list[Candidate]:
    """Each waiting owner's oldest `min(limit, free)` claimable tasks in the gates of `free`:
    all `plan_claims` can take from them in one claim."""
    term, params = _app_term(app)
    oldest = _OLDEST.format(app=term)
    found: list[Candidate] = []
    for gate, (slots, _) in free.items():
        owners: list[str | None] = [None]
        owners += [row[0] for row in tx.conn.execute(_OWNERS, (gate,))]
        for owner in owners:
            rows = tx.conn.execute(oldest, (gate, owner, *params, now, min(limit, slots)))
            found.extend(Candidate(*row) for row in rows)
    return found


def _turns(tx: Tx, gates: list[str]) -> dict[tuple[str, str], int]:
    turns: dict[tuple[str, str], int] = {}
    for gate in gates:
        query = "SELECT owner, turn FROM gate_turns WHERE gate = ?"
        for owner, turn in tx.conn.execute(query, (gate,)):
            turns[(gate, owner)] = turn
    return turns


def _record_turns(tx: Tx, used: dict[tuple[str, str], int]) -> None:
    tx.conn.executemany(
        "INSERT OR REPLACE INTO gate_turns (gate, owner, turn) VALUES (?, ?, ?)",
        [(gate, owner, turn) for (gate, owner), turn in used.items()],
    )
    tx.conn.execute("UPDATE meta SET value = ? WHERE key = 'next_turn'", (max(used.values()) + 1,))


def _plan(
    tx: Tx, ready: list[TaskRecord], limit: int, app: str | None, now: float
) -> list[TaskRecord]:
    """`ready` (the oldest claimable ungated tasks) merged with the gated tasks that may go
    now, in `plan_claims` order; the turns they use are stored."""
    free = rooms(tx, app, now)
    if not free:
        return ready
    pool = [Candidate(r.task_id, r.created_at) for r in ready]
    pool += candidates(tx, free, limit, app, now)
    pool.sort(key=lambda c: c.created_at)
    row = tx.conn.execute("SELECT value FROM meta WHERE key = 'next_turn'").fetchone()
    running = {gate: held for gate, (_, held) in free.items()}
    chosen, used = plan_claims(pool, limit, running, _turns(tx, list(free)), int(row[0]))
    if used:
        _record_turns(tx, used)
    by_id = {r.task_id: r for r in ready}
    by_id.update(load_many(tx, [i for i in chosen if i not in by_id], now))
    return [by_id[task_id] for task_id in chosen]


def claim(tx: Tx, owner: str, until: float, limit: int, app: str | None) -> list[TaskRecord]:
    """Lease up to `limit` claimable queued tasks of `app` to `owner` (`claim_queued`)."""
    now = time.time()
    taken = tx.unclaimed(limit, app, now)
    if tx.conn.execute(_ANY_GATED).fetchall():
        taken = _plan(tx, taken, limit, app, now)
    if taken:
        tx.conn.executemany(_LEASE, [(owner, until, r.task_id) for r in taken])
    begun: list[TaskRecord] = []
    for record in taken:
        record.lease_owner, record.lease_expires = owner, until
        record.not_before = None
        if record.gate is None and record.phase != RUNNING:
            for kind in rules.begin(record, owner, start_message(record)) or ():
                tx.emit(record.task_id, kind, record.status)
            begun.append(record)
    if begun:
        rows = [(r.status_message, r.updated_at, r.task_id) for r in begun]
        tx.conn.executemany(_BEGIN, rows)
    return taken


def forget_turns(tx: Tx) -> None:
    """Drop the turns of gates no active task waits in or holds (`purge_expired`): one pass
    over `gate_turns`, two index probes per row."""
    tx.conn.execute(
        f"DELETE FROM gate_turns WHERE NOT EXISTS (SELECT 1 FROM tasks "
        f"INDEXED BY {GATE_HEADS_INDEX} WHERE {GATED} AND gate = gate_turns.gate) "
        f"AND NOT EXISTS (SELECT 1 FROM tasks INDEXED BY {GATE_HOLDERS_INDEX} "
        f"WHERE {HOLDING} AND gate = gate_turns.gate)"
    )


__all__ = ["candidates", "claim", "forget_turns", "probe", "rooms"]
