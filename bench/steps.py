"""What a durable step costs: one recorded `step()`, and resuming over 1,000 recorded steps.

    .venv/bin/python -m bench.steps                         # memory, sqlite, redis, postgres
    .venv/bin/python -m bench.steps --stores sqlite --rounds 20

Per store that answers (Redis at `--redis-url`, PostgreSQL at `--postgres-url`; one that
does not is left out and said so), one server over FastMCP's in-memory transport:

- **A recorded step.** Each round runs `--per-round` plain synchronous `tools/call`s (a
  no-op tool) and one task whose tool runs `--per-round` steps of a no-op function, each
  `await step(...)` timed inside the tool (`perf_counter_ns`): it runs the function,
  encodes its result and writes it to the store (one round trip) before it returns. p50
  of the steps against p50 of the sync calls of the same run.
- **Resuming.** A tool records `--resume` steps and then fails its first attempt
  (`Retry(attempts=2)`); its second attempt replays every step. Timed inside the tool
  from the first `step()` of the second attempt to the last (the replay of each, in total
  and per step, against the same sync p50); and, beside it, the one store read of those
  steps that a resumed run makes before its body starts (p50 of 21 reads).

Prints a table; writes bench/results/steps.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from fastmcp import Client, FastMCP

from bench.calls import pct
from bench.history import opened, reachable, store_url, write_report
from fastmcp_tasks import Retry, TasksExtension, step, task_options
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.steps import StepStore

RESULTS = Path(__file__).resolve().parent / "results" / "steps.json"
STORES = ("memory", "sqlite", "redis", "postgres")


def noop(i: int) -> dict[str, int]:
    return {"i": i}


class Failing(Exception):
    """The first attempt of the resume tool ends with it, so a retry replays its steps."""


def bench_server(url: str) -> tuple[FastMCP, TasksExtension, dict[str, list[int]]]:
    timings: dict[str, list[int]] = {"step": [], "replay": []}
    attempts: list[int] = []
    mcp = FastMCP("bench-steps")
    tasks = TasksExtension(url=url)
    mcp.add_extension(tasks)

    @mcp.tool
    async def sync() -> str:
        return "ok"

    @mcp.tool(task=True)
    async def stepping(tag: str, count: int) -> int:
        for i in range(count):
            start = time.perf_counter_ns()
            await step(f"{tag}:{i}", noop, i)
            timings["step"].append(time.perf_counter_ns() - start)
        return count

    @mcp.tool(task=True)
    @task_options(retry=Retry(attempts=2, backoff=timedelta(milliseconds=1), jitter=False))
    async def resumed(count: int) -> int:
        attempts.append(1)
        start = time.perf_counter_ns()
        for i in range(count):
            await step(f"s{i}", noop, i)
        if len(attempts) == 1:
            raise Failing("the first attempt fails after its steps")
        timings["replay"].append(time.perf_counter_ns() - start)
        return count

    return mcp, tasks, timings


async def read_p50(store: TaskStore, count: int, samples: int = 21) -> float:
    """p50 (microseconds) of reading the `count` recorded steps of the resumed task: the
    one store read a resumed run makes before it replays them."""
    listing = cast(ListableTaskStore, store)
    [task] = [t for t in await listing.list_tasks(limit=10) if t.tool == "resumed"]
    steps = cast(StepStore, store)
    took = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        found = await steps.steps(task.task_id)
        took.append(time.perf_counter_ns() - start)
        assert len(found) == count, len(found)
    return pct(took, 50)


async def measure(url: str, rounds: int, per_round: int, resume: int) -> dict[str, float]:
    mcp, tasks, timings = bench_server(url)
    sync: list[int] = []
    async with Client(mcp) as client:
        for round_number in range(rounds + 2):  # two warm-up rounds
            for _ in range(per_round):
                start = time.perf_counter_ns()
                await client.call_tool("sync", {})
                took = time.perf_counter_ns() - start
                if round_number >= 2:
                    sync.append(took)
            if round_number < 2:
                timings["step"].clear()
            await client.call_tool("stepping", {"tag": f"r{round_number}", "count": per_round})
            if round_number < 2:
                timings["step"].clear()
        result = await client.call_tool("resumed", {"count": resume})
        assert result.data == resume, result
        read = await read_p50(tasks.store, resume)
    [replay] = timings["replay"]
    sync_p50 = pct(sync, 50)  # microseconds
    step_p50 = pct(timings["step"], 50)
    return {
        "sync_p50_us": sync_p50,
        "step_p50_us": step_p50,
        "step_mean_us": statistics.fmean(timings["step"]) / 1000,
        "step_over_sync": step_p50 / sync_p50,
        "resume_steps": resume,
        "resume_read_ms": read / 1000,
        "resume_ms": replay / 1e6,
        "resume_per_step_us": replay / 1000 / resume,
        "resume_over_sync": replay / 1000 / sync_p50,
    }


async def main(args: argparse.Namespace) -> None:
    report: dict[str, Any] = {
        "rounds": args.rounds,
        "per_round": args.per_round,
        "resume": args.resume,
        "stores": {},
    }
    skipped = []
    with tempfile.TemporaryDirectory(prefix="bench-steps-") as scratch:
        for name in args.stores.split(","):
            url = store_url(name, args, Path(scratch))
            why = await reachable(name, url)
            if why is not None:
                skipped.append(f"{name}: {why}")
                continue
            try:
                report["stores"][name] = await measure(
                    url, args.rounds, args.per_round, args.resume
                )
            finally:
                if name in ("redis", "postgres"):
                    async with opened(name, url):  # clears the prefix / drops the schema
                        pass
    print(f"in-memory transport; {args.rounds} rounds of {args.per_round} steps; one run")
    print()
    print(
        "| store | sync p50 µs | one step p50 µs (/ sync) "
        f"| resume over {args.resume:,} steps: ms (per step µs, / sync) "
        "| reading them, ms |"
    )
    print("|---|---|---|---|---|")
    for name, row in report["stores"].items():
        print(
            f"| {name} | {row['sync_p50_us']:.0f} "
            f"| {row['step_p50_us']:.0f} ({row['step_over_sync']:.2f}) "
            f"| {row['resume_ms']:.1f} ({row['resume_per_step_us']:.1f} µs, "
            f"{row['resume_over_sync']:.2f}) | {row['resume_read_ms']:.1f} |"
        )
    write_report(report, skipped, RESULTS)


if __name__ == "__main__":
    os.environ.pop("FASTMCP_TASKS_SEAL", None)
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--resume", type=int, default=1000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    asyncio.run(main(parser.parse_args()))
