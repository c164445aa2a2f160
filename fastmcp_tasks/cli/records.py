"""The operator commands that read a store's operator records: `workers` and `audit`.

    fastmcp-tasks workers [--url STORE_URL] [--json]
    fastmcp-tasks audit [--url STORE_URL] [--limit N] [--json]

`workers` lists the processes that run tasks, as their heartbeats describe them
(`stores.operations.WorkerInfo`, those seen within the last `FORGET_AFTER` seconds):
id, application, host, pid, version, running / concurrency, tools, when it started,
when it was last seen, and its state: `alive`, `gone` (three heartbeats missed) or
`stopped` (it shut down cleanly). `audit` lists the operator actions, newest first
(who: the dashboard token's label or `cli`, with the user and host a command ran as).
`--json` prints the records as the store keeps them (a worker with its `state`). The
store must keep operator records; any other is refused (exit 2).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from fastmcp_tasks import actions
from fastmcp_tasks.cli.operating import (
    Body,
    Prompt,
    add_url_option,
    plural,
    print_json,
    print_table,
)
from fastmcp_tasks.cli.operator import OperatorError
from fastmcp_tasks.cli.views import age, short, stamp
from fastmcp_tasks.stores.listing import ListableTaskStore
from fastmcp_tasks.stores.operations import MAX_AUDIT, AuditEntry, WorkerInfo

#: The states a worker is shown in, in the order listed.
STATES = ("alive", "gone", "stopped")


def add_record_commands(commands: Any) -> None:
    """Add `workers` and `audit` to the `fastmcp-tasks` subcommands."""
    workers = commands.add_parser("workers", help="list the processes that run tasks")
    audit = commands.add_parser("audit", help="list the operator actions, newest first")
    audit.add_argument("--limit", type=int, default=50, help="most entries shown (default 50)")
    for command in (workers, audit):
        command.add_argument("--json", action="store_true", help="print JSON")
        add_url_option(command)


def state_of(worker: WorkerInfo, now: float) -> str:
    """`stopped` (said goodbye), `alive` (heartbeats coming) or `gone` (they stopped)."""
    if worker.stopped:
        return "stopped"
    return "alive" if worker.alive(now) else "gone"


async def _workers(store: ListableTaskStore, args: argparse.Namespace, prompt: Prompt) -> int:
    ops = actions.require_operable(store, "Listing workers")
    now = time.time()
    found = sorted(
        await ops.workers(),
        key=lambda w: (w.app or "", STATES.index(state_of(w, now)), -w.started_at, w.worker_id),
    )
    if args.json:
        print_json([{**w.to_json(), "state": state_of(w, now)} for w in found])
        return 0
    if not found:
        print("No worker has reported to this store in the last hour.")
        return 0
    rows = [
        (
            w.worker_id,
            w.app or "-",
            w.host,
            str(w.pid),
            w.version,
            f"{w.running}/{w.concurrency}",
            short(", ".join(w.tools), 40) or "-",
            age(w.started_at, now),
            age(w.last_seen, now),
            state_of(w, now),
        )
        for w in found
    ]
    header = ("WORKER", "APP", "HOST", "PID", "VERSION", "RUNNING", "TOOLS", "STARTED")
    counts = [(state, sum(row[-1] == state for row in rows)) for state in STATES]
    footer = f"{plural(len(rows), 'worker')}: " + ", ".join(f"{n} {s}" for s, n in counts)
    print_table((*header, "LAST SEEN", "STATE"), rows, footer)
    return 0


def actor_of(entry: AuditEntry) -> str:
    """`cli (alice@build-host)`, or the actor alone when the entry says no more."""
    user, host = entry.details.get("user"), entry.details.get("host")
    where = "@".join(str(part) for part in (user, host) if part)
    return f"{entry.actor} ({where})" if where else entry.actor


def details_of(entry: AuditEntry) -> str:
    """An entry's details but who acted, as `key=value` on one line (the filter first,
    the ids last)."""
    parts = []
    first, last = ("filter",), ("ids",)
    order = sorted(entry.details, key=lambda key: (key not in first, key in last))
    for key in order:
        value = entry.details[key]
        if key in ("user", "host"):
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if key.endswith("_before") and isinstance(value, (int, float)):
            text = stamp(value)
        parts.append(f"{key}={text}")
    return short(" ".join(parts), 120)


async def _audit(store: ListableTaskStore, args: argparse.Namespace, prompt: Prompt) -> int:
    ops = actions.require_operable(store, "Reading the audit log")
    if not 1 <= args.limit <= MAX_AUDIT:
        raise OperatorError(f"--limit must be 1..{MAX_AUDIT}, got {args.limit}", 2)
    entries = await ops.audit(args.limit)
    if args.json:
        print_json([entry.to_json() for entry in entries])
        return 0
    if not entries:
        print("No operator action is recorded.")
        return 0
    rows = [
        (stamp(e.at), actor_of(e), e.action, str(e.count), details_of(e) or "-") for e in entries
    ]
    more = " (the --limit; there may be more)" if len(entries) == args.limit else ""
    noun = "1 entry" if len(entries) == 1 else f"{len(entries)} entries"
    footer = f"{noun}, newest first{more}"
    print_table(("TIME", "ACTOR", "ACTION", "COUNT", "DETAILS"), rows, footer)
    return 0


#: The commands here, each one's body (run by `cli.actions.run_action_command`).
RECORD_COMMANDS: dict[str, Body] = {"workers": _workers, "audit": _audit}

__all__ = ["RECORD_COMMANDS", "STATES", "actor_of", "add_record_commands", "state_of"]
