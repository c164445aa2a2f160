"""The scale-out bench server: one task tool, `sleeper()`, on a Redis or PostgreSQL task
store (the name is historical: the URL decides).

The harness (`bench/run.py`, scale-out phase) builds the front end in process with
`build(url, concurrency=0)`; each worker is a real subprocess of the worker command,
which imports this file with the store named by the environment:

    BENCH_REDIS_URL='redis://127.0.0.1:6379/15?prefix=P' \\
        python -m fastmcp_tasks worker bench/redis_app.py:mcp --concurrency 10

    BENCH_REDIS_URL='postgresql://postgres@127.0.0.1:5432/test?schema=S' \\
        python -m fastmcp_tasks worker bench/redis_app.py:mcp --concurrency 10

Environment: `BENCH_REDIS_URL` (the store URL, Redis or PostgreSQL; required for `mcp`
to exist), `BENCH_SLEEP_MS` (how long `sleeper` sleeps, 50), `BENCH_CONCURRENCY` (the
extension's own concurrency, 10; the worker's `--concurrency` overrides it).
"""

from __future__ import annotations

import os

import anyio
from fastmcp import FastMCP

from fastmcp_tasks import TasksExtension

TOOL = "sleeper"


def build(url: str, concurrency: int = 10, sleep_ms: float = 50.0) -> FastMCP:
    """A server whose only task tool sleeps `sleep_ms` (`await anyio.sleep`) and returns."""
    mcp = FastMCP("bench-redis")  # the app name of the tasks, whatever the store
    mcp.add_extension(TasksExtension(url=url, concurrency=concurrency, max_tasks=200_000))
    seconds = sleep_ms / 1000

    @mcp.tool(task=True)
    async def sleeper() -> str:
        await anyio.sleep(seconds)
        return "slept"

    return mcp


# The worker command imports this file by path: the server is then built from the
# environment (like tests/durable_server.py).
if "BENCH_REDIS_URL" in os.environ:
    mcp = build(
        os.environ["BENCH_REDIS_URL"],
        int(os.environ.get("BENCH_CONCURRENCY", "10")),
        float(os.environ.get("BENCH_SLEEP_MS", "50")),
    )
