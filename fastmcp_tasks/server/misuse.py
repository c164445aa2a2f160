"""Options that are legal but do nothing on this server: one warning each, at startup.

- `@task_options(...)` on a tool of the server's own that never runs as a task (its
  `@mcp.tool` has no `task=True`, nor does the server default tools to tasks): every
  option applies only to the tool's tasks, so none of them does anything.
- `task_options(dedupe=...)` on a server without authentication: dedupe tells callers
  apart by their principal, and without one a call always starts new work (handing one
  anonymous caller's task, whose id is its credential, to another would give its result
  away), so nothing is ever deduplicated.

`warn_about(server)` runs once per start of the extension (its lifespan) and logs each
as a WARNING through the logger `fastmcp_tasks.configuration`; the package reports
through logging and uses no `warnings`. It reads only what FastMCP's own startup reads,
never a proxy's remote server: the server's own tools (`local_provider`) for the first,
and its task tools (`get_tasks()`, mounted servers' included) for the second. Reading
them never stops startup: a failure is logged at DEBUG.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from fastmcp.tools.base import Tool

from fastmcp_tasks.server.options import NO_OPTIONS, TaskOptions, options_of
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.steps import stepped

logger = logging.getLogger("fastmcp_tasks.configuration")


def set_options(options: TaskOptions) -> list[str]:
    """The names of the options a tool's `task_options` sets (not left at their default)."""
    return [
        field.name
        for field in dataclasses.fields(options)
        if getattr(options, field.name) != getattr(NO_OPTIONS, field.name)
    ]


async def warn_about(server: Any, store: TaskStore | None = None) -> None:
    """Log a WARNING for each tool whose task options do nothing here (module doc)."""
    try:
        own = await server.local_provider.list_tools()
        tasks = [c for c in await server.get_tasks() if isinstance(c, Tool)]
    except Exception:  # a check, not a gate: never stop startup over it
        logger.debug("could not list the tools to check their task options", exc_info=True)
        return
    for name in sorted({t.name for t in own if t.task_config.mode == "forbidden"}):
        tool = next(t for t in own if t.name == name)
        if (options := options_of(tool)) is not NO_OPTIONS:
            logger.warning(
                "tool %r has task_options(%s), which apply only to its tasks, but it never "
                "runs as a task: add task=True to its @mcp.tool, or remove task_options",
                name,
                ", ".join(set_options(options)),
            )
    for name in sorted({t.name for t in tasks}):
        options = options_of(next(t for t in tasks if t.name == name))
        if options.resumable and store is not None and stepped(store) is None:
            logger.warning(
                "tool %r has task_options(resumable=True), but the %s store keeps no "
                "durable steps: step() records nothing there, so a crashed task runs again "
                "from the top: use a store that implements StepStore",
                name,
                getattr(store, "scheme", type(store).__name__),
            )
        if options.dedupe is not None and getattr(server, "auth", None) is None:
            logger.warning(
                "tool %r has task_options(dedupe=%gs), but this server has no "
                "authentication, so its calls are never deduplicated (dedupe tells callers "
                "apart by their principal; anonymous callers never share a task): configure "
                "FastMCP(auth=...)",
                name,
                options.dedupe.total_seconds(),
            )


__all__ = ["set_options", "warn_about"]
