"""What flow control costs on the hot path: task creation with `concurrency` and `dedupe`
set, beside the same tool without them and a plain synchronous call, on each store.

    .venv/bin/python -m bench.flow                 # about 40 s
    .venv/bin/python -m bench.flow --rounds 200 --stores memory,sqlite

One server per store, in memory transport (raw JSON-RPC through `fastmcp.Client`'s
session). Each round times, in rotating order: a synchronous `tools/call` of `noop`
(the reference), the creation of a task of `plain` (no options), of `limited`
(`concurrency=10_000`: the gate's checks, never a wait), of `deduped` (`dedupe`, each
call with new arguments: the key's lookup and write, never a hit) and of a dedupe hit
(the same arguments again: answered from the existing task). Creation is the
`tools/call` that returns the `CreateTaskResult`; the tasks run in the background.
Prints a table; writes bench/results/flow.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastmcp import FastMCP

from bench.calls import summary
from bench.proto import Send
from bench.server import redis_answers, store_url
from bench.transports import memory_transport
from fastmcp_tasks import TasksExtension, task_options

RESULTS = Path(__file__).resolve().parent / "results" / "flow.json"
KINDS = ("sync", "plain", "limited", "deduped", "dedupe_hit")


def flow_server(url: str) -> FastMCP:
    mcp = FastMCP("bench-flow")
    mcp.add_extension(TasksExtension(url=url, max_tasks=200_000))

    @mcp.tool(task=True)
    async def noop() -> str:
        return "ok"

    @mcp.tool(task=True)
    async def plain(n: int) -> int:
        return n

    @mcp.tool(task=True)
    @task_options(concurrency=10_000)
    async def limited(n: int) -> int:
        return n

    @mcp.tool(task=True)
    @task_options(dedupe=timedelta(minutes=5))
    async def deduped(n: int) -> int:
        return n

    return mcp


async def _call(send: Send, name: str, arguments: dict[str, Any], task: bool) -> dict[str, Any]:
    return await send("tools/call", {"name": name, "arguments": arguments}, task)


async def measure(store: str, rounds: int) -> dict[str, Any]:
    samples: dict[str, list[int]] = {kind: [] for kind in KINDS}
    counter = itertools.count()
    async with store_url(store) as url, memory_transport(flow_server(url)) as conn:
        send = conn.send
        hit = {"n": -1}
        await _call(send, "deduped", hit, True)
        for _ in range(20):  # warm up every path
            for name in ("plain", "limited", "deduped"):
                await _call(send, name, {"n": next(counter)}, True)
            await _call(send, "noop", {}, False)
        for i in range(rounds):
            order = KINDS[i % len(KINDS) :] + KINDS[: i % len(KINDS)]
            for kind in order:
                if kind == "sync":
                    name, arguments, task = "noop", {}, False
                elif kind == "dedupe_hit":
                    name, arguments, task = "deduped", hit, True
                else:
                    name, arguments, task = kind, {"n": next(counter)}, True
                start = time.perf_counter_ns()
                answer = await _call(send, name, arguments, task)
                samples[kind].append(time.perf_counter_ns() - start)
                assert (answer.get("resultType") == "task") is task, answer
            if i % 50 == 49:
                await asyncio.sleep(0.05)  # let the background runs drain
    rows = {kind: summary(values) for kind, values in samples.items()}
    sync = rows["sync"]["p50_us"]
    return {kind: {**row, "ratio_p50": row["p50_us"] / sync} for kind, row in rows.items()}


async def run(stores: list[str], rounds: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for store in stores:
        if store == "redis" and (problem := redis_answers("redis://127.0.0.1:6379/15")):
            results[store] = {"skipped": problem}
            continue
        results[store] = await measure(store, rounds)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--stores", default="memory,sqlite,redis")
    args = parser.parse_args()
    results = asyncio.run(run(args.stores.split(","), args.rounds))
    print("| store | sync p50 | plain | concurrency | dedupe (miss) | dedupe (hit) |")
    print("|---|---|---|---|---|---|")
    for store, rows in results.items():
        if "skipped" in rows:
            print(f"| {store} | skipped: {rows['skipped']} |||||")
            continue
        cells = [
            f"{rows[k]['p50_us'] / 1000:.2f} ms ({rows[k]['ratio_p50']:.2f}x)" for k in KINDS[1:]
        ]
        print(f"| {store} | {rows['sync']['p50_us'] / 1000:.2f} ms | " + " | ".join(cells) + " |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rounds": args.rounds, **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
