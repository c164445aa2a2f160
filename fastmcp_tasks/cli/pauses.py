"""The operator commands that pause a tool: `pause`, `resume` and `paused`.

    fastmcp-tasks pause TOOL [--app APP] [--url STORE_URL]
    fastmcp-tasks resume TOOL [--app APP] [--url STORE_URL]
    fastmcp-tasks paused [--url STORE_URL] [--json]

`pause` stops every process of the application from starting runs of TOOL (tasks
already running go on; new ones wait, held in the store); `resume` lifts it and
releases the held tasks at once; `paused` lists the pauses in place. Through
`fastmcp_tasks.actions`, audited as `cli`. A pause is per application (`--app`,
`''` for tasks created without one); without `--app`, the one application the store's
workers run is meant (for `resume`, first the one application TOOL is paused for), and
more or none is a usage error. The store must keep operator records
(`stores.operations.OperableTaskStore`); any other is refused (exit 2).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

from fastmcp_tasks import actions
from fastmcp_tasks.cli.operating import (
    ACTOR,
    Body,
    Prompt,
    add_url_option,
    print_json,
    print_table,
    who,
)
from fastmcp_tasks.cli.operator import OperatorError
from fastmcp_tasks.cli.views import age, stamp
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.operations import OperableTaskStore, Pause, pause_key


def add_pause_commands(commands: Any) -> None:
    """Add `pause`, `resume` and `paused` to the `fastmcp-tasks` subcommands."""
    app_help = "the application ('' for tasks without one; default: the one its workers run)"
    pause = commands.add_parser("pause", help="stop starting runs of a tool, in every process")
    resume = commands.add_parser("resume", help="start runs of a paused tool again")
    for command in (pause, resume):
        command.add_argument("tool", help="the tool's name")
        command.add_argument("--app", help=app_help)
        add_url_option(command)
    paused = commands.add_parser("paused", help="list the paused tools")
    paused.add_argument("--json", action="store_true", help="print JSON")
    add_url_option(paused)


def of(app: str) -> str:
    """`of app X`, or `of tasks without an app` for `''`."""
    return f"of app {app}" if app else "of tasks without an app"


async def _pause(store: ListableTaskStore, args: argparse.Namespace, prompt: Prompt) -> int:
    ops = actions.require_operable(store, "Pausing a tool")
    app = args.app if args.app is not None else await _only_app(ops)
    if not await actions.pause_tool(store, app, args.tool, ACTOR, context=who()):
        held = next((p for p in await ops.paused() if (p.app, p.tool) == (app, args.tool)), None)
        since = "" if held is None else f" (since {stamp(held.since)}, by {held.by})"
        print(f"{args.tool} {of(app)} was already paused{since}.")
        return 0
    again = shlex.join(["fastmcp-tasks", "resume", args.tool, "--app", app])
    print(f"Paused {args.tool} {of(app)}: new runs wait until `{again}`.")
    apps_workers = [w for w in await ops.workers() if pause_key(w.app) == app]
    if apps_workers and not any(args.tool in w.tools for w in apps_workers):
        print(f"note: no worker {of(app)} lists a tool named {args.tool!r}", file=sys.stderr)
    return 0


async def _resume(store: ListableTaskStore, args: argparse.Namespace, prompt: Prompt) -> int:
    ops = actions.require_operable(store, "Resuming a tool")
    pauses = await ops.paused()
    app = args.app
    if app is None:
        apps = {p.app for p in pauses if p.tool == args.tool}
        app = apps.pop() if len(apps) == 1 else await _only_app(ops)
    released = await actions.resume_tool(store, app, args.tool, ACTOR, context=who())
    if released is None:
        now = ", ".join(f"{p.tool} {of(p.app)}" for p in _ordered(pauses)) or "none"
        raise OperatorError(f"{args.tool} {of(app)} is not paused (paused now: {now})")
    held = f"released {released} held task{'s' if released != 1 else ''}"
    print(f"Resumed {args.tool} {of(app)}: {held}.")
    return 0


async def _only_app(ops: OperableTaskStore) -> str:
    """The one application the store's workers run; else a usage error naming them."""
    apps = sorted({pause_key(w.app) for w in await ops.workers()})
    if len(apps) == 1:
        return apps[0]
    known = (
        "its workers run " + ", ".join(repr(app) for app in apps)
        if apps
        else "no worker has reported to this store in the last hour"
    )
    raise OperatorError(f"name the application with --app ({known}; '' for none)", 2)


def _ordered(pauses: list[Pause]) -> list[Pause]:
    return sorted(pauses, key=lambda p: (p.app, p.tool))


async def _paused(store: ListableTaskStore, args: argparse.Namespace, prompt: Prompt) -> int:
    ops = actions.require_operable(store, "Listing paused tools")
    pauses = _ordered(await ops.paused())
    if args.json:
        print_json([p.to_json() for p in pauses])
        return 0
    if not pauses:
        print("No tool is paused.")
        return 0
    now = time.time()
    rows = [(p.app or "-", p.tool, f"{stamp(p.since)} ({age(p.since, now)})", p.by) for p in pauses]
    print_table(("APP", "TOOL", "SINCE", "BY"), rows, f"{len(pauses)} paused")
    return 0


#: The commands here, each one's body (run by `cli.actions.run_action_command`).
PAUSE_COMMANDS: dict[str, Body] = {"pause": _pause, "resume": _resume, "paused": _paused}

__all__ = ["PAUSE_COMMANDS", "add_pause_commands", "of"]
