"""A server with a six-step resumable tool, run as a real subprocess by `test_steps_processes`.

    python tests/steps_server.py --db PATH|URL --port N [--concurrency N] [--lease S]

`six(path)` runs six durable steps (`fastmcp_tasks.step`); step N appends "start N PID"
to the file `path`, then "done N PID"; step 2 first asks the caller to confirm
(`ctx.elicit`). Step 4 waits after its "start" line until the file `path + ".go"`
exists, so a test can SIGKILL the process that runs it. The tool is
`task_options(resumable=True)` and not marked idempotent: only its steps make recovery
run it again. Imported by `fastmcp-tasks worker tests/steps_server.py`, the server is
built from `STEPS_DB` / `STEPS_LEASE` in the environment.
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
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import TasksExtension, step, task_options

FAST = TaskConfig(poll_interval=timedelta(milliseconds=50))
#: The step that waits for the go file.
BLOCKING = 4
#: The step that asks the caller (`ctx.elicit`) before it works.
ASKING = 2


def note(path: Path, line: str) -> None:
    with path.open("a") as lines:
        lines.write(f"{line} {os.getpid()}\n")


def released(path: str) -> bool:
    """Whether the test has created the go file (after it killed the first runner)."""
    return Path(f"{path}.go").exists()


async def work(path: str, n: int, ctx: Context | None = None) -> int:
    log = Path(path)
    note(log, f"start {n}")
    if ctx is not None:  # step ASKING asks the caller first: its answer is part of the step
        answer = await ctx.elicit(f"Run step {n}?", bool)
        assert answer.action == "accept" and answer.data is True, answer
    if n == BLOCKING:
        while not released(path):  # noqa: ASYNC110 - the signal is a file
            await anyio.sleep(0.02)
    note(log, f"done {n}")
    return n


def build(db: str, concurrency: int = 100, lease: float = 2.0) -> FastMCP:
    """`db`: a SQLite file path, or a full store URL."""
    url = db if "://" in db else f"sqlite:///{db}"
    mcp = FastMCP("steps-durable")
    mcp.add_extension(
        TasksExtension(url=url, lease=timedelta(seconds=lease), concurrency=concurrency)
    )

    @mcp.tool(task=FAST)
    @task_options(resumable=True)
    async def six(path: str, ctx: Context) -> str:
        total = 0
        for n in range(1, 7):
            asking = ctx if n == ASKING else None
            total += await step(f"step {n}", work, path, n, asking)
        return f"{total} in {os.getpid()}"

    return mcp


if "STEPS_DB" in os.environ:
    mcp = build(os.environ["STEPS_DB"], lease=float(os.environ.get("STEPS_LEASE", "2")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--lease", type=float, default=2.0)
    args = parser.parse_args()
    server = build(args.db, args.concurrency, args.lease)
    server.run(transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False)


if __name__ == "__main__":
    main()
