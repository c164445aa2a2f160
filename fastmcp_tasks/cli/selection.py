"""How `cancel --all-matching` and `purge` choose tasks by filter: the options, the
`actions.TaskFilter` they make, the preview and the confirmation.

The options: `--status` (statuses and `error`, a completed task whose tool reported an
error, or `active` / `finished`; comma separated or repeated), `--tool`, `--app` (`''`:
tasks created without one), `--owner`, `--id-prefix`, `--older-than AGE` (`cancel`:
created more than AGE ago; `purge`: ended more than AGE ago), `--dry-run`, `--yes`.

`choose` selects the matching task ids (`actions.select`: newest first, at most
`actions.MAX_SELECTION`, saying so when more match), prints how many and a table of the
first `PREVIEW`, then asks "Cancel these 12 tasks?" (`--yes`: do not ask; `--dry-run`:
stop after the preview). The caller acts on exactly the ids it returns, so a task that
starts matching after the preview is left alone.
"""

from __future__ import annotations

import argparse
import time

from fastmcp_tasks import actions
from fastmcp_tasks.actions import OUTCOMES, Selection, TaskFilter
from fastmcp_tasks.cli.operating import Prompt, plural, print_table
from fastmcp_tasks.cli.operator import OperatorError, parse_age
from fastmcp_tasks.cli.views import age, short
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.outcomes import ERROR, outcome_of
from fastmcp_tasks.wire.names import ACTIVE_STATUSES, TERMINAL_STATUSES

#: Tasks the preview of a bulk action lists (it always says how many in all).
PREVIEW = 10
#: The outcomes `cancel` selects among (and its default), and `purge`'s.
ACTIVE = ACTIVE_STATUSES
FINISHED = TERMINAL_STATUSES | {ERROR}
_GROUPS = {"active": ACTIVE, "finished": FINISHED}
_FILTERS = ("status", "tool", "app", "owner", "id_prefix")


def parse_outcomes(text: str) -> frozenset[str]:
    """`working,error` or `active` / `finished` as filter outcomes (an argparse `type`)."""
    found: set[str] = set()
    for name in filter(None, (part.strip() for part in text.split(","))):
        if name not in OUTCOMES and name not in _GROUPS:
            known = ", ".join([*sorted(OUTCOMES), *_GROUPS])
            raise argparse.ArgumentTypeError(f"unknown task status {name!r}: give {known}")
        found |= _GROUPS.get(name, {name})
    if not found:
        raise argparse.ArgumentTypeError("give a task status")
    return frozenset(found)


def add_filter_options(command: argparse.ArgumentParser, statuses: str, older: str) -> None:
    """The filter options, `--dry-run` and `--yes` (`statuses`, `older`: their help)."""
    group = command.add_argument_group("choosing tasks by filter")
    group.add_argument("--status", type=parse_outcomes, action="append", metavar="STATUS", help=(
        f"{statuses}; comma separated or repeated"
    ))  # fmt: skip
    group.add_argument("--tool", help="only tasks of this tool")
    group.add_argument("--app", help="only tasks of this application ('' for none)")
    group.add_argument("--owner", help="only tasks of this principal key (client_id|sub)")
    group.add_argument("--id-prefix", metavar="PREFIX", help="only tasks whose id starts so")
    group.add_argument("--older-than", type=parse_age, metavar="AGE", help=older)
    command.add_argument("--dry-run", action="store_true", help="only show what would be done")
    command.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def filtered(args: argparse.Namespace) -> bool:
    """Whether a filter other than `--older-than` was given."""
    return any(getattr(args, name) is not None for name in _FILTERS)


def task_filter(args: argparse.Namespace, now: float) -> TaskFilter:
    """The filter the options say: `cancel` among active tasks, `purge` finished ones."""
    cancel = args.command == "cancel"
    allowed = ACTIVE if cancel else FINISHED
    outcomes = frozenset().union(*args.status) if args.status else allowed
    if outcomes - allowed:
        wrong = ", ".join(sorted(outcomes - allowed))
        kind = "active" if cancel else "finished"
        raise OperatorError(f"{args.command} acts on {kind} tasks only, not {wrong}", 2)
    cutoff = None if args.older_than is None else now - args.older_than
    return TaskFilter(
        outcomes=outcomes,
        tool=args.tool,
        app=args.app,
        owner=args.owner,
        id_prefix=args.id_prefix,
        created_before=cutoff if cancel else None,
        ended_before=None if cancel else cutoff,
    )


async def choose(
    store: ListableTaskStore, where: TaskFilter, args: argparse.Namespace, prompt: Prompt
) -> Selection | None:
    """Select, preview, ask; the selection to act on (`None`: nothing, or not now)."""
    selection = await actions.select(store, where, limit=actions.MAX_SELECTION)
    if selection.count == 0:
        print("No tasks match.")
        return None
    noun = plural(selection.count, "task")
    print(f"{noun} match{'es' if selection.count == 1 else ''}, newest first:")
    now = time.time()
    shown = [task for i in selection.task_ids[:PREVIEW] if (task := await store.get(i))]
    more = selection.count - len(shown)
    print_table(
        ("TASK ID", "STATUS", "TOOL", "APP", "CREATED", "UPDATED", "MESSAGE"),
        [_row(task, now) for task in shown],
        f"... and {more} more" if more else None,
    )
    if selection.truncated:
        print(
            f"More tasks match than one command acts on ({actions.MAX_SELECTION}): these "
            "are the newest; run it again for the rest."
        )
    cancel = args.command == "cancel"
    if args.dry_run:
        print(f"Dry run: nothing {'cancelled' if cancel else 'removed'}.")
        return None
    these = f"these {noun}" if selection.count != 1 else "this task"
    question = f"{'Cancel' if cancel else 'Purge'} {these}?"
    would = f"{args.command} would {'cancel' if cancel else 'remove'} {noun}"
    if args.yes or await prompt(question, would):
        return selection
    print(f"Nothing {'cancelled' if cancel else 'removed'}.")
    return None


def _row(task: TaskRecord, now: float) -> tuple[str, ...]:
    created, updated = age(task.created_at, now), age(task.updated_at, now)
    message = short(task.status_message or "", 50)
    return (task.task_id, outcome_of(task), task.tool, task.app or "-", created, updated, message)


__all__ = [
    "ACTIVE",
    "FINISHED",
    "PREVIEW",
    "add_filter_options",
    "choose",
    "filtered",
    "parse_outcomes",
    "task_filter",
]
