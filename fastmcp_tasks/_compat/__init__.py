"""The one seam to FastMCP and the MCP SDK: every private name we use lives in this package.

Each function or constant below is one seam: a private FastMCP or SDK name the
tasks extension needs because FastMCP 4.2 offers no public replacement (the
docstring of each says what it is for and why). No other module of
`fastmcp_tasks` may touch a private FastMCP or SDK name; `tests/test_compat.py`
fails if one does.

Modules: `core` (the server's dispatch, argument pre-check, `Progress`, the
client's claim index), `mounts` (a task's run: mounted servers, what the
caller's request carries in), `client` (the elicitation callback, FastMCP's
result parser), `modern_entry` (the SDK's entry for a modern HTTP request: its reply
mode chosen per request), `proxy` (a FastMCP proxy's backend session), `shape` and
`checks` (how the seams are checked). Callers import this package only.

`check_seams()` runs at import of `fastmcp_tasks` and checks that every seam
still has the shape we rely on (cheaply: attributes, callables, parameter
names, the attribute names a constructor assigns). A FastMCP upgrade that moves
a seam makes the import fail with `IncompatibleFastMCP`, naming the installed
FastMCP version and each missing seam: never a silent fallback, never a
fallback that fails open (error details leaking, a call raising).
"""

from __future__ import annotations

from fastmcp_tasks._compat.checks import check_seams, check_server, missing_seams
from fastmcp_tasks._compat.client import (
    elicitation_callback,
    install_default_http_client,
    parse_tool_result,
)
from fastmcp_tasks._compat.core import (
    SDK_TRANSPORT_ERRORS,
    CoreProgress,
    bind_progress,
    call_adapter,
    core_progress_aenter,
    is_client_tool_call,
    is_function_tool,
    is_request_seam,
    low_level_server,
    mask_error_details,
    normalize_call_tool_result,
    rebind_prefab_tool_names,
    request_seam_chain,
    result_claims,
    run_tool,
    server_extension,
    server_extensions,
    server_lifespan,
    set_core_progress_aenter,
    validate_input,
)
from fastmcp_tasks._compat.legacy import advertise_tasks, allow_task_results, requested_task
from fastmcp_tasks._compat.modern_entry import (
    Answer,
    Exchange,
    choose_reply,
    forget_reply,
    is_core_call_path,
    mcp_param_rejection,
    method_binding,
    serialize_result,
    sse_deferral,
    wire_result,
    write_reply,
)
from fastmcp_tasks._compat.mounts import (
    adopt_request_state,
    carry_into_task,
    child_middleware,
    mounted_target,
    needs_access_token,
    request_scoped_state,
    uncarry,
)
from fastmcp_tasks._compat.proxy import (
    check_proxy_seams,
    proxy_session_class,
    session_claim,
    session_read_timeout,
    set_proxy_session_class,
)

__all__ = [
    "SDK_TRANSPORT_ERRORS",
    "Answer",
    "CoreProgress",
    "Exchange",
    "adopt_request_state",
    "advertise_tasks",
    "allow_task_results",
    "bind_progress",
    "call_adapter",
    "carry_into_task",
    "check_proxy_seams",
    "check_seams",
    "check_server",
    "child_middleware",
    "choose_reply",
    "core_progress_aenter",
    "elicitation_callback",
    "forget_reply",
    "install_default_http_client",
    "is_client_tool_call",
    "is_core_call_path",
    "is_function_tool",
    "is_request_seam",
    "low_level_server",
    "mask_error_details",
    "mcp_param_rejection",
    "method_binding",
    "missing_seams",
    "mounted_target",
    "needs_access_token",
    "normalize_call_tool_result",
    "parse_tool_result",
    "proxy_session_class",
    "rebind_prefab_tool_names",
    "request_scoped_state",
    "request_seam_chain",
    "requested_task",
    "result_claims",
    "run_tool",
    "serialize_result",
    "server_extension",
    "server_extensions",
    "server_lifespan",
    "session_claim",
    "session_read_timeout",
    "set_core_progress_aenter",
    "set_proxy_session_class",
    "sse_deferral",
    "uncarry",
    "validate_input",
    "wire_result",
    "write_reply",
]
