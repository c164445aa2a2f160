"""Sealing a task's payloads at rest (`TasksExtension(seal="all")`) and opening them.

`Payloads` knows the fields (`stores.sealed` says how a sealed value looks) and
seals or opens one record at a time with the configured keys (`server.sealing`):
each value is bound to its task and its place (`<task id> RS <field>`), so a sealed
value copied to another task or another field does not open there.

`SealedStore` wraps the store the engine and the request handlers use (inside
`MonitoredStore`): under `seal="all"` every payload is sealed on its way in, and in
every process with keys every sealed payload is opened on its way out, so the tool
and the client see the values they would see without sealing. Dedupe keys and the
idempotency check read plain values (hashed before anything is sealed; compared
after opening). A value this process cannot open (no key, another key) is left
sealed for the code using it to refuse clearly (`unopened_reason`).

What stays readable: the tool name, status, times, owner key, application, status
message, error code, whether a result is a tool error, the history's kinds and times.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.server.sealing import KEY_ENV, Sealer, SealError
from fastmcp_tasks.stores.base import TaskRecord, encode_json
from fastmcp_tasks.stores.sealed import MARK, is_sealed, is_sealed_json, sealed_fields
from fastmcp_tasks.stores.steps import StepRecord

#: The variable read when `TasksExtension(seal=None)`.
SEAL_ENV = "FASTMCP_TASKS_SEAL"
#: `caller`: only the caller's token, headers and session (with a key); `all`: payloads too.
SEAL_MODES = ("caller", "all")
#: The keys of `TaskRecord.context` that carry what the client sent.
CONTEXT_PAYLOADS = ("inputResponses", "requestState")
_RS = "\x1e"


def seal_mode(setting: str | None, sealer: Sealer | None) -> bool:
    """Whether `seal=setting` (or `SEAL_ENV`) seals every payload; checked against the keys."""
    if setting is None:
        setting = os.environ.get(SEAL_ENV, "").strip() or "caller"
    if setting not in SEAL_MODES:
        raise ConfigurationError(f"seal must be one of {SEAL_MODES}, got {setting!r}")
    if setting == "all" and sealer is None:
        raise ConfigurationError(
            f'seal="all" needs an encryption key: pass encryption_key=... or set {KEY_ENV}'
        )
    return setting == "all"


def unopened_reason(record: TaskRecord, keyed: bool) -> str | None:
    """Why a process with (`keyed`) or without keys cannot use `record`'s payloads."""
    found = sealed_fields(
        record.arguments, record.result_json, record.error, record.input_requests, record.answers
    )
    if not found:
        return None
    what = " and ".join(found)
    if not keyed:
        return f"the task's {what} are sealed and this process has no encryption key: set {KEY_ENV}"
    return (
        f"the task's {what} are sealed and this process cannot decrypt them with its keys: "
        f"set {KEY_ENV} to the key of the process that accepted the task"
    )


def unreadable(record: TaskRecord) -> str | None:
    """Why the wire cannot show `record` (its result, error or input requests are sealed
    with keys this process lacks); `None` when it can."""
    status = record.status
    if status == "completed":
        sealed = is_sealed_json(record.result_json)
    elif status == "failed":
        sealed = is_sealed(record.error)
    elif status == "input_required":
        sealed = any(is_sealed(v) for v in (record.input_requests or {}).values())
    else:
        return None
    if not sealed:
        return None
    return (
        "the task's payloads are sealed and this server cannot open them: set "
        f"{KEY_ENV} to the key of the processes that run its tasks"
    )


class Payloads:
    """Seals (with `seal_all`) and opens the payloads of task records."""

    def __init__(self, sealer: Sealer | None, seal_all: bool) -> None:
        if seal_all and sealer is None:
            raise ConfigurationError('seal="all" needs an encryption key')
        self.sealer = sealer
        self.seal_all = seal_all

    # --- sealing -----------------------------------------------------------------

    def _sealed(self, task_id: str, place: str, text: str) -> str:
        assert self.sealer is not None
        return self.sealer.seal_text(f"{task_id}{_RS}{place}", text)

    def value(self, task_id: str, place: str, value: Any) -> dict[str, Any]:
        """`value` sealed for `place` of the task."""
        return {MARK: self._sealed(task_id, place, encode_json(value))}

    def entries(self, task_id: str, kind: str, entries: dict[str, Any]) -> dict[str, Any]:
        """Each value of `entries` (input requests, answers) sealed under its key."""
        return {key: self.value(task_id, f"{kind}:{key}", v) for key, v in entries.items()}

    def result(self, task_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """A `CallToolResult` sealed; whether it is a tool error stays readable."""
        sealed = self._sealed(task_id, "result", encode_json(result))
        return {MARK: sealed, "isError": result.get("isError") is True}

    def error(self, task_id: str, error: dict[str, Any]) -> dict[str, Any]:
        """A JSON-RPC error sealed; its code stays readable."""
        sealed = self.value(task_id, "error", error)
        return {"code": error.get("code"), "message": "sealed", **sealed}

    def record(self, record: TaskRecord) -> TaskRecord:
        """A copy of `record` with its payloads sealed."""
        tid = record.task_id
        changes: dict[str, Any] = {}
        if record.arguments is not None:
            changes["arguments"] = self.value(tid, "arguments", record.arguments)
        if record.input_requests:
            changes["input_requests"] = self.entries(tid, "input", record.input_requests)
        if record.answers:
            changes["answers"] = self.entries(tid, "answer", record.answers)
        if record.result_json is not None:
            sealed = self._sealed(tid, "result", record.result_json)
            result = json.loads(record.result_json)
            flag = isinstance(result, dict) and result.get("isError") is True
            changes["result_json"] = encode_json({MARK: sealed, "isError": flag})
        if record.error is not None:
            changes["error"] = self.error(tid, record.error)
        context = record.context
        if context and any(key in context for key in CONTEXT_PAYLOADS):
            changes["context"] = {
                key: self.value(tid, f"context:{key}", v) if key in CONTEXT_PAYLOADS else v
                for key, v in context.items()
            }
        return dataclasses.replace(record, **changes) if changes else record

    def step(self, task_id: str, name: str, value_json: str) -> str:
        """A step's value (JSON text) sealed, as JSON text."""
        return encode_json({MARK: self._sealed(task_id, f"step:{name}", value_json)})

    # --- opening (never raises: what cannot be opened stays sealed) ------------------

    def _open(self, task_id: str, place: str, sealed: Any) -> str | None:
        if self.sealer is None or not isinstance(sealed, dict):
            return None
        text = sealed.get(MARK)
        try:
            return self.sealer.open_text(f"{task_id}{_RS}{place}", str(text))
        except SealError:
            return None

    def _opened_value(self, task_id: str, place: str, value: Any) -> Any:
        if not is_sealed(value):
            return value
        text = self._open(task_id, place, value)
        return value if text is None else json.loads(text)

    def opened(self, record: TaskRecord) -> TaskRecord:
        """`record` with every payload this process can open opened (itself when none)."""
        tid = record.task_id
        changes: dict[str, Any] = {}
        if is_sealed(record.arguments):
            changes["arguments"] = self._opened_value(tid, "arguments", record.arguments)
        if is_sealed_json(record.result_json):
            text = self._open(tid, "result", json.loads(record.result_json or "{}"))
            if text is not None:
                changes["result_json"] = text
        if is_sealed(record.error):
            changes["error"] = self._opened_value(tid, "error", record.error)
        for field, kind in (("input_requests", "input"), ("answers", "answer")):
            entries = getattr(record, field)
            if entries and any(is_sealed(v) for v in entries.values()):
                changes[field] = self.opened_entries(tid, kind, entries)
        context = record.context
        if context and any(is_sealed(context.get(key)) for key in CONTEXT_PAYLOADS):
            changes["context"] = {
                key: self._opened_value(tid, f"context:{key}", v) for key, v in context.items()
            }
        return dataclasses.replace(record, **changes) if changes else record

    def opened_entries(self, task_id: str, kind: str, entries: dict[str, Any]) -> dict[str, Any]:
        return {k: self._opened_value(task_id, f"{kind}:{k}", v) for k, v in entries.items()}

    def opened_step(self, task_id: str, step: StepRecord) -> StepRecord:
        if not is_sealed_json(step.value_json):
            return step
        text = self._open(task_id, f"step:{step.name}", json.loads(step.value_json))
        return step if text is None else dataclasses.replace(step, value_json=text)

    def opened_any(self, value: Any) -> Any:
        """A store call's answer with the records in it opened (a record, a list or a
        dict of them); anything else as it is."""
        if isinstance(value, TaskRecord):
            return self.opened(value)
        if isinstance(value, list) and value and isinstance(value[0], TaskRecord):
            return [self.opened(r) for r in value]
        if isinstance(value, dict) and value:
            first = next(iter(value.values()))
            if isinstance(first, TaskRecord):
                return {k: self.opened(r) for k, r in value.items()}
        return value


#: What an operator view shows in place of a payload it cannot open.
SEALED_HINT = f"sealed: set {KEY_ENV} to read it"
_readers: dict[str, Payloads] = {}


def for_operators(record: TaskRecord) -> TaskRecord:
    """`record` as the CLI and the dashboard show it: payloads opened with the keys of
    this process's environment (`KEY_ENV`), and each one it cannot open replaced by
    `SEALED_HINT` in a value of the field's shape (a result keeps its `isError`)."""
    setting = os.environ.get(KEY_ENV, "")
    reader = _readers.get(setting)
    if reader is None:
        reader = _readers[setting] = Payloads(Sealer.configured(None), seal_all=False)
    if not sealed_fields(
        record.arguments, record.result_json, record.error, record.input_requests, record.answers
    ):
        return record
    record = reader.opened(record)
    hint = {"sealed": SEALED_HINT}
    changes: dict[str, Any] = {}
    if is_sealed(record.arguments):
        changes["arguments"] = hint
    if is_sealed_json(record.result_json):
        flag = json.loads(record.result_json or "{}").get("isError") is True
        content = [{"type": "text", "text": SEALED_HINT}]
        changes["result_json"] = encode_json({"content": content, "isError": flag})
    if is_sealed(record.error):
        changes["error"] = {"code": (record.error or {}).get("code"), "message": SEALED_HINT}
    for field in ("input_requests", "answers"):
        entries = getattr(record, field)
        if entries and any(is_sealed(v) for v in entries.values()):
            shown = {"method": "sealed", "params": {"message": SEALED_HINT}}
            changes[field] = {k: shown if is_sealed(v) else v for k, v in entries.items()}
    return dataclasses.replace(record, **changes) if changes else record
