"""The process `bench.instructions` runs under callgrind: `bench/cpu_app.py`'s server,
served in this process through its ASGI app (no HTTP server, no sockets), answering
`N` requests of one kind, with instrumentation on only around them.

`python -m bench.instructions_probe KIND N SIGNALS` (the store from `BENCH_CPU_URL`; the
extension runs its tasks in this process, `BENCH_CPU_CONCURRENCY` > 0): after a warm-up
it writes `ready` to `SIGNALS` and waits for `SIGNALS.go` (the harness has turned
instrumentation on), sends the requests one after another, waits until the tasks they
made have finished and their history is written (`settled`), writes `done` and waits
for `SIGNALS.stop` (instrumentation is off again). Kinds: `floor` (a method no server
has), `sync` (a plain `tools/call`), `create` (a task-creating `tools/call`, the
task's run included) and `get` (a `tasks/get` of a finished task).

Before the window the heap is collected and frozen (`gc.freeze`): otherwise whether a
full collection of the whole start-up heap falls inside the 200 requests (about 60
million instructions, 0.3 million a request) depends on how much every earlier step
allocated, and a change anywhere moved a kind's count by 8 % for no cost of its own.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from pathlib import Path
from typing import Any

from bench.cpu import FLOOR_METHOD
from bench.proto import caps, request_frame

KINDS = ("floor", "sync", "create", "get")
ECHO = {"name": "echo", "arguments": {"text": "hello"}}


async def call(app: Any, method: str, params: dict[str, Any], opt_in: bool, rid: int) -> bytes:
    """One POST to the app's MCP endpoint, as a client's would arrive; the body answered."""
    body, headers = request_frame(method, params, caps(opt_in), rid, "bench-instructions")
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw += [
        (b"content-type", b"application/json"),
        (b"host", b"127.0.0.1:8000"),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    sent = False
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # never disconnects
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            out.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(out)


async def signal(signals: Path, state: str, answer: str) -> None:
    """Tell the harness `state`; wait for its `answer` file (another process writes it)."""
    signals.write_text(state)  # noqa: ASYNC240 - a few bytes, between measurements
    reply = signals.with_name(f"{signals.name}.{answer}")
    while not reply.exists():  # noqa: ASYNC110 - another process's file
        await asyncio.sleep(0.02)


async def settled() -> None:
    """Until this process's runner holds no task and no outcome waits to be written, then
    long enough for the history's batched write (about every 0.2 s) to happen. No request
    is made; what runs meanwhile is the tasks' own work and the process's idle and
    periodic work (the event loop, the store's feed), which is counted too and shared out
    over the requests. (`echo` has no gate or concurrency limit, so each creation hands
    its task to the runner at once.)"""
    from bench import cpu_app

    runner = cpu_app._extension.runner if cpu_app._extension is not None else None
    assert runner is not None, "the extension is not running"
    while runner.job_ids() or runner.pending_outcomes:  # noqa: ASYNC110 - no event to wait on
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)


async def run(kind: str, n: int, signals: Path) -> None:
    from bench import cpu_app  # built from the environment on import

    app = cpu_app.mcp.http_app()
    async with app.router.lifespan_context(app):
        first = json.loads(await call(app, "tools/call", ECHO, True, 0))["result"]["taskId"]
        await settled()
        method, params, opt_in = {
            "floor": (FLOOR_METHOD, {}, False),
            "sync": ("tools/call", ECHO, False),
            "create": ("tools/call", ECHO, True),
            "get": ("tasks/get", {"taskId": first}, True),
        }[kind]
        for rid in range(20):  # warm-up: every cache and code path touched once
            await call(app, method, params, opt_in, rid)
        await settled()  # the warm-up's tasks are not counted
        gc.collect()  # the window starts from the same heap whatever the code allocated
        gc.freeze()  # ... and a full collection in it walks only what the window made
        await signal(signals, "ready", "go")
        for rid in range(n):
            await call(app, method, params, opt_in, rid)
        await settled()
        await signal(signals, "done", "stop")


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])))
