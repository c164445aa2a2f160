"""How a sealed payload looks in a store, for the code that must recognise one.

Under `TasksExtension(seal="all")` (`server.payloads`) a task's payloads are kept
sealed: arguments, each input request and answer, the result, the error, the MRTR
answers and state of its context, and its durable steps' values. Each sealed value
is a JSON object holding `MARK` (the sealed text), so every field keeps its type in
every store:

- `arguments`, each value of `input_requests` / `answers`, `context["inputResponses"]`
  and `context["requestState"]`: `{"$sealed": "<sealed text>"}`;
- the result: `{"$sealed": "...", "isError": <bool>}`: whether the tool reported an
  error stays readable, so operators count tool errors without the key;
- the error: `{"code": <code>, "message": "sealed", "$sealed": "..."}`;
- a step's value: the JSON text of `{"$sealed": "..."}`.

A process holding the key opens them as it reads (`server.payloads.SealedStore`); a
value it cannot open stays in this form, and whoever uses it says so (a worker fails
the task, `tasks/get` answers -32603, operator views show "sealed").
"""

from __future__ import annotations

from typing import Any

#: The key of a sealed value's sealed text.
MARK = "$sealed"
#: How the JSON text of a sealed result or step value begins.
JSON_PREFIX = '{"$sealed":'
#: What operator views show in place of a payload they cannot open.
SHOWN = "sealed"


def is_sealed(value: Any) -> bool:
    """Whether `value` (a record field) is a sealed payload."""
    return isinstance(value, dict) and MARK in value


def is_sealed_json(text: str | None) -> bool:
    """Whether `text` (a stored result or step value) is a sealed payload."""
    return text is not None and text.startswith(JSON_PREFIX)


def sealed_fields(
    arguments: Any, result_json: str | None, error: Any, requests: Any, answers: Any
) -> list[str]:
    """The names of the payloads among these fields that are still sealed."""
    found = []
    if is_sealed(arguments):
        found.append("arguments")
    if is_sealed_json(result_json):
        found.append("result")
    if is_sealed(error):
        found.append("error")
    if isinstance(requests, dict) and any(is_sealed(v) for v in requests.values()):
        found.append("input requests")
    if isinstance(answers, dict) and any(is_sealed(v) for v in answers.values()):
        found.append("answers")
    return found
