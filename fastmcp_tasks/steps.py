"""`step()`: durable steps inside a task, replayed when the task runs again.

    @mcp.tool(task=True)
    @task_options(resumable=True)
    async def migrate(tables: list[str]) -> str:
        total = 0
        for t in tables:
            total += await step(f"copy:{t}", copy_table, t)
        return f"{total} rows"

Inside a running task, `await step(name, fn, *args, **kwargs)` runs `fn(*args, **kwargs)`
(awaited when it is a coroutine function or returns an awaitable), records its result
as JSON under `name` with the task (`stores.steps`), and returns it. When the task runs
again (its process died and the tool is `resumable`, another worker took it over, a
`Retry` attempt) a step recorded by an earlier run is not run: its recorded result is
returned. Retries keep the steps: a failed attempt resumes at the step that failed.

- The value returned is always `json.loads` of the recorded JSON, on the first run too,
  so both runs see the same thing (a tuple comes back as a list, a dict's keys as
  strings). A result that is not JSON (a set, an object, NaN) raises `TypeError`
  naming the step, and nothing is recorded.
- `fn` raising records nothing; the exception propagates unchanged and the name may
  be used again in the same run (a tool that retries a step itself).
- Names are 1 to `MAX_STEP_NAME` characters, unique within one run (`ValueError`).
- Past a per-task bound (`stores.steps`: `MAX_STEPS`, `MAX_STEP_BYTES`,
  `MAX_STEPS_BYTES`) `StepNotRecorded` (a `StepLimitExceeded`, and a `ToolError`, so
  the caller reads why even where a server masks error details) is raised.
- Outside a task (a synchronous `tools/call`, plain code) it just calls `fn`. On a store
  without durable steps it calls `fn` and records nothing (a warning, once per process).

A step's `fn` may use the task's `ctx` (`ctx.elicit()`, progress): an answer it returns
is recorded with the step, so a resumed run does not ask again.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from fastmcp.exceptions import ToolError

from fastmcp_tasks.errors import StepLimitExceeded
from fastmcp_tasks.server.engine.context import current_task
from fastmcp_tasks.stores import steps as step_limits
from fastmcp_tasks.stores.steps import StepRecord


class StepNotRecorded(StepLimitExceeded, ToolError):
    """`step()` could not record a step: the task reached a bound on its steps."""


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


def _check_name(name: str) -> None:
    if not 1 <= len(name) <= step_limits.MAX_STEP_NAME:
        raise ValueError(
            f"a step name must be 1 to {step_limits.MAX_STEP_NAME} characters, "
            f"got {len(name)}: {name[:40]!r}"
        )


def _encode(name: str, value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"step {name!r} returned a {type(value).__name__} that is not JSON "
            f"({exc}); a step's result must be JSON (dicts, lists, str, numbers, "
            "bool, None), so it was not recorded"
        ) from exc


async def step(name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run `fn(*args, **kwargs)` as the durable step `name` of the running task (module
    docstring): recorded once, replayed by a later run of the same task."""
    if not isinstance(name, str):
        raise TypeError(f"a step name must be a str, got {type(name).__name__}")
    running = current_task()
    if running is None:  # not inside a task: nothing to record
        return await _call(fn, args, kwargs)
    _check_name(name)
    steps = running.steps
    store = steps.store(running.store)
    if store is None:
        return await _call(fn, args, kwargs)
    steps.claim(name)
    try:
        recorded = await steps.recorded(store, running.task_id)
        found = recorded.get(name)
        if found is not None:
            return json.loads(found.value_json)
        encoded = _encode(name, await _call(fn, args, kwargs))
        at = time.time()
        try:
            saved = await store.save_step(running.task_id, name, encoded, at)
        except StepLimitExceeded as exc:
            raise StepNotRecorded(f"Step {name!r} was not recorded: {exc}") from exc
    except BaseException:
        steps.release(name)
        raise
    if saved:
        steps.add(StepRecord(name, encoded, at))
    return json.loads(encoded)


__all__ = ["StepNotRecorded", "step"]
