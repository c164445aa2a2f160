"""The contract of `settle` and `settle_message` (`stores.settling`): `transition` and
`set_status_message` without the record read back.

For a store that offers them, each test makes the same change to two like tasks, one
with `transition` (`set_status_message`) and one with `settle` (`settle_message`), and
compares what each call answered and what the store keeps afterwards. A store without
`settle` skips these tests (the engine then uses its `transition`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fastmcp_tasks.stores.base import TaskRecord, TaskStore
from fastmcp_tasks.stores.settling import lean_method
from fastmcp_tasks.testing.base import ContractBase, make_record

#: What differs between two like tasks changed a moment apart.
_OWN = ("task_id", "created_at", "updated_at", "terminal_at", "expires_at")

#: (status, fields) of each change compared, from a `working` task (`working`: from one
#: waiting for input).
CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("completed", {"result": {"content": [{"type": "text", "text": "é \ud800"}]}}),
    ("failed", {"error": {"code": -32603, "message": "boom"}, "status_message": "boom"}),
    ("cancelled", {"status_message": "Cancelled by the client"}),
    ("working", {"status_message": "again"}),
]


def _kept(record: TaskRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    kept = dataclasses.asdict(record)
    for name in _OWN:
        kept.pop(name, None)
    return kept


class SettleContract(ContractBase):
    """`settle` against the same store's `transition`."""

    async def _pair(self, store: TaskStore) -> tuple[TaskRecord, TaskRecord]:
        if lean_method(store, "settle", "transition") is None:
            pytest.skip("the store under test has no settle (stores.settling)")
        made = []
        for _ in range(2):
            record = make_record(arguments={"big": "x" * 2000}, status_message="running")
            await store.create(record)
            made.append(record)
        return made[0], made[1]

    @pytest.mark.parametrize(("status", "fields"), CHANGES, ids=[c[0] for c in CHANGES])
    async def test_settle_changes_a_task_as_transition_does(
        self, store: TaskStore, status: str, fields: dict[str, Any]
    ) -> None:
        told, settled = await self._pair(store)
        if status == "working":  # back from waiting for input
            for record in (told, settled):
                asked = {"k": {"method": "elicitation/create", "params": {"message": "?"}}}
                assert await store.request_input(record.task_id, asked) is not None
        changed = await store.transition(told.task_id, status, **dict(fields))  # type: ignore[arg-type]
        applied = await store.settle(settled.task_id, status, **dict(fields))  # type: ignore[attr-defined]
        assert changed is not None and applied is True
        expected = _kept(await store.get(told.task_id))
        assert _kept(await store.get(settled.task_id)) == expected
        assert _kept(changed) == expected

    async def test_settle_refuses_what_transition_refuses(self, store: TaskStore) -> None:
        told, settled = await self._pair(store)
        for record in (told, settled):
            assert await store.transition(record.task_id, "completed", result={}) is not None
        settle = store.settle  # type: ignore[attr-defined]
        assert await settle(settled.task_id, "failed", error={"code": 1, "message": "x"}) is False
        assert (
            await store.transition(told.task_id, "failed", error={"code": 1, "message": "x"})
            is None
        )
        assert _kept(await store.get(settled.task_id)) == _kept(await store.get(told.task_id))
        assert await settle("no-such-task", "completed", result={}) is False
        other = make_record()
        await store.create(other)
        unexpected = frozenset({"input_required"})
        assert await settle(other.task_id, "completed", expect=unexpected, result={}) is False
        found = await store.get(other.task_id)
        assert found is not None and found.status == "working"

    async def test_settle_message_sets_a_message_as_set_status_message_does(
        self, store: TaskStore
    ) -> None:
        told, settled = await self._pair(store)
        say = lean_method(store, "settle_message", "set_status_message")
        if say is None:
            pytest.skip("the store under test has no settle_message (stores.settling)")
        for message in ("step 1", "step 1", None, "é \ud800"):  # twice: unchanged
            changed = await store.set_status_message(told.task_id, message)
            assert changed is not None and await say(settled.task_id, message) is True
            expected = _kept(await store.get(told.task_id))
            assert _kept(await store.get(settled.task_id)) == expected
        for record in (told, settled):
            assert await store.transition(record.task_id, "cancelled") is not None
        assert await store.set_status_message(told.task_id, "late") is None
        assert await say(settled.task_id, "late") is False
        assert await say("no-such-task", "x") is False
        assert _kept(await store.get(settled.task_id)) == _kept(await store.get(told.task_id))


__all__ = ["SettleContract"]
