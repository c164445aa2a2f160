"""Fixture server for the official MCP conformance suite's ``tasks-*`` scenarios.

The scenarios of ``@modelcontextprotocol/conformance`` (see
``scripts/conformance.sh``) call these tools by name:

* ``greet``                 plain synchronous tool (never a task)
* ``slow_compute``          optional task support; sleeps ``seconds`` (takes ``label``)
* ``failing_job``           task support ``required``; raises a ToolError, so the
                            task ends ``completed`` with ``isError: true``
* ``protocol_error_job``    raises an ``MCPError``, so the task ends ``failed``
* ``confirm_delete``        task that asks one question mid-run (``input_required``)
* ``multi_input``           task that asks two questions concurrently
* ``test_tool_with_task``   task support ``required``; MRTR composition: a
                            synchronous ``input_required`` round first, then a
                            task once the answer arrives

Run it standalone with ``python tests/conformance_server.py --port N``: it serves
Streamable HTTP on ``http://127.0.0.1:N/mcp``. Tests can import ``mcp`` instead.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script (``python tests/conformance_server.py``): make the repo
    # root importable so ``fastmcp_tasks`` resolves without an install.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

from fastmcp_tasks import TasksExtension, task_options

mcp = FastMCP("conformance-fixture")
mcp.add_extension(TasksExtension())


@dataclass
class DeleteConfirmation:
    confirm: bool


@dataclass
class NameAndConfirmation:
    name: str
    confirm: bool


@mcp.tool
def greet(name: str) -> str:
    """Greet someone synchronously."""
    return f"Hello, {name}!"


@mcp.tool(task=True)
async def slow_compute(seconds: float = 1.0, label: str | None = None) -> str:
    """Sleep for ``seconds``; runs as a task when the client opts in.

    The suite tags every call with a ``label`` (e.g. ``lifecycle-create``); it must
    be accepted, or the call fails argument validation and never becomes a task.
    """
    await anyio.sleep(seconds)
    return f"Computed {label or 'result'} after {seconds} seconds"


@mcp.tool(task=TaskConfig(mode="required"))
async def failing_job() -> str:
    """Always fails with a tool error (task ends completed with isError)."""
    raise ToolError("failing_job failed on purpose")


@mcp.tool(task=True)
async def protocol_error_job() -> str:
    """Always fails with a protocol error (task ends failed)."""
    raise MCPError(code=-32603, message="protocol_error_job failed on purpose")


@mcp.tool(task=True)
async def confirm_delete(filename: str, ctx: Context) -> str:
    """Ask the client to confirm, then pretend to delete ``filename``."""
    answer = await ctx.elicit(f"Really delete {filename}?", response_type=DeleteConfirmation)
    if answer.action == "accept" and answer.data.confirm:
        return f"Deleted {filename}"
    return f"Kept {filename} ({answer.action})"


@mcp.tool(task=True)
async def multi_input(ctx: Context) -> str:
    """Ask two questions concurrently; both must be answered to finish."""
    first, second = await asyncio.gather(
        ctx.elicit("First: your name?", response_type=NameAndConfirmation),
        ctx.elicit("Second: your name?", response_type=NameAndConfirmation),
    )
    parts = []
    for label, answer in (("first", first), ("second", second)):
        if answer.action == "accept":
            parts.append(f"{label}={answer.data.name} confirm={answer.data.confirm}")
        else:
            parts.append(f"{label}={answer.action}")
    return "; ".join(parts)


NAME_REQUEST_KEY = "name"


async def ask_for_name(ctx: Context, arguments: dict) -> mcp_types.InputRequiredResult | None:
    """The foreground guard: ask until the call carries an answer, then let it become a task."""
    if isinstance((ctx.input_responses or {}).get(NAME_REQUEST_KEY), mcp_types.ElicitResult):
        return None
    return mcp_types.InputRequiredResult(
        input_requests={
            NAME_REQUEST_KEY: mcp_types.ElicitRequest(
                params=mcp_types.ElicitRequestFormParams(
                    message="What is your name?",
                    requested_schema={
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"],
                    },
                )
            )
        }
    )


# MRTR composition (C11): round 1 is a synchronous InputRequiredResult from the
# foreground guard; the round carrying the answer becomes a task whose body reads it.
@mcp.tool(task=TaskConfig(mode="required"))
@task_options(foreground_input=ask_for_name)
async def test_tool_with_task(ctx: Context) -> str:
    """Ask for a name in the foreground, then greet from a task."""
    answer = (ctx.input_responses or {})[NAME_REQUEST_KEY]
    assert isinstance(answer, mcp_types.ElicitResult)
    if answer.action != "accept" or not answer.content:
        return f"No name given ({answer.action})"
    return f"Hello, {answer.content.get('name')}! (finished in a task)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    mcp.run(
        transport="http",
        host=args.host,
        port=args.port,
        path="/mcp",
        show_banner=False,
    )


if __name__ == "__main__":
    main()
