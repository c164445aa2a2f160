"""Answering a task's `inputRequests` from the client (C65-C68), shared by every mode.

`InputAnswerer` hands each outstanding request to `on_input(key, request)`, or
an elicitation to the SDK elicitation callback a `fastmcp.Client` builds from
its `elicitation_handler` (called with a `ClientRequestContext`, exactly like a
foreground elicitation, C66). Keys are answered once (C67) and all answers of
one state go back in a single `tasks/update` (C65).

A request that neither can answer makes `check()` raise `NoInputHandler` (a
`ToolError`) before anything is asked, with a message saying what to pass (with the
words "no elicitation handler" when an elicitation is among them, which code written
for the official package matches);
`strict=False` keeps the older lenient rule (elicitations answered
`{"action": "cancel"}`, other requests left unanswered).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types
from mcp.client.session import ClientRequestContext, ClientSession, ElicitationFnT
from mcp.shared.exceptions import MCPError

from fastmcp_tasks.errors import NoInputHandler
from fastmcp_tasks.wire.models import TaskState, UpdateTaskParams, UpdateTaskRequest

InputHandler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any] | None]]

ELICITATION = "elicitation/create"


def unanswerable_message(task_id: str, requests: dict[str, Any]) -> str:
    """What the task asks that nothing answers, and what to pass so something does."""
    methods = sorted({str(r.get("method", "?")) for r in requests.values()})
    asks = [
        str((r.get("params") or {}).get("message"))
        for r in requests.values()
        if r.get("method") == ELICITATION and (r.get("params") or {}).get("message")
    ]
    asked = f" ({'; '.join(repr(a) for a in asks)})" if asks else ""
    if methods == [ELICITATION]:
        return (
            f"Task {task_id} asks for input{asked} but this client has no elicitation "
            "handler: pass elicitation_handler= to Client(...) (or on_input= to "
            "call_tool_task) to answer it; a TasksClientExtension given in extensions= "
            "takes its own elicitation_handler= or on_input="
        )
    lacks = " (it has no elicitation handler and no on_input=)" if ELICITATION in methods else ""
    return (
        f"Task {task_id} asks for {', '.join(methods)}{asked}, which this client cannot "
        f"answer{lacks}: pass on_input= to call_tool_task (or to TasksClientExtension) to "
        "answer it; elicitations alone can also be answered by Client(elicitation_handler=...)"
    )


class InputAnswerer:
    """Answers the `inputRequests` of one task, each key once.

    Args:
        on_input: answers one request: `await on_input(key, request)` returns the
            result (an `ElicitResult` dict for elicitations), or `None` to leave it
            unanswered. Takes precedence over `elicitation_callback`.
        elicitation_callback: the SDK elicitation callback (`Client(elicitation_handler=)`
            builds one) for elicitations when `on_input` is not given.
        strict: raise `NoInputHandler` for requests neither can answer (otherwise an
            elicitation is answered `{"action": "cancel"}` and others are left alone).
    """

    def __init__(
        self,
        on_input: InputHandler | None = None,
        elicitation_callback: ElicitationFnT | None = None,
        *,
        strict: bool = True,
    ) -> None:
        self.on_input = on_input
        self.elicitation_callback = elicitation_callback
        self.strict = strict

    def can_answer(self, request: dict[str, Any]) -> bool:
        """Whether some handler here can answer `request`."""
        if self.on_input is not None:
            return True
        return request.get("method") == ELICITATION and self.elicitation_callback is not None

    def check(self, task_id: str, requests: dict[str, Any], answered: set[str]) -> None:
        """Raise `NoInputHandler` (when strict) if a new request cannot be answered."""
        if not self.strict:
            return
        stuck = {
            key: request
            for key, request in requests.items()
            if key not in answered and not self.can_answer(request)
        }
        if stuck:
            raise NoInputHandler(
                unanswerable_message(task_id, stuck), task_id=task_id, requests=stuck
            )

    async def answer(
        self,
        session: ClientSession,
        task_id: str,
        requests: dict[str, Any],
        answered: set[str],
    ) -> dict[str, Any]:
        """Answer the requests not yet in `answered` in one `tasks/update`; the answers sent.

        Raises:
            NoInputHandler: (strict) a request nothing here can answer; nothing was asked.
            MCPError: the server refused the `tasks/update` (e.g. -32602 naming a key).
                Nothing was consumed, so the keys sent leave `answered` again.
        """
        self.check(task_id, requests, answered)
        answers: dict[str, Any] = {}
        for key, request in requests.items():
            if key in answered:
                continue
            answered.add(key)
            answer = await self.answer_one(session, task_id, key, request)
            if answer is not None:
                answers[key] = answer
        if answers:
            try:
                await session.send_request(
                    UpdateTaskRequest(
                        params=UpdateTaskParams(taskId=task_id, inputResponses=answers)
                    ),
                    TaskState,
                )
            except MCPError:
                answered.difference_update(answers)
                raise
        return answers

    async def answer_one(
        self, session: ClientSession, task_id: str, key: str, request: dict[str, Any]
    ) -> dict[str, Any] | None:
        """One request's answer (`None`: leave it unanswered)."""
        if self.on_input is not None:
            return await self.on_input(key, request)
        if request.get("method") != ELICITATION:
            return None
        if self.elicitation_callback is None:
            return {"action": "cancel"}
        params = mcp_types.ElicitRequest.model_validate(
            {"method": ELICITATION, "params": request.get("params") or {}}
        ).params
        context = ClientRequestContext(
            session=session, request_id=f"task-{task_id}-{key}", meta=params.meta
        )
        result = await self.elicitation_callback(context, params)
        if isinstance(result, mcp_types.ErrorData):
            return {"action": "cancel"}
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
