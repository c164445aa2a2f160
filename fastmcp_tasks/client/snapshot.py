"""`TaskSnapshot`: one task state as the client saw it, typed and read-only.

    snap = await task.status()
    print(snap.status, snap.status_message)     # attributes, as the official package has
    print(snap["status"], snap.get("statusMessage"))   # wire keys, as our dicts had

A snapshot wraps the DetailedTask fields of one `tasks/get` answer (or one
pushed `notifications/tasks` state, or a `CreateTaskResult`): attributes in
snake_case (`task_id`, `status`, `status_message`, `result`, `error`,
`input_requests`, `ttl_ms`, `poll_interval_ms`, `created_at`,
`last_updated_at`), and a read-only `Mapping[str, Any]` over the wire keys
(`taskId`, `statusMessage`, ...). A snapshot holds its own deep copy of the
state, and `as_dict()` / `model_dump()` return another one, so nothing a caller
changes reaches the handle the snapshot came from.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from fastmcp_tasks.wire.names import TERMINAL_STATUSES

#: Attribute -> wire key, for `model_dump(by_alias=False)` and the docs.
FIELDS: dict[str, str] = {
    "task_id": "taskId",
    "status": "status",
    "status_message": "statusMessage",
    "created_at": "createdAt",
    "last_updated_at": "lastUpdatedAt",
    "ttl_ms": "ttlMs",
    "poll_interval_ms": "pollIntervalMs",
    "result": "result",
    "error": "error",
    "input_requests": "inputRequests",
}
_ENVELOPE = ("resultType", "_meta")


class TaskSnapshot(Mapping[str, Any]):
    """One task state: attribute access (snake_case) and read access by wire key.

    Args:
        state: the DetailedTask fields (wire keys); `resultType` and `_meta` are dropped.
    """

    __slots__ = ("_state",)

    def __init__(self, state: Mapping[str, Any]) -> None:
        self._state: dict[str, Any] = {
            k: copy.deepcopy(v) for k, v in state.items() if k not in _ENVELOPE
        }

    @classmethod
    def model_validate(cls, obj: Mapping[str, Any]) -> TaskSnapshot:
        """A snapshot of a wire dict (a `tasks/get` result), for code written for pydantic."""
        return cls(obj)

    # --- the Mapping over wire keys -------------------------------------------

    def __getitem__(self, key: str) -> Any:
        return self._state[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __repr__(self) -> str:
        message = f", status_message={self.status_message!r}" if self.status_message else ""
        return f"TaskSnapshot(task_id={self.task_id!r}, status={self.status!r}{message})"

    def as_dict(self) -> dict[str, Any]:
        """A deep copy of the wire dict (camelCase keys)."""
        return copy.deepcopy(self._state)

    def model_dump(self, *, by_alias: bool = True) -> dict[str, Any]:
        """A deep copy of the fields: wire keys, or attribute names with `by_alias=False`."""
        if by_alias:
            return self.as_dict()
        wire_to_name = {wire: name for name, wire in FIELDS.items()}
        return {wire_to_name.get(k, k): copy.deepcopy(v) for k, v in self._state.items()}

    # --- attributes -------------------------------------------------------------

    @property
    def task_id(self) -> str | None:
        """The task's id (`None` only for a call the server answered synchronously)."""
        value = self._state.get("taskId")
        return None if value is None else str(value)

    @property
    def status(self) -> str:
        """`working`, `input_required`, `completed`, `failed` or `cancelled`."""
        return str(self._state.get("status", ""))

    @property
    def status_message(self) -> str | None:
        """The server's latest human-readable message, if any."""
        value = self._state.get("statusMessage")
        return None if value is None else str(value)

    @property
    def result(self) -> dict[str, Any] | None:
        """The `CallToolResult` (as JSON) of a `completed` task."""
        return self._dict("result")

    @property
    def error(self) -> dict[str, Any] | None:
        """The JSON-RPC error object (`code`, `message`, `data`) of a `failed` task."""
        return self._dict("error")

    @property
    def input_requests(self) -> dict[str, Any] | None:
        """What a task in `input_required` waits for: key to request."""
        return self._dict("inputRequests")

    @property
    def ttl_ms(self) -> int | None:
        """How long the server keeps the task after creation, in ms (`None`: unlimited)."""
        return self._int("ttlMs")

    @property
    def poll_interval_ms(self) -> int | None:
        """How often the server wants to be polled, in ms."""
        return self._int("pollIntervalMs")

    @property
    def created_at(self) -> str | None:
        """When the task was created (ISO 8601)."""
        value = self._state.get("createdAt")
        return None if value is None else str(value)

    @property
    def last_updated_at(self) -> str | None:
        """When the task last changed (ISO 8601)."""
        value = self._state.get("lastUpdatedAt")
        return None if value is None else str(value)

    @property
    def terminal(self) -> bool:
        """Whether the status is `completed`, `failed` or `cancelled`."""
        return self.status in TERMINAL_STATUSES

    def _dict(self, key: str) -> dict[str, Any] | None:
        value = self._state.get(key)
        return value if isinstance(value, dict) else None

    def _int(self, key: str) -> int | None:
        value = self._state.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value)
