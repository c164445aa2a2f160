"""Configuration mistakes say what is wrong: durations, options that do nothing, hints.

- Every duration the package takes accepts a `timedelta` or plain seconds (`int` or
  `float`), normalized at construction; a bool, another type, NaN, an infinity or a
  negative value is refused with a `ConfigurationError` saying what it takes.
- Options that are legal but silently do nothing are warned about once, at startup.
- Errors a client or a user meets say what to do.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

from fastmcp_tasks import Retry, TasksExtension, _compat, task_options
from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.server.options import options_of
from fastmcp_tasks.stores.memory import MemoryTaskStore

pytestmark = pytest.mark.anyio


def _options(**kwargs: Any) -> Any:
    def tool() -> None: ...

    return options_of(type("T", (), {"fn": task_options(**kwargs)(tool)})())


#: parameter -> (build with a value, read back what it became, must it be positive).
DURATIONS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], bool]] = {
    "retention": (
        lambda v: TasksExtension(retention=v),
        lambda e: timedelta(milliseconds=e.retention_ms),
        False,
    ),
    "sweep_interval": (
        lambda v: TasksExtension(sweep_interval=v),
        lambda e: timedelta(seconds=e.sweep_interval),
        True,
    ),
    "input_timeout": (lambda v: TasksExtension(input_timeout=v), lambda e: e.input_timeout, False),
    "lease": (
        lambda v: TasksExtension(lease=v),
        lambda e: timedelta(seconds=e.lease_seconds),
        True,
    ),
    "shutdown_grace": (
        lambda v: TasksExtension(shutdown_grace=v),
        lambda e: timedelta(seconds=e.shutdown_grace),
        False,
    ),
    "store_timeout": (
        lambda v: TasksExtension(store_timeout=v),
        lambda e: timedelta(seconds=e.store_timeout),
        True,
    ),
    "tombstone_retention": (
        lambda v: TasksExtension(tombstone_retention=v),
        lambda e: e._config["tombstone_retention"],
        False,
    ),
    "worker_interval": (
        lambda v: TasksExtension(worker_interval=v),
        lambda e: timedelta(seconds=e.worker_interval),
        True,
    ),
    "task_options(dedupe=)": (lambda v: _options(dedupe=v), lambda o: o.dedupe, True),
    "task_options(input_timeout=)": (
        lambda v: _options(input_timeout=v),
        lambda o: o.input_timeout,
        False,
    ),
    "Retry(backoff=)": (lambda v: Retry(backoff=v), lambda r: r.backoff, False),
    "Retry(max_backoff=)": (lambda v: Retry(max_backoff=v), lambda r: r.max_backoff, False),
}


@pytest.mark.parametrize("parameter", DURATIONS)
def test_a_duration_takes_plain_seconds(parameter: str) -> None:
    build, read, _ = DURATIONS[parameter]
    assert read(build(90)) == timedelta(seconds=90)
    assert read(build(2.5)) == timedelta(seconds=2.5)
    assert read(build(timedelta(minutes=3))) == timedelta(minutes=3)


@pytest.mark.parametrize("parameter", DURATIONS)
def test_a_duration_refuses_what_is_not_one(parameter: str) -> None:
    build, _, positive = DURATIONS[parameter]
    # as the user wrote it: `retention`, `dedupe` (of task_options), `Retry(backoff=)`
    name = parameter if parameter.startswith("Retry") else parameter.split("(")[-1].rstrip("=)")
    for value in (True, "5m", math.nan, math.inf):
        with pytest.raises(ConfigurationError) as info:
            build(value)
        assert str(info.value) == (
            f"{name} takes a timedelta or a number of seconds, got {value!r}"
        ), value
    for value, shown in ((-5, "-5"), (timedelta(seconds=-1), "timedelta(seconds=-1)")):
        with pytest.raises(ConfigurationError) as info:
            build(value)
        assert str(info.value) == (
            f"{name} must be positive: a timedelta or a number of seconds above 0, got {shown}"
            if positive
            else f"{name} must not be negative: a timedelta or a number of seconds, got {shown}"
        )
    with pytest.raises(ConfigurationError) as info:
        build(1e300)
    assert str(info.value) == f"{name} is longer than a timedelta can be: 1e+300"
    if positive:
        with pytest.raises(ConfigurationError) as info:
            build(0)
        assert str(info.value) == (
            f"{name} must be positive: a timedelta or a number of seconds above 0, got 0"
        )
    else:
        build(0)


def test_what_the_plain_seconds_do() -> None:
    extension = TasksExtension(retention=3600, lease=2, store_timeout=1.5, input_timeout=5)
    assert extension.retention_ms == 3_600_000 and extension.lease_seconds == 2.0
    assert extension.store_timeout == 1.5
    assert _options(input_timeout=5).timeout_seconds(None) == 5.0
    assert _options().timeout_seconds(extension.input_timeout) == 5.0
    assert Retry(backoff=1, max_backoff=3, jitter=False).delay(3) == 3.0
    assert extension.clone().retention_ms == 3_600_000  # a clone takes the same arguments
    assert TasksExtension(retention=None).retention_ms is None  # None still means "no limit"
    assert TasksExtension(store_timeout=None).store_timeout is None


# --- options that do nothing: warned once at startup --------------------------------------


def _server(auth: Any = None) -> FastMCP:
    mcp = FastMCP("misused", auth=auth)
    mcp.add_extension(TasksExtension())

    @mcp.tool  # no task=True: its task_options can never apply
    @task_options(concurrency=1, retry=Retry(attempts=2))
    async def not_a_task(x: int) -> int:
        return x

    @mcp.tool(task=True)
    @task_options(dedupe=300)
    async def deduped(x: int) -> int:
        return x

    @mcp.tool(task=True)
    @task_options(concurrency=2)
    async def fine(x: int) -> int:
        return x

    child = FastMCP("child")

    @child.tool(task=True)
    @task_options(dedupe=timedelta(minutes=1))
    async def nested(x: int) -> int:
        return x

    @child.tool  # not checked: a mounted server's own tools are its own extension's concern
    @task_options(input_timeout=60)
    async def nested_plain(x: int) -> int:
        return x

    mcp.mount(child, namespace="child")
    return mcp


async def test_options_that_do_nothing_are_warned_about_once_at_startup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="fastmcp_tasks")
    mcp = _server()
    async with _compat.server_lifespan(mcp):
        pass
    warned = [r.getMessage() for r in caplog.records if r.name == "fastmcp_tasks.configuration"]
    assert sorted(warned) == [
        "tool 'child_nested' has task_options(dedupe=60s), but this server has no "
        "authentication, so its calls are never deduplicated (dedupe tells callers apart by "
        "their principal; anonymous callers never share a task): configure FastMCP(auth=...)",
        "tool 'deduped' has task_options(dedupe=300s), but this server has no "
        "authentication, so its calls are never deduplicated (dedupe tells callers apart by "
        "their principal; anonymous callers never share a task): configure FastMCP(auth=...)",
        "tool 'not_a_task' has task_options(concurrency, retry), which apply only to its "
        "tasks, but it never runs as a task: add task=True to its @mcp.tool, or remove "
        "task_options",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)


async def test_dedupe_on_an_authenticated_server_is_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="fastmcp_tasks")
    mcp = _server(auth=StaticTokenVerifier(tokens={"t": {"client_id": "c", "scopes": []}}))
    async with _compat.server_lifespan(mcp):
        pass
    warned = [r.getMessage() for r in caplog.records if r.name == "fastmcp_tasks.configuration"]
    assert [w.split(" has ")[0] for w in warned] == ["tool 'not_a_task'"]


async def test_resumable_on_a_store_without_steps_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class NoSteps(MemoryTaskStore):
        """A store of one's own that keeps no durable steps."""

        save_step = None  # type: ignore[assignment]  # (blocks the StepStore protocol)

    caplog.set_level(logging.WARNING, logger="fastmcp_tasks")
    for store, warned_of in ((NoSteps(), ["tool 'migrate'"]), (MemoryTaskStore(), [])):
        caplog.clear()
        mcp = FastMCP("resumable")
        mcp.add_extension(TasksExtension(store=store))

        @mcp.tool(task=True)
        @task_options(resumable=True)
        async def migrate(x: int) -> int:
            return x

        async with _compat.server_lifespan(mcp):
            pass
        warned = [r.getMessage() for r in caplog.records if r.name == "fastmcp_tasks.configuration"]
        assert [w.split(" has ")[0] for w in warned] == warned_of
        assert all("keeps no durable steps" in w for w in warned)


# --- hints --------------------------------------------------------------------------------


def test_ls_of_the_memory_store_names_every_shared_store() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastmcp_tasks", "ls", "--url", "memory://"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "fastmcp-tasks: memory:// keeps tasks inside one server process, so no other process "
        "can see them: give the server's shared store (sqlite:///..., redis://... or "
        "postgresql://...)\n"
    )


def test_a_front_end_on_the_memory_store_names_every_shared_store() -> None:
    with pytest.raises(ConfigurationError) as info:
        TasksExtension(concurrency=0)
    assert str(info.value) == (
        "concurrency=0 runs nothing in this process, and memory:// is not shared with other "
        "processes: use a durable store (sqlite:///..., redis://... or postgresql://...)"
    )
