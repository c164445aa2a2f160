"""The flow-control store contract (`fastmcp_tasks.testing.flow.FlowContract`) on every
built-in store: gates and fair turns, retry waits, deduplication, tombstones."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fastmcp_tasks import TaskStore
from fastmcp_tasks.testing.flow import FlowContract
from tests.test_store_contract import STORE_FACTORIES


class TestBuiltinFlow(FlowContract):
    @pytest.fixture(params=sorted(STORE_FACTORIES))
    async def store(self, request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
        instance = STORE_FACTORIES[request.param]()
        await instance.open()
        try:
            yield instance
        finally:
            await instance.close()
