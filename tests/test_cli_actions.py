"""The operator commands acting on a store (`cli.actions`, `cli.pauses`, `cli.records`,
`show`'s history), run in this process on a `MemoryTaskStore`.

Each test parses a real command line with the commands' own parsers, runs the command's
body on the store (what `run_on_store` does once it opened the URL's store), and checks
what is printed and what the store holds after: tasks, histories, pauses, the audit log.
A confirmation is a function here, so a test can act between the preview and the answer.
`test_cli_store_actions.py` runs the console script on SQLite files.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from typing import Any

import pytest

from fastmcp_tasks import MemoryTaskStore, actions
from fastmcp_tasks.cli.actions import add_action_commands, command_body, prepare
from fastmcp_tasks.cli.operator import OperatorError, _show, add_operator_commands
from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.operations import TaskEvent, WorkerInfo
from tests.test_store_contract import record

pytestmark = pytest.mark.anyio

ERROR_RESULT = {"content": [{"type": "text", "text": "bad input"}], "isError": True}
OPERATIONS = (
    "add_events events beat workers pause resume paused hold_paused add_audit audit delete_finished"
).split()


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fastmcp-tasks")
    commands = parser.add_subparsers(dest="command", required=True)
    add_operator_commands(commands)
    add_action_commands(commands)
    return parser.parse_args(argv)


async def never(question: str, would: str) -> bool:
    raise AssertionError(f"asked {question!r} ({would})")


async def run(store: Any, *argv: str, prompt: Any = never) -> int:
    """`fastmcp-tasks ARGV --url memory://` on `store`; its exit status."""
    args = parse(*argv, "--url", "memory://")
    assert prepare(args) is None  # a store's command, not a server's
    return int(await command_body(args.command)(store, args, prompt))


async def made(
    store: Any, tool: str = "build", app: str | None = "shop", kept: bool = False, **end: Any
) -> str:
    """A task of `tool` (ended as `end` says: `result=` completed, `error=` failed;
    `kept`: until purged, else a minute after its end)."""
    task = record(tool=tool, app=app, retention_ms=None if kept else 60_000)
    await store.create(task)
    if end:
        await store.transition(task.task_id, "failed" if "error" in end else "completed", **end)
    return task.task_id


async def got(store: Any, task_id: str) -> TaskRecord:
    task = await store.get(task_id)
    assert task is not None
    return task


def lines(out: str) -> dict[str, str]:
    """Printed `ID  what` lines by id."""
    return {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines() if "  " in line}


# --- cancel and purge ----------------------------------------------------------------------


async def test_cancel_by_id_in_the_store(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryTaskStore()
    active = await made(store)
    done = await made(store, result={"content": []})
    assert await run(store, "cancel", active, done, "no-such-task") == 1  # one was missing
    out = capsys.readouterr().out
    said = lines(out)
    assert said[active] == "cancel requested" and said[done] == "already finished (completed)"
    assert said["no-such-task"] == "not found"
    assert out.endswith("1 task was asked to stop; 1 already finished; 1 not found.\n")
    assert (await got(store, active)).cancel_requested
    assert not (await got(store, done)).cancel_requested
    (event,) = await store.events(active)
    assert (event.kind, event.details) == ("cancel_requested", {"by": "operator", "who": "cli"})
    (entry,) = await store.audit()
    assert (entry.actor, entry.action, entry.count) == ("cli", "cancel", 1)
    assert entry.details["selected"] == 3 and entry.details["host"] == socket.gethostname()


async def test_bulk_cancel_acts_on_exactly_the_previewed_tasks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryTaskStore()
    chosen = [await made(store) for _ in range(3)]
    other_tool = await made(store, "deploy")
    other_app = await made(store, app="blog")
    finished = await made(store, result={"content": []})
    late: list[str] = []

    async def yes_after_a_new_match(question: str, would: str) -> bool:
        assert question == "Cancel these 3 tasks?"
        assert would == "cancel would cancel 3 tasks"
        late.append(await made(store))  # matches the filter, after the preview
        return True

    argv = ("cancel", "--all-matching", "--tool", "build", "--app", "shop")
    assert await run(store, *argv, prompt=yes_after_a_new_match) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 tasks match, newest first:\n")
    assert set(lines(out)) - {"TASK"} == set(chosen)
    assert out.rstrip().endswith("Cancel requested for 3 tasks.")
    for task_id in chosen:
        assert (await got(store, task_id)).cancel_requested
    for task_id in (*late, other_tool, other_app, finished):
        assert not (await got(store, task_id)).cancel_requested
    (entry,) = await store.audit()
    assert entry.count == 3 and entry.details["filter"]["tool"] == "build"
    assert entry.details["filter"]["outcomes"] == ["input_required", "working"]


async def test_a_preview_alone_or_declined_changes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryTaskStore()
    ids = [await made(store) for _ in range(12)]

    async def no(question: str, would: str) -> bool:
        return False

    assert await run(store, "cancel", "--all-matching", "--dry-run", "--status", "active") == 0
    dry = capsys.readouterr().out
    assert dry.startswith("12 tasks match, newest first:\n") and "... and 2 more" in dry
    assert dry.rstrip().endswith("Dry run: nothing cancelled.")
    assert await run(store, "cancel", "--all-matching", prompt=no) == 0
    assert capsys.readouterr().out.rstrip().endswith("Nothing cancelled.")
    assert not any([(await got(store, task_id)).cancel_requested for task_id in ids])
    assert await store.audit() == []
    assert await run(store, "cancel", "--all-matching", "--tool", "nothing") == 0
    assert capsys.readouterr().out == "No tasks match.\n"


async def test_a_selection_says_when_it_was_cut(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryTaskStore()
    ids = [await made(store) for _ in range(3)]
    monkeypatch.setattr(actions, "MAX_SELECTION", 2)
    assert await run(store, "cancel", "--all-matching", "--yes") == 0
    out = capsys.readouterr().out
    assert "More tasks match than one command acts on (2): these are the newest" in out
    assert [(await got(store, i)).cancel_requested for i in ids] == [False, True, True]


async def test_purge_by_filter_finds_tool_errors(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryTaskStore()
    bad = await made(store, "x", result=ERROR_RESULT)
    good = await made(store, "x", result={"content": []})
    crashed = await made(store, "x", error={"code": -32603, "message": "boom"})
    other = await made(store, "y", result=ERROR_RESULT)
    active = await made(store, "x")
    assert await run(store, "purge", "--status", "error", "--tool", "x", "--yes") == 0
    out = capsys.readouterr().out
    assert out.startswith("1 task matches, newest first:\n")
    assert lines(out)[bad].split()[:2] == ["error", "x"]
    assert out.rstrip().endswith("Removed 1 task.")
    assert await store.get(bad) is None
    for kept in (good, crashed, other, active):
        assert await store.get(kept) is not None
    (entry,) = await store.audit()
    assert (entry.action, entry.count, entry.details["filter"]["outcomes"]) == (
        "purge",
        1,
        ["error"],
    )
    with pytest.raises(OperatorError, match="purge acts on finished tasks only, not working"):
        await run(store, "purge", "--status", "working", "--yes")


async def test_purge_by_filter_and_age_uses_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryTaskStore()
    old = await made(store, kept=True, result={"content": []})
    store._tasks[old].terminal_at = time.time() - 3 * 86_400  # ended three days ago
    recent = await made(store, result={"content": []})
    assert await run(store, "purge", "--tool", "build", "--older-than", "2d", "--yes") == 0
    assert capsys.readouterr().out.rstrip().endswith("Removed 1 task.")
    assert await store.get(old) is None and await store.get(recent) is not None


async def test_purge_by_id_never_removes_an_active_task(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryTaskStore()
    done = await made(store, error={"code": 1, "message": "x"})
    active = await made(store)
    assert await run(store, "purge", done, active, "gone-task") == 1
    out = capsys.readouterr().out
    said = lines(out)
    assert said[done] == "removed" and said["gone-task"] == "not found"
    assert said[active] == "still working: not purged"
    assert await store.get(done) is None and await store.get(active) is not None


# --- pause, resume, paused ---------------------------------------------------------------


def worker(worker_id: str, app: str | None, **fields: Any) -> WorkerInfo:
    values: dict[str, Any] = {
        "worker_id": worker_id,
        "app": app,
        "host": "box",
        "pid": 4242,
        "version": "1.2.3",
        "concurrency": 8,
        "tools": ("build", "deploy"),
        "running": 2,
        "started_at": time.time() - 600,
        "last_seen": time.time(),
        "interval": 5.0,
    }
    values.update(fields)
    return WorkerInfo(**values)


async def test_pause_resume_and_paused(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryTaskStore()
    await store.beat(worker("w1", "shop"))
    assert await run(store, "pause", "build") == 0  # the one app its workers run
    assert capsys.readouterr().out == (
        "Paused build of app shop: new runs wait until `fastmcp-tasks resume build --app shop`.\n"
    )
    assert await run(store, "pause", "build") == 0
    assert "build of app shop was already paused (since " in capsys.readouterr().out
    assert await run(store, "paused", "--json") == 0
    (pause,) = json.loads(capsys.readouterr().out)
    assert (pause["app"], pause["tool"], pause["by"]) == ("shop", "build", "cli")
    assert await run(store, "paused") == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["APP", "TOOL", "SINCE", "BY"]
    assert listed[1].split()[:2] == ["shop", "build"] and listed[1].endswith("cli")
    held = await made(store)
    assert await store.claim(held, "w1", time.time() + 30) is not None
    assert await store.hold_paused(held, "w1", "paused") is not None
    assert await run(store, "resume", "build") == 0
    assert capsys.readouterr().out == "Resumed build of app shop: released 1 held task.\n"
    with pytest.raises(OperatorError, match="build of app shop is not paused") as refused:
        await run(store, "resume", "build")
    assert refused.value.status == 1
    actions_done = [(e.action, e.details.get("released")) for e in await store.audit()]
    assert actions_done == [("resume", 1), ("pause", None)]


async def test_pause_names_the_app_unless_the_workers_tell(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryTaskStore()
    with pytest.raises(OperatorError, match="no worker has reported") as none:
        await run(store, "pause", "build")
    assert none.value.status == 2
    await store.beat(worker("w1", "shop"))
    await store.beat(worker("w2", None))
    with pytest.raises(OperatorError, match=r"its workers run '', 'shop'"):
        await run(store, "pause", "build")
    assert await run(store, "pause", "build", "--app", "") == 0
    assert capsys.readouterr().out.startswith("Paused build of tasks without an app: ")
    assert await run(store, "resume", "build") == 0  # the one app `build` is paused for
    assert capsys.readouterr().out.startswith("Resumed build of tasks without an app")
    assert await run(store, "pause", "bulid", "--app", "shop") == 0
    assert "no worker of app shop lists a tool named 'bulid'" in capsys.readouterr().err


# --- workers and audit -------------------------------------------------------------------


async def test_workers_lists_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryTaskStore()
    now = time.time()
    await store.beat(worker("box:1:alive", "shop"))
    await store.beat(worker("box:2:gone", "shop", last_seen=now - 120))
    await store.beat(worker("box:3:bye", "shop", stopped=True))
    assert await run(store, "workers") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "WORKER", "APP", "HOST", "PID", "VERSION", "RUNNING", "TOOLS", "STARTED", "LAST",
        "SEEN", "STATE",
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in out[1:-1]}
    assert rows["box:1:alive"].split()[1:6] == ["shop", "box", "4242", "1.2.3", "2/8"]
    assert "build, deploy" in rows["box:1:alive"] and "10m ago" in rows["box:1:alive"]
    assert [rows[w].split()[-1] for w in ("box:1:alive", "box:2:gone", "box:3:bye")] == [
        "alive",
        "gone",
        "stopped",
    ]
    assert "2m ago" in rows["box:2:gone"]
    assert out[-1] == "3 workers: 1 alive, 1 gone, 1 stopped"
    assert await run(store, "workers", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(w["worker_id"], w["state"]) for w in listed] == [
        ("box:1:alive", "alive"),
        ("box:2:gone", "gone"),
        ("box:3:bye", "stopped"),
    ]
    assert listed[0]["tools"] == ["build", "deploy"] and listed[0]["concurrency"] == 8


async def test_audit_lists_the_actions_newest_first(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryTaskStore()
    assert await run(store, "audit") == 0
    assert capsys.readouterr().out == "No operator action is recorded.\n"
    task_id = await made(store)
    assert await run(store, "pause", "build", "--app", "shop") == 0
    assert await run(store, "cancel", task_id) == 0
    capsys.readouterr()
    assert await run(store, "audit", "--limit", "1") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["TIME", "ACTOR", "ACTION", "COUNT", "DETAILS"]
    assert f"cli ({socket.gethostname()}" not in out[1] or "@" in out[1]
    assert " cancel " in out[1] and f'ids=["{task_id}"]' in out[1]
    assert out[-1] == "1 entry, newest first (the --limit; there may be more)"
    assert await run(store, "audit", "--json") == 0
    entries = json.loads(capsys.readouterr().out)
    assert [(e["actor"], e["action"], e["count"]) for e in entries] == [
        ("cli", "cancel", 1),
        ("cli", "pause", 1),
    ]
    assert entries[1]["details"]["tool"] == "build"
    with pytest.raises(OperatorError, match=r"--limit must be 1\.\.10000"):
        await run(store, "audit", "--limit", "0")


# --- show's history ------------------------------------------------------------------------


async def test_show_prints_the_history_and_exports_it(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryTaskStore()
    task_id = await made(store, result=ERROR_RESULT)
    at = (await got(store, task_id)).created_at
    history = [
        TaskEvent(at, "created", {"app": "shop", "owner": None, "by": "front", "queued": True}),
        TaskEvent(at + 1, "taken", {"worker": "box:1:a"}),
        TaskEvent(at + 1.5, "started", {"worker": "box:1:a", "attempt": 1}),
        TaskEvent(at + 2, "message", {"message": "step 1/3"}),
        TaskEvent(at + 3, "cancel_requested", {"by": "operator", "who": "cli"}),
        TaskEvent(at + 4, "finished", {"outcome": "error", "message": "bad input", "x": 1}),
    ]
    await store.add_events([(task_id, event) for event in history])
    assert await _show(store, task_id, False, "memory://") == 0
    out = capsys.readouterr().out
    shown = out[out.index("History") :].splitlines()
    assert len(shown) == 6
    words = [  # the dashboard's words (dashboard.history.describe)
        "Created · app shop · by front · queued for a worker",
        "Taken by a worker · worker box:1:a",
        "Run started · attempt 1 · on worker box:1:a",
        "Status message · step 1/3",
        "Cancel requested · by an operator (cli)",
        "Finished: tool error · bad input",
    ]
    assert all(line.endswith(f"  {said}") for line, said in zip(shown, words, strict=True))
    assert await _show(store, task_id, True, "memory://") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["task_id"] == task_id and document["status"] == "completed"
    assert document["outcome"] == "error" and document["result"] == ERROR_RESULT
    assert document["history"] == [event.to_json() for event in history]


# --- a store that keeps no operator records -------------------------------------------------


class PlainStore:
    """A third party's listable store that keeps no operator records."""

    scheme = "plain"
    durable = True

    def __init__(self) -> None:
        self._inner = MemoryTaskStore()

    def __getattr__(self, name: str) -> Any:
        if name in OPERATIONS:
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.mark.parametrize(
    ("argv", "needs"),
    [
        (["pause", "build", "--app", "a"], "Pausing a tool"),
        (["resume", "build", "--app", "a"], "Resuming a tool"),
        (["paused"], "Listing paused tools"),
        (["workers"], "Listing workers"),
        (["audit"], "Reading the audit log"),
        (["purge", "some-task"], "Purging chosen tasks"),
        (["purge", "--status", "failed", "--yes"], "Purging chosen tasks"),
    ],
)
async def test_without_operator_records_the_rest_is_refused(argv: list[str], needs: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{needs} needs a store that keeps operator "):
        await run(PlainStore(), *argv)


async def test_without_operator_records_cancel_show_and_purge_by_age_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = PlainStore()
    active = await made(store)
    done = await made(store, result={"content": []})
    assert await run(store, "cancel", active) == 0
    ended = await got(store, active)  # nobody ran it: it ends at once, as tasks/cancel does
    assert ended.cancel_requested and ended.status == "cancelled"
    assert ended.status_message == "Cancelled by an operator (cli)"
    capsys.readouterr()
    assert await _show(store, active, True, "plain://") == 0
    assert json.loads(capsys.readouterr().out)["history"] is None
    assert await run(store, "purge", "--older-than", "0s", "--yes") == 0
    assert capsys.readouterr().out.startswith("Removed 2 finished tasks that ended before ")
    assert await store.get(done) is None


# --- usage -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cancel", "t1", "--all-matching"], "give task ids or --all-matching, not both"),
        (["cancel", "--tool", "x"], "filters choose tasks with --all-matching"),
        (["cancel"], "give the TASK_IDs to cancel, or --all-matching FILTERS"),
        (["cancel", "t1", "--token", "x"], "--token and --header apply to a SERVER only"),
        (["purge"], "say what to purge: --older-than AGE, filters"),
        (["purge", "t1", "--tool", "x"], "give task ids or filters, not both"),
    ],
)
def test_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(OperatorError, match=message) as refused:
        prepare(parse(*argv, "--url", "sqlite:///tasks.db"))
    assert refused.value.status == 2


def test_cancel_goes_through_a_server_or_to_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FASTMCP_TASKS_URL", raising=False)
    server = prepare(parse("cancel", "http://127.0.0.1:8000/mcp", "t1", "--token", "k"))
    assert server is not None
    assert (server.server, server.task_id, server.token) == ("http://127.0.0.1:8000/mcp", "t1", "k")
    file = prepare(parse("cancel", "tests/cli_server.py", "t1"))
    assert file is not None and file.server == "tests/cli_server.py"
    by_url = prepare(parse("cancel", "--url", "https://example.com/mcp", "t1"))
    assert by_url is not None and by_url.server == "https://example.com/mcp"
    store = parse("cancel", "sqlite:///tasks.db", "t1", "t2")
    assert prepare(store) is None and (store.url, store.task_ids) == (
        "sqlite:///tasks.db",
        ["t1", "t2"],
    )
    monkeypatch.setenv("FASTMCP_TASKS_URL", "redis://127.0.0.1/0")
    env = parse("cancel", "t1")
    assert prepare(env) is None and env.url == "redis://127.0.0.1/0"
    for argv, message in (
        (["http://h/mcp", "t1", "--all-matching"], "act on a task store"),
        (["http://h/mcp", "t1", "t2"], "through a server, cancel one task"),
        (["sqlite:///a.db", "t1", "--url", "sqlite:///b.db"], "or --url, not both"),
        (["redis://:s3cret@h/0", "t1", "--url", "redis://h/1"], r"'redis://:\*\*\*@h/0' or"),
    ):
        with pytest.raises(OperatorError, match=message):
            prepare(parse("cancel", *argv))
    monkeypatch.delenv("FASTMCP_TASKS_URL")
    with pytest.raises(OperatorError, match="say where the task is"):
        prepare(parse("cancel", "t1"))
