"""The operator commands of `fastmcp-tasks` that look into a task store: `ls` and `show`.

    fastmcp-tasks ls [--url URL] [--status STATUS ...] [--owner KEY] [--tool NAME]
        [--app NAME] [--limit N] [--json]
    fastmcp-tasks show TASK_ID [--url URL] [--json]

They open the store itself, not a server: `--url` is a store URL (`sqlite:///...`,
`redis://...`, `postgresql://...`), by default `FASTMCP_TASKS_URL`, the variable the
extension reads. `memory://` is refused: no other process can see its tasks. The store
must support listing (`ListableTaskStore`); the bundled SQLite, Redis and PostgreSQL
stores do. A URL is only ever printed masked (`stores.urls.masked`).

`ls` lists tasks newest first; `--status` takes statuses, comma separated or
repeated, and `active` / `finished` for either group. A task that ended with a tool
error (the tool raised: `completed` on the MCP wire, with an `isError` result) is
shown, and filtered, as its own outcome `error` (`stores.outcomes`): `--status error`
lists them, and `--status completed` lists the clean successes only (`finished`
includes both). The store lists statuses, so these two are told apart here, paging
through its `completed` tasks until `--limit` is filled; `--tool` and `--app` are
filtered here the same way. `show` prints one task:
times, message, owner, attempts (the runs of the tool body begun), where an active
task's run stands (its `phase`), lease, input requests, error and a summary of
the result (arguments shortened), then its history where the store keeps one
(`cli.history`) and its durable steps (name, when, size: `dashboard.steps`). The
commands that act on a store (`cancel`, `purge`, `pause`, ...)
live in `cli.actions`, which uses `open_store` and `OperatorError` from here.

On a terminal the output is `rich` tables; elsewhere plain aligned text, and
`--json` prints JSON (`show --json` with the history and the operator outcome); `show`
of a removed task says when it expired or was purged (its tombstone). Exit status: 0
done, 1 no such task or the store failed, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

import anyio

from fastmcp_tasks.cli.history import history_fields, show_document, steps_fields
from fastmcp_tasks.cli.terminal import STYLES
from fastmcp_tasks.cli.views import (
    _UNITS,
    age,
    describe,
    short,
    stamp,
    summary_json,
)
from fastmcp_tasks.dashboard.steps import steps_of
from fastmcp_tasks.errors import ConfigurationError, StoreError
from fastmcp_tasks.server.payloads import for_operators
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.flow import tombstone_of
from fastmcp_tasks.stores.listing import MAX_PAGE, ListableTaskStore, PageKey
from fastmcp_tasks.stores.operations import history_of
from fastmcp_tasks.stores.outcomes import (
    ERROR,
    OUTCOME_GROUPS,
    OUTCOMES,
    outcome_of,
    split_needed,
    store_statuses,
)
from fastmcp_tasks.stores.sqlite.schema import path_from_url
from fastmcp_tasks.stores.urls import masked

COMMANDS = ("ls", "show")
URL_ENV = "FASTMCP_TASKS_URL"
_GROUPS = OUTCOME_GROUPS
_STYLES = {**STYLES, ERROR: "bold red"}
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


class OperatorError(Exception):
    """A failure reported on stderr: `status` 1 (not found, store down) or 2 (usage)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


# --- arguments ---------------------------------------------------------------------------


def parse_age(text: str) -> float:
    """`90s`, `30m`, `12h`, `1d`, `2w` as seconds (an argparse `type`)."""
    match = _AGE.fullmatch(text.strip().lower())
    if match is None or float(match[1]) < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: give a number and a unit, like 90s, 30m, 12h, 1d or 2w"
        )
    return float(match[1]) * _UNITS[match[2]]


def parse_statuses(text: str) -> frozenset[str]:
    """`working,failed`, `error` or `active` / `finished` as outcomes (an argparse `type`)."""
    statuses: set[str] = set()
    for name in filter(None, (part.strip() for part in text.split(","))):
        if name not in _GROUPS and name not in OUTCOMES:
            known = ", ".join([*STYLES, ERROR, *_GROUPS])
            raise argparse.ArgumentTypeError(f"unknown task status {name!r}: give {known}")
        statuses |= _GROUPS.get(name, {name})
    return frozenset(statuses)


def add_operator_commands(commands: Any) -> None:
    """Add `ls` and `show` to the `fastmcp-tasks` subcommands."""
    env = os.environ.get(URL_ENV)
    url_help = f"the task store URL (default ${URL_ENV}{', now ' + masked(env) if env else ''})"
    ls = commands.add_parser("ls", help="list a task store's tasks, newest first")
    ls.add_argument("--status", type=parse_statuses, action="append", metavar="STATUS", help=(
        "working, input_required, completed (without a tool error), error (completed with a "
        "tool error), failed, cancelled, active or finished (comma separated or repeated)"
    ))  # fmt: skip
    ls.add_argument("--owner", help="only tasks of this principal key (client_id|sub)")
    ls.add_argument("--tool", help="only tasks of this tool")
    ls.add_argument("--app", help="only tasks of this application (the server's name)")
    ls.add_argument("--limit", type=int, default=50, help="most tasks shown (default 50)")
    show = commands.add_parser("show", help="print one task of a task store")
    show.add_argument("task_id", help="the task's id")
    for command in (ls, show):
        command.add_argument("--url", default=env, help=url_help)
        command.add_argument("--json", action="store_true", help="print JSON")


def run_operator_command(args: argparse.Namespace) -> int:
    """Run a parsed operator command; the exit status (errors reported on stderr)."""
    try:
        return anyio.run(_run, args)
    except OperatorError as exc:
        print(f"fastmcp-tasks: {exc}", file=sys.stderr)
        return exc.status
    except StoreError as exc:
        print(f"fastmcp-tasks: {exc}", file=sys.stderr)
        return 1
    except ConfigurationError as exc:  # found at open: a database that does not exist
        print(f"fastmcp-tasks: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fastmcp-tasks: interrupted", file=sys.stderr)
        return 130


async def _run(args: argparse.Namespace) -> int:
    store = open_store(args.url)
    await store.open()
    try:
        if args.command == "ls":
            return await _ls(store, args)
        return await _show(store, args.task_id, args.json, masked(args.url))
    finally:
        await store.close()


def open_store(url: str | None) -> ListableTaskStore:
    """The (unopened) store a URL names, checked to be shared and listable."""
    if not url:
        raise OperatorError(f"name the task store: --url URL or {URL_ENV}", 2)
    try:
        if url.startswith("sqlite:") and not os.path.exists(path_from_url(url)):
            raise OperatorError(f"no task store at {masked(url)}: the file does not exist")
        store = store_from_url(url)
    except ConfigurationError as exc:  # (a message quotes the URL masked: `stores.urls`)
        raise OperatorError(str(exc), 2) from None
    if not store.durable:
        raise OperatorError(
            f"{masked(url)} keeps tasks inside one server process, so no other process can "
            "see them: give the server's shared store (sqlite:///..., redis://... or "
            "postgresql://...)",
            2,
        )
    if not isinstance(store, ListableTaskStore):
        raise OperatorError(f"the {store.scheme}:// store cannot list tasks", 2)
    return store


# --- the commands --------------------------------------------------------------------------


async def _ls(store: ListableTaskStore, args: argparse.Namespace) -> int:
    outcomes = frozenset().union(*args.status) if args.status else None
    if not 1 <= args.limit <= MAX_PAGE:
        raise OperatorError(f"--limit must be 1..{MAX_PAGE}, got {args.limit}", 2)
    tasks = await list_outcomes(
        store, outcomes, args.owner, args.limit, tool=args.tool, app=args.app
    )
    if args.json:
        print(json.dumps([summary_json(for_operators(task)) for task in tasks], indent=2))
        return 0
    now = time.time()
    header = ("TASK ID", "STATUS", "TOOL", "CREATED", "UPDATED", "MESSAGE")
    rows = [
        (
            t.task_id,
            outcome_of(t),
            t.tool,
            age(t.created_at, now),
            age(t.updated_at, now),
            short(t.status_message or "", 60),
        )
        for t in tasks
    ]
    more = " (the --limit; there may be more)" if len(tasks) == args.limit else ""
    footer = f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}, newest first{more}"
    console = _console()
    if console is None:
        widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            cells = (str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
            print("  ".join(cells).rstrip())
        print(footer)
        return 0
    from rich.table import Table
    from rich.text import Text

    table = Table(*header, caption=footer, header_style="bold")
    for row in rows:
        table.add_row(*(Text(cell, style=_STYLES.get(cell, "")) for cell in row))
    console.print(table)
    return 0


async def list_outcomes(
    store: ListableTaskStore,
    outcomes: frozenset[str] | None,
    owner: str | None,
    limit: int,
    *,
    tool: str | None = None,
    app: str | None = None,
) -> list[TaskRecord]:
    """The newest `limit` tasks of these outcomes (`None`: all), of `tool` and `app` when
    given: the store's listing of their statuses, filtered by `outcome_of` when it holds
    outcomes not wanted (`completed` without `error`, or back) and by tool and
    application, paging with `before` until `limit` tasks are found."""
    statuses = None if outcomes is None else store_statuses(outcomes)
    if not split_needed(outcomes) and tool is None and app is None:
        return await store.list_tasks(status=statuses, owner=owner, limit=limit)

    def wanted(task: TaskRecord) -> bool:
        return (
            (outcomes is None or outcome_of(task) in outcomes)
            and (tool is None or task.tool == tool)
            and (app is None or task.app == app)
        )

    found: list[TaskRecord] = []
    before: PageKey | None = None
    size = min(MAX_PAGE, max(limit, 200))
    while len(found) < limit:
        page = await store.list_tasks(status=statuses, owner=owner, limit=size, before=before)
        found += [task for task in page if wanted(task)]
        if len(page) < size:
            break
        before = (page[-1].created_at, page[-1].task_id)
    return found[:limit]


async def _show(store: ListableTaskStore, task_id: str, as_json: bool, where: str) -> int:
    task = await store.get(task_id)
    task = None if task is None else for_operators(task)  # sealed payloads: key or "sealed"
    if task is None:
        if (stone := await tombstone_of(store, task_id)) is None:
            raise OperatorError(
                f"no task {task_id!r} in {where} (never created, expired or purged)"
            )
        why = "expired (its retention ran out)" if stone.reason == "expired" else "was purged"
        when = f"{stamp(stone.at)} ({age(stone.at, time.time())})"
        raise OperatorError(f"task {task_id!r} in {where} {why} at {when}")
    events = await history_of(store, task.task_id)
    steps = await steps_of(store, task.task_id)
    if as_json:
        print(json.dumps(show_document(task, events, steps), indent=2, ensure_ascii=False))
        return 0
    fields = describe(task, time.time()) + history_fields(events, task.created_at)
    fields += steps_fields(steps, task.created_at)
    console = _console()
    if console is None:
        width = max(len(name) for name, _ in fields)
        for name, value in fields:
            print(f"{name.ljust(width)}  {value}")
        return 0
    from rich.table import Table
    from rich.text import Text

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name, value in fields:
        style = _STYLES.get(value, "") if name == "Status" else ""
        table.add_row(Text(name), Text(value, style=style))
    console.print(table)
    return 0


# --- rendering -------------------------------------------------------------------------------


def _console() -> Any:
    """A `rich` console when stdout is a terminal, else `None` (plain text)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else None


__all__ = ["COMMANDS", "add_operator_commands", "run_operator_command"]
