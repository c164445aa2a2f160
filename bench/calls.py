"""The harness's calls of the bench tools (`sync_call`, `create_task`, `get_task`,
`run_task`, `call_probe`) and how they are timed: `timed` (one call, with the server's
share on HTTP), `fan_out` (many callers), `rotated` (interleaving order) and the
statistics (`pct`, `summary`, `server_side`).
"""

from __future__ import annotations

import asyncio
import gc
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from bench.proto import TERMINAL, Conn, OptIn, Send

TOOL = "noop"
#: Task-creating calls carry an idempotency key, as `call_tool_task()` and the default
#: HTTP transport of `fastmcp_tasks` send them (`--idempotency-keys`).
KEYED = False
IDEMPOTENCY_META_KEY = "fastmcp-tasks/idempotencyKey"


def creation(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The params of a task-creating `tools/call` (with a fresh key under `KEYED`)."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if KEYED:
        params["_meta"] = {IDEMPOTENCY_META_KEY: secrets.token_urlsafe(24)}
    return params


async def sync_call(send: Send) -> dict[str, Any]:
    result = await send("tools/call", {"name": TOOL, "arguments": {}}, False)
    assert result.get("resultType") != "task", result
    return result


async def create_task(send: Send) -> str:
    result = await send("tools/call", creation(TOOL, {}), True)
    assert result["resultType"] == "task", result
    return result["taskId"]  # type: ignore[no-any-return]


async def get_task(send: Send, task_id: str) -> dict[str, Any]:
    return await send("tasks/get", {"taskId": task_id}, True)


async def run_task(send: Send, poll_sleep: float) -> int:
    """Create a task and poll it to completion; return how many `tasks/get` it took."""
    task_id = await create_task(send)
    polls = 0
    while True:
        polls += 1
        task = await get_task(send, task_id)
        if task["status"] in TERMINAL:
            assert task["status"] == "completed", task
            return polls
        if poll_sleep:
            await asyncio.sleep(poll_sleep)


async def call_probe(send: Send, name: str, arguments: dict[str, Any], opt_in: OptIn = True) -> str:
    result = await send("tools/call", creation(name, arguments), opt_in)
    assert result["resultType"] == "task", result
    return result["taskId"]  # type: ignore[no-any-return]


def pct(samples_ns: list[int], q: float) -> float:
    """Nearest-rank percentile, in microseconds."""
    ordered = sorted(samples_ns)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1] / 1000


def summary(samples_ns: list[int]) -> dict[str, Any]:
    return {
        "n": len(samples_ns),
        "p50_us": pct(samples_ns, 50),
        "p99_us": pct(samples_ns, 99),
        "min_us": min(samples_ns) / 1000,
        "mean_us": sum(samples_ns) / len(samples_ns) / 1000,
    }


async def timed(
    fn: Callable[[], Awaitable[Any]], conn: Conn | None = None, label: str | None = None
) -> int:
    """Client-observed nanoseconds of one call; the server's share goes to `conn.clock`."""
    clock = conn.clock if conn is not None else None
    if clock is not None:
        clock.label = label
    start = time.perf_counter_ns()
    await fn()
    elapsed = time.perf_counter_ns() - start
    if clock is not None:
        clock.label = None
    return elapsed


def server_side(*conns: Conn) -> dict[str, Any]:
    """Summaries of the server-side (ASGI) samples collected on `conns`, by label."""
    merged: dict[str, list[int]] = {}
    for conn in conns:
        if conn.clock is not None:
            for label, values in conn.clock.samples.items():
                merged.setdefault(label, []).extend(values)
    return {label: summary(values) for label, values in merged.items()}


async def fan_out(
    conn: Conn, total: int, concurrency: int, job: Callable[[Send], Awaitable[Any]]
) -> tuple[float, list[Any]]:
    """Run `job` `total` times with `concurrency` callers, each on its own channel.

    Returns (seconds, results). Channels are opened before the clock starts.
    """
    remaining = total
    results: list[Any] = []
    go = anyio.Event()
    ready = 0

    async def caller() -> None:
        nonlocal remaining, ready
        async with conn.channel() as send:
            ready += 1
            await go.wait()
            while remaining > 0:
                remaining -= 1
                results.append(await job(send))

    gc.collect()
    async with anyio.create_task_group() as group:
        for _ in range(concurrency):
            group.start_soon(caller)
        while ready < concurrency:  # noqa: ASYNC110 - wait until every channel is open
            await asyncio.sleep(0)
        start = time.perf_counter_ns()
        go.set()
    return (time.perf_counter_ns() - start) / 1e9, results


def rotated(kinds: list[Any], i: int) -> list[Any]:
    """Round `i`'s order of the interleaved kinds: rotated by one each round, so every kind
    follows every other equally often. (A call right after a different kind of work, above
    all after a SQLite store's worker-thread round trips, is slower than after its own
    kind; a fixed order would charge that to whichever kind comes next.)"""
    k = i % len(kinds)
    return kinds[k:] + kinds[:k]


async def append_to(into: list[Any], value: Awaitable[Any]) -> None:
    into.append(await value)
