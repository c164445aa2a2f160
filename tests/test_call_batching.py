"""`CallBatcher` (`stores.call_batching`): idle calls go alone, concurrent ones together
(made in one turn of the event loop, or while another is on its way).

The batcher itself, with a `send` of the test's own that records every batch; the
stores that use it are covered by the store contract (`ConcurrencyContract`) and by
`tests/test_redis_batching.py` / `tests/test_postgres_batching.py`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import TaskGroup

from fastmcp_tasks.stores.call_batching import ALONE, CallBatcher

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the stores that batch run on asyncio


class Recorder:
    """A `send` that answers `call * 10`, refuses odd negatives and may hold or fail."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.alone: list[int] = []
        self.release = asyncio.Event()
        self.release.set()
        self.alone_release = self.release  # what a call made alone waits for
        self.fail: Exception | None = None

    async def send(self, batch: list[int]) -> list[Any]:
        self.batches.append(list(batch))
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return [self.answer(call) for call in batch]

    @staticmethod
    def answer(call: int) -> Any:
        if call == -1:
            return ALONE
        if call < 0:
            return ValueError(f"refused {call}")
        return call * 10

    def alone_call(self, call: int) -> Any:
        async def alone() -> Any:
            self.alone.append(call)
            await self.alone_release.wait()
            outcome = self.answer(call) if call != -1 else "made alone"
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        return alone


def batcher_of(recorder: Recorder) -> CallBatcher[int]:
    return CallBatcher(recorder.send, lambda: ConnectionError("closed"))


def held() -> tuple[Recorder, CallBatcher[int]]:
    """A recorder whose calls (alone or batched) wait until `release` is set, and its batcher."""
    recorder = Recorder()
    recorder.release.clear()
    return recorder, batcher_of(recorder)


async def settle(outcomes: dict[Any, Any], key: Any, make: Callable[[], Awaitable[Any]]) -> None:
    """`outcomes[key]`: what `make()` returned, or the exception it raised (the tests of
    the stores' batching use it too)."""
    try:
        outcomes[key] = await make()
    except Exception as exc:
        outcomes[key] = exc


def calling(batcher: CallBatcher[int], recorder: Recorder, outcomes: dict[Any, Any]) -> Any:
    """`call(n)`: make call `n` through `batcher`, its outcome into `outcomes[n]`."""

    async def call(n: int) -> None:
        await settle(outcomes, n, functools.partial(batcher.call, n, recorder.alone_call(n)))

    return call


def batch_on_its_way() -> tuple[Recorder, CallBatcher[int], dict[Any, Any], Any]:
    """A recorder whose batches and calls made alone each wait until told (`release`,
    `alone_release`), its batcher, the calls' outcomes and `calling`'s `call`."""
    recorder = Recorder()
    recorder.release.clear()
    recorder.alone_release = asyncio.Event()
    batcher = batcher_of(recorder)
    outcomes: dict[Any, Any] = {}
    return recorder, batcher, outcomes, calling(batcher, recorder, outcomes)


async def behind_one(group: TaskGroup, call: Any, calls: Any) -> None:
    """Make the first of `calls`, wait until it is on its way (its recorder holds it),
    then make the others: they are made while it is on its way."""
    first, *rest = calls
    group.start_soon(call, first)
    await anyio.wait_all_tasks_blocked()
    for n in rest:
        group.start_soon(call, n)


async def send_a_batch_of_2_and_3(group: TaskGroup, recorder: Recorder, call: Any) -> None:
    """Calls 1 to 3: 1 goes alone and answers, then the batch [2, 3] goes, and is held."""
    await behind_one(group, call, range(1, 4))
    await anyio.wait_all_tasks_blocked()
    recorder.alone_release.set()
    await anyio.wait_all_tasks_blocked()


async def test_an_idle_call_goes_alone_and_is_never_batched() -> None:
    recorder = Recorder()
    batcher = batcher_of(recorder)
    with anyio.fail_after(5):
        assert await batcher.call(3, recorder.alone_call(3)) == 30
        assert await batcher.call(4, recorder.alone_call(4)) == 40
    assert recorder.alone == [3, 4] and recorder.batches == []


async def test_calls_made_in_one_turn_of_the_loop_go_together_led_by_the_first() -> None:
    """An idle batcher's call waits one turn of the event loop before it goes: the calls
    made in that turn (the settles of tasks a claim started together) go with it."""
    recorder = Recorder()
    batcher = batcher_of(recorder)
    answers: dict[int, Any] = {}
    call = calling(batcher, recorder, answers)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            for n in range(1, 5):
                group.start_soon(call, n)
        assert await batcher.call(7, recorder.alone_call(7)) == 70  # no company: alone
    assert recorder.batches == [[1, 2, 3, 4]] and recorder.alone == [7]
    assert answers == {n: n * 10 for n in range(1, 5)}


async def test_a_call_cancelled_in_its_turn_leaves_the_calls_that_came_along_answered() -> None:
    recorder = Recorder()
    batcher = batcher_of(recorder)
    answers: dict[int, Any] = {}
    scope = anyio.CancelScope()

    async def first() -> None:
        with scope:
            answers[1] = await batcher.call(1, recorder.alone_call(1))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(first)
            group.start_soon(calling(batcher, recorder, answers), 2)
            await anyio.lowlevel.checkpoint()  # 1 waits out its turn, 2 queues behind it
            scope.cancel()
    assert answers == {2: 20} and recorder.alone == [2] and recorder.batches == []


async def test_a_call_whose_turn_saw_the_batcher_close_fails_unsent() -> None:
    recorder = Recorder()
    batcher = batcher_of(recorder)
    outcomes: dict[int, Any] = {}
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(calling(batcher, recorder, outcomes), 1)
            group.start_soon(batcher.close)
    assert isinstance(outcomes[1], ConnectionError)
    assert recorder.alone == [] and recorder.batches == []


async def test_calls_made_while_one_is_on_its_way_go_together_in_order() -> None:
    recorder, batcher = held()
    answers: dict[int, Any] = {}
    call = calling(batcher, recorder, answers)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await behind_one(group, call, range(1, 9))
            await anyio.wait_all_tasks_blocked()
            recorder.release.set()
    assert recorder.alone == [1] and recorder.batches == [[2, 3, 4, 5, 6, 7, 8]]
    assert answers == {n: n * 10 for n in range(1, 9)}


async def test_each_call_gets_its_own_error_and_alone_means_its_caller_makes_it() -> None:
    recorder, batcher = held()
    answers: dict[int, Any] = {}
    call = calling(batcher, recorder, answers)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await behind_one(group, call, (1, 2, -3, 4, -1, 5))
            await anyio.wait_all_tasks_blocked()
            recorder.release.set()
    assert recorder.batches == [[2, -3, 4, -1, 5]]
    shown = {n: str(a) if isinstance(a, ValueError) else a for n, a in answers.items()}
    assert shown == {1: 10, 2: 20, -3: "refused -3", 4: 40, -1: "made alone", 5: 50}
    assert recorder.alone == [1, -1]


async def test_a_batch_that_fails_as_a_whole_fails_each_of_its_calls() -> None:
    recorder, batcher = held()
    outcomes: dict[int, Any] = {}

    call = calling(batcher, recorder, outcomes)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await behind_one(group, call, range(1, 5))
            await anyio.wait_all_tasks_blocked()
            recorder.fail = OSError("connection reset")
            recorder.release.set()
        assert outcomes[1] == 10  # went alone, before the failure
        assert all(isinstance(outcomes[n], OSError) for n in (2, 3, 4))
        recorder.fail = None
        assert await batcher.call(7, recorder.alone_call(7)) == 70  # and it serves on


async def cancel_some(calls: list[int], cancelled: set[int]) -> tuple[Recorder, dict[int, Any]]:
    """Make `calls` (the first goes alone and is held, the rest queue behind it), cancel
    the callers of `cancelled` while they wait, then let everything answer."""
    recorder, batcher = held()
    answers: dict[int, Any] = {}
    scopes: dict[int, anyio.CancelScope] = {}

    async def call(n: int) -> None:
        with anyio.CancelScope() as scopes[n]:
            answers[n] = await batcher.call(n, recorder.alone_call(n))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await behind_one(group, call, calls)
            await anyio.wait_all_tasks_blocked()
            for n in cancelled:
                scopes[n].cancel()
            await anyio.wait_all_tasks_blocked()
            recorder.release.set()
    return recorder, answers


async def test_a_call_whose_caller_stopped_waiting_is_not_sent() -> None:
    recorder, answers = await cancel_some([1, 2, 3, 4, 5], {3, 4})
    assert recorder.batches == [[2, 5]]
    assert answers == {1: 10, 2: 20, 5: 50}


async def test_a_lone_survivor_of_a_batch_is_made_by_its_caller() -> None:
    recorder, answers = await cancel_some([1, 2, 3], {2})
    assert recorder.batches == [] and recorder.alone == [1, 3]
    assert answers == {1: 10, 3: 30}


async def test_closing_lets_the_batch_on_its_way_end_and_fails_what_is_queued() -> None:
    recorder, batcher, outcomes, call = batch_on_its_way()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await send_a_batch_of_2_and_3(group, recorder, call)
            for n in range(4, 6):  # queued behind it
                group.start_soon(call, n)
            await anyio.wait_all_tasks_blocked()
            group.start_soon(batcher.close)
            await anyio.wait_all_tasks_blocked()
            recorder.release.set()  # the batch on its way answers its callers
        assert recorder.batches == [[2, 3]]  # 4 and 5 were never sent
        assert outcomes[1] == 10 and outcomes[2] == 20 and outcomes[3] == 30
        assert all(isinstance(outcomes[n], ConnectionError) for n in (4, 5))
        with pytest.raises(ConnectionError):  # closed: a later call fails at once
            await batcher.call(6, recorder.alone_call(6))
        assert 6 not in recorder.alone


async def test_a_send_that_answers_the_wrong_number_of_calls_fails_them_all() -> None:
    async def short(batch: list[int]) -> list[Any]:
        return batch[:-1]

    gate = asyncio.Event()

    async def alone() -> int:
        await gate.wait()
        return 0

    batcher: CallBatcher[int] = CallBatcher(short, lambda: ConnectionError("closed"))
    outcomes: dict[int, Any] = {}

    async def call(n: int) -> None:
        try:
            outcomes[n] = await batcher.call(n, alone)
        except RuntimeError as exc:
            outcomes[n] = exc

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await behind_one(group, call, range(3))
            await anyio.wait_all_tasks_blocked()
            gate.set()
    assert outcomes[0] == 0
    assert all(isinstance(outcomes[n], RuntimeError) for n in (1, 2))


async def test_a_cancelled_close_still_answers_what_is_queued() -> None:
    recorder, batcher, outcomes, call = batch_on_its_way()  # it never answers in time
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await send_a_batch_of_2_and_3(group, recorder, call)
            group.start_soon(call, 4)  # queued behind it
            await anyio.wait_all_tasks_blocked()
            with anyio.move_on_after(0.05):  # closing gives up waiting for the batch
                await batcher.close()
            await anyio.wait_all_tasks_blocked()
            assert isinstance(outcomes.get(4), ConnectionError)  # answered, not left hanging
            recorder.release.set()  # the batch on its way still answers its own callers
    assert outcomes[2] == 20 and outcomes[3] == 30


async def test_calls_a_batch_does_not_admit_are_made_alone_at_once() -> None:
    recorder, _ = held()
    recorder.alone_release = asyncio.Event()  # calls made alone wait for this one
    batcher = CallBatcher(
        recorder.send,
        lambda: ConnectionError("closed"),
        lambda calls: [n % 2 == 0 for n in calls],  # odd calls may not ride in a batch
    )
    outcomes: dict[Any, Any] = {}
    call = calling(batcher, recorder, outcomes)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await behind_one(group, call, range(1, 6))
            await anyio.wait_all_tasks_blocked()
            recorder.alone_release.set()  # 1 answers; the batch [2, 4] goes and is held
            await anyio.wait_all_tasks_blocked()
            assert outcomes == {1: 10, 3: 30, 5: 50}  # not held up by the batch
            recorder.release.set()
    assert recorder.batches == [[2, 4]] and recorder.alone == [1, 3, 5]
    assert outcomes == {n: n * 10 for n in range(1, 6)}


async def test_an_admit_that_raises_fails_its_batchs_calls_and_the_batcher_serves_on() -> None:
    recorder, _ = held()
    recorder.alone_release = asyncio.Event()

    def admit(calls: list[int]) -> list[bool]:
        if 99 in calls:
            raise RuntimeError("admit failed")
        return [True] * len(calls)

    batcher = CallBatcher(recorder.send, lambda: ConnectionError("closed"), admit)
    outcomes: dict[Any, Any] = {}
    call = calling(batcher, recorder, outcomes)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            await behind_one(group, call, (1, 2, 99))
            recorder.alone_release.set()  # 1 answers; the batch [2, 99] meets the failure
        assert isinstance(outcomes[2], RuntimeError) and isinstance(outcomes[99], RuntimeError)
        recorder.release.set()
        assert await batcher.call(7, recorder.alone_call(7)) == 70
    assert outcomes[1] == 10 and recorder.batches == []
