"""The plumbing every contract class shares: the `store` fixture slot, marks, time bounds.

`ContractBase` marks its tests for the anyio pytest plugin, runs them on asyncio
(override `anyio_backend` for trio), and wraps every `async def test_*` a subclass
defines in `anyio.fail_after(self.timeout)` so a hung store fails one test instead
of stalling the run. `make_record` builds the active task the tests create.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import anyio
import pytest

from fastmcp_tasks.stores.base import TaskRecord, TaskStore

_counter = itertools.count()


def make_record(*, retention_ms: int | None = 60_000, **fields: object) -> TaskRecord:
    """A new `working` task (`task-N` ids, unique per process) with `fields` set (any field,
    the defaults included, may be given)."""
    now = time.time()
    values: dict[str, object] = {
        "task_id": f"task-{next(_counter)}",
        "tool": "tool",
        "status": "working",
        "created_at": now,
        "updated_at": now,
        "arguments": {"a": 1},
        "retention_ms": retention_ms,
        "poll_interval_ms": 1000,
    }
    values.update(fields)
    return TaskRecord(**values)  # type: ignore[arg-type]


def _bounded(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def bounded(self: ContractBase, *args: Any, **kwargs: Any) -> Any:
        with anyio.fail_after(self.timeout):
            return await fn(self, *args, **kwargs)

    bounded._contract_bounded = True  # type: ignore[attr-defined]
    return bounded


class ContractBase:
    """Base of the contract classes; a subclass supplies the `store` fixture."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    #: Seconds each test may take before it fails as hung.
    timeout: ClassVar[float] = 30.0

    #: The `max_tasks` the `store` fixture's store was made with; `None`: it has no
    #: retained-task cap (the tests of that cap skip).
    max_tasks: ClassVar[int | None] = 50

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if (
                name.startswith("test_")
                and inspect.iscoroutinefunction(value)
                and not getattr(value, "_contract_bounded", False)
            ):
                setattr(cls, name, _bounded(value))

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def store(self) -> TaskStore:
        """Override: yield an opened, empty store (`max_tasks=self.max_tasks`), close it after."""
        raise NotImplementedError(
            f"{type(self).__name__} must define a `store` fixture yielding an opened TaskStore"
        )

    def needs_cap(self) -> int:
        """`max_tasks`, or skip the calling test when the store has no such cap."""
        if self.max_tasks is None:
            pytest.skip("the store under test has no max_tasks cap (max_tasks = None)")
        return self.max_tasks
