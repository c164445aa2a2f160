"""Checking a tool's arguments before a task is created for it.

A call with invalid arguments must be answered exactly as the synchronous path
answers it, and must not leave a task behind. The interceptor therefore asks
`arguments_valid()` first and, on `False`, hands the call to the synchronous
path, which produces the very error a blocking call gets.

For a `FunctionTool` the check uses the same pydantic call adapter core builds
in `FunctionTool.run` (built once per tool here, cached weakly), validating
without starting the tool body: the adapter's call returns a coroutine that is
closed unawaited. Other tool types are not pre-checked; their argument errors
end the task `completed` with the same `isError` content a blocking call gets.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from typing import Any

from fastmcp.tools.base import Tool
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

logger = logging.getLogger("fastmcp_tasks.validation")

try:  # core internals; their absence only disables the pre-check
    from fastmcp.server.dependencies import without_injected_parameters
    from fastmcp.tools.function_tool import (
        FunctionTool,
        _strict_input_validation,
        _validate_input,
        _wrap_body_errors,
    )
    from fastmcp.utilities.async_utils import is_coroutine_function
    from fastmcp.utilities.types import get_cached_typeadapter
except ImportError:  # pragma: no cover - depends on the installed FastMCP
    FunctionTool = None  # type: ignore[assignment,misc]

# Tools are unhashable pydantic models: key by identity, and check the weak
# reference so a recycled id never returns another tool's adapter.
_adapters: dict[int, tuple[weakref.ref[Any], TypeAdapter[Any] | None]] = {}


def _adapter_for(tool: Any) -> TypeAdapter[Any] | None:
    cached = _adapters.get(id(tool))
    if cached is not None and cached[0]() is tool:
        return cached[1]
    adapter: TypeAdapter[Any] | None = None
    try:
        body = _wrap_body_errors(tool.fn, materialize_generators=True)
        wrapper = without_injected_parameters(body, run_in_thread=tool.run_in_thread)
        # Only an async wrapper can be validated without running the body.
        if is_coroutine_function(wrapper):
            adapter = get_cached_typeadapter(_wrap_body_errors(wrapper))
    except Exception:  # pragma: no cover - defensive: never block a call on the pre-check
        logger.debug("No argument pre-check for tool %r", tool.name, exc_info=True)
    key = id(tool)
    _adapters[key] = (weakref.ref(tool, lambda _: _adapters.pop(key, None)), adapter)
    return adapter


def arguments_valid(tool: Tool, arguments: dict[str, Any]) -> bool:
    """False when the synchronous path would reject `arguments` before running the tool."""
    if FunctionTool is None or not isinstance(tool, FunctionTool):
        return True
    adapter = _adapter_for(tool)
    if adapter is None:
        return True
    try:
        pending = _validate_input(adapter, arguments, strict=_strict_input_validation())
    except PydanticValidationError:
        return False
    if inspect.iscoroutine(pending):
        pending.close()
    return True
