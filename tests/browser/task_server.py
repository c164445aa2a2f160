"""The MCP server the browser tests watch: a real FastMCP server on a shared store.

    python tests/browser/task_server.py --url STORE_URL --port N --dir MARKERS

Served over Streamable HTTP at `/mcp` by uvicorn, in its own process, on the same store
(SQLite file or Redis prefix) the dashboard reads. The tools wait on files the test
writes, never on a clock (each is also served under the names in brackets, which the
README's screenshots show):

- `quick(text)` [`send_invoice`] returns at once;
- `hold(key)` [`render_report`, `export_ledger`] runs until `MARKERS/<key>.go`
  exists; meanwhile, whenever the text of `MARKERS/<key>.msg` changes, it sets its
  `statusMessage` to it and records, in `MARKERS/<key>.said`, the message and the time
  just before the store write (the start of the latency the test measures); a cancel
  stops it; with `fail` set it then raises a `ToolError` of that text instead;
- `fail(reason)` [`charge_card`] raises a JSON-RPC error: the task ends `failed` with
  it as `error`;
- `oops(reason)` raises a `ToolError`: the task ends `completed` with an `isError`
  result (a tool error, which the dashboard shows as `error`);
- `ask(question)` [`approve_refund`] asks the client for a string (the task waits in
  `input_required`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import Progress, TasksExtension

FAST = TaskConfig(poll_interval=timedelta(milliseconds=50))


def _write(path: Path, text: str) -> None:
    """Replace `path` atomically: a reader sees the old or the new text, never half."""
    partial = path.with_name(path.name + ".part")
    partial.write_text(text)
    os.replace(partial, path)


def build(url: str, markers: Path) -> FastMCP:
    mcp = FastMCP("dashboard-demo")
    mcp.add_extension(TasksExtension(url=url))

    async def quick(text: str) -> str:
        return f"done: {text}"

    async def hold(key: str, fail: str = "", progress: Progress = Progress()) -> str:
        said: str | None = None
        while not (markers / f"{key}.go").exists():
            try:
                wanted = (markers / f"{key}.msg").read_text()
            except FileNotFoundError:
                wanted = said
            if wanted is not None and wanted != said:
                before = time.time()
                await progress.set_message(wanted)
                said = wanted
                _write(markers / f"{key}.said", f"{before!r}\n{wanted}")
            await anyio.sleep(0.01)  # a file signal: the test writes the files
        if fail:
            raise ToolError(fail)
        return f"held {key}"

    async def fail(reason: str) -> str:
        raise MCPError(code=-32050, message=reason)  # the task ends `failed` with it

    async def oops(reason: str) -> str:
        raise ToolError(reason)  # the task ends `completed`, its result an error result

    async def ask(question: str, ctx: Context) -> str:
        answer = await ctx.elicit(question, str)
        return f"{question} -> {answer.action}:{getattr(answer, 'data', None)}"

    # each behaviour also under the names the README's screenshots show
    for names, behaviour in [
        (("quick", "send_invoice"), quick),
        (("hold", "render_report", "export_ledger"), hold),
        (("fail", "charge_card"), fail),
        (("oops", "import_rows"), oops),
        (("ask", "approve_refund"), ask),
    ]:
        for name in names:
            mcp.tool(behaviour, name=name, task=FAST)

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    mcp = build(args.url, Path(args.dir))
    mcp.run(transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False)


if __name__ == "__main__":
    main()
