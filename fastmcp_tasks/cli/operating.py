"""What the commands acting on a task store share: running one, tables, asking, who acts.

The commands of `cli.actions` (`cancel`, `purge`), `cli.pauses` (`pause`, `resume`,
`paused`) and `cli.records` (`workers`, `audit`) open the store by its URL as `ls` does
(`--url`, default `FASTMCP_TASKS_URL`; `cli.operator.open_store`) and report failures
the same way: 1 for not found or the store failing, 2 for a usage error or a store that
cannot do what was asked (one that keeps no operator records cannot pause, say).

Every action is audited as actor `cli` (`ACTOR`), with the user and host it ran as in
the audit entry's details (`who`). A command that acts on many tasks asks first on a
terminal (`ask`) and needs `--yes` anywhere else. Tables are `rich` on a terminal and
plain aligned text elsewhere (`print_table`).
"""

from __future__ import annotations

import argparse
import functools
import getpass
import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread

from fastmcp_tasks.cli.operator import URL_ENV, OperatorError, open_store
from fastmcp_tasks.cli.terminal import STYLES
from fastmcp_tasks.errors import ConfigurationError, StoreError
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.urls import masked

#: The actor the audit log names for every action of the command line.
ACTOR = "cli"
#: How a table colours a cell: statuses, `error` (a tool error), a worker's state.
CELL_STYLES = {**STYLES, "error": "red", "alive": "green", "gone": "red", "stopped": "dim"}
#: Asks a yes/no question: `(question, what it would do)`; `True` to go ahead.
Prompt = Callable[[str, str], Awaitable[bool]]
#: A command's body, given the opened store.
Body = Callable[[ListableTaskStore, argparse.Namespace, Prompt], Awaitable[int]]


@functools.cache
def who() -> Mapping[str, str]:
    """The user and host the command runs as, for the audit log (what is knowable)."""
    found: dict[str, str] = {}
    try:
        found["user"] = getpass.getuser()
    except Exception:  # no login name and no password entry (some containers)
        pass
    try:
        found["host"] = socket.gethostname()
    except OSError:
        pass
    return found


def add_url_option(command: argparse.ArgumentParser) -> None:
    """`--url STORE_URL`, default `$FASTMCP_TASKS_URL`, as on `ls`."""
    env = os.environ.get(URL_ENV)
    shown = f", now {masked(env)}" if env else ""
    help_text = f"the task store URL (default ${URL_ENV}{shown})"
    command.add_argument("--url", default=env, help=help_text)


async def ask(question: str, would: str) -> bool:
    """`question [y/N]` on a terminal; off one, refuse: `would` needs `--yes`."""
    if not sys.stdin.isatty():
        raise OperatorError(f"{would}: pass --yes to confirm", 2)
    answer = await anyio.to_thread.run_sync(input, f"{question} [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def run_on_store(args: argparse.Namespace, body: Body, prompt: Prompt = ask) -> int:
    """Open the store `args.url` names, run `body` on it, close it; the exit status
    (failures reported on stderr, as the other operator commands do)."""

    async def run() -> int:
        store = open_store(args.url)
        await store.open()
        try:
            return await body(store, args, prompt)
        finally:
            await store.close()

    try:
        return anyio.run(run)
    except OperatorError as exc:
        return report(str(exc), exc.status)
    except StoreError as exc:
        return report(str(exc), 1)
    except ConfigurationError as exc:  # a store without operator records, a missing database
        return report(str(exc), 2)
    except KeyboardInterrupt:
        return report("interrupted", 130)


def report(message: str, status: int) -> int:
    """`fastmcp-tasks: message` on stderr; `status`."""
    print(f"fastmcp-tasks: {message}", file=sys.stderr)
    return status


def plural(count: int, noun: str) -> str:
    """`1 task`, `2 tasks`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def print_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], footer: str | None = None
) -> None:
    """A table: `rich` on a terminal (statuses coloured), plain aligned text elsewhere."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            print("  ".join(cells).rstrip())
        if footer:
            print(footer)
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(*header, caption=footer, header_style="bold")
    for row in rows:
        table.add_row(*(Text(cell, style=CELL_STYLES.get(cell, "")) for cell in row))
    console.print(table)


def print_json(value: Any) -> None:
    """`value` as indented JSON on stdout."""
    print(json.dumps(value, indent=2, ensure_ascii=False))


__all__ = [
    "ACTOR",
    "CELL_STYLES",
    "Body",
    "Prompt",
    "add_url_option",
    "ask",
    "plural",
    "print_json",
    "print_table",
    "report",
    "run_on_store",
    "who",
]
