"""A server on a SQLite store, run as a real subprocess by the crash and multi-process tests.

    python tests/durable_server.py --db PATH|URL --port N --dir MARKERS

Tools wait for marker files (`MARKERS/<key>.go`) so a test in another process can
release them, and write `MARKERS/<key>.started.<pid>` when they start (and
`MARKERS/<key>.cancelled.<pid>` when a cancel stops them while they wait). `related_report`
answers `[task id, status, pid]` for each task its call relates to (`related_tasks()`).
`mimic` shows a status message of its own choosing (through `Progress.set_message`, or
`ctx.report_progress`) before it waits: text that looks like the engine's own.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from fastmcp import Context, FastMCP
from fastmcp.dependencies import Progress
from fastmcp.utilities.tasks import TaskConfig
from mcp_types import ToolAnnotations

from fastmcp_tasks import TasksExtension, related_tasks

FAST = TaskConfig(poll_interval=timedelta(milliseconds=50))


def build(
    db: str, markers: Path, concurrency: int = 100, lease: float = 2.0, beat: float = 5.0
) -> FastMCP:
    """`db` is a SQLite file path, or a full store URL (`redis://...`); `beat`: seconds
    between a worker's heartbeats."""
    url = db if "://" in db else f"sqlite:///{db}"
    mcp = FastMCP("durable")
    extension = TasksExtension(
        url=url,
        lease=timedelta(seconds=lease),
        concurrency=concurrency,
        worker_interval=timedelta(seconds=beat),
    )
    mcp.add_extension(extension)

    async def hold(key: str) -> None:
        (markers / f"{key}.started.{os.getpid()}").touch()
        try:
            while not (markers / f"{key}.go").exists():  # noqa: ASYNC110 - a file signal
                await anyio.sleep(0.02)
        except anyio.get_cancelled_exc_class():
            (markers / f"{key}.cancelled.{os.getpid()}").touch()
            raise

    @mcp.tool(task=FAST)
    async def quick(text: str) -> str:
        return f"quick {text}"

    @mcp.tool(task=FAST, annotations=ToolAnnotations(idempotentHint=True))
    async def idempotent_job(key: str) -> str:
        await hold(key)
        return f"idempotent {key} in {os.getpid()}"

    @mcp.tool(task=FAST)
    async def plain_job(key: str) -> str:
        await hold(key)
        return f"plain {key}"

    @mcp.tool(task=FAST)
    async def mimic(
        key: str, message: str, via: str, ctx: Context, progress: Progress = Progress()
    ) -> str:
        if via == "progress":
            await progress.set_message(message)
        else:
            await ctx.report_progress(1, 3, message)
        await hold(key)
        return f"mimic {key}"

    @mcp.tool(task=FAST)
    async def ask(question: str, ctx: Context) -> str:
        answer = await ctx.elicit(question, bool)
        return f"{question} -> {answer.action}:{getattr(answer, 'data', None)}"

    @mcp.tool(task=FAST, annotations=ToolAnnotations(idempotentHint=True))
    async def ask_again(question: str, ctx: Context) -> str:
        answer = await ctx.elicit(question, bool)
        return f"{question} -> {answer.action}:{getattr(answer, 'data', None)} in {os.getpid()}"

    @mcp.tool(task=FAST)
    async def related_report() -> list[list[str]]:
        return [[t.task_id, t.status, str(os.getpid())] for t in await related_tasks()]

    return mcp


# `fastmcp-tasks worker tests/durable_server.py` imports this module: the server is
# then built from the environment.
if "DURABLE_DB" in os.environ:
    mcp = build(
        os.environ["DURABLE_DB"],
        Path(os.environ["DURABLE_MARKERS"]),
        int(os.environ.get("DURABLE_CONCURRENCY", "100")),
        float(os.environ.get("DURABLE_LEASE", "2")),
        float(os.environ.get("DURABLE_BEAT", "5")),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--lease", type=float, default=2.0, help="lease seconds (2)")
    args = parser.parse_args()
    mcp = build(args.db, Path(args.dir), args.concurrency, args.lease)
    mcp.run(transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False)


if __name__ == "__main__":
    main()
