"""Per-tool task options that `TaskConfig` (FastMCP core's) has no field for.

    @mcp.tool(task=True)
    @task_options(input_timeout=timedelta(minutes=10), foreground_input=ask_for_name)
    async def deploy(ctx: Context) -> str: ...

- `input_timeout`: how long the task waits for an answer to an input request
  before treating it as unanswered (an elicitation returns
  `CancelledElicitation`); overrides `TasksExtension(input_timeout=...)`.
  `None` waits for as long as the task lives.
- `foreground_input`: MRTR composition (C11). A guard
  `async (ctx, arguments) -> InputRequiredResult | None` run in the foreground
  on every `tools/call` of the tool before any task exists: while it returns an
  `InputRequiredResult`, the call answers `resultType: "input_required"` and the
  client retries with `inputResponses`; once it returns `None`, the call
  becomes a task (when the client opted in) and the task body reads that
  final round's answers from `ctx.input_responses`. Without it, a task that
  needs input parks in `input_required` instead.
- `needs_access_token`: the tool reads the caller's token imperatively
  (`get_access_token()`), so a run in a process that does not hold it (a
  worker, recovery) fails with a clear error instead of seeing `None`. Tools
  with a `CurrentAccessToken()` / `TokenClaim(...)` parameter or `auth=` are
  detected without it (`server.engine.caller`).

- `resumable`: the tool records its progress with `fastmcp_tasks.step()`, so a task
  whose process died is run again (recovery, `engine.leases`) as an idempotent tool's
  is, and replays the steps it completed instead of failing "interrupted". A `retry`
  attempt replays them too, with or without it.

- `concurrency`, `concurrency_key`, `dedupe`, `retry`: flow control (`server.flow`):
  at most N tasks of the tool (per key) at once across processes, identical calls
  answered by the task already doing the work, retries with backoff.

The decorator stores the options on the function and returns it unchanged,
so it goes below `@mcp.tool`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import mcp_types
from fastmcp.server.context import Context

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.server.durations import Duration, optional_duration
from fastmcp_tasks.server.flow import Retry, check_concurrency

Guard = Callable[[Context, dict[str, Any]], Awaitable[mcp_types.InputRequiredResult | None]]
F = TypeVar("F", bound=Callable[..., Any])

ATTRIBUTE = "__fastmcp_tasks_options__"
_UNSET: Any = object()


@dataclass(frozen=True)
class TaskOptions:
    """Options one tool sets with `task_options`."""

    input_timeout: timedelta | Any | None = _UNSET
    foreground_input: Guard | None = None
    needs_access_token: bool = False
    concurrency: int | None = None
    concurrency_key: Callable[[dict[str, Any]], Any] | None = None
    dedupe: timedelta | None = None
    retry: Retry | None = None
    resumable: bool = False

    @property
    def flow_controlled(self) -> bool:
        """Whether the tool's tasks need a store that keeps flow control."""
        return self.concurrency is not None or self.dedupe is not None or self.retry is not None

    def timeout_seconds(self, default: timedelta | None) -> float | None:
        """The input timeout in seconds for this tool, falling back to `default`."""
        value = default if self.input_timeout is _UNSET else self.input_timeout
        return None if value is None else max(0.0, value.total_seconds())


NO_OPTIONS = TaskOptions()


def task_options(
    *,
    input_timeout: Duration | Any | None = _UNSET,
    foreground_input: Guard | None = None,
    needs_access_token: bool = False,
    concurrency: int | None = None,
    concurrency_key: Callable[[dict[str, Any]], Any] | None = None,
    dedupe: Duration | None = None,
    retry: Retry | None = None,
    resumable: bool = False,
) -> Callable[[F], F]:
    """Attach task options to a tool function (apply below `@mcp.tool`); durations are a
    `timedelta` or plain seconds (`server.durations`)."""
    check_concurrency(concurrency, concurrency_key)
    dedupe = optional_duration("dedupe", dedupe, positive=True)
    if input_timeout is not _UNSET:
        input_timeout = optional_duration("input_timeout", input_timeout)
    if retry is not None and not isinstance(retry, Retry):
        raise ConfigurationError("retry must be a fastmcp_tasks.Retry")
    options = TaskOptions(
        input_timeout=input_timeout,
        foreground_input=foreground_input,
        needs_access_token=needs_access_token,
        concurrency=concurrency,
        concurrency_key=concurrency_key,
        dedupe=dedupe,
        retry=retry,
        resumable=bool(resumable),
    )

    def attach(fn: F) -> F:
        setattr(fn, ATTRIBUTE, options)
        return fn

    return attach


def options_of(tool: Any) -> TaskOptions:
    """The options a tool's function carries, or the defaults."""
    options = getattr(getattr(tool, "fn", None), ATTRIBUTE, None)
    return options if isinstance(options, TaskOptions) else NO_OPTIONS
