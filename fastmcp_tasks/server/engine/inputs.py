"""Input in the middle of a task: outstanding requests, answers, and who waits for them.

A task asks for input by adding requests to the store under fresh keys (the
task moves to `input_required`); the client reads them from `tasks/get` and
answers with `tasks/update`. The answer goes into the store; the store's change
feed tells this process's `InputBroker`, which hands it to the coroutine waiting
on that key. Nothing here talks to a request handler directly, so the waiting
run and the answering client may be in different processes.

Keys are minted here, unique over a task's whole life and never reused (C30).

The answer rule (`answer_problem`), applied by `tasks/update` to answers for
keys that are outstanding (other keys are ignored, C35): an answer must be the
result type of its request (`ElicitResult`, `CreateMessageResult`,
`ListRootsResult`); an accepted elicitation's `content` must satisfy the
request's `requestedSchema` (the flat primitive-property subset elicitation
allows: types, `required`, `enum`/`oneOf`/`anyOf` choices, string length,
numeric bounds, array item choices and counts). A field the schema's
`properties` does not name is allowed, as JSON Schema allows it, unless the
schema says `"additionalProperties": false`; when `additionalProperties` is a
schema, such a field's value must satisfy it (the same subset). A violation
rejects the whole update with -32602 naming the key and the problem; nothing
is consumed and the key stays outstanding.

What the tool then receives is FastMCP's own conversion of the content
(`handle_elicit_accept`, see `engine.context`), exactly as a foreground
`ctx.elicit` converts the same answer: an extra field reaches a model that
keeps extras (`extra="allow"`) and is dropped by one that ignores them.
"""

from __future__ import annotations

import functools
import itertools
import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types
from pydantic import ValidationError

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.engine.supervision import retry_store
from fastmcp_tasks.stores.base import TaskStore

ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"
ROOTS = "roots/list"
_ACTIONS = frozenset({"accept", "decline", "cancel"})
_RESULT_MODELS: dict[str, type[mcp_types.Result]] = {
    SAMPLE: mcp_types.CreateMessageResult,
    ROOTS: mcp_types.ListRootsResult,
}
#: The capability a client declares for each input kind (C31).
CAPABILITY_OF = {ELICIT: "elicitation", SAMPLE: "sampling", ROOTS: "roots"}

_sequence = itertools.count(1)


def new_key(kind: str) -> str:
    """A key no other request of any task will ever carry."""
    return f"{kind}-{next(_sequence)}-{secrets.token_urlsafe(6)}"


def elicitation_request(message: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The `inputRequests` entry for a form elicitation, as a foreground call would send it."""
    return {
        "method": ELICIT,
        "params": {"mode": "form", "message": message, "requestedSchema": schema},
    }


# --- the answer rule -------------------------------------------------------------------


def answer_problem(request: Mapping[str, Any], answer: Any) -> str | None:
    """Why `answer` cannot answer `request`, or `None` when it can."""
    if not isinstance(answer, dict):
        return "an answer must be a JSON object"
    method = request.get("method")
    if method == ELICIT:
        action = answer.get("action")
        if not isinstance(action, str) or action not in _ACTIONS:
            return f"action must be one of accept, decline, cancel; got {action!r}"
        if action != "accept":
            return None
        content = answer.get("content", {})
        if not isinstance(content, dict):
            return "content must be an object"
        schema = (request.get("params") or {}).get("requestedSchema") or {}
        return _content_problem(schema, content)
    model = _RESULT_MODELS.get(str(method))
    if model is None:
        return f"cannot answer a request of method {method!r}"
    try:
        model.model_validate(answer)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "answer"
        return f"not a valid {model.__name__}: {where}: {first['msg']}"
    return None


def _content_problem(schema: Mapping[str, Any], content: dict[str, Any]) -> str | None:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    additional = schema.get("additionalProperties", True)
    for name in schema.get("required") or ():
        if name not in content:
            return f"content is missing required field {name!r}"
    for name, value in content.items():
        spec = properties.get(name)
        if spec is None:
            if additional is False:
                return f"content has unknown field {name!r}"
            if not isinstance(additional, Mapping):  # absent or true: anything goes
                continue
            spec = additional
        problem = _value_problem(spec, value)
        if problem is not None:
            return f"content field {name!r} {problem}"
    return None


def _choices(spec: Mapping[str, Any]) -> list[Any] | None:
    if "enum" in spec:
        return list(spec["enum"])
    for key in ("oneOf", "anyOf"):
        if key in spec:
            return [option.get("const") for option in spec[key] if isinstance(option, dict)]
    return None


def _value_problem(spec: Mapping[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be a boolean"
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a {kind}"
        if kind == "integer" and isinstance(value, float) and not value.is_integer():
            return "must be an integer"
        if "minimum" in spec and value < spec["minimum"]:
            return f"must be >= {spec['minimum']}"
        if "maximum" in spec and value > spec["maximum"]:
            return f"must be <= {spec['maximum']}"
        return None
    if kind == "string":
        if not isinstance(value, str):
            return "must be a string"
        choices = _choices(spec)
        if choices is not None and value not in choices:
            return f"must be one of {choices}"
        if "minLength" in spec and len(value) < spec["minLength"]:
            return f"must be at least {spec['minLength']} characters"
        if "maxLength" in spec and len(value) > spec["maxLength"]:
            return f"must be at most {spec['maxLength']} characters"
        return None
    if kind == "array":
        if not isinstance(value, list):
            return "must be an array"
        choices = _choices(spec.get("items") or {})
        if choices is not None and any(item not in choices for item in value):
            return f"items must be among {choices}"
        if "minItems" in spec and len(value) < spec["minItems"]:
            return f"must have at least {spec['minItems']} items"
        if "maxItems" in spec and len(value) > spec["maxItems"]:
            return f"must have at most {spec['maxItems']} items"
        return None
    choices = _choices(spec)
    if choices is not None and value not in choices:
        return f"must be one of {choices}"
    return None


# --- waiting for answers ------------------------------------------------------------------


@dataclass(eq=False)
class _Waiter:
    event: anyio.Event = field(default_factory=anyio.Event)
    answer: Any = None


class InputBroker:
    """Parks running tasks on input requests and wakes them when answers arrive."""

    def __init__(self, store: TaskStore, history: HistoryWriter | None = None) -> None:
        self.store = store
        self.history = history if history is not None else HistoryWriter(store)
        self._waiters: dict[str, dict[str, _Waiter]] = {}

    async def ask(
        self,
        task_id: str,
        requests: dict[str, dict[str, Any]],
        *,
        wait_seconds: float | None = None,
        status_message: str | None = None,
    ) -> dict[str, Any]:
        """Add `requests` and wait for the answers; keys unanswered in `wait_seconds` are left out.

        Unanswered keys are withdrawn from the task (later answers are ignored).
        Raises `LookupError` when the task is gone or already finished.
        """
        waiters = {key: _Waiter() for key in requests}
        mine = self._waiters.setdefault(task_id, {})
        mine.update(waiters)
        try:
            parked = await retry_store(  # a blip delays the question, never loses it
                functools.partial(
                    self.store.request_input, task_id, requests, status_message=status_message
                )
            )
            if parked is None:
                raise LookupError(f"task {task_id} is not active")
            self.history.note(task_id, "input_requested", keys=sorted(requests))
            with anyio.move_on_after(math.inf if wait_seconds is None else wait_seconds):
                for waiter in waiters.values():
                    await waiter.event.wait()
            pending = frozenset(key for key, w in waiters.items() if not w.event.is_set())
            if pending:
                await retry_store(functools.partial(self.store.withdraw_input, task_id, pending))
                late = await retry_store(functools.partial(self._collect, task_id, pending))
                for key, answer in late.items():  # answered meanwhile
                    waiters[key].answer = answer
                    waiters[key].event.set()
            return {key: w.answer for key, w in waiters.items() if w.event.is_set()}
        finally:
            for key in waiters:
                mine.pop(key, None)
            if not mine:
                self._waiters.pop(task_id, None)

    async def _collect(self, task_id: str, keys: frozenset[str]) -> dict[str, Any]:
        """The stored answers among `keys`, read first and removed after.

        Reading before removing means a removal whose reply is lost (a store blip)
        loses no answer: what is read is handed over, and a leftover stored answer
        is harmless, since keys are never reused.
        """
        record = await self.store.get(task_id)
        stored = (record.answers or {}) if record is not None else {}
        found = {key: stored[key] for key in keys if key in stored}
        if found:
            try:
                await self.store.take_answers(task_id, frozenset(found))
            except StoreError:
                pass  # left in the store; never asked for again
        return found

    async def answered(self, task_id: str, keys: list[str]) -> None:
        """Hand answers that reached the store to the coroutines waiting here."""
        mine = self._waiters.get(task_id)
        if not mine:
            return
        wanted = frozenset(key for key in keys if key in mine)
        if not wanted:
            return
        for key, answer in (await self._collect(task_id, wanted)).items():
            waiter = mine.get(key)
            if waiter is not None and not waiter.event.is_set():
                waiter.answer = answer
                waiter.event.set()
