"""The in-task guard loop: a tool that returns `InputRequiredResult` inside a task.

Core's guard pattern (SEP-2322) asks for input by returning an
`InputRequiredResult`; in the foreground the client retries the call with
`inputResponses`. Inside a task there is no retry: the task parks in
`input_required` with the tool's requests (under fresh keys, unique for the
task's whole life, C30), and when every request is answered the tool runs
again with `ctx.input_responses` (keyed as the tool minted them) and
`ctx.request_state` set, exactly as core documents. `requestState` stays on
the server; it never appears on the task's wire.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from fastmcp.tools.base import Tool
from pydantic import TypeAdapter

from fastmcp_tasks.context import RunningTask, TaskContext
from fastmcp_tasks.execution import Outcome, run_tool, to_wire
from fastmcp_tasks.inputs import CAPABILITY_OF, ELICIT, new_key

#: Rounds after which a tool that keeps asking is stopped (a loop guard).
MAX_ROUNDS = 50

_requests_adapter: TypeAdapter[mcp_types.InputRequests] = TypeAdapter(mcp_types.InputRequests)


async def run_rounds(
    server: Any,
    tool: Tool | None,
    name: str,
    arguments: dict[str, Any],
    running: RunningTask,
    responses: mcp_types.InputResponses | None = None,
    request_state: str | None = None,
) -> Outcome:
    """Run the tool, parking for input and re-running it until it returns a result.

    Each run gets a fresh `TaskContext` (core exits a background context once the
    tool's `ctx` dependency is released), carrying the answers of the round before:
    for the first run, those gathered in the foreground (MRTR composition, C11).
    """
    for round_number in range(1, MAX_ROUNDS + 1):
        ctx = TaskContext(server, running)
        ctx._task_input_responses = responses
        ctx._task_request_state = request_state
        async with ctx:
            outcome = await run_tool(server, tool, name, arguments)
        ask = outcome.input_required
        if ask is None:
            return outcome
        requests = _requests_adapter.dump_python(
            ask.input_requests or {}, mode="json", by_alias=True, exclude_none=True
        )
        missing = sorted(
            {CAPABILITY_OF.get(r.get("method"), str(r.get("method"))) for r in requests.values()}
            - running.input_kinds
        )
        if missing:
            return _error_outcome(
                server,
                f"Tool {name!r} asked for input the client cannot give: the tools/call that "
                f"created this task did not declare {', '.join(missing)}",
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
