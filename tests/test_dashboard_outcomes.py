"""Tool errors are errors: a task `completed` with an `isError` result, in the operator views.

The rule (`stores.outcomes`) on records; the dashboard's summaries, index, filters,
counts and statistics on every store (memory, a SQLite file, Redis, PostgreSQL: the last
two skip loudly without a server and fail when `CI=true`) with tool errors written
through the store API; and, through the dashboard's HTTP routes, tasks a real FastMCP
server ended (a `ToolError`, a masked `ValueError`) on a SQLite file: the MCP wire still
says `completed`, the dashboard says `error`. Also the arguments of a task on its page
and in its JSON.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from fastmcp_tasks import MemoryTaskStore, TaskRecord
from fastmcp_tasks.dashboard import app as dashboard_app
from fastmcp_tasks.dashboard import stats
from fastmcp_tasks.dashboard.charts import throughput_chart
from fastmcp_tasks.dashboard.index import TaskIndex, TaskQuery, TaskSummary
from fastmcp_tasks.dashboard.summary import TEXT_LIMIT
from fastmcp_tasks.stores.outcomes import (
    OUTCOMES,
    outcome_of,
    split_needed,
    store_statuses,
    tool_error_text,
)
from tests.servers import make_server
from tests.test_dashboard_data import WEEK_MS, everything, ids, record, store  # noqa: F401
from tests.test_dashboard_http import client_of, loaded
from tests.wire import memory_wire

pytestmark = pytest.mark.anyio


def result(text: str | None = "went wrong", *, is_error: Any = True) -> str:
    content = [] if text is None else [{"type": "text", "text": text}]
    document: dict[str, Any] = {"content": content}
    if is_error is not None:
        document["isError"] = is_error
    return json.dumps(document, separators=(",", ":"))


def ended(status: str, *, result_json: str | None = None, **fields: Any) -> TaskRecord:
    task = record(retention_ms=WEEK_MS, **fields)
    task.status = status  # type: ignore[assignment]
    task.terminal_at = task.updated_at
    task.result_json = result_json
    return task


# --- the rule ------------------------------------------------------------------------------


def test_a_tool_error_is_a_completed_task_whose_stored_result_is_an_error() -> None:
    image = {"type": "image", "data": "AA==", "mimeType": "image/png"}
    second_text = json.dumps({"content": [image, {"type": "text", "text": "bad"}], "isError": True})
    cases: list[tuple[TaskRecord, str | None]] = [
        (ended("completed", result_json=result("quota exceeded")), "quota exceeded"),
        (ended("completed", result_json=second_text), "bad"),  # the first *text* block
        (ended("completed", result_json=result(None)), ""),  # an error result without text
        (ended("completed", result_json=result("fine", is_error=False)), None),
        (ended("completed", result_json=result("fine", is_error=None)), None),
        (ended("completed", result_json=result("x", is_error="true")), None),  # not `true`
        # the words in a text, or a nested key, are not the result's own `isError`
        (ended("completed", result_json=result('{"isError": true}', is_error=None)), None),
        (
            ended("completed", result_json=json.dumps({"content": [], "x": {"isError": True}})),
            None,
        ),
        (ended("failed", error={"code": -32603, "message": "boom"}), None),
        (ended("cancelled"), None),
        (record(status_message="isError: true"), None),  # a message is never read
    ]
    for task, expected in cases:
        assert tool_error_text(task) == expected, task.result_json
        assert outcome_of(task) == ("error" if expected is not None else task.status)
    assert store_statuses(frozenset({"error"})) == {"completed"}
    assert store_statuses(frozenset({"error", "failed"})) == {"completed", "failed"}
    assert split_needed(frozenset({"completed"})) and split_needed(frozenset({"error"}))
    assert not split_needed(frozenset({"completed", "error"})) and not split_needed(None)
    assert not split_needed(frozenset({"failed", "working"}))


def test_the_summary_keeps_the_error_text_and_says_error() -> None:
    task = ended("completed", result_json=result("y" * 900), tool="charge")
    summary = TaskSummary.of(task)
    now = time.time()
    assert summary.is_error and summary.outcome == "error" and summary.status == "completed"
    assert summary.tool_error is not None and len(summary.tool_error) == TEXT_LIMIT  # cut
    assert summary.state_at(now) == "error"
    shown = summary.to_json(now)
    assert (shown["status"], shown["outcome"], shown["state"]) == ("completed", "error", "error")
    assert shown["is_error"] is True and shown["error"] == summary.tool_error
    clean = TaskSummary.of(ended("completed", result_json=result("ok", is_error=False)))
    assert not clean.is_error and clean.state_at(now) == "completed"
    assert clean.to_json(now)["is_error"] is False
    assert TaskQuery(status=frozenset({"completed"})).matches(clean)
    assert not TaskQuery(status=frozenset({"completed"})).matches(summary)
    assert TaskQuery.from_params({"status": "error"}).matches(summary)
    assert TaskQuery.from_params({"status": "finished"}).matches(summary)
    assert TaskQuery.from_params({"status": "error"}).params() == {"status": "error"}


# --- the index on every store ------------------------------------------------------------


async def mixed(target: Any) -> dict[str, list[str]]:
    """Tasks of two tools in every outcome, made through the store API; ids by outcome."""
    made: dict[str, list[str]] = {outcome: [] for outcome in OUTCOMES}
    base = time.time() - 100
    for i in range(18):
        task = record(tool=("alpha", "beta")[i % 2], retention_ms=WEEK_MS)
        task.created_at = task.updated_at = base + i
        await target.create(task)
        kind = i % 6
        if kind == 1:
            await target.transition(task.task_id, "completed", result={"content": []})
            made["completed"].append(task.task_id)
        elif kind in (2, 3):
            bad = {"content": [{"type": "text", "text": f"bad input {i}"}], "isError": True}
            await target.transition(task.task_id, "completed", result=bad)
            made["error"].append(task.task_id)
        elif kind == 4:
            await target.transition(task.task_id, "failed", error={"code": 1, "message": "x"})
            made["failed"].append(task.task_id)
        else:
            made["working"].append(task.task_id)
    return made


async def test_the_index_filters_counts_and_pages_by_outcome(store: Any) -> None:  # noqa: F811
    made = await mixed(store)
    records = await everything(store)
    newest_first = ids(records)
    index = TaskIndex(store, page_size=5)
    loading = TaskIndex(store)  # not loaded: pages come straight from the store
    await index.load()
    for text, wanted in [
        ("error", {"error"}),
        ("completed", {"completed"}),
        ("finished", {"completed", "error", "failed"}),
        ("", set(OUTCOMES)),
    ]:
        expected = [i for i in newest_first if any(i in made[o] for o in wanted)]
        for limit in (2, 50):
            for source in (index, loading):
                query = TaskQuery.from_params({"status": text, "limit": str(limit)})
                seen: list[str] = []
                while True:
                    page = await source.page(query)
                    seen += ids(page.tasks)
                    if page.next_before is None:
                        break
                    query = TaskQuery(**{**query.__dict__, "before": page.next_before})
                assert seen == expected, (text, limit, source is index)
        first = await index.page(TaskQuery.from_params({"status": text}))
        assert first.matching == len(expected)
    error = TaskQuery.from_params({"status": "error", "tool": "alpha"})
    assert (await index.page(error)).matching == len(
        [i for i in made["error"] if index.get(i).tool == "alpha"]  # type: ignore[union-attr]
    )
    counts = index.counts()
    assert counts["error"] == len(made["error"]) == 6
    assert counts["completed"] == len(made["completed"]) == 3  # the clean successes only
    assert counts["failed"] == 3 and counts["working"] == 6
    shown = {s.task_id: s.state_at(time.time()) for s in index.summaries()}
    assert {shown[i] for i in made["error"]} == {"error"}
    assert {shown[i] for i in made["completed"]} == {"completed"}


async def test_failure_rates_and_the_chart_count_tool_errors() -> None:
    memory = MemoryTaskStore()
    await memory.open()
    now = float(int(time.time()))
    plan = [("ok", "pay"), ("ok", "pay"), ("error", "pay"), ("failed", "pay"), ("ok", "ship")]
    for i, (outcome, tool) in enumerate([*plan, ("working", "pay")]):
        task = record(tool=tool, retention_ms=WEEK_MS)
        task.created_at = task.updated_at = now - 600 + i
        if outcome != "working":
            task.terminal_at = task.updated_at = task.created_at + 10
            task.status = "failed" if outcome == "failed" else "completed"  # type: ignore[assignment]
            if outcome == "failed":
                task.error = {"code": -32603, "message": "down"}
            else:
                task.result_json = result("no", is_error=True if outcome == "error" else None)
        await memory.create(task)
    index = TaskIndex(memory, clock=lambda: now)
    await index.load()
    view = stats.overview(index, stats.BacklogSampler(), now)
    pay = next(t for t in view.tools if t.tool == "pay")
    assert (pay.count, pay.finished, pay.failed, pay.tool_errors) == (5, 4, 1, 1)
    assert pay.failure_rate == pytest.approx(2 / 4)
    ship = next(t for t in view.tools if t.tool == "ship")
    assert ship.failure_rate == 0.0 and ship.tool_errors == 0
    assert sum(b.failed for b in view.per_minute) == 2
    assert sum(b.finished for b in view.per_minute) == 5
    document = view.to_json()
    assert [t["tool_errors"] for t in document["tools"]] == [1, 0]
    assert sum(b["failed"] for b in document["per_bucket"]) == 2
    assert "(2 failed or ended with a tool error)" in throughput_chart(view)
    await memory.close()


# --- tasks a real server ended, through the dashboard's routes ------------------------------


async def test_a_real_tool_error_is_error_in_the_dashboard_and_completed_on_the_wire(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    server, probes = make_server(url=url)
    async with memory_wire(server) as wire:
        raised = (await wire.call_tool("tool_error"))["taskId"]
        masked = (await wire.call_tool("crash"))["taskId"]
        fine = (await wire.call_tool("echo", {"text": "fine"}))["taskId"]
        held = (await wire.call_tool("blocker", {"key": "args"}))["taskId"]
        for task_id in (raised, masked, fine):
            assert (await wire.wait(task_id))["status"] == "completed"  # the wire as it was
        await probes.event("started", "args").wait()
        async with client_of(dashboard_app(url)) as http:
            await loaded(http)
            errors = (await http.get("/api/tasks", params={"status": "error"})).json()
            assert sorted(t["id"] for t in errors["tasks"]) == sorted([raised, masked])
            assert errors["matching"] == 2
            by_id = {t["id"]: t for t in errors["tasks"]}
            assert by_id[raised]["state"] == "error" and by_id[raised]["is_error"] is True
            assert by_id[raised]["status"] == "completed"
            assert by_id[raised]["error"] == "the job could not finish"
            completed = (await http.get("/api/tasks", params={"status": "completed"})).json()
            assert [t["id"] for t in completed["tasks"]] == [fine]
            assert completed["tasks"][0]["is_error"] is False
            listing = (await http.get("/tasks", params={"status": "error"})).text
            assert f'data-task-id="{raised}" data-status="completed" data-outcome="error"' in (
                listing
            )
            assert '<span class="badge status-error">tool error</span>' in listing
            assert '<option value="error" selected>tool error</option>' in listing
            document = (await http.get(f"/api/tasks/{raised}")).json()
            assert document["status"] == "completed" and document["state"] == "error"
            assert document["outcome"] == "error" and document["is_error"] is True
            assert document["tool_error"] == "the job could not finish"
            page = (await http.get(f"/tasks/{raised}")).text
            assert 'data-outcome="error"' in page and "status-error" in page
            assert re.search(r'id="detail-tool-error">the job could not finish</pre>', page)
            with anyio.fail_after(10):  # the overview's pass is cached for a moment
                while True:
                    overview = (await http.get("/api/overview")).json()
                    tools = {t["tool"]: t for t in overview["tools"]}
                    if "crash" in tools and "tool_error" in tools:
                        break
                    await anyio.sleep(0.05)
            assert tools["tool_error"]["tool_errors"] == 1 and tools["tool_error"]["failed"] == 0
            assert tools["tool_error"]["failure_rate"] == 1.0
            assert tools["echo"]["failure_rate"] == 0.0
            assert overview["counts"]["error"] == 2 and overview["counts"]["completed"] == 1
            # the arguments of a task, pretty-printed on its page and whole in its JSON
            shown = (await http.get(f"/tasks/{held}")).text
            assert '<pre id="detail-arguments">{\n  &quot;key&quot;: &quot;args&quot;\n}</pre>' in (
                shown
            )
            assert (await http.get(f"/api/tasks/{held}")).json()["arguments"] == {"key": "args"}
        probes.event("release", "args").set()
        await wire.wait(held)


async def test_long_arguments_are_cut_with_a_control_showing_all() -> None:
    memory = MemoryTaskStore()
    await memory.open()
    task = record(arguments={"rows": [f"row-{n:04d}" for n in range(400)]})
    await memory.create(task)
    async with client_of(dashboard_app(memory)) as http:
        page = (await http.get(f"/tasks/{task.task_id}")).text
        shown = page.split('<pre id="detail-arguments">', 1)[1].split("</pre>", 1)[0]
        assert "row-0000" in shown and "row-0399" not in shown and "characters in all" in shown
        full = page.split('<details id="arguments-full">', 1)[1].split("</details>", 1)[0]
        assert "<summary>Show all arguments (" in full and "row-0399" in full
        assert (await http.get(f"/api/tasks/{task.task_id}")).json()["arguments"] == (
            task.arguments
        )
    await memory.close()
