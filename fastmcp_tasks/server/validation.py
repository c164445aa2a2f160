"""Checking a tool's arguments before a task is created for it.

A call with invalid arguments must be answered exactly as the synchronous path
answers it, and must not leave a task behind. The interceptor therefore asks
`arguments_valid()` first and, on `False`, hands the call to the synchronous
path, which produces the very error a blocking call gets. `task_arguments()` is the
whole check a task-creating call makes of its arguments, wherever it is answered (the
interceptor, `direct_calls`): encoded once, within `max_argument_bytes`, valid.

For a `FunctionTool` the check uses the same pydantic call adapter core builds
in `FunctionTool.run` (`_compat.call_adapter`, built once per tool here, cached
weakly), validating without starting the tool body: the adapter's call returns a
coroutine that is closed unawaited. Other tool types are not pre-checked; their
argument errors end the task `completed` with the same `isError` content a
blocking call gets. The check never raises into a call: `_compat.check_seams()`
refuses a FastMCP whose validation seams changed shape, and anything else the
pre-check trips over leaves the call to the task, whose run validates as core does.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from typing import Any

from fastmcp.tools.base import Tool
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from fastmcp_tasks import _compat
from fastmcp_tasks.errors import too_large
from fastmcp_tasks.server.limits import Limits
from fastmcp_tasks.stores.text import EncodedJSON, encoded

logger = logging.getLogger("fastmcp_tasks.validation")

# Tools are unhashable pydantic models: key by identity, and check the weak
# reference so a recycled id never returns another tool's adapter.
_adapters: dict[int, tuple[weakref.ref[Any], TypeAdapter[Any] | None]] = {}


def _adapter_for(tool: Any) -> TypeAdapter[Any] | None:
    cached = _adapters.get(id(tool))
    if cached is not None and cached[0]() is tool:
        return cached[1]
    adapter: TypeAdapter[Any] | None = None
    try:
        # Only an async wrapper can be validated without running the body.
        adapter = _compat.call_adapter(tool)
    except Exception:  # pragma: no cover - defensive: never block a call on the pre-check
        logger.debug("No argument pre-check for tool %r", tool.name, exc_info=True)
    key = id(tool)
    _adapters[key] = (weakref.ref(tool, lambda _: _adapters.pop(key, None)), adapter)
    return adapter


def arguments_valid(tool: Tool, arguments: dict[str, Any], *, strict: bool = False) -> bool:
    """False when the synchronous path would reject `arguments` before running the tool;
    with `strict`, also when the check trips over anything else (a validator that needs
    FastMCP's request context, say, which `direct_calls` does not make): the caller then
    leaves the call to the path that has it."""
    if not _compat.is_function_tool(tool):
        return True
    adapter = _adapter_for(tool)
    if adapter is None:
        return True
    try:
        pending = _compat.validate_input(adapter, arguments)
    except PydanticValidationError:
        return False
    except Exception:  # the seam misbehaves: let the task's run validate (fail safe)
        if strict:
            return False
        logger.warning("Argument pre-check for tool %r failed", tool.name, exc_info=True)
        return True
    if inspect.iscoroutine(pending):
        pending.close()
    return True


def task_arguments(
    limits: Limits, tool: Tool, raw: dict[str, Any] | None, *, strict: bool = False
) -> EncodedJSON | None:
    """A task's arguments, encoded once (sized, then stored), or `None` when they are
    invalid (the synchronous path reports them; no task is made), or with `strict` when
    the check could not tell (`arguments_valid`).

    Raises:
        MCPError: -32602 when they are over `max_argument_bytes`.
    """
    arguments = encoded(raw or {})
    if (over := limits.over("max_argument_bytes", arguments)) is not None:
        raise too_large("the arguments", "max_argument_bytes", *over)
    return arguments if arguments_valid(tool, arguments, strict=strict) else None
