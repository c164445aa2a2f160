"""`fastmcp-tasks worker`: run a server's task tools for a shared store, without serving MCP.

It enters the server's lifespan, so its `TasksExtension` takes queued tasks from
the shared store and runs them; SIGTERM or SIGINT stops taking work, lets
running tasks finish for `--grace` seconds, then hands the rest back.

Its concurrency is `--concurrency`, else the extension's; an extension with
`concurrency=0` is a front end's (the scale-out guide, docs/how-to/scaling-out.md,
serves one server file both ways), so the worker then runs `DEFAULT_CONCURRENCY` (the
extension's own default) and its startup line says so. An explicit `--concurrency` below
1 is refused. A store found misconfigured as it opens (a database that does not exist)
ends the worker with its message and exit status 2, as a usage error does; a store that
is down is waited for.

Once the server's lifespan has started (its modules imported, its tools registered, its
store opened or being waited for), the worker collects garbage once and freezes what is
left (`gc.freeze`): CPython's full collections then no longer walk the objects of startup
(FastMCP, pydantic, the MCP SDK, the store's driver, the server's own modules), which
under load made every worker spend tens of milliseconds a collection re-reading them.
What is frozen is never collected, so an object of startup that later becomes cyclic
garbage (of a task it had taken by then, too) stays in memory; `--no-gc-freeze` keeps
the collector as it was. The startup line is printed after the freeze.
"""

from __future__ import annotations

import gc
import signal
from typing import Any

import anyio

from fastmcp_tasks import _compat
from fastmcp_tasks.cli.common import CommandError
from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.server.extension import DEFAULT_CONCURRENCY
from fastmcp_tasks.stores.urls import describe, masked
from fastmcp_tasks.wire.names import TASKS_EXTENSION_ID

#: `--help` of `--concurrency`.
CONCURRENCY_HELP = (
    "tasks at once (default: the server's TasksExtension concurrency; "
    f"{DEFAULT_CONCURRENCY} when that is 0, a front end's setting)"
)


async def run_worker(
    server: Any, concurrency: int | None, grace: float, *, gc_freeze: bool = True
) -> None:
    extension = _compat.server_extension(server, TASKS_EXTENSION_ID)
    if extension is None or not hasattr(extension, "store"):
        raise CommandError("the server has no TasksExtension")
    if not extension.store.durable:
        raise CommandError(
            f"{masked(extension.url)} keeps tasks inside one process, so a worker cannot see "
            "them: configure a shared store (TasksExtension(url='sqlite:///...') or "
            "FASTMCP_TASKS_URL)"
        )
    note = ""
    if concurrency is not None:
        if concurrency < 1:
            raise CommandError(f"a worker needs --concurrency of at least 1, got {concurrency}")
        extension.concurrency = concurrency
    elif extension.concurrency < 1:  # the same file serves as a `concurrency=0` front end
        extension.concurrency = DEFAULT_CONCURRENCY
        note = (
            " (the server's TasksExtension has concurrency=0, a front end's setting: the "
            f"worker runs the default {DEFAULT_CONCURRENCY}; --concurrency N sets it)"
        )
    extension.shutdown_grace = grace
    try:
        await _serve(server, extension, note, gc_freeze)
    except ConfigurationError as exc:  # found at open: a database that does not exist
        raise CommandError(str(exc)) from None


async def _serve(server: Any, extension: Any, note: str, gc_freeze: bool) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with _compat.server_lifespan(server):
            if gc_freeze:  # module doc: full collections stop walking what startup made
                gc.collect()
                gc.freeze()
            print(
                f"fastmcp-tasks worker: {describe(extension.store)}, concurrency "
                f"{extension.concurrency}{note}",
                flush=True,
            )
            if extension.health().status == "starting":  # the store did not answer yet
                print(
                    "fastmcp-tasks worker: the task store is unreachable; waiting for it "
                    "(retrying with backoff)",
                    flush=True,
                )
            async for _ in signals:
                print("fastmcp-tasks worker: stopping", flush=True)
                break
