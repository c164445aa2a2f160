"""The store with payloads sealed on the way in and opened on the way out.

`SealedStore` wraps a `TaskStore` for `Payloads` (`server.payloads`): the calls that
write a payload (`create`, `transition`, `request_input`, `answer_input`,
`save_step`) seal it under `seal="all"`; every call that returns records (or
answers, or steps) opens what this process can. Every other method and attribute is
the wrapped store's; `inner` is it (capability checks look through, as they do
through `MonitoredStore`). The operator tools (CLI, dashboard) read through one too,
with the keys of their environment and nothing sealed on the way in.

Status messages stay readable. The ones the engine copies from a payload (a failure's
error message, an elicitation's question) are replaced under `seal="all"` by
`FAILED_MESSAGE` and `INPUT_MESSAGE`; the payload itself reaches the client intact.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastmcp_tasks.server.payloads import Payloads
from fastmcp_tasks.server.sealing import Sealer
from fastmcp_tasks.stores.base import TaskChange, TaskRecord, TaskStore
from fastmcp_tasks.stores.peeking import peek
from fastmcp_tasks.stores.settling import settle, settle_message
from fastmcp_tasks.stores.steps import StepRecord

#: The status message of a task whose error (sealed) would have given its own.
FAILED_MESSAGE = "Failed"
#: The status message of a task parked for input, whose question (sealed) would be it.
INPUT_MESSAGE = "Waiting for input"


class SealedStore:
    """A `TaskStore` whose payloads are sealed at rest (module docstring)."""

    def __init__(self, inner: TaskStore, payloads: Payloads) -> None:
        self.inner = inner
        self.payloads = payloads
        self.scheme = inner.scheme
        self.durable = inner.durable

    async def create(self, record: TaskRecord, **options: Any) -> TaskRecord | None:
        payloads = self.payloads
        stored = payloads.record(record) if payloads.seal_all else record
        found = await self.inner.create(stored, **options)
        return None if found is None else payloads.opened(found)

    async def transition(self, task_id: str, status: Any, **fields: Any) -> TaskRecord | None:
        found = await self.inner.transition(task_id, status, **self._sealed(task_id, fields))
        return None if found is None else self.payloads.opened(found)

    async def settle_message(self, task_id: str, message: str | None) -> bool:
        """`stores.settling`: as the inner store sets a message (none is sealed)."""
        return await settle_message(self.inner, task_id, message)

    async def peek(self, task_id: str) -> TaskRecord | None:
        """`stores.peeking`: opened as `get` is, whatever the inner store offers."""
        found = await peek(self.inner, task_id)
        return None if found is None else self.payloads.opened(found)

    async def settle(self, task_id: str, status: Any, **fields: Any) -> bool:
        """`stores.settling`: sealed as `transition` is, whatever the inner store offers."""
        return await settle(self.inner, task_id, status, **self._sealed(task_id, fields))

    def _sealed(self, task_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        """A status change's fields with its result or error sealed (`seal_all`)."""
        payloads = self.payloads
        if payloads.seal_all:
            if fields.get("result") is not None:
                fields["result"] = payloads.result(task_id, fields["result"])
            if (error := fields.get("error")) is not None:
                if fields.get("status_message") == error.get("message"):
                    fields["status_message"] = FAILED_MESSAGE  # the error's words are sealed
                fields["error"] = payloads.error(task_id, error)
        return fields

    async def request_input(
        self, task_id: str, requests: dict[str, Any], **fields: Any
    ) -> TaskRecord | None:
        payloads = self.payloads
        if payloads.seal_all:
            if fields.get("status_message") is not None:  # an elicitation's question
                fields["status_message"] = INPUT_MESSAGE
            requests = payloads.entries(task_id, "input", requests)
        found = await self.inner.request_input(task_id, requests, **fields)
        return None if found is None else payloads.opened(found)

    async def answer_input(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any] | None:
        payloads = self.payloads
        stored = payloads.entries(task_id, "answer", responses) if payloads.seal_all else responses
        accepted = await self.inner.answer_input(task_id, stored)
        return None if accepted is None else {key: responses[key] for key in accepted}

    async def take_answers(self, task_id: str, keys: frozenset[str]) -> dict[str, Any]:
        taken = await self.inner.take_answers(task_id, keys)
        return self.payloads.opened_entries(task_id, "answer", taken)

    async def save_step(self, task_id: str, name: str, value_json: str, at: float) -> bool:
        payloads = self.payloads
        if payloads.seal_all:
            value_json = payloads.step(task_id, name, value_json)
        saved: bool = await self.inner.save_step(task_id, name, value_json, at)  # type: ignore[attr-defined]
        return saved

    async def steps(self, task_id: str) -> list[StepRecord]:
        found: list[StepRecord] = await self.inner.steps(task_id)  # type: ignore[attr-defined]
        return [self.payloads.opened_step(task_id, step) for step in found]

    def changes(
        self, task_ids: frozenset[str] | None = None, kinds: frozenset[str] | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[TaskChange]]:
        return self.inner.changes(task_ids, kinds)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)  # AttributeError when the store lacks it
        if not inspect.iscoroutinefunction(target):
            return target
        opened_any = self.payloads.opened_any

        async def opening(*args: Any, **kw: Any) -> Any:
            return opened_any(await target(*args, **kw))

        opening.__name__ = name
        self.__dict__[name] = opening  # found directly from now on
        return opening

    def __repr__(self) -> str:
        return f"SealedStore({self.inner!r})"


def sealed_store(store: TaskStore, sealer: Sealer | None, seal_all: bool) -> TaskStore:
    """`store` through `SealedStore` when this process has keys, else `store` itself (a
    process without keys cannot open anything: the users of a sealed value refuse it)."""
    if sealer is None:
        return store
    return SealedStore(store, Payloads(sealer, seal_all))
