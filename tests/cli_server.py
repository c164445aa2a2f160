"""The server the command-line tests talk to, in memory or over HTTP.

    fastmcp-tasks call tests/cli_server.py render pages=3      # loaded in memory
    python tests/cli_server.py --port N                        # served by uvicorn

Tools: `render` reports "Rendering page i/n" through `Progress`; `order` asks for a
form (an enum, an integer, a boolean); `hold` writes `$CLI_MARKERS/<key>.started.<pid>`
and waits for `$CLI_MARKERS/<key>.go`. Tasks are kept in memory.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import Progress, TasksExtension

FAST = TaskConfig(poll_interval=timedelta(milliseconds=50))
MARKERS = Path(os.environ.get("CLI_MARKERS", "."))

mcp = FastMCP("cli")
mcp.add_extension(TasksExtension(url="memory://"))


@dataclass
class Order:
    size: Literal["small", "large"]
    quantity: int
    gift: bool


@mcp.tool(task=FAST)
async def render(pages: int = 3, delay: float = 0.3, progress: Progress = Progress()) -> str:
    await progress.set_total(pages)
    for page in range(1, pages + 1):
        await progress.set_message(f"Rendering page {page}/{pages}")
        await anyio.sleep(delay)
    return f"rendered {pages} pages"


@mcp.tool(task=FAST)
async def order(item: str, ctx: Context) -> str:
    answer = await ctx.elicit(f"Your order of {item}?", Order)
    if answer.action != "accept":
        return f"order {answer.action}"
    chosen = answer.data
    return f"{chosen.quantity} {chosen.size} {item}" + (" as a gift" if chosen.gift else "")


@mcp.tool(task=FAST)
async def hold(key: str) -> str:
    (MARKERS / f"{key}.started.{os.getpid()}").touch()
    while not (MARKERS / f"{key}.go").exists():  # noqa: ASYNC110 - a file signal
        await anyio.sleep(0.02)
    return f"held {key}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    mcp.run(transport="http", host="127.0.0.1", port=port, path="/mcp", show_banner=False)
