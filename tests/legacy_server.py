"""The server the real 2025-11-25 clients talk to (tests/test_legacy_clients.py), over HTTP.

    python tests/legacy_server.py --port N --dir MARKERS

Served by uvicorn at `http://127.0.0.1:N/mcp`, tasks in memory, both generations
on one store: FastMCP 3, the `mcp` 1.x SDK and the TypeScript SDK 1.x initialize at
2025-11-25 and get the V1 surface; FastMCP 4's client speaks 2026-07-28.

Tools (every one `task=True`, polled every 50 ms):
- `double(x)` answers `2 * x` at once;
- `hold(key)` writes `MARKERS/<key>.started`, waits for `MARKERS/<key>.go` (a file
  signal from the test process) and answers `held <key>`; when it is stopped it
  writes `MARKERS/<key>.cancelled` first;
- `refuse(reason)` raises `ToolError` (an `isError` result: `failed` on V1);
- `order(item)` asks `ctx.elicit("Your order of <item>?", Order)` and answers what
  was chosen, or the action when it was not accepted;
- `steps(key)` waits for `MARKERS/<key>.go`, then reports progress `STEPS` times
  (`ctx.report_progress(n, STEPS, "step n of STEPS")`), each time waiting for
  `MARKERS/<key>.heard-<n>` (the test saw the client hear step n) before the next,
  and answers `STEPS steps`;
- `counted(key)` does the same with core's `Progress` dependency (`set_total`, then
  `set_message` and `increment` per step), as a FastMCP user writes it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from fastmcp import Context, FastMCP
from fastmcp.dependencies import Progress
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import TasksExtension

FAST = TaskConfig(poll_interval=timedelta(milliseconds=50))
STEPS = 3


async def signalled(marker: Path) -> None:
    """Wait for a file signal from the test process (its own bound stops a stuck run)."""
    while not await anyio.Path(marker).exists():  # noqa: ASYNC110 - a file signal
        await anyio.sleep(0.02)


@dataclass
class Order:
    size: Literal["small", "large"]
    quantity: int


def build(markers: Path) -> FastMCP:
    mcp = FastMCP("legacy-interop")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=FAST)
    async def double(x: int) -> int:
        return 2 * x

    @mcp.tool(task=FAST)
    async def hold(key: str) -> str:
        (markers / f"{key}.started").touch()
        try:
            await signalled(markers / f"{key}.go")
        except anyio.get_cancelled_exc_class():
            (markers / f"{key}.cancelled").touch()
            raise
        return f"held {key}"

    @mcp.tool(task=FAST)
    async def refuse(reason: str) -> str:
        raise ToolError(f"refused: {reason}")

    @mcp.tool(task=FAST)
    async def order(item: str, ctx: Context) -> str:
        answer = await ctx.elicit(f"Your order of {item}?", Order)
        if answer.action != "accept":
            return f"order {answer.action}"
        return f"{answer.data.quantity} {answer.data.size} {item}"

    @mcp.tool(task=FAST)
    async def steps(key: str, ctx: Context) -> str:
        await signalled(markers / f"{key}.go")
        for step in range(1, STEPS + 1):
            await ctx.report_progress(step, STEPS, f"step {step} of {STEPS}")
            await signalled(markers / f"{key}.heard-{step}")
        return f"{STEPS} steps"

    @mcp.tool(task=FAST)
    async def counted(key: str, progress: Progress = Progress()) -> str:
        await signalled(markers / f"{key}.go")
        await progress.set_total(STEPS)
        for step in range(1, STEPS + 1):
            await progress.set_message(f"step {step} of {STEPS}")
            await progress.increment()
            await signalled(markers / f"{key}.heard-{step}")
        return f"{STEPS} steps"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    mcp = build(Path(args.dir))
    mcp.run(
        transport="http",
        host="127.0.0.1",
        port=args.port,
        path="/mcp",
        show_banner=False,
        uvicorn_config={"access_log": False},
    )


if __name__ == "__main__":
    main()
