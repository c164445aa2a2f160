"""A task's durable steps where operators look: `fastmcp-tasks show` and the dashboard.

`show` (run in this process on a memory store) lists each step's time, name and size,
never its value; `show --json` carries `steps: [{name, at, size}]`. The dashboard's task
page has a "Steps" section: the count and the last 50, escaped. A store without steps
shows none (`steps: null`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import pytest

from fastmcp_tasks import MemoryTaskStore
from fastmcp_tasks.cli.operator import _show
from fastmcp_tasks.dashboard import app as dashboard_app
from fastmcp_tasks.dashboard.history import describe
from fastmcp_tasks.stores.operations import TaskEvent
from fastmcp_tasks.testing import make_record
from tests.test_dashboard_http import client_of

pytestmark = pytest.mark.anyio

SECRET = "the step's value, never shown"


async def stepped_task(store: MemoryTaskStore, count: int, name: str = "copy:{i}") -> str:
    await store.open()
    task = make_record(tool="migrate", app="shop")
    await store.create(task)
    start = time.time() - count
    for i in range(count):
        value = json.dumps({"n": i, "secret": SECRET})
        assert await store.save_step(task.task_id, name.format(i=i), value, start + i)
    return task.task_id


async def test_show_lists_the_steps_without_their_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryTaskStore()
    task_id = await stepped_task(store, 3)
    with anyio.fail_after(10):
        assert await _show(store, task_id, as_json=True, where="memory") == 0
        document = json.loads(capsys.readouterr().out)
        assert await _show(store, task_id, as_json=False, where="memory") == 0
        text = capsys.readouterr().out
    size = len(json.dumps({"n": 0, "secret": SECRET}))
    assert [s["name"] for s in document["steps"]] == ["copy:0", "copy:1", "copy:2"]
    assert [s["size"] for s in document["steps"]] == [size] * 3
    assert all(isinstance(s["at"], float) for s in document["steps"])
    assert set(document["steps"][0]) == {"name", "at", "size"}
    assert SECRET not in json.dumps(document) and SECRET not in text
    assert "3 completed steps" in text
    for i in range(3):
        assert f"copy:{i} · {size} B" in text


async def test_show_says_nothing_of_steps_a_store_does_not_keep(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Stepless(MemoryTaskStore):
        steps = None  # type: ignore[assignment]

    store = Stepless()
    await store.open()
    task = make_record(tool="t")
    await store.create(task)
    with anyio.fail_after(10):
        assert await _show(store, task.task_id, as_json=True, where="memory") == 0
    assert json.loads(capsys.readouterr().out)["steps"] is None


async def test_show_lists_the_last_fifty_of_many(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryTaskStore()
    task_id = await stepped_task(store, 60)
    with anyio.fail_after(10):
        assert await _show(store, task_id, as_json=False, where="memory") == 0
    text = capsys.readouterr().out
    assert "60 completed steps (the last 50 below; --json has all)" in text
    assert "copy:9 ·" not in text and "copy:10 ·" in text and "copy:59 ·" in text


async def test_the_task_page_has_a_steps_section_escaped() -> None:
    store = MemoryTaskStore()
    task_id = await stepped_task(store, 55, name="<b>step</b> {i}")
    with anyio.fail_after(10):
        async with client_of(dashboard_app(store)) as http:
            page = (await http.get(f"/tasks/{task_id}")).text
    section = page[page.index('<section id="steps"') :]
    section = section[: section.index("</section>")]
    assert '<p id="steps-count">55 completed steps</p>' in section
    assert "The last 50 of 55 steps" in section
    assert section.count('<code class="step-name">') == 50
    assert "&lt;b&gt;step&lt;/b&gt; 54" in section and "<b>step" not in page
    assert "&lt;b&gt;step&lt;/b&gt; 4<" not in section  # the first five are not listed
    assert 'start="6"' in section
    assert SECRET not in page


async def test_a_task_without_steps_has_no_section() -> None:
    store = MemoryTaskStore()
    task_id = await stepped_task(store, 0)
    with anyio.fail_after(10):
        async with client_of(dashboard_app(store)) as http:
            page = (await http.get(f"/tasks/{task_id}")).text
    assert 'id="steps"' not in page


def test_the_resumed_event_in_words() -> None:
    event: Any = TaskEvent(time.time(), "resumed", {"steps": 3, "last": "copy:users"})
    assert describe(event, time.time()) == (
        "Resumed from its steps",
        "completed steps 3 · last copy:users",
    )
