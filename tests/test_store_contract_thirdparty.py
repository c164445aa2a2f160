"""docs/how-to/custom-store.md's example, run: a third-party store takes the contract.

`WrappedStore` stands for a store written outside this package: it delegates to a
`MemoryTaskStore` through `__getattr__`, so it is not one, and subclassing
`StoreContract` with a ten-line `store` fixture runs the whole contract on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from fastmcp_tasks import MemoryTaskStore, TaskStore
from fastmcp_tasks.testing import StoreContract


class WrappedStore:
    """A store of someone else's: every call goes to an inner `MemoryTaskStore`."""

    scheme = "wrapped"
    durable = False

    def __init__(self, *, max_tasks: int | None) -> None:
        self._inner = MemoryTaskStore(max_tasks=max_tasks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TestWrappedStore(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[TaskStore]:
        store = WrappedStore(max_tasks=self.max_tasks)
        await store.open()
        yield store  # type: ignore[misc]
        await store.close()


def test_the_wrapper_is_not_a_builtin_store() -> None:
    assert not isinstance(WrappedStore(max_tasks=None), MemoryTaskStore)
