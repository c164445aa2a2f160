"""What the command line makes of an HTTP server that answers with an error status.

`fastmcp-tasks call|wait` probes a server it failed to connect to with one plain POST,
to say why in words a person can act on. Some statuses are a refusal to act on at once
(401, 403, 404); others may not be the server's last word (`PASSING`: a proxy whose
backend restarts, a rate limit, and 400, which a server that is up answers to a probe
outside a session in the moment after a restart): a patient `wait` tries again for its
`--reconnect-timeout` and only then reports the last one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from fastmcp_tasks.cli.target import http_refusal
from tests.wire import serve_asgi

pytestmark = pytest.mark.anyio

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def answering(status: int) -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    """An ASGI app that answers every HTTP request with `status` and no MCP at all."""

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    return app


@asynccontextmanager
async def serving(status: int) -> AsyncIterator[str]:
    async with serve_asgi(answering(status), lifespan="off") as base:
        yield f"{base}/mcp"


@pytest.mark.parametrize(
    ("status", "passing", "says"),
    [
        (400, True, "HTTP 400 Bad Request"),
        (401, False, "HTTP 401 Unauthorized: pass --token or set $FASTMCP_TASKS_TOKEN"),
        (403, False, "HTTP 403 Forbidden: pass --token"),
        (404, False, "HTTP 404 Not Found"),
        (429, True, "HTTP 429 Too Many Requests"),
        (502, True, "HTTP 502 Bad Gateway"),
        (503, True, "HTTP 503 Service Unavailable"),
    ],
)
async def test_which_statuses_are_worth_another_try(status: int, passing: bool, says: str) -> None:
    async with serving(status) as url:
        refusal = await http_refusal(url, {})
    assert refusal is not None
    assert refusal.passing is passing
    assert refusal.reason.startswith(says)


async def test_a_server_that_accepts_is_no_refusal() -> None:
    async with serving(200) as url:
        assert await http_refusal(url, {}) is None
    assert await http_refusal(url, {}) is None  # nothing listens any more: no answer


def wait_command(url: str, reconnect: float) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "fastmcp_tasks", "wait", url, "some-task"]
    command += ["--reconnect-timeout", str(reconnect)]
    return subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


async def finish(process: subprocess.Popen[str]) -> tuple[int, str, float]:
    started = time.monotonic()
    _out, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=20))
    return process.returncode, err, time.monotonic() - started


async def test_wait_tries_a_passing_status_again_until_its_reconnect_timeout() -> None:
    async with serving(400) as url:
        code, err, took = await finish(wait_command(url, 1.5))
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == f"fastmcp-tasks: cannot reach {url} yet; retrying", err
    assert lines[-1] == f"fastmcp-tasks: cannot reach {url}: HTTP 400 Bad Request", err
    assert took >= 1.0, took  # it kept trying for its window, not once


async def test_wait_stops_at_once_on_a_refusal() -> None:
    async with serving(401) as url:
        code, err, _took = await finish(wait_command(url, 60))
    assert code == 1
    assert "retrying" not in err, err
    assert f"cannot reach {url}: HTTP 401 Unauthorized: pass --token" in err, err
