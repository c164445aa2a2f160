"""The contract of `peek` (`stores.peeking`): `get` without `arguments` and `context`.

For a store that offers it, `peek` answers exactly what the same store's `get` answers
for the same task, but for those two fields, which it leaves `None`; and `None` where
`get` does. A store without `peek` skips these tests (the engine then uses `get`).
"""

from __future__ import annotations

import dataclasses

import pytest

from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.settling import lean_method
from fastmcp_tasks.testing.base import ContractBase, make_record


class PeekContract(ContractBase):
    """`peek` against the same store's `get`."""

    async def test_peek_answers_get_without_the_payloads(self, store: TaskStore) -> None:
        peek = lean_method(store, "peek", "get")
        if peek is None:
            pytest.skip("the store under test has no peek (stores.peeking)")
        context = {"related": ["other"], "inputKinds": ["elicitation"]}
        record = make_record(arguments={"big": "x" * 5000}, context=context, owner="alice")
        await store.create(record)
        asked = {"k": {"method": "elicitation/create", "params": {"message": "?"}}}
        assert await store.request_input(record.task_id, asked) is not None
        for _ in range(2):  # waiting for input, then completed
            full, lean = await store.get(record.task_id), await peek(record.task_id)
            assert full is not None and full.arguments == {"big": "x" * 5000}
            assert lean == dataclasses.replace(full, arguments=None, context=None)
            await store.transition(record.task_id, "completed", result={"content": []})
        assert await peek("no-such-task") is None


__all__ = ["PeekContract"]
