"""The operator commands that act on tasks: `cancel` and `purge`, by id or by filter.

    fastmcp-tasks cancel SERVER TASK_ID [--token TOKEN] [--header 'NAME: VALUE']
    fastmcp-tasks cancel [--url STORE_URL] TASK_ID [TASK_ID ...] [--dry-run]
    fastmcp-tasks cancel [--url STORE_URL] --all-matching [FILTERS] [--dry-run] [--yes]
    fastmcp-tasks purge --older-than AGE [--url STORE_URL] [--dry-run] [--yes]
    fastmcp-tasks purge [--url STORE_URL] FILTERS [--dry-run] [--yes]
    fastmcp-tasks purge [--url STORE_URL] TASK_ID [TASK_ID ...] [--dry-run]

FILTERS (`cli.selection`): `--status`, `--tool`, `--app`, `--owner`, `--id-prefix`,
`--older-than AGE` (`cancel`: created more than AGE ago; `purge`: ended more than AGE
ago). `--status` takes `error` too: a completed task whose tool reported an error.

`cancel` decides by where it is pointed: an http(s) URL or a `server.py` (first argument
or `--url`) is a server, cancelled through as before (`cli.client`); any other URL
(`sqlite:///...`, `redis://...`, `postgresql://...`; default `FASTMCP_TASKS_URL`) is
the store itself, acted on with `fastmcp_tasks.actions` and no server needed.

By filter, the command previews the matching tasks, asks, then acts on exactly the
previewed ids (`cli.selection.choose`). `cancel` only selects active tasks,
`purge` only finished ones. `purge --older-than AGE` alone deletes every task that ended
before then, as it always did. Ids are acted on at once, each said what became of it.
Exit status: 0 done, 1 an id was not found (or the store failed), 2 a usage error or a
store that keeps no operator records (purging chosen tasks needs them; cancel does not).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from fastmcp_tasks import actions
from fastmcp_tasks.cli.client import run_client_command
from fastmcp_tasks.cli.operating import (
    ACTOR,
    Body,
    Prompt,
    add_url_option,
    ask,
    plural,
    report,
    run_on_store,
    who,
)
from fastmcp_tasks.cli.operator import URL_ENV, OperatorError
from fastmcp_tasks.cli.pauses import PAUSE_COMMANDS, add_pause_commands
from fastmcp_tasks.cli.records import RECORD_COMMANDS, add_record_commands
from fastmcp_tasks.cli.selection import add_filter_options, choose, filtered, task_filter
from fastmcp_tasks.cli.target import SERVER_HELP, add_connection_options
from fastmcp_tasks.cli.views import age, duration, stamp
from fastmcp_tasks.stores.flow import tombstone_of
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.outcomes import outcome_of
from fastmcp_tasks.stores.urls import masked


def add_action_commands(commands: Any) -> None:
    """Add `cancel`, `purge` and the commands of `cli.pauses` and `cli.records`."""
    cancel = commands.add_parser(
        "cancel",
        help="cancel tasks: through a SERVER, or in a task store by id or filter",
        description="fastmcp-tasks cancel SERVER TASK_ID, or cancel [--url STORE_URL] "
        "TASK_ID... / --all-matching FILTERS: straight in the store, no server needed",
    )
    cancel.add_argument("targets", nargs="*", metavar="[SERVER] TASK_ID", help=(
        f"task ids; first {SERVER_HELP}, or a task store URL (default --url)"
    ))  # fmt: skip
    cancel.add_argument("--url", default=None, help=(
        f"the task store URL (default ${URL_ENV}); an http(s) URL is a server"
    ))  # fmt: skip
    cancel.add_argument(
        "--all-matching", action="store_true", help="cancel every active task the filters match"
    )
    ages = "(90s, 30m, 12h, 1d, 2w)"
    statuses = "working, input_required or active (the default)"
    add_filter_options(cancel, statuses, f"only tasks created more than AGE ago {ages}")
    add_connection_options(cancel)
    purge = commands.add_parser(
        "purge",
        help="delete finished tasks: by age, filter or id",
        description="fastmcp-tasks purge --older-than AGE (every task that ended before), "
        "purge FILTERS, or purge TASK_ID...: active tasks are never purged",
    )
    purge.add_argument("task_ids", nargs="*", metavar="TASK_ID", help="finished tasks to delete")
    statuses = "completed, error (a tool error), failed, cancelled or finished (the default)"
    add_filter_options(purge, statuses, f"only tasks that ended more than AGE ago {ages}")
    add_url_option(purge)
    add_pause_commands(commands)
    add_record_commands(commands)


def run_action_command(args: argparse.Namespace, prompt: Prompt = ask) -> int:
    """Run a parsed `cancel`, `purge`, pause or records command; the exit status."""
    try:
        server = prepare(args)
    except OperatorError as exc:
        return report(str(exc), exc.status)
    if server is not None:
        return run_client_command(server)
    return run_on_store(args, command_body(args.command), prompt)


def prepare(args: argparse.Namespace) -> argparse.Namespace | None:
    """Check the arguments before opening anything (`OperatorError` for a usage error).
    For a `cancel` through a server, the client command's arguments; else `None`, the
    store's URL in `args.url` and the task ids in `args.task_ids`."""
    server = _server_cancel(args) if args.command == "cancel" else None
    if server is None:
        _check(args)
    return server


def command_body(command: str) -> Body:
    """What runs `command` on the opened store."""
    return {"cancel": act, "purge": act, **PAUSE_COMMANDS, **RECORD_COMMANDS}[command]


def _is_server(text: str) -> bool:
    if text.startswith(("http://", "https://")):
        return True
    path = text.partition(":")[0]
    return "://" not in text and (path.endswith(".py") or Path(path).is_file())


def _server_cancel(args: argparse.Namespace) -> argparse.Namespace | None:
    """The client command's arguments when `cancel` names a server; else the store's
    URL and the task ids put in `args.url` and `args.task_ids`."""
    targets, url = list(args.targets), args.url
    if targets and (_is_server(targets[0]) or "://" in targets[0]):
        if url:
            raise OperatorError(f"give {masked(targets[0])!r} or --url, not both", 2)
        url, targets = targets[0], targets[1:]
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise OperatorError(
            "say where the task is: a SERVER (http(s) URL or path/to/server.py) before "
            f"the TASK_ID, or the task store (--url STORE_URL or {URL_ENV})",
            2,
        )
    if not _is_server(url):
        if args.token or args.header:
            raise OperatorError("--token and --header apply to a SERVER only", 2)
        args.url, args.task_ids = url, targets
        return None
    if args.all_matching or args.dry_run or args.yes or filtered(args):
        raise OperatorError(
            "--all-matching, the filters, --dry-run and --yes act on a task store: give "
            "its URL (sqlite:///..., redis://..., postgresql://...), not a server's",
            2,
        )
    if len(targets) != 1:
        raise OperatorError("through a server, cancel one task: cancel SERVER TASK_ID", 2)
    return argparse.Namespace(
        command="cancel", server=url, task_id=targets[0], token=args.token, header=args.header
    )


def _check(args: argparse.Namespace) -> None:
    """Refuse a meaningless mix of ids, filters and `--all-matching` (before opening)."""
    if args.command not in ("cancel", "purge"):
        return
    ids, chosen = bool(args.task_ids), filtered(args) or args.older_than is not None
    if args.command == "cancel":
        if ids and args.all_matching:
            raise OperatorError("give task ids or --all-matching, not both", 2)
        if chosen and not args.all_matching:
            raise OperatorError("filters choose tasks with --all-matching (try --dry-run)", 2)
        if not ids and not args.all_matching:
            raise OperatorError("give the TASK_IDs to cancel, or --all-matching FILTERS", 2)
    elif ids and chosen:
        raise OperatorError("give task ids or filters, not both", 2)
    elif not ids and not chosen:
        raise OperatorError(
            "say what to purge: --older-than AGE, filters (--status, --tool, ...) or TASK_IDs",
            2,
        )


async def act(store: ListableTaskStore, args: argparse.Namespace, prompt: Prompt) -> int:
    """`cancel` or `purge` on an opened store (`args` from `run_action_command`)."""
    if args.command == "purge" and not args.task_ids and not filtered(args):
        return await _purge_older(store, args, prompt)
    if args.command == "purge":
        actions.require_operable(store, "Purging chosen tasks")
    if args.task_ids:
        return await _by_ids(store, args)
    where = task_filter(args, time.time())
    selection = await choose(store, where, args, prompt)
    if selection is None:
        return 0
    if args.command == "cancel":
        done = await actions.cancel_tasks(
            store, selection.task_ids, ACTOR, where=where, context=who()
        )
        gone = f"; {done.finished} had finished and {done.missing} were gone meanwhile"
        tail = gone if done.finished or done.missing else ""
        print(f"Cancel requested for {plural(done.requested, 'task')}{tail}.")
        return 0
    removed = await actions.purge_tasks(
        store, selection.task_ids, ACTOR, where=where, context=who()
    )
    tail = "" if removed == selection.count else f" of {selection.count} (the rest were gone)"
    print(f"Removed {plural(removed, 'task')}{tail}.")
    return 0


async def _by_ids(store: ListableTaskStore, args: argparse.Namespace) -> int:
    """Cancel or purge the tasks named, saying what became of each; 1 if one was missing."""
    ids = list(dict.fromkeys(args.task_ids))
    before = {task_id: await store.get(task_id) for task_id in ids}
    cancel, dry = args.command == "cancel", args.dry_run
    if not dry and cancel:
        await actions.cancel_tasks(store, ids, ACTOR, context=who())
    elif not dry:
        await actions.purge_tasks(store, ids, ACTOR, context=who())
    if cancel:
        acted = "would be asked to stop" if dry else "cancel requested"
    else:
        acted = "would be removed" if dry else "removed"
    counts = {"acted": 0, "skipped": 0, "missing": 0}
    width = max(len(task_id) for task_id in ids)
    for task_id, task in before.items():
        if task is None:
            counts["missing"] += 1
            said = await _missing(store, task_id)
        elif task.is_active == cancel:
            counts["acted"] += 1
            said = acted
        else:
            counts["skipped"] += 1
            state = outcome_of(task)
            said = f"already finished ({state})" if cancel else f"still {state}: not purged"
        print(f"{task_id.ljust(width)}  {said}")
    verb = "would be" if dry else ("was" if counts["acted"] == 1 else "were")
    what = "asked to stop" if cancel else "removed"
    print(
        f"{plural(counts['acted'], 'task')} {verb} {what}; {counts['skipped']} "
        f"{'already finished' if cancel else 'still active'}; {counts['missing']} not found."
    )
    return 1 if counts["missing"] else 0


async def _missing(store: ListableTaskStore, task_id: str) -> str:
    stone = await tombstone_of(store, task_id)
    if stone is None:
        return "not found"
    why = "expired" if stone.reason == "expired" else "purged"
    return f"not found ({why} {age(stone.at, time.time())})"


async def _purge_older(store: ListableTaskStore, args: argparse.Namespace, prompt: Prompt) -> int:
    """`purge --older-than AGE` alone: every task that ended before then (as always)."""
    cutoff = time.time() - args.older_than
    when = f"that ended before {stamp(cutoff)} (more than {duration(args.older_than)} ago)"
    count = await store.purge_finished(cutoff, dry_run=True)
    if count == 0:
        print(f"No finished tasks {when}.")
        return 0
    noun = f"{count} finished task{'s' if count != 1 else ''}"
    if args.dry_run:
        print(f"Would remove {noun} {when}.")
        return 0
    if not args.yes and not await prompt(f"Remove {noun} {when}?", f"purge would remove {noun}"):
        print("Nothing removed.")
        return 0
    removed = await actions.purge_before(store, cutoff, ACTOR, context=who())
    print(f"Removed {removed} finished task{'s' if removed != 1 else ''} {when}.")
    return 0


#: The commands `run_action_command` runs.
ACTION_COMMANDS = ("cancel", "purge", *PAUSE_COMMANDS, *RECORD_COMMANDS)

__all__ = [
    "ACTION_COMMANDS",
    "act",
    "add_action_commands",
    "command_body",
    "prepare",
    "run_action_command",
]
