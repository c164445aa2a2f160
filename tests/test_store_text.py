"""Text a client or a tool may produce that is not valid UTF-8 (a lone surrogate) is kept by
every store: JSON payloads exactly, a plain status message with U+FFFD in its place."""

from __future__ import annotations

import pytest

from fastmcp_tasks import TaskStore
from fastmcp_tasks.stores.base import encode_json, storable_text
from tests.test_store_contract import record, store

pytestmark = pytest.mark.anyio

__all__ = ["store"]  # the contract's parametrized fixture

LONE = "\ud800"


async def test_payloads_with_lone_surrogates_round_trip(store: TaskStore) -> None:
    task = record()
    task.arguments = {"text": f"a{LONE}b", "é": "ü"}
    await store.create(task)
    assert (await store.get(task.task_id)).arguments == {"text": f"a{LONE}b", "é": "ü"}  # type: ignore[union-attr]
    await store.request_input(task.task_id, {"k": {"message": f"ask {LONE}"}})
    parked = await store.get(task.task_id)
    assert parked is not None and parked.input_requests == {"k": {"message": f"ask {LONE}"}}
    accepted = await store.answer_input(task.task_id, {"k": {"content": {"v": LONE}}})
    assert accepted == {"k": {"content": {"v": LONE}}}
    assert await store.take_answers(task.task_id, frozenset({"k"})) == accepted
    result = {"content": [{"type": "text", "text": f"done {LONE}"}]}
    done = await store.transition(task.task_id, "completed", result=result)
    assert done is not None
    assert (await store.get(task.task_id)).result == result  # type: ignore[union-attr]


async def test_status_messages_with_lone_surrogates_are_kept_readable(store: TaskStore) -> None:
    task = record()
    await store.create(task)
    await store.set_status_message(task.task_id, f"page {LONE} of 3")
    assert (await store.get(task.task_id)).status_message == "page \ufffd of 3"  # type: ignore[union-attr]
    await store.request_input(task.task_id, {"k": {}}, status_message=f"{LONE}?")
    assert (await store.get(task.task_id)).status_message == "\ufffd?"  # type: ignore[union-attr]
    await store.transition(
        task.task_id, "failed", status_message=LONE, error={"code": 1, "message": LONE}
    )
    failed = await store.get(task.task_id)
    assert failed is not None and failed.status_message == "\ufffd"
    assert failed.error == {"code": 1, "message": LONE}


def test_valid_text_is_stored_as_it_is() -> None:
    assert encode_json({"é": "漢字"}) == '{"é":"漢字"}'  # no escapes for valid text
    assert encode_json({"x": LONE}) == '{"x":"\\ud800"}'
    assert storable_text("héllo ?") == "héllo ?"
    assert storable_text(None) is None
