"""The client commands of `fastmcp-tasks`: `call`, `get`, `wait` and `cancel`.

SERVER is a Streamable HTTP URL (`http://127.0.0.1:8000/mcp`) or `path/to/server.py[:object]`,
a FastMCP server loaded into this process and talked to in memory: its tasks run inside
the command and end with it, so Ctrl-C there always cancels.

`call` runs a tool as a task: it prints the task id, then follows the task (a `rich`
live line on a terminal, one plain line per change elsewhere, see `cli.terminal`),
answers the task's elicitations by asking in the terminal (on a non-terminal stdin
they are cancelled, with a note on stderr), and prints the result. Ctrl-C on a
terminal asks whether to cancel the task (exit 130) or detach from it, leaving it
running (exit 0, with the `wait` command that resumes it); a second Ctrl-C, or Ctrl-C
without a terminal on stdin, cancels. `wait` follows an existing task the same way
but only detaches when not asked (exit 130); its `--timeout` gives up without
cancelling. `get` prints the task as JSON, `cancel` cancels it. `call --related ID`
(repeatable) names tasks the call relates to, a hint the tool reads (`related_tasks()`).
A server's refusal is printed as it sent it (e.g. "Task expired (...)", with its data).

`call` and `wait` keep following their task while the server cannot be reached (a
restart, a deploy, a proxy's 502/503/504, its store down) for `--reconnect-timeout`
seconds (10 minutes by default, `none` for no limit); `call` resends a `tools/call`
whose reply was lost with the same idempotency key, so it never starts a second task.
Past the window they say so in a few lines, with the `wait` command that resumes the
task, and exit 1.

Exit status: 0 on success; 1 when the task failed or was cancelled, the tool reported
an error, or the server could not be reached (the reason on stderr); 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import anyio
import mcp_types
from rich.console import Console
from rich.text import Text

from fastmcp_tasks.cli.target import (
    SERVER_HELP,
    Target,
    add_connection_options,
    add_reconnect_option,
    parse_arguments,
    parse_target,
)
from fastmcp_tasks.cli.terminal import Prompter, TaskView
from fastmcp_tasks.cli.views import result_text
from fastmcp_tasks.client.watch import DEFAULT_RECONNECT_TIMEOUT

if TYPE_CHECKING:
    from fastmcp.client.client import CallToolResult as FastMCPCallToolResult

Interrupt = Literal["cancel", "detach"]
#: How long a `tasks/cancel` sent on the way out may take.
CANCEL_GRACE = 5.0


class TaskFailure(Exception):
    """A client command's failure, reported on stderr with exit status 1."""


class Session:
    """One client command run: the consoles, the prompts, the view and Ctrl-C."""

    def __init__(
        self, target: Target, *, lines: bool, reconnect_timeout: float | None = None
    ) -> None:
        self.target = target
        self.reconnect_timeout = reconnect_timeout
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.prompter = Prompter(self.out if self.out.is_terminal else self.err)
        self.view = TaskView(self.out, live=self.out.is_terminal, lines=lines)
        self.signals: AsyncIterator[signal.Signals] | None = None

    def report(self, message: str) -> None:
        """A message on stderr: `fastmcp-tasks: ...`."""
        self.err.print(Text.assemble(("fastmcp-tasks: ", "bold red"), message))

    def show(self, result: mcp_types.CallToolResult | FastMCPCallToolResult) -> int:
        """Print a result (exit 0), or report the tool's error (exit 1)."""
        text = result_text(result)
        if result.is_error:
            self.report(f"the tool reported an error: {text}")
            return 1
        print(text, file=self.out.file, flush=True)
        return 0

    @asynccontextmanager
    async def connect(self, *, patient: bool = False) -> AsyncIterator[Any]:
        """A connected `fastmcp.Client` for the target, which prompts for elicitations;
        `patient` (`wait`) tries an unreachable server for `reconnect_timeout`, not once."""
        from fastmcp import Client

        from fastmcp_tasks.client.watch import DEFAULT_RETRY, Outage, RetryPolicy

        once = RetryPolicy(attempts=1)
        outage = Outage(DEFAULT_RETRY, self.reconnect_timeout) if patient else Outage(once, 0.0)
        while True:
            client = Client(self.target.transport(), elicitation_handler=self.elicitation_handler)
            try:
                await client.__aenter__()
                break
            except Exception as exc:
                refusal = await self.target.refusal()
                lasting = refusal is not None and not refusal.passing
                delay = None if lasting else outage.next_delay()
                if delay is None:
                    reason = refusal.reason if refusal else str(exc)
                    raise TaskFailure(f"cannot reach {self.target.text}: {reason}") from None
                if outage.tries == 1:
                    self.report(f"cannot reach {self.target.text} yet; retrying")
                await anyio.sleep(delay)
        try:
            yield client
        finally:
            await client.__aexit__(None, None, None)

    async def on_input(self, key: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """Answer one of a task's `inputRequests`: elicitations are asked in the terminal."""
        method = request.get("method")
        if method != "elicitation/create":
            self.report(f"the task asks for {method}, which this command cannot answer")
            return None
        params = request.get("params") or {}
        if not self.prompter.interactive:
            self.report(
                f"the task asks {params.get('message')!r}; stdin is not a terminal, "
                "so the request is cancelled"
            )
            return {"action": "cancel"}
        with self.view.paused():
            try:
                return await self.prompter.elicit(params)
            except EOFError:
                return {"action": "cancel"}

    def input_rejected(self, error: Exception) -> None:
        """The server refused an answer (nothing was consumed): say why; it is asked again."""
        message = getattr(getattr(error, "error", None), "message", None) or str(error)
        self.report(f"the server refused the answer: {message}; asking again")

    async def elicitation_handler(
        self, message: str, response_type: Any, params: Any, context: Any
    ) -> Any:
        """The client's handler for an elicitation outside a task: the same prompts."""
        from fastmcp.client.elicitation import ElicitResult

        request = {"method": "elicitation/create", "params": params.model_dump(by_alias=True)}
        answer = await self.on_input("foreground", request) or {"action": "cancel"}
        return ElicitResult(action=answer["action"], content=answer.get("content"))

    def announce(self, task_id: str) -> None:
        """The task id, first (plain `task ID` when stdout is not a terminal)."""
        if not self.out.is_terminal:
            print(f"task {task_id}", file=self.out.file, flush=True)
            return
        line = Text.assemble(("task ", "dim"), (task_id, "bold"))
        if not self.target.detachable:
            line.append("  (in memory: the task ends with this command)", style="dim")
        elif self.prompter.interactive:
            line.append("  Ctrl-C to cancel or detach", style="dim")
        self.out.print(line)

    async def follow(self, task: Any, limit: float | None, on_interrupt: Interrupt) -> int:
        """Show the task until it ends, then its result; handle Ctrl-C and the timeout."""
        from fastmcp_tasks.client.extension import task_outcome

        interrupted = timed_out = False
        failure: Exception | None = None
        following = anyio.CancelScope()

        async def watch() -> None:
            nonlocal interrupted
            assert self.signals is not None
            async for _ in self.signals:
                interrupted = True
                following.cancel()
                return

        self.view.start()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                with following:
                    try:
                        with anyio.fail_after(limit):
                            async for state in task.updates():
                                self.view.update(state)
                    except TimeoutError:
                        timed_out = True
                    except Exception as exc:  # reported below, once the view is closed
                        failure = exc
                group.cancel_scope.cancel()
        finally:
            self.view.stop()
        if interrupted:
            return await self.interrupted(task, on_interrupt)
        if timed_out and on_interrupt == "cancel":
            await self.cancel(task)
            raise TaskFailure(f"timed out; the task was cancelled ({task.task_id})")
        if timed_out:
            raise TaskFailure(f"timed out; task {task.task_id} keeps running")
        if failure is not None:
            raise failure
        return self.show(task_outcome(str(task.task_id), task.state))

    async def interrupted(self, task: Any, default: Interrupt) -> int:
        """After Ctrl-C: ask (on a terminal, for a task that outlives us), then act."""
        choice = default
        if self.prompter.interactive and self.target.detachable:
            choice = await self.decide()
        if choice == "detach":
            resume = f"fastmcp-tasks wait {self.target.text} {task.task_id}"
            self.out.print(Text(f"detached: task {task.task_id} keeps running"))
            self.out.print(Text(f"resume with: {resume}"))
            return 0 if self.prompter.interactive else 130
        await self.cancel(task)
        self.report(f"interrupted: cancelled task {task.task_id}")
        return 130

    async def decide(self) -> Interrupt:
        """Ask "Cancel the task or detach?"; a second Ctrl-C (or end of input) cancels."""
        choice: Interrupt = "cancel"
        with anyio.CancelScope() as asking:

            async def second_interrupt() -> None:
                assert self.signals is not None
                async for _ in self.signals:
                    asking.cancel()
                    return

            async with anyio.create_task_group() as group:
                group.start_soon(second_interrupt)
                try:
                    answer = await self.prompter.choose("Cancel the task or detach?", ["c", "d"])
                    choice = "detach" if answer.lower() == "d" else "cancel"
                except EOFError:
                    pass
                group.cancel_scope.cancel()
        if asking.cancelled_caught:
            self.prompter.console.print()
        return choice

    async def cancel(self, task: Any) -> None:
        """Send `tasks/cancel` on the way out (shielded, bounded); a refusal is reported."""
        from mcp.shared.exceptions import MCPError

        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE):
            try:
                await task.cancel()
            except MCPError as exc:
                self.report(f"could not cancel task {task.task_id}: {exc.error.message}")

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        limit: float | None,
        related: list[str] | None = None,
    ) -> int:
        """`call`: run the tool as a task (relating it to `related`) and follow it."""
        from fastmcp_tasks.client.handles import call_tool_task

        # Ctrl-C is taken from the start: one pressed while the call is sent still counts
        with anyio.open_signal_receiver(signal.SIGINT) as self.signals:
            async with self.connect() as client:
                task = await call_tool_task(
                    client,
                    tool,
                    arguments,
                    on_input=self.on_input,
                    on_input_rejected=self.input_rejected,
                    allow_synchronous=True,  # a tool that is not a task still runs
                    raise_on_error=False,  # an error result is shown (exit 1), not raised
                    related=related,
                    reconnect_timeout=self.reconnect_timeout,
                )
                if task.task_id is None:  # the server answered without a task
                    return self.show(await task)
                self.announce(task.task_id)
                return await self.follow(task, limit, "cancel")

    async def wait(self, task_id: str, limit: float | None) -> int:
        """`wait`: follow an existing task to its result."""
        from fastmcp_tasks.client.handles import ToolTask

        with anyio.open_signal_receiver(signal.SIGINT) as self.signals:
            async with self.connect(patient=True) as client:
                task = await ToolTask.resume(
                    client,
                    task_id,
                    on_input=self.on_input,
                    on_input_rejected=self.input_rejected,
                    reconnect_timeout=self.reconnect_timeout,
                )
                return await self.follow(task, limit, "detach")

    async def get(self, task_id: str) -> int:
        """`get`: print the task as JSON."""
        from fastmcp_tasks.client.handles import ToolTask

        async with self.connect() as client:
            task = await ToolTask.resume(client, task_id)
        if self.out.is_terminal:
            self.out.print_json(data=task.state)
        else:
            print(json.dumps(task.state, indent=2), file=self.out.file, flush=True)
        return 0

    async def cancel_command(self, task_id: str) -> int:
        """`cancel`: ask the server to cancel the task."""
        from fastmcp_tasks.client.handles import ToolTask

        async with self.connect() as client:
            task = await ToolTask.resume(client, task_id)
            if task.done:
                status = task.state["status"]
                raise TaskFailure(f"task {task_id} is already {status}; not cancelled")
            await task.cancel()
        print(f"cancel requested for task {task_id}", file=self.out.file, flush=True)
        return 0


def add_client_commands(commands: Any) -> None:
    """Add `call`, `get` and `wait` to the `fastmcp-tasks` subcommands (`cancel` is
    `cli.actions`', which hands a cancel through a SERVER to `run_client_command`)."""
    call = commands.add_parser(
        "call",
        help="run a tool as a task: live status, prompts for input, Ctrl-C to cancel or detach",
    )
    call.add_argument("server", help=SERVER_HELP)
    call.add_argument("tool", help="the tool to call")
    call.add_argument("arguments", nargs="*", help="key=value (values parsed as JSON if valid)")
    call.add_argument("--timeout", type=float, default=None, help="cancel after SECONDS")
    add_reconnect_option(call)
    call.add_argument(
        "--related",
        action="append",
        metavar="TASK_ID",
        help="a task this call relates to (repeatable): a hint the tool can read",
    )
    add_connection_options(call)
    for name, text in (
        ("get", "print a task as JSON"),
        ("wait", "follow a task and print its result (Ctrl-C stops waiting)"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("server", help=SERVER_HELP)
        command.add_argument("task_id", help="the task's id")
        add_connection_options(command)
        if name == "wait":
            command.add_argument(
                "--timeout", type=float, default=None, help="stop waiting after SECONDS"
            )
            add_reconnect_option(command)


def run_client_command(args: argparse.Namespace) -> int:
    """Run a parsed client command; the exit status (errors reported on stderr)."""
    from mcp.shared.exceptions import MCPError

    from fastmcp_tasks.errors import TaskUnreachable

    target = parse_target(args.server, token=args.token, headers=args.header)
    reconnect = getattr(args, "reconnect_timeout", DEFAULT_RECONNECT_TIMEOUT)
    session = Session(target, lines=args.command == "call", reconnect_timeout=reconnect)
    try:
        if args.command == "call":
            arguments = parse_arguments(args.arguments)
            return anyio.run(session.call, args.tool, arguments, args.timeout, args.related)
        if args.command == "get":
            return anyio.run(session.get, args.task_id)
        if args.command == "wait":
            return anyio.run(session.wait, args.task_id, args.timeout)
        return anyio.run(session.cancel_command, args.task_id)
    except MCPError as exc:
        session.report(f"{exc.error.message} (error {exc.error.code})")
        if exc.error.data is not None:
            session.report(f"data: {json.dumps(exc.error.data)}")
    except TaskUnreachable as exc:
        session.report(
            f"lost contact with task {exc.task_id} for {exc.waited:.0f}s: {exc.last_error}"
        )
        session.report("the task may still be running; resume with:")
        session.report(f"  fastmcp-tasks wait {target.text} {exc.task_id}")
    except TaskFailure as exc:
        session.report(str(exc))
    except KeyboardInterrupt:
        return 130
    return 1
