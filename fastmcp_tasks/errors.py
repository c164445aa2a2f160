"""Every exception fastmcp-tasks raises, and the JSON-RPC errors it sends.

The hierarchy::

    TasksError                      base of everything this package raises
    ├── ConfigurationError          bad construction arguments (also a ValueError)
    ├── StoreError                  a store could not do what was asked
    │   ├── TaskLimitExceeded       a store refused a new task: a cap is reached
    │   ├── StepLimitExceeded       a store refused a durable step: a per-task bound
    │   └── StoreTimeout            a store call took longer than `store_timeout`
    ├── DuplicateTask               `create` of an id the store already has (also a ValueError)
    ├── InvalidTransition           a state change the task's state machine forbids
    ├── IncompatibleFastMCP         the installed FastMCP lacks a seam `_compat` needs (ImportError)
    ├── TaskFailed                  client: a task ended `failed` (also MCPError and ToolError)
    │   └── TaskCancelled           client: a task ended `cancelled`
    ├── NotATask                    client: `call_tool_task` got a synchronous answer (ToolError)
    ├── NoInputHandler              client: a task asks for input nothing can answer (ToolError)
    └── TaskUnreachable             client: the server stayed unreachable for the reconnect window

The client errors are also `fastmcp.exceptions.ToolError`, so code written for
FastMCP's own client (`except ToolError`) catches them; `TaskFailed` is also the
task's JSON-RPC error as an `MCPError` (its code, message and data).

Wire errors are `mcp.shared.exceptions.MCPError` built by the functions below,
so every code and message the server sends lives in this one module:

- `missing_capability()`   -32021, the per-request tasks opt-in is absent (HTTP 400); the
                           message says why and what the client must declare
- `task_not_found()`       -32602, unknown task id (or expired, purged, foreign: see below)
- `task_expired()`         -32602, the caller's task expired or was purged, and when
- `header_mismatch()`      -32020, `Mcp-Name` disagrees with `params.taskId` (HTTP 400)
- `invalid_answer()`       -32602, a `tasks/update` answer that cannot answer its request
- `limit_exceeded()`       -32000, a configured cap refuses a new task
- `polling_too_fast()`     -32000, `tasks/get` of one task faster than the configured pace
- `too_large()`            -32602, arguments or answers over a configured size limit
- `store_unavailable()`    -32603, the task store failed (e.g. Redis unreachable); retryable
- `unreadable_payload()`   -32603, the task's payloads are sealed with keys this server lacks
- `interrupted()`          -32603, the task's run was lost (shutdown, crash)
- `flow_control_unsupported()` -32603, a tool's flow-control options on a store without it
- `concurrency_key_failed()`   -32603, a tool's `concurrency_key` raised
- `invalid_idempotency_key()`  -32602, a malformed `_meta` idempotency key
- `idempotency_key_reused()`   -32602, an idempotency key names another call's task
- `resent_not_run()`           -32602, a resent `tools/call` that would run synchronously
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

from fastmcp.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.jsonrpc import HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY

from fastmcp_tasks.wire.names import IDEMPOTENCY_META_KEY, RESENT_META_KEY, TASKS_EXTENSION_ID

#: Implementation-defined server error (JSON-RPC reserves -32000..-32099 for these).
LIMIT_EXCEEDED = -32000


class TasksError(Exception):
    """Base class of every exception raised by fastmcp-tasks."""


class ConfigurationError(TasksError, ValueError):
    """The extension or a store was constructed with arguments that cannot work."""


class StoreError(TasksError):
    """A store could not complete an operation."""


class TaskLimitExceeded(StoreError):
    """A store refused to create a task because a configured cap is reached."""

    def __init__(self, limit: str, value: int) -> None:
        super().__init__(f"{limit}={value} reached")
        self.limit = limit
        self.value = value


class StepLimitExceeded(StoreError):
    """A store refused to record a durable step: a per-task bound on steps is reached."""


class StoreTimeout(StoreError):
    """A store call did not answer within the extension's `store_timeout`."""


class DuplicateTask(TasksError, ValueError):
    """`create` was given a task id the store already holds.

    Ids are 192 random bits, so after a `create` whose reply was lost (a timeout) a
    retry that meets this error means the first attempt did commit.
    """


class InvalidTransition(TasksError):
    """A status change that the SEP-2663 state machine does not allow."""


class IncompatibleFastMCP(TasksError, ImportError):
    """The installed FastMCP (or MCP SDK) no longer has a seam `fastmcp_tasks._compat` needs.

    Raised at import of `fastmcp_tasks` (or at server startup for seams that live
    on a server instance); the message names the FastMCP version and each seam.
    """

    def __init__(self, version: str, missing: list[str]) -> None:
        self.version = version
        self.missing = list(missing)
        super().__init__(
            f"fastmcp-tasks cannot run on FastMCP {version}: it no longer provides "
            + "; ".join(self.missing)
            + " (see ARCHITECTURE.md, 'FastMCP internals we use')"
        )


class TaskFailed(MCPError, ToolError, TasksError):
    """A task the client followed ended `failed`: its JSON-RPC error as an `MCPError`.

    Also a `ToolError`, so `except ToolError` (FastMCP's client convention) and
    `except MCPError` (the task's error code, message and data) both catch it.

    Args:
        code: the JSON-RPC error code of the task's `error`.
        message: its message.
        data: its data, if any.
        task_id: the task's id.
    """

    def __init__(
        self, code: int, message: str, data: Any = None, *, task_id: str | None = None
    ) -> None:
        super().__init__(code, message, data)
        self.task_id = task_id


class TaskCancelled(TaskFailed):
    """A task the client followed ended `cancelled` (by `tasks/cancel` or by the server)."""


class NotATask(ToolError, TasksError):
    """`call_tool_task()` was answered synchronously: the tool ran, but not as a task.
    The message says why and what to change; `result` is the synchronous result (a
    `fastmcp.client.client.CallToolResult`), `tool_name` the tool called."""

    def __init__(self, message: str, *, result: Any, tool_name: str) -> None:
        super().__init__(message)
        self.result = result
        self.tool_name = tool_name


class NoInputHandler(ToolError, TasksError):
    """A task waits for input (`inputRequests`) that nothing on this client can answer.
    The message says what it asks and how to answer; `requests`: key to request."""

    def __init__(self, message: str, *, task_id: str, requests: dict[str, Any]) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.requests = requests


class TaskUnreachable(ToolError, TasksError):
    """The server could not be reached about a task for the whole reconnect window: the
    task may well be running or finished. The message names the task, the last error
    (`last_error`, one line), how long it tried (`waited`, seconds) and how to resume."""

    def __init__(
        self, task_id: str, last_error: str, *, waited: float, server: str | None = None
    ) -> None:
        self.task_id = task_id
        self.last_error = last_error
        self.waited = waited
        self.server = server  # the server's URL, when known, for the resume hint
        target = server or "SERVER"
        self.resume_hint = (
            f"fastmcp-tasks wait {target} {task_id}  (or ToolTask.resume(client, {task_id!r}))"
        )
        super().__init__(
            f"Lost contact with task {task_id} for {waited:.0f}s (last error: {last_error}); "
            f"it may still be running: resume with {self.resume_hint}"
        )


def missing_capability(why: str) -> MCPError:
    """-32021: the request did not declare the tasks extension in its `_meta`.

    The code and `data` are the spec's; the message adds `why` (the tool runs only as a
    task, or the method needs the extension) and what the client must do.
    """
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"Missing required client capability: {why}; the client must declare the "
        f'{TASKS_EXTENSION_ID} extension in the request\'s _meta["{CLIENT_CAPABILITIES_META_KEY}"]',
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}},
    )


def _shown_id(task_id: str) -> str:
    return task_id if len(task_id) <= 80 and task_id.isprintable() else "(invalid id)"


def task_not_found(task_id: str) -> MCPError:
    """-32602: unknown tasks, and removed or foreign ones the caller may not hear about.

    A task that expired or was purged gets `task_expired()` only when its tombstone
    says the caller may see it; everyone else gets exactly this answer.
    """
    return MCPError(
        code=INVALID_PARAMS,
        message=f"Failed to retrieve task: Task not found ({_shown_id(task_id)}); it never "
        "existed, has expired, or was purged",
    )


class Removal(Protocol):
    """What `task_expired` needs of a removed task (`stores.flow.Tombstone` has it)."""

    @property
    def at(self) -> float: ...

    @property
    def reason(self) -> str: ...


def iso_utc(when: float) -> str:
    """Epoch seconds as ISO 8601 UTC to the second: `2026-12-01T16:00:00Z`."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def task_expired(task_id: str, removal: Removal) -> MCPError:
    """-32602 for the caller's own task that expired (retention ran out) or was purged.

    `data` is `{"taskId", "reason": "expired" | "purged", "removedAt": ISO 8601 UTC}`.
    """
    shown, when = _shown_id(task_id), iso_utc(removal.at)
    if removal.reason == "purged":
        what = f"Task purged ({shown}): an operator removed it at {when}"
    else:
        what = f"Task expired ({shown}): it finished and its retention ran out at {when}"
    return MCPError(
        code=INVALID_PARAMS,
        message=f"Failed to retrieve task: {what}",
        data={"taskId": task_id, "reason": removal.reason, "removedAt": when},
    )


def header_mismatch(header: str, body: str) -> MCPError:
    """-32020: the `Mcp-Name` routing header names another task than the body."""
    return MCPError(
        code=HEADER_MISMATCH,
        message=f"Mcp-Name header {header!r} does not match params.taskId {body!r}",
    )


def invalid_answer(key: str, problem: str) -> MCPError:
    """-32602: an answer for an outstanding key is malformed; nothing was consumed."""
    return MCPError(
        code=INVALID_PARAMS,
        message=f"Invalid inputResponses[{key!r}]: {problem}; the request is still outstanding",
        data={"key": key, "problem": problem},
    )


def limit_exceeded(limit: str, value: int) -> MCPError:
    """A cap refuses a new task; nothing was created."""
    return MCPError(
        code=LIMIT_EXCEEDED,
        message=f"Task limit reached: {limit}={value}; no task was created, retry later",
        data={"limit": limit, "value": value},
    )


def polling_too_fast(fraction: float, interval_ms: int, retry_after_ms: int) -> MCPError:
    """-32000: a client polls one task far faster than its `pollIntervalMs` (C19)."""
    return MCPError(
        code=LIMIT_EXCEEDED,
        message=f"Polling too fast: pollIntervalMs is {interval_ms} and "
        f"min_poll_fraction={fraction}; retry in {retry_after_ms} ms",
        data={"limit": "min_poll_fraction", "value": fraction, "retryAfterMs": retry_after_ms},
    )


STORE_UNAVAILABLE = "Task store unavailable; nothing was created or changed, retry later"
#: How long a client should wait before retrying after `store_unavailable()`.
STORE_RETRY_AFTER_MS = 1000


def unreadable_payload(reason: str) -> MCPError:
    """-32603: the task's payloads are sealed with keys this server lacks (`reason`)."""
    return MCPError(code=INTERNAL_ERROR, message=reason)


def store_unavailable() -> MCPError:
    """-32603: the store could not answer; nothing was created or changed.

    The message never carries the store's own error (it may name hosts, ports,
    prefixes or file paths): the server log has it (`fastmcp_tasks.health`).
    """
    return MCPError(
        code=INTERNAL_ERROR,
        message=STORE_UNAVAILABLE,
        data={"retryable": True, "retryAfterMs": STORE_RETRY_AFTER_MS},
    )


def too_large(what: str, limit: str, value: int, size: int) -> MCPError:
    """-32602: a payload is over a configured size limit; nothing was created or changed."""
    return MCPError(
        code=INVALID_PARAMS,
        message=f"{what} is {size} bytes, over the limit {limit}={value}",
        data={"limit": limit, "value": value, "size": size},
    )


def result_too_large(size: int, cap: int) -> dict[str, Any]:
    """The JSON-RPC error object of a task whose result was over `max_result_bytes`."""
    return {
        "code": INTERNAL_ERROR,
        "message": f"Result too large: {size} bytes, over the limit max_result_bytes={cap}",
        "data": {"limit": "max_result_bytes", "value": cap, "size": size},
    }


def flow_control_unsupported(tool: str, scheme: str) -> MCPError:
    """-32603: the tool's `concurrency`/`dedupe`/`retry` need a store that keeps them."""
    return MCPError(
        code=INTERNAL_ERROR,
        message=f"Tool {tool!r} uses flow control (concurrency, dedupe or retry), which the "
        f"{scheme!r} task store does not keep; no task was created",
    )


def concurrency_key_failed(tool: str, error: BaseException) -> MCPError:
    """-32603: the tool's `concurrency_key` raised for these arguments."""
    return MCPError(
        code=INTERNAL_ERROR,
        message=f"The concurrency_key of tool {tool!r} failed for these arguments "
        f"({type(error).__name__}); no task was created",
    )


def invalid_idempotency_key(reason: str) -> MCPError:
    """-32602: `_meta["fastmcp-tasks/idempotencyKey"]` is malformed; nothing ran or was created.

    `reason` says what is wrong; it never quotes the key (a bearer secret).
    """
    return MCPError(
        code=INVALID_PARAMS,
        message=f"Invalid _meta[{IDEMPOTENCY_META_KEY!r}]: {reason}; nothing was run or created",
        data={"key": IDEMPOTENCY_META_KEY, "problem": reason},
    )


def idempotency_key_reused() -> MCPError:
    """-32602: the idempotency key's task is another call's (other tool or arguments)."""
    return MCPError(
        code=INVALID_PARAMS,
        message="idempotency key already used for a different call (another tool or other "
        "arguments); no task was created",
        data={"key": IDEMPOTENCY_META_KEY},
    )


def resent_not_run(tool: str) -> MCPError:
    """-32602: a `tools/call` resent after a lost reply (`_meta["fastmcp-tasks/resent"]`)
    that this server would answer without a task; the tool is not run a second time."""
    return MCPError(
        code=INVALID_PARAMS,
        message=f"tools/call of {tool!r} was resent after a lost reply, but {tool!r} does "
        "not run as a task here, so it was not run again: the first attempt may have run",
        data={"key": RESENT_META_KEY, "tool": tool},
    )


def state_only_rounds(tool: str, rounds: int) -> dict[str, Any]:
    """A task's tool set only a `requestState` (no input request) `rounds` times in a row."""
    message = f"Tool {tool!r} asked for input without naming any request (only a requestState)"
    return {"code": INTERNAL_ERROR, "message": f"{message} {rounds} times in a row; stopped"}


def interrupted(reason: str) -> dict[str, Any]:
    """The JSON-RPC error object stored on a task whose run was lost."""
    return {"code": INTERNAL_ERROR, "message": f"Task interrupted: {reason}"}


def error_object(error: MCPError) -> dict[str, Any]:
    """The JSON-RPC error object (code, message, data) carried by an MCPError."""
    data = error.error
    obj: dict[str, Any] = {"code": data.code, "message": data.message}
    if data.data is not None:
        obj["data"] = data.data
    return obj
