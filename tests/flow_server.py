"""A server with flow-controlled tools, run as a real subprocess by `test_flow_processes`.

    python tests/flow_server.py --db PATH|URL --port N --dir LOGS [--concurrency N]

Every run appends `start|end <label> <time> <pid>` to `LOGS/runs.log` (one `write`
of a short line on an `O_APPEND` file: lines of several processes never interleave),
so a test can compute how many runs overlapped across processes. `serial` runs wait
for the file `LOGS/open.go`, so the test fills the queue before anything finishes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.utilities.tasks import TaskConfig

from fastmcp_tasks import Retry, TasksExtension, task_options

FAST = TaskConfig(poll_interval=timedelta(milliseconds=50))
TOKENS = {
    "alice-token": {"client_id": "app", "sub": "alice", "scopes": []},
    "bob-token": {"client_id": "app", "sub": "bob", "scopes": []},
}


class Flaky(Exception):
    pass


def build(db: str, logs: Path, concurrency: int = 100) -> FastMCP:
    url = db if "://" in db else f"sqlite:///{db}"
    mcp = FastMCP("flow", auth=StaticTokenVerifier(tokens=TOKENS))
    extension = TasksExtension(url=url, lease=timedelta(seconds=2), concurrency=concurrency)
    mcp.add_extension(extension)
    runs = logs / "runs.log"

    def log(event: str, label: str) -> None:
        line = f"{event} {label} {time.time():.6f} {os.getpid()}\n".encode()
        fd = os.open(runs, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    @mcp.tool(task=FAST)
    @task_options(concurrency=3)
    async def render(n: int) -> int:
        log("start", f"r{n}")
        await anyio.sleep(0.15)
        log("end", f"r{n}")
        return n

    @mcp.tool(task=FAST)
    @task_options(concurrency=1)
    async def serial(who: str, n: int) -> str:
        log("start", f"{who}{n}")
        while not (logs / "open.go").exists():  # noqa: ASYNC110 - a file signal
            await anyio.sleep(0.02)
        log("end", f"{who}{n}")
        return who

    @mcp.tool(task=FAST)
    @task_options(dedupe=timedelta(minutes=5))
    async def expensive(n: int) -> int:
        log("start", f"e{n}")
        await anyio.sleep(0.3)
        log("end", f"e{n}")
        return n

    @mcp.tool(task=FAST)
    @task_options(retry=Retry(attempts=3, backoff=timedelta(seconds=3), jitter=False, on=(Flaky,)))
    async def fetch(key: str) -> str:
        attempt = sum(1 for n in os.listdir(logs) if n.startswith(f"{key}.attempt.")) + 1
        os.close(os.open(logs / f"{key}.attempt.{attempt}.{os.getpid()}", os.O_CREAT))
        if attempt == 1:
            raise Flaky(f"first attempt of {key} failed")
        return f"{key} on attempt {attempt} in {os.getpid()}"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    mcp = build(args.db, Path(args.dir), args.concurrency)
    mcp.run(transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False)


if __name__ == "__main__":
    main()
