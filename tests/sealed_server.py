"""An authenticated server whose tasks read the caller, run as a real subprocess.

    python tests/sealed_server.py --port N --concurrency C   (front end, Streamable HTTP)
    python -m fastmcp_tasks worker tests/sealed_server.py     (a worker)

The store is `SEALED_STORE` (a store URL, or a SQLite file's path); the encryption key and
the sealing mode are read by `TasksExtension` itself from `FASTMCP_TASKS_ENCRYPTION_KEY`
and `FASTMCP_TASKS_SEAL`. `stale-token` expires
`STALE_SECONDS` after it is verified, so a worker started later restores an expired token.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from fastmcp import FastMCP
from fastmcp.server.auth import AccessToken
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.dependencies import CurrentAccessToken, get_access_token, get_http_headers
from fastmcp.utilities.tasks import TaskConfig
from mcp_types import ToolAnnotations

from fastmcp_tasks import TasksExtension, task_options

STALE_SECONDS = 2
FAST = TaskConfig(poll_interval=timedelta(milliseconds=50))
TOKENS = {
    "alice-token": {"client_id": "alice-app", "sub": "alice", "scopes": ["deploy"]},
    "stale-token": {"client_id": "stale-app", "sub": "stale", "scopes": []},
}


class SkewedVerifier(StaticTokenVerifier):
    """`StaticTokenVerifier`, except that `stale-token` expires `STALE_SECONDS` from now."""

    async def verify_token(self, token: str) -> AccessToken | None:
        verified = await super().verify_token(token)
        if verified is not None and token == "stale-token":
            verified = verified.model_copy(update={"expires_at": int(time.time()) + STALE_SECONDS})
        return verified


def build(store: str, concurrency: int) -> FastMCP:
    url = store if "://" in store else f"sqlite:///{store}"
    mcp = FastMCP("sealed", auth=SkewedVerifier(tokens=TOKENS))
    mcp.add_extension(TasksExtension(url=url, concurrency=concurrency, lease=timedelta(seconds=2)))

    @mcp.tool(task=FAST)
    async def whoami(token: AccessToken = CurrentAccessToken()) -> dict[str, Any]:
        imperative = get_access_token()
        return {
            "subject": token.subject,
            "client_id": token.client_id,
            "scopes": token.scopes,
            "imperative": imperative.client_id if imperative else None,
            "demo": get_http_headers().get("x-demo"),
        }

    @mcp.tool(task=FAST)
    @task_options(dedupe=timedelta(minutes=5))
    async def echo(text: str) -> dict[str, Any]:
        return {"echo": text}

    @mcp.tool(task=FAST, annotations=ToolAnnotations(idempotentHint=True))
    async def held_whoami(gate: str) -> dict[str, Any]:
        """Says it started (`<gate>.started` holds the pid), waits for `gate` to exist."""
        await anyio.Path(f"{gate}.started").write_text(str(os.getpid()))
        while not await anyio.Path(gate).exists():  # noqa: ASYNC110 - another process makes it
            await anyio.sleep(0.05)
        token = get_access_token()
        return {
            "subject": token.subject if token else None,
            "demo": get_http_headers().get("x-demo"),
            "pid": os.getpid(),
        }

    @mcp.tool(task=FAST)
    async def headers_only() -> dict[str, Any]:
        token = get_access_token()
        return {"token": token is not None, "demo": get_http_headers().get("x-demo")}

    return mcp


if "SEALED_STORE" in os.environ:  # `fastmcp-tasks worker tests/sealed_server.py`
    mcp = build(os.environ["SEALED_STORE"], int(os.environ.get("SEALED_CONCURRENCY", "4")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    server = build(os.environ["SEALED_STORE"], args.concurrency)
    server.run(transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False)


if __name__ == "__main__":
    main()
