"""The `fastmcp-tasks` command line (also `python -m fastmcp_tasks`).

    fastmcp-tasks worker path/to/server.py[:object] [--concurrency N] [--grace SECONDS]
    fastmcp-tasks call SERVER TOOL [key=value ...] [--timeout SECONDS]   (SERVER: URL or server.py)
    fastmcp-tasks get SERVER TASK_ID
    fastmcp-tasks wait SERVER TASK_ID [--timeout SECONDS]
    fastmcp-tasks cancel SERVER TASK_ID
    fastmcp-tasks ls|show TASK_ID|purge --older-than AGE [--url STORE_URL]

`worker` runs a server's task tools without serving MCP: it enters the server's
lifespan, so its `TasksExtension` takes queued tasks from the shared store
(those of `concurrency=0` front ends, and recovered ones) and runs them. The
store URL is the extension's (`url=...` or `FASTMCP_TASKS_URL`); `memory://`
is refused, since no other process could see its tasks. SIGTERM or SIGINT
stops taking work, lets running tasks finish for `--grace` seconds, then
hands the rest back to the store.

The client commands (`call`, `get`, `wait`, `cancel`) live in `cli_client`: SERVER
is a Streamable HTTP URL or a `path/to/server.py[:object]` run in memory. `call`
follows the task live, asks in the terminal for its input, and on Ctrl-C offers to
cancel the task or detach from it.

The operator commands (`ls`, `show`, `purge`) live in `cli_operator`: they open a
shared store by its URL to list tasks, print one, or delete old finished ones.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from fastmcp_tasks.cli_client import add_client_commands, run_client_command
from fastmcp_tasks.cli_operator import COMMANDS as OPERATOR_COMMANDS
from fastmcp_tasks.cli_operator import add_operator_commands, run_operator_command
from fastmcp_tasks.wire import TASKS_EXTENSION_ID


class CommandError(SystemExit):
    """A usage problem reported to the user with exit status 2."""

    def __init__(self, message: str) -> None:
        print(f"fastmcp-tasks: {message}", file=sys.stderr)
        super().__init__(2)


def load_server(target: str) -> Any:
    """The FastMCP server named by `path/to/server.py[:object]`."""
    from fastmcp import FastMCP

    path_text, _, attribute = target.partition(":")
    path = Path(path_text).resolve()
    if not path.is_file():
        raise CommandError(f"no such server file: {path_text}")
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"_fastmcp_tasks_app_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise CommandError(f"cannot import {path_text}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    if attribute:
        server = getattr(module, attribute, None)
        if not isinstance(server, FastMCP):
            raise CommandError(f"{path_text} has no FastMCP server named {attribute!r}")
        return server
    for name in ("mcp", "server", "app"):
        if isinstance(getattr(module, name, None), FastMCP):
            return getattr(module, name)
    found = [value for value in vars(module).values() if isinstance(value, FastMCP)]
    if len(found) != 1:
        raise CommandError(f"name the server to run: {path_text}:<object>")
    return found[0]


async def run_worker(server: Any, concurrency: int | None, grace: float) -> None:
    extension = server._extensions.get(TASKS_EXTENSION_ID)
    if extension is None or not hasattr(extension, "store"):
        raise CommandError("the server has no TasksExtension")
    if not extension.store.durable:
        raise CommandError(
            f"{extension.url} keeps tasks inside one process, so a worker cannot see them: "
            "configure a shared store (TasksExtension(url='sqlite:///...') or "
            "FASTMCP_TASKS_URL)"
        )
    if concurrency is not None:
        extension.concurrency = concurrency
    if extension.concurrency < 1:
        raise CommandError("a worker needs --concurrency of at least 1")
    extension.shutdown_grace = grace
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with server._lifespan_manager():
            print(
                f"fastmcp-tasks worker: {extension.url}, concurrency {extension.concurrency}",
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


def main(argv: list[str] | None = None) -> None:
    """Run the `fastmcp-tasks` command line with `argv` (default: `sys.argv[1:]`)."""
    parser = argparse.ArgumentParser(prog="fastmcp-tasks", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_client_commands(commands)
    add_operator_commands(commands)
    worker = commands.add_parser("worker", help="run a server's task tools for a shared store")
    worker.add_argument("server", help="path/to/server.py[:object]")
    worker.add_argument("--concurrency", type=int, default=None, help="tasks at once")
    worker.add_argument(
        "--grace", type=float, default=30.0, help="seconds running tasks may finish at shutdown"
    )
    args = parser.parse_args(argv)
    if args.command == "worker":
        server = load_server(args.server)
        anyio.run(run_worker, server, args.concurrency, args.grace)
    elif args.command in OPERATOR_COMMANDS:
        raise SystemExit(run_operator_command(args))
    else:
        raise SystemExit(run_client_command(args))


if __name__ == "__main__":  # pragma: no cover
    main()
