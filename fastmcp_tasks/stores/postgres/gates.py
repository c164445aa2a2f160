"""`claim_queued` through concurrency gates for the PostgreSQL store (`stores.flow`).

This module owns the gated claim, one transaction run only when some gate has a
claimable task and a free slot (`postgres.leases` finds out, and which gates, in its
one-statement fast path). `SKIP LOCKED` row locks alone cannot keep a gate's limit: two
claimers would each count the slot the other is taking. So the claim takes the
advisory transaction lock of every gate it may take from ("gate:<gate>", in one
order, `COLLATE "C"`, so two claimers never deadlock), then, in fresh statements
that see every lease committed before the lock was granted:

- each such gate's free slots (its oldest claimable task's `gate_limit` minus its
  leased active tasks: a probe of the gate index and a range of the holders index);
- the oldest claimable ungated tasks (`FOR NO KEY UPDATE SKIP LOCKED`);
- each waiting owner's oldest claimable tasks in those gates, as `Candidate`s (a
  loose scan of the owners waiting in a gate, then a short range per owner: the
  cost follows the owners waiting, not the tasks queued), and the gates' turns
  (`gate_turns`), sent together in one round trip;

`stores.flow.plan_claims` chooses, and the chosen tasks are leased (re-checked as
still unleased and active) and their turns stored before the commit releases the
locks. Turn numbers only order the owners of one gate, so the next turn is one
past the gate's highest stored turn: no counter row every gate would share.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import Candidate, plan_claims
from fastmcp_tasks.stores.postgres.schema import from_row

if TYPE_CHECKING:
    from fastmcp_tasks.stores.postgres.connections import PostgresConnections


async def claim_gated(
    store: PostgresConnections,
    conn: AsyncConnection[Any],
    gates: list[str],
    owner: str,
    until: float,
    limit: int,
    app: str | None,
) -> list[TaskRecord]:
    """Lease up to `limit` claimable tasks of `app`, gated ones of `gates` (those the fast
    path found with room) within their free slots in fair turns, in `conn`'s
    transaction (see the module doc)."""
    sql, run = store.sql, store._on
    claims = sql.of_app if app is not None else sql.any_app
    now = time.time()
    base: dict[str, Any] = {"app": app, "now": now}
    gates = sorted(set(gates))
    # these plans hardly depend on the values, and re-planning each one (PostgreSQL's
    # custom plans) cost more than running it
    await run(conn, "SET LOCAL plan_cache_mode = force_generic_plan", fetch=False)
    await run(
        conn, sql.lock_gates, {"prefix": f"{store.schema}:gate:", "gates": gates}, fetch=False
    )
    rooms = await run(conn, claims.rooms_of, {**base, "gates": gates})
    free = {gate: (int(cap) - int(running), int(running)) for gate, cap, running in rooms}
    # sent together, fetched together: one round trip (the transaction is a pipeline)
    ready_cur = await store.send_statement(conn, claims.ready_ids, {**base, "limit": limit})
    waiting = [
        await store.send_statement(
            conn, claims.candidates, {**base, "gate": gate, "per": min(limit, slots)}
        )
        for gate, (slots, _) in free.items()
    ]
    turns_cur = await store.send_statement(conn, sql.turns, {"gates": list(free)}) if free else None
    pool = [Candidate(task_id, created_at) for task_id, created_at in await ready_cur.fetchall()]
    for cur in waiting:
        pool += [Candidate(*row) for row in await cur.fetchall()]
    turns: dict[tuple[str, str], int] = {}
    if turns_cur is not None:
        for gate, who, turn in await turns_cur.fetchall():
            turns[(gate, who)] = int(turn)
    pool.sort(key=lambda c: (c.created_at, c.task_id))
    running = {gate: held for gate, (_, held) in free.items()}
    next_turn = max(turns.values(), default=-1) + 1
    chosen, used = plan_claims(pool, limit, running, turns, next_turn)
    if not chosen:
        return []
    leased = await run(conn, sql.lease_many, {"owner": owner, "until": until, "ids": chosen})
    if used:
        await run(
            conn,
            sql.save_turns,
            {
                "gates": [gate for gate, _ in used],
                "owners": [who for _, who in used],
                "turns": list(used.values()),
            },
            fetch=False,
        )
    by_id = {record.task_id: record for record in map(from_row, leased)}
    return [by_id[task_id] for task_id in chosen if task_id in by_id]


__all__ = ["claim_gated"]
