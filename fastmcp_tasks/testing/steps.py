"""The durable-steps part of the store contract (`stores.steps.StepStore`): steps kept in
recording order for an active task only, the first value under a name kept, removed with
the task on every deletion path, and the per-task bounds (count, one value's bytes, all
values' bytes, in UTF-8) refused atomically, even by saves racing for the last place.

The bound tests lower the limits of `fastmcp_tasks.stores.steps` with `monkeypatch`: a
store reads them when it saves (never copies them at import or open).
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import anyio
import pytest

from fastmcp_tasks.errors import StepLimitExceeded
from fastmcp_tasks.stores import steps as limits
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.steps import StepStore, stepped
from fastmcp_tasks.testing.base import ContractBase, make_record


def _stepped(store: TaskStore) -> StepStore:
    found = stepped(store)
    if found is None:
        pytest.skip("the store under test keeps no durable steps (StepStore)")
    return found


async def _active(store: TaskStore) -> str:
    task = make_record()
    await store.create(task)
    return task.task_id


async def _names(store: StepStore, task_id: str) -> list[str]:
    return [step.name for step in await store.steps(task_id)]


class StepsContract(ContractBase):
    """Durable steps: order, first value, active tasks only, deletion, bounds."""

    async def test_steps_are_read_in_recording_order(self, store: TaskStore) -> None:
        steps = _stepped(store)
        task_id = await _active(store)
        assert await steps.steps(task_id) == []
        now = time.time()
        for i, name in enumerate(("zeta", "alpha", "mid", "b")):
            assert await steps.save_step(task_id, name, f'{{"i": {i}}}', now + i)
        got = await steps.steps(task_id)
        assert [s.name for s in got] == ["zeta", "alpha", "mid", "b"]
        assert [s.value_json for s in got] == [f'{{"i": {i}}}' for i in range(4)]
        assert [s.at for s in got] == pytest.approx([now + i for i in range(4)])

    async def test_the_first_value_under_a_name_stays(self, store: TaskStore) -> None:
        steps = _stepped(store)
        task_id = await _active(store)
        assert await steps.save_step(task_id, "fetch", '"first"', 1.0)
        assert await steps.save_step(task_id, "fetch", '"second"', 2.0)
        assert await steps.save_step(task_id, "other", "null", 3.0)
        got = await steps.steps(task_id)
        assert [(s.name, s.value_json, s.at) for s in got] == [
            ("fetch", '"first"', 1.0),
            ("other", "null", 3.0),
        ]

    async def test_an_absent_task_records_nothing(self, store: TaskStore) -> None:
        steps = _stepped(store)
        task_id = f"absent-{uuid.uuid4().hex}"
        assert not await steps.save_step(task_id, "a", "1", time.time())
        assert await steps.steps(task_id) == []
        await store.create(dataclasses.replace(make_record(), task_id=task_id))
        assert await steps.steps(task_id) == []  # nothing was kept for it before

    async def test_an_ended_task_records_nothing_and_keeps_its_steps(
        self, store: TaskStore
    ) -> None:
        steps = _stepped(store)
        for status, extra in (
            ("completed", {"result": {"content": []}}),
            ("failed", {"error": {"code": -32603, "message": "boom"}}),
            ("cancelled", {}),
        ):
            task_id = await _active(store)
            assert await steps.save_step(task_id, "before", '"kept"', time.time())
            await store.transition(task_id, status, **extra)  # type: ignore[arg-type]
            assert not await steps.save_step(task_id, "after", "1", time.time())
            assert not await steps.save_step(task_id, "before", '"again"', time.time())
            got = await steps.steps(task_id)
            assert [(s.name, s.value_json) for s in got] == [("before", '"kept"')]

    async def test_a_task_waiting_for_input_records(self, store: TaskStore) -> None:
        steps = _stepped(store)
        task_id = await _active(store)
        await store.request_input(task_id, {"k": {"method": "elicitation/create"}})
        parked = await store.get(task_id)
        assert parked is not None and parked.status == "input_required"
        assert await steps.save_step(task_id, "asked", "true", time.time())
        assert await _names(steps, task_id) == ["asked"]

    async def test_steps_go_with_their_task(self, store: TaskStore) -> None:
        steps = _stepped(store)
        purged, expiring = make_record(), make_record(retention_ms=0)
        for task in (purged, expiring):
            await store.create(task)
            assert await steps.save_step(task.task_id, "s", "1", time.time())
            await store.transition(task.task_id, "completed", result={"content": []})
        assert await steps.steps(expiring.task_id) == []  # expired: gone for readers now
        purge = getattr(store, "purge_finished", None)
        if purge is not None:
            await purge(time.time() + 1)
            assert await steps.steps(purged.task_id) == []
        await store.purge_expired(time.time() + 1)
        assert await steps.steps(expiring.task_id) == []
        delete = getattr(store, "delete_finished", None)
        late = make_record()
        await store.create(late)
        assert await steps.save_step(late.task_id, "s", "1", time.time())
        await store.transition(late.task_id, "cancelled")
        if delete is not None:
            assert await delete([late.task_id]) == 1
            assert await steps.steps(late.task_id) == []
        # each id reused: a fresh task with no steps
        for task_id in (purged.task_id, expiring.task_id, late.task_id):
            if purge is None and task_id == purged.task_id:
                continue
            if delete is None and task_id == late.task_id:
                continue
            await store.create(dataclasses.replace(make_record(), task_id=task_id))
            assert await steps.steps(task_id) == []

    async def test_the_count_is_bounded(
        self, store: TaskStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        steps = _stepped(store)
        monkeypatch.setattr(limits, "MAX_STEPS", 3)
        task_id = await _active(store)
        for name in ("a", "b", "c"):
            assert await steps.save_step(task_id, name, "1", time.time())
        with pytest.raises(StepLimitExceeded):
            await steps.save_step(task_id, "d", "1", time.time())
        assert await steps.save_step(task_id, "a", "2", time.time())  # already recorded
        assert await _names(steps, task_id) == ["a", "b", "c"]
        other = await _active(store)  # the bound is per task
        assert await steps.save_step(other, "d", "1", time.time())

    async def test_one_value_is_bounded(
        self, store: TaskStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        steps = _stepped(store)
        monkeypatch.setattr(limits, "MAX_STEP_BYTES", 10)
        task_id = await _active(store)
        with pytest.raises(StepLimitExceeded):
            await steps.save_step(task_id, "big", '"123456789"', time.time())  # 11 bytes
        assert await steps.steps(task_id) == []
        assert await steps.save_step(task_id, "fits", '"12345678"', time.time())  # 10
        assert await _names(steps, task_id) == ["fits"]

    async def test_all_values_together_are_bounded(
        self, store: TaskStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        steps = _stepped(store)
        monkeypatch.setattr(limits, "MAX_STEPS_BYTES", 20)
        task_id = await _active(store)
        assert await steps.save_step(task_id, "a", '"12345678"', time.time())  # 10 bytes
        assert await steps.save_step(task_id, "b", '"12345678"', time.time())  # 20 in all
        with pytest.raises(StepLimitExceeded):
            await steps.save_step(task_id, "c", "1", time.time())
        assert await _names(steps, task_id) == ["a", "b"]

    async def test_sizes_are_counted_in_utf8_bytes(
        self, store: TaskStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        steps = _stepped(store)
        monkeypatch.setattr(limits, "MAX_STEP_BYTES", 8)
        monkeypatch.setattr(limits, "MAX_STEPS_BYTES", 12)
        task_id = await _active(store)
        with pytest.raises(StepLimitExceeded):
            await steps.save_step(task_id, "wide", '"éééé"', time.time())  # 6 chars, 10 bytes
        assert await steps.save_step(task_id, "fits", '"ééé"', time.time())  # 8 bytes
        with pytest.raises(StepLimitExceeded):
            await steps.save_step(task_id, "over", '"😀"', time.time())  # 6 bytes: 14 in all
        assert await steps.save_step(task_id, "last", '"é"', time.time())  # 4: 12 in all
        with pytest.raises(StepLimitExceeded):
            await steps.save_step(task_id, "full", '"é"', time.time())  # 4 more: 16 in all
        got = await steps.steps(task_id)
        assert [(s.name, s.value_json) for s in got] == [("fits", '"ééé"'), ("last", '"é"')]

    async def test_racing_saves_never_pass_the_count_bound(
        self, store: TaskStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        steps = _stepped(store)
        monkeypatch.setattr(limits, "MAX_STEPS", 5)
        task_id = await _active(store)
        for name in ("a", "b", "c"):
            assert await steps.save_step(task_id, name, "1", time.time())
        saved: list[str] = []
        refused: list[str] = []

        async def save(name: str) -> None:
            try:
                assert await steps.save_step(task_id, name, "1", time.time())
            except StepLimitExceeded:
                refused.append(name)
            else:
                saved.append(name)

        async with anyio.create_task_group() as group:
            for i in range(12):
                group.start_soon(save, f"racer-{i}")
        assert len(saved) == 2 and len(refused) == 10
        names = await _names(steps, task_id)
        assert names[:3] == ["a", "b", "c"] and sorted(names[3:]) == sorted(saved)


__all__ = ["StepsContract"]
