"""Executing one tool call as a task: the tool body, its outcome, and guard rounds.

The completed `result` of a task must be exactly the `CallToolResult` the
synchronous `tools/call` returns for the same call (C27): the same content,
structured content, `isError`, `_meta` and error masking. FastMCP core does
that conversion in `FastMCP.call_tool` (masking) and `_on_call_tool` (wire
form), both tied to a foreground request, so this module mirrors their rules
step for step; `tests/test_parity.py` runs every return type both ways and
fails if core changes them.

One difference is deliberate and specified: an `MCPError` raised by the tool is
a JSON-RPC error, so the task ends `failed` with that error (C28) instead of
being masked into an `isError` result.

Guard rounds. Core's guard pattern (SEP-2322) asks for input by returning an
`InputRequiredResult`; in the foreground the client retries the call with
`inputResponses`. Inside a task there is no retry: the task parks in
`input_required` with the tool's requests (under fresh keys, unique for the
task's whole life, C30), and when every request is answered the tool runs
again with `ctx.input_responses` (keyed as the tool minted them) and
`ctx.request_state` set, exactly as core documents. `requestState` stays on
the server; it never appears on the task's wire.

A round that only sets state (an `InputRequiredResult` with a `requestState` and no
input request, which the spec allows) is what FastMCP's foreground path re-runs: its
`Client` (the SDK's `run_input_required_driver`) waits 50 ms, doubling to 250 ms, and
retries the call with the state and no responses, for at most 10 rounds. A task does
exactly that (`STATE_ONLY_BACKOFF`, `STATE_ONLY_ROUNDS`): the tool runs again with
`ctx.request_state` and `ctx.input_responses` `None`, the task staying `working`, and
an 11th such round in a row ends the task `failed` with a -32603 saying the tool asked
for input without naming any request (`errors.state_only_rounds`), where the
foreground client raises `InputRequiredRoundsExceededError`.

Mounted tools. In the foreground a mounted tool runs through the child's
`call_tool`: the child's middleware, then the body, under a Context of the
child. A task does the same at every mount level (`invoke`), with a
`TaskContext` of that level's server, so the body sees the task
(`is_background_task`, `task_id`, progress, logging, elicitation) and the
child's middleware runs around it with the caller's identity; an unexpected
exception is masked by the server the tool lives on, as the child would.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import mcp_types
from fastmcp.exceptions import DisabledError, FastMCPError, NotFoundError, ToolError
from fastmcp.server.dependencies import get_context
from fastmcp.server.providers.addressing import parse_hashed_backend_name
from fastmcp.tools.base import Tool, ToolResult
from fastmcp.utilities.exceptions import get_http_status_code, is_timeout_error
from fastmcp.utilities.versions import VersionSpec
from mcp.shared.exceptions import MCPError
from mcp_types import methods as mcp_methods
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from fastmcp_tasks import _compat
from fastmcp_tasks.errors import error_object, state_only_rounds
from fastmcp_tasks.server.engine.caller import Caller, carried, needs_access_token, token_error
from fastmcp_tasks.server.engine.context import NO_HANDLER_HINT, RunningTask, TaskContext
from fastmcp_tasks.server.engine.inputs import CAPABILITY_OF, ELICIT, new_key
from fastmcp_tasks.server.engine.jobs import Job, let_the_reply_go
from fastmcp_tasks.server.engine.sealed import unexpired, unopened_error
from fastmcp_tasks.server.engine.steps import resume

logger = logging.getLogger("fastmcp_tasks.execution")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended: `completed` with a wire `CallToolResult`, or `failed` with an error."""

    status: Literal["completed", "failed"]
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_required: mcp_types.InputRequiredResult | None = None
    #: the exception the tool raised, when the outcome reports one (`engine.retries`)
    raised: BaseException | None = field(default=None, compare=False)


class MaskedToolError(ToolError):
    """The `ToolError` standing for an unexpected exception, as core's `call_tool` masks it."""

    def __init__(self, message: str, origin: BaseException) -> None:
        super().__init__(message)
        self.origin = origin


def _origin(error: BaseException) -> BaseException:
    """The exception the tool itself raised, under the masks of every mount level."""
    while isinstance(error, MaskedToolError):
        error = error.origin
    return error


async def resolve_tool(server: Any, name: str, version: str | None) -> Tool | None:
    """The tool `FastMCP.call_tool` would run for `name` at `version`, or None.

    Exactly core's resolution: `get_tool(name, version=VersionSpec(eq=version))`
    (the highest version when `version` is None), then, for a hashed backend
    name (`__<hash>_<name>`), `get_tool_by_hash`.
    """
    spec = VersionSpec(eq=version) if version else None
    tool: Tool | None = await server.get_tool(name, version=spec)
    if tool is None:
        hashed = parse_hashed_backend_name(name)
        if hashed is not None:
            tool = await server.get_tool_by_hash(*hashed)
    return tool


async def leaf_of(tool: Tool) -> Tool:
    """The tool a mounted tool finally runs (itself when not mounted): its options live there."""
    while (hop := _compat.mounted_target(tool)) is not None:
        child, name, version = hop
        inner = await resolve_tool(child, name, version)
        if inner is None:
            return tool
        tool = inner
    return tool


async def token_missing(tool: Tool | None, authenticated: bool, caller: Caller | None) -> bool:
    """Whether an authenticated caller's task of a tool that needs the token runs where the
    token does not exist (a worker, recovery): it then fails instead of seeing `None`."""
    if not authenticated or (caller is not None and not caller.expired) or tool is None:
        return False
    return needs_access_token(await leaf_of(tool))


async def invoke(
    server: Any, tool: Tool, arguments: dict[str, Any], running: RunningTask, scoped: Any
) -> Any:
    """Run `tool`'s body; a mounted tool through each child's middleware, in its own Context."""
    hop = _compat.mounted_target(tool)
    if hop is None:
        return await _compat.run_tool(tool, arguments)
    child, child_name, version = hop
    outer = TaskContext(
        child,
        running,
        _current_responses(),
        _current_request_state(),
        scoped_state=scoped,
    )

    async def below(name: str, args: dict[str, Any]) -> Any:
        inner = await resolve_tool(child, name, version)
        if inner is None:
            raise NotFoundError(f"Unknown tool: {name!r}")
        try:
            return await invoke(child, inner, args, running, scoped)
        except (FastMCPError, PydanticValidationError, MCPError):
            raise
        except Exception as error:
            raise _masked(child, name, error) from error

    async with outer:
        return await _compat.child_middleware(child, child_name, arguments, version, outer, below)


def _current_task_context() -> TaskContext | None:
    try:
        context = get_context()
    except RuntimeError:
        return None
    return context if isinstance(context, TaskContext) else None


def _current_responses() -> mcp_types.InputResponses | None:
    context = _current_task_context()
    return context.input_responses if context is not None else None


def _current_request_state() -> str | None:
    context = _current_task_context()
    return context.request_state if context is not None else None


async def run_tool(
    server: Any,
    tool: Tool | None,
    name: str,
    arguments: dict[str, Any],
    running: RunningTask | None = None,
    scoped: dict[str, Any] | None = None,
) -> Outcome:
    """Run `tool` with `arguments` in the current (task) Context and classify the outcome."""
    try:
        if tool is None:
            raise NotFoundError(f"Unknown tool: {name!r}")
        try:
            if running is None:
                result = await _compat.run_tool(tool, arguments)
            else:
                result = await invoke(server, tool, arguments, running, scoped)
        except (FastMCPError, PydanticValidationError):
            raise
        except MCPError as error:
            logger.info("Tool %r raised a JSON-RPC error %s", name, error.error.code)
            return Outcome("failed", error=error_object(error), raised=error)
        except Exception as error:
            raise _masked(server, name, error) from error
    except (DisabledError, NotFoundError):
        return _completed(_error_result(f"Unknown tool: {name!r}"), server)
    except FastMCPError as error:
        return _completed(_error_result(str(error)), server, _origin(error))
    except PydanticValidationError as error:
        return _completed(_error_result(str(error)), server, error)

    input_required = getattr(result, "input_required", None)
    if isinstance(input_required, mcp_types.InputRequiredResult):
        return Outcome("completed", input_required=input_required)
    result = await _compat.rebind_prefab_tool_names(server, result)
    if not isinstance(result, ToolResult):  # pragma: no cover - core guarantees ToolResult
        raise TypeError(f"tool {name!r} produced {type(result).__name__}, not a ToolResult")
    return _completed(_compat.normalize_call_tool_result(result.to_mcp_result()), server)


def _masked(server: Any, name: str, error: Exception) -> ToolError:
    """The `ToolError` core's `call_tool` would raise for an unexpected exception."""
    status_code = get_http_status_code(error)
    logger.error("Error calling tool %r", name, exc_info=status_code is None)
    if status_code == 429:
        return MaskedToolError("Rate limited by upstream API, please retry later", error)
    if is_timeout_error(error):
        return MaskedToolError("Upstream request timed out, please retry", error)
    if _compat.mask_error_details(server):
        return MaskedToolError(f"Error calling tool {name!r}", error)
    return MaskedToolError(f"Error calling tool {name!r}: {error}", error)


def _error_result(message: str) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=message)], is_error=True
    )


def _completed(
    result: mcp_types.CallToolResult, server: Any, raised: BaseException | None = None
) -> Outcome:
    return Outcome("completed", result=to_wire(result, server), raised=raised)


def to_wire(result: mcp_types.CallToolResult, server: Any) -> dict[str, Any]:
    """The JSON a 2026-07-28 `tools/call` response carries for `result`.

    Dumped and sieved exactly as the SDK runner does for the synchronous
    response, then stamped with the same `serverInfo` `_meta`, so a client
    decodes the inline task result and the synchronous result identically.
    """
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    wire = mcp_methods.serialize_server_result("tools/call", LATEST_MODERN_VERSION, dumped)
    wire.setdefault("resultType", "complete")
    stamp = getattr(_compat.low_level_server(server), "server_info_stamp", None)
    if stamp is not None:
        meta = wire.get("_meta")
        key = mcp_types.SERVER_INFO_META_KEY
        if meta is None:
            wire["_meta"] = {key: stamp}
        elif isinstance(meta, dict) and meta.get(key) is None:
            wire["_meta"] = {**meta, key: stamp}
    return wire


# --- guard rounds (SEP-2322 inside a task) ------------------------------------

#: Rounds after which a tool that keeps asking is stopped (a loop guard).
MAX_ROUNDS = 50
#: State-only rounds in a row a task re-runs (the SDK client's default round cap).
STATE_ONLY_ROUNDS = 10
#: The wait before a state-only round's re-run: first, and longest (it doubles), as the
#: SDK client's `run_input_required_driver` waits before retrying the call.
STATE_ONLY_BACKOFF = (0.05, 0.25)

_requests_adapter: TypeAdapter[mcp_types.InputRequests] = TypeAdapter(mcp_types.InputRequests)


async def run_job(server: Any, job: Job, running: RunningTask) -> Outcome:
    """Run one job's tool to its outcome (`run_rounds`), unless it needs a token it
    cannot have here: then it fails at once with `caller.TOKEN_UNAVAILABLE`."""
    await let_the_reply_go(job)
    if job.caller_error is not None:  # sealed with keys this process does not have
        return Outcome("failed", error=unopened_error(job.caller_error))
    caller = unexpired(job.caller)
    if await token_missing(job.tool, job.authenticated, caller):
        return Outcome("failed", error=token_error(job.name, caller))
    await resume(running, job.attempt)  # a later run: its recorded steps, said (`steps`)
    return await run_rounds(
        server,
        job.tool,
        job.name,
        job.arguments,
        running,
        job.input_responses,
        job.request_state,
        caller,
    )


async def run_rounds(
    server: Any,
    tool: Tool | None,
    name: str,
    arguments: dict[str, Any],
    running: RunningTask,
    responses: mcp_types.InputResponses | None = None,
    request_state: str | None = None,
    caller: Caller | None = None,
) -> Outcome:
    """Run the tool, parking for input and re-running it until it returns a result.

    Each run gets a fresh `TaskContext` (core exits a background context once the
    tool's `ctx` dependency is released), carrying the answers of the round before:
    for the first run, those gathered in the foreground (MRTR composition, C11).
    `caller` (the accepting process only) is what the tool sees of the request
    that created the task: token, headers, session id, request-scoped state.
    """
    scoped = caller.request_state if caller is not None else None
    state_only, wait = 0, STATE_ONLY_BACKOFF[0]
    for round_number in range(1, MAX_ROUNDS + 1):
        ctx = TaskContext(server, running, responses, request_state, scoped_state=scoped)
        running.steps.new_round()  # the body runs again: its step names may repeat
        with carried(caller):
            async with ctx:
                outcome = await run_tool(server, tool, name, arguments, running, scoped)
        ask = outcome.input_required
        if ask is None:
            return outcome
        requests = _requests_adapter.dump_python(
            ask.input_requests or {}, mode="json", by_alias=True, exclude_none=True
        )
        if not requests:  # only a state: run again with it, as the foreground client does
            state_only += 1
            if state_only > STATE_ONLY_ROUNDS:
                return Outcome("failed", error=state_only_rounds(name, state_only))
            await anyio.sleep(wait)
            wait = min(wait * 2, STATE_ONLY_BACKOFF[1])
            responses, request_state = None, ask.request_state
            continue
        state_only, wait = 0, STATE_ONLY_BACKOFF[0]
        missing = sorted(
            {CAPABILITY_OF.get(r.get("method"), str(r.get("method"))) for r in requests.values()}
            - running.input_kinds
        )
        if missing:
            hint = f" ({NO_HANDLER_HINT})" if "elicitation" in missing else ""
            return _error_outcome(
                server,
                f"Tool {name!r} asked for input the client cannot give: the tools/call that "
                f"created this task did not declare {', '.join(missing)}{hint}",
            )
        responses = await _gather(running, requests, round_number)
        request_state = ask.request_state
    return _error_outcome(server, f"Tool {name!r} asked for input {MAX_ROUNDS} times; stopped")


async def _gather(
    running: RunningTask, requests: dict[str, dict[str, Any]], round_number: int
) -> mcp_types.InputResponses | None:
    if not requests:
        return None
    wire_keys = {new_key(f"r{round_number}"): key for key in requests}
    status = next(
        (r["params"].get("message") for r in requests.values() if r.get("method") == ELICIT),
        None,
    )
    answers = await running.ask({w: requests[k] for w, k in wire_keys.items()}, status)
    responses: dict[str, Any] = {}
    for wire_key, key in wire_keys.items():
        if wire_key in answers:
            responses[key] = answers[wire_key]
        elif requests[key].get("method") == ELICIT:
            responses[key] = {"action": "cancel"}  # unanswered within the input timeout
    params = mcp_types.InputResponseRequestParams.model_validate({"inputResponses": responses})
    return params.input_responses


def _error_outcome(server: Any, message: str) -> Outcome:
    result = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=message)], is_error=True
    )
    return Outcome("completed", result=to_wire(result, server))
