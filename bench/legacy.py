"""2025-11-25 tasks beside a synchronous call: what a V1 client pays for a task.

    .venv/bin/python -m bench.legacy            # about 20 s
    .venv/bin/python -m bench.legacy --rounds 100

One server (the memory store), two transports (in memory, and Streamable HTTP to
uvicorn on a free 127.0.0.1 port), a 2025-11-25 `fastmcp.Client` speaking raw
JSON-RPC through its session. Each round, interleaved, times a plain synchronous
`tools/call` of the no-op tool and a V1 round trip of the same tool: `tools/call`
with `params.task` (the `CreateTaskResult`) then `tasks/result` (which waits for
the outcome). Prints a table; writes bench/results/legacy.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastmcp import Client, FastMCP

from bench.calls import summary
from bench.proto import free_port
from fastmcp_tasks import TasksExtension

Send = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
RESULTS = Path(__file__).resolve().parent / "results" / "legacy.json"


def server() -> FastMCP:
    mcp = FastMCP("bench-v1")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def noop() -> str:
        return "ok"

    return mcp


@asynccontextmanager
async def legacy_send(mcp: FastMCP, transport: str) -> AsyncIterator[Send]:
    """Raw JSON-RPC over a 2025-11-25 client session (in memory, or over HTTP)."""
    if transport == "memory":
        async with Client(mcp, mode="legacy") as client:
            yield _sender(client)
        return
    import uvicorn

    port = free_port()
    config = uvicorn.Config(mcp.http_app(), host="127.0.0.1", port=port, log_level="warning")
    web = uvicorn.Server(config)
    serving = asyncio.create_task(web.serve())
    while not web.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.01)
    try:
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
            yield _sender(client)
    finally:
        web.should_exit = True
        await serving


def _sender(client: Client[Any]) -> Send:
    session = client.session

    async def send(method: str, params: dict[str, Any]) -> dict[str, Any]:
        data: dict[str, Any] = {"method": method, "params": dict(params)}
        opts: dict[str, Any] = {}
        session._stamp(data, opts)
        result: dict[str, Any] = await session._dispatcher.send_raw_request(
            method, data["params"], opts
        )
        return result

    return send


async def measure(transport: str, rounds: int) -> dict[str, Any]:
    call = {"name": "noop", "arguments": {}}
    sync_ns: list[int] = []
    task_ns: list[int] = []
    async with legacy_send(server(), transport) as send:
        for _ in range(20):  # warm up both paths
            await send("tools/call", call)
            created = await send("tools/call", {**call, "task": {}})
            await send("tasks/result", {"taskId": created["task"]["taskId"]})
        for i in range(rounds):
            for kind in ("sync", "task") if i % 2 else ("task", "sync"):
                start = time.perf_counter_ns()
                if kind == "sync":
                    answer = await send("tools/call", call)
                    assert answer["content"][0]["text"] == "ok", answer
                    sync_ns.append(time.perf_counter_ns() - start)
                else:
                    created = await send("tools/call", {**call, "task": {}})
                    answer = await send("tasks/result", {"taskId": created["task"]["taskId"]})
                    assert answer["content"][0]["text"] == "ok", answer
                    task_ns.append(time.perf_counter_ns() - start)
    sync, task = summary(sync_ns), summary(task_ns)
    return {"sync": sync, "v1_round_trip": task, "ratio_p50": task["p50_us"] / sync["p50_us"]}


async def run(rounds: int) -> dict[str, Any]:
    return {transport: await measure(transport, rounds) for transport in ("memory", "http")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    results = asyncio.run(run(args.rounds))
    print("| 2025-11-25 client | sync tools/call p50 | create + tasks/result p50 | ratio |")
    print("|---|---|---|---|")
    for transport, row in results.items():
        print(
            f"| {transport} | {row['sync']['p50_us'] / 1000:.2f} ms "
            f"| {row['v1_round_trip']['p50_us'] / 1000:.2f} ms | {row['ratio_p50']:.2f} |"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rounds": args.rounds, **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
