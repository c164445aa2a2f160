"""Store-level latency of the PostgreSQL store's hot paths, one call at a time.

    .venv/bin/python -m bench.postgres_store                    # ~10 s
    .venv/bin/python -m bench.postgres_store --rounds 2000 --url postgresql://...

Times, in one fresh schema (dropped afterwards): `create` (no caps), `create` with
`ActiveCaps` (the advisory lock and the counts), `get`, `set_status_message`,
`transition` (working -> completed), `claim_queued` (ungated, one task) and
`claim_queued` of a gated task (the serialised path: a gate of 10 whose tasks end as
they are claimed, four owners taking turns). Prints p50 / p90 in
microseconds and the statements each call sent (`stats["statements"]`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import psycopg

from fastmcp_tasks.stores.base import ActiveCaps, TaskRecord
from fastmcp_tasks.stores.postgres import PostgresTaskStore

Call = Callable[[int], Awaitable[object]]


def task(n: int, **fields: object) -> TaskRecord:
    now = time.time()
    return TaskRecord(
        task_id=f"bench-{n}",
        tool="tool",
        status="working",
        created_at=now,
        updated_at=now,
        arguments={"a": n, "text": "x" * 64},
        retention_ms=60_000,
        **fields,  # type: ignore[arg-type]
    )


async def timed(store: PostgresTaskStore, name: str, rounds: int, call: Call) -> None:
    samples: list[float] = []
    before = store.stats["statements"]
    cpu = time.process_time()
    for n in range(rounds):
        start = time.perf_counter()
        await call(n)
        samples.append((time.perf_counter() - start) * 1e6)
    cpu_us = (time.process_time() - cpu) / rounds * 1e6
    report(name, samples, (store.stats["statements"] - before) / rounds, cpu_us)


def report(name: str, samples: list[float], per_call: float, cpu_us: float | None = None) -> None:
    """One line: wall p50 / p90, statements per call, and this process's CPU per call (the
    client side: psycopg and the store's Python; the server's is not in it)."""
    samples.sort()
    p50, p90 = statistics.median(samples), samples[int(len(samples) * 0.9)]
    cpu = "" if cpu_us is None else f"   client CPU/call {cpu_us:5.0f} us"
    print(f"{name:<28} p50 {p50:7.0f} us   p90 {p90:7.0f} us   statements/call {per_call:.2f}{cpu}")


async def main(url: str, rounds: int) -> None:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    store = PostgresTaskStore(url, schema=schema, max_tasks=None)
    await store.open()
    later = time.time() + 3600
    try:
        for n in range(50):  # warm the pool's connection and its prepared statements
            await store.create(task(-1 - n, lease_owner="w", lease_expires=later))
            await store.get(f"bench-{-1 - n}")
        caps = ActiveCaps(total=10**9, per_owner=10**9)
        leased = {"lease_owner": "w", "lease_expires": later}
        await timed(store, "create", rounds, lambda n: store.create(task(n, **leased)))
        await timed(
            store,
            "create (ActiveCaps)",
            rounds,
            lambda n: store.create(task(rounds + n, owner="o", **leased), caps=caps),
        )
        await timed(store, "get", rounds, lambda n: store.get(f"bench-{n}"))
        await timed(
            store,
            "set_status_message",
            rounds,
            lambda n: store.set_status_message(f"bench-{n}", "m"),
        )
        await timed(
            store,
            "transition -> completed",
            rounds,
            lambda n: store.transition(f"bench-{n}", "completed", result={"content": []}),
        )
        for n in range(rounds):
            await store.create(task(3 * rounds + n))
        await timed(
            store, "claim_queued (ungated, 1)", rounds, lambda n: store.claim_queued("w", later, 1)
        )
        for n in range(rounds):  # a gate of 10, its tasks ending as they are claimed
            await store.create(task(4 * rounds + n, gate="g", gate_limit=10, owner=f"o{n % 4}"))

        async def claim_gated(n: int) -> None:
            (taken,) = await store.claim_queued("w", later, 1)
            ending.append(taken.task_id)

        ending: list[str] = []
        samples: list[float] = []
        before = store.stats["statements"]
        for n in range(rounds):
            start = time.perf_counter()
            await claim_gated(n)
            samples.append((time.perf_counter() - start) * 1e6)
            before += 1  # the transition below is not the claim's
            await store.transition(ending.pop(), "completed", result={})
        report("claim_queued (gated, 1)", samples, (store.stats["statements"] - before) / rounds)
    finally:
        await store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.rounds))
