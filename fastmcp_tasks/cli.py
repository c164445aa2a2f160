"""The `fastmcp-tasks` command line (also `python -m fastmcp_tasks`).

    fastmcp-tasks worker path/to/server.py[:object] [--concurrency N] [--grace SECONDS]
    fastmcp-tasks call SERVER TOOL [key=value ...] [--timeout SECONDS]
    fastmcp-tasks get SERVER TASK_ID
    fastmcp-tasks wait SERVER TASK_ID [--timeout SECONDS]
    fastmcp-tasks cancel SERVER TASK_ID

`worker` runs a server's task tools without serving MCP: it enters the server's
lifespan, so its `TasksExtension` takes queued tasks from the shared store
(those of `concurrency=0` front ends, and recovered ones) and runs them. The
store URL is the extension's (`url=...` or `FASTMCP_TASKS_URL`); `memory://`
is refused, since no other process could see its tasks. SIGTERM or SIGINT
stops taking work, lets running tasks finish for `--grace` seconds, then
hands the rest back to the store.

The client commands talk to a server by its Streamable HTTP URL (`SERVER`, e.g.
`http://127.0.0.1:8000/mcp`). `call` runs a tool as a task: it prints the task id,
a live status line (rewritten in place on a terminal), then the result; Ctrl-C
cancels the task. `get` prints the task as JSON, `wait` prints its result, `cancel`
cancels it. They exit 0 on success and 1 when the task failed or was cancelled, or
the server could not be reached (the reason on stderr); usage errors exit 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio

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
            async for _ in signals:
                print("fastmcp-tasks worker: stopping", flush=True)
                break


# --- client commands: call, get, wait, cancel ----------------------------------------


class TaskFailure(Exception):
    """A client command's failure, reported on stderr with exit status 1."""


def server_url(text: str) -> str:
    """The SERVER argument, checked to be an http(s) URL."""
    if not text.startswith(("http://", "https://")):
        raise CommandError(f"SERVER must be an http(s) URL, got {text!r}")
    return text


def parse_arguments(items: list[str]) -> dict[str, Any]:
    """`key=value` pairs as tool arguments; a value is JSON when it parses, else a string."""
    arguments: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise CommandError(f"arguments are key=value, got {item!r}")
        try:
            arguments[key] = json.loads(raw)
        except ValueError:
            arguments[key] = raw
    return arguments


def result_text(result: Any) -> str:
    """What a person reads of a `CallToolResult`: its text blocks, other blocks as JSON."""
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            parts.append(json.dumps(block.model_dump(by_alias=True, mode="json")))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


class StatusLine:
    """The live one-line status of `call`: rewritten in place on a terminal, else appended."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.state: dict[str, Any] = {}
        self.active = False
        self.printed = ""

    def text(self) -> str:
        """`[status] message (elapsed)` for the latest state."""
        elapsed = time.monotonic() - self.started
        message = self.state.get("statusMessage")
        line = f"[{self.state.get('status', '?')}]" + (f" {message}" if message else "")
        return f"{line} ({elapsed:.1f}s)"

    def update(self, state: dict[str, Any]) -> None:
        """Take a new task state (the handle's `on_status_change`) and show it."""
        self.state = state
        self.draw()

    def draw(self) -> None:
        """Show the current line: in place on a terminal, once per change otherwise."""
        if not self.active or not self.state:
            return
        line = self.text()
        if self.tty:
            self.stream.write(f"\r\x1b[K{line}")
        elif line.rsplit(" (", 1)[0] != self.printed.rsplit(" (", 1)[0]:
            self.stream.write(f"{line}\n")
        else:
            return
        self.printed = line
        self.stream.flush()

    def close(self) -> None:
        """End the in-place line so that what follows starts on a fresh line."""
        if self.tty and self.printed:
            self.stream.write("\n")
            self.stream.flush()

    async def tick(self) -> None:
        """Redraw every 0.2 s on a terminal, so the elapsed time moves."""
        while self.tty:
            await anyio.sleep(0.2)
            self.draw()


async def _call(url: str, tool: str, arguments: dict[str, Any], limit: float | None) -> int:
    # Ctrl-C is taken from the start: one pressed while the call is sent still cancels it
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        return await _run_call(signals, url, tool, arguments, limit)


async def _run_call(
    signals: Any, url: str, tool: str, arguments: dict[str, Any], limit: float | None
) -> int:
    from fastmcp_tasks.handles import call_tool_task

    line = StatusLine(sys.stdout)
    async with _client(url) as client:
        task = await call_tool_task(client, tool, arguments, on_status_change=line.update)
        if task.task_id is None:  # the server answered without a task
            return _show(await task)
        print(f"task {task.task_id}", flush=True)
        line.active = True
        line.draw()
        interrupted = False
        waiting = anyio.CancelScope()
        failure: Exception | None = None
        result: Any = None
        async with anyio.create_task_group() as group:

            async def on_interrupt() -> None:
                nonlocal interrupted
                async for _ in signals:
                    interrupted = True
                    waiting.cancel()  # task.wait() then sends tasks/cancel once
                    return

            group.start_soon(on_interrupt)
            group.start_soon(line.tick)
            with waiting:
                try:
                    result = await task.wait(limit)
                except Exception as exc:  # reported below, outside the task group
                    failure = exc
                finally:
                    line.close()
            group.cancel_scope.cancel()
        if interrupted:
            print(f"interrupted: cancelled task {task.task_id}", file=sys.stderr)
            return 130
        if failure is not None:
            raise failure
        return _show(result)


def _show(result: Any) -> int:
    text = result_text(result)
    if result.is_error:
        print(f"fastmcp-tasks: the tool reported an error: {text}", file=sys.stderr)
        return 1
    print(text, flush=True)
    return 0


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[Any]:
    from fastmcp import Client

    try:
        client = Client(url)
        await client.__aenter__()
    except Exception as exc:
        raise TaskFailure(f"cannot reach {url}: {exc}") from None
    try:
        yield client
    finally:
        await client.__aexit__(None, None, None)


async def _get(url: str, task_id: str) -> int:
    from fastmcp_tasks.handles import ToolTask

    async with _client(url) as client:
        task = await ToolTask.resume(client, task_id)
    print(json.dumps(task.state, indent=2))
    return 0


async def _wait(url: str, task_id: str, limit: float | None) -> int:
    from fastmcp_tasks.handles import ToolTask

    async with _client(url) as client:
        task = await ToolTask.resume(client, task_id)
        return _show(await task.wait(limit))


async def _cancel(url: str, task_id: str) -> int:
    from fastmcp_tasks.handles import ToolTask

    async with _client(url) as client:
        task = await ToolTask.resume(client, task_id)
        if task.done:
            raise TaskFailure(f"task {task_id} is already {task.state['status']}; not cancelled")
        await task.cancel()
    print(f"cancel requested for task {task_id}")
    return 0


def add_client_commands(commands: Any) -> None:
    """Add `call`, `get`, `wait` and `cancel` to the `fastmcp-tasks` subcommands."""
    call = commands.add_parser("call", help="run a tool as a task, with a live status line")
    call.add_argument("server", help="the server's http(s) URL")
    call.add_argument("tool", help="the tool to call")
    call.add_argument("arguments", nargs="*", help="key=value (values parsed as JSON if valid)")
    call.add_argument("--timeout", type=float, default=None, help="cancel after SECONDS")
    for name, text in (
        ("get", "print a task as JSON"),
        ("wait", "wait for a task and print its result"),
        ("cancel", "cancel a task"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("server", help="the server's http(s) URL")
        command.add_argument("task_id", help="the task's id")
        if name == "wait":
            command.add_argument("--timeout", type=float, default=None, help="give up after")


def run_client_command(args: argparse.Namespace) -> int:
    """Run a parsed client command; the exit status (errors reported on stderr)."""
    from mcp.shared.exceptions import MCPError

    url = server_url(args.server)
    try:
        if args.command == "call":
            arguments = parse_arguments(args.arguments)
            return anyio.run(_call, url, args.tool, arguments, args.timeout)
        if args.command == "get":
            return anyio.run(_get, url, args.task_id)
        if args.command == "wait":
            return anyio.run(_wait, url, args.task_id, args.timeout)
        return anyio.run(_cancel, url, args.task_id)
    except MCPError as exc:
        code = exc.error.code
        print(f"fastmcp-tasks: {exc.error.message} (error {code})", file=sys.stderr)
        if exc.error.data is not None:
            print(f"fastmcp-tasks: data: {json.dumps(exc.error.data)}", file=sys.stderr)
    except TimeoutError:
        print("fastmcp-tasks: timed out; the task was cancelled", file=sys.stderr)
    except TaskFailure as exc:
        print(f"fastmcp-tasks: {exc}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> None:
    """Run the `fastmcp-tasks` command line with `argv` (default: `sys.argv[1:]`)."""
    parser = argparse.ArgumentParser(prog="fastmcp-tasks", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_client_commands(commands)
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
    else:
        raise SystemExit(run_client_command(args))


if __name__ == "__main__":  # pragma: no cover
    main()
