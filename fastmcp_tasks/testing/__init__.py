"""The `TaskStore` contract as tests a third-party store runs: `StoreContract`.

Subclass `StoreContract` in a test module (its name starting with `Test`) and give
it a `store` fixture that yields an opened, empty store made with
`max_tasks=self.max_tasks` (50; set `max_tasks = None` when your store has no such
cap) and closes it afterwards. Every test of the contract then runs against it,
the same tests the memory, SQLite and Redis stores pass::

    import pytest
    from fastmcp_tasks.testing import StoreContract
    from my_package import MyTaskStore

    class TestMyTaskStore(StoreContract):
        @pytest.fixture
        async def store(self):
            store = MyTaskStore(max_tasks=self.max_tasks)
            await store.open()
            yield store
            await store.close()

It needs pytest and anyio's pytest plugin (installed with anyio); tests run on
asyncio (override the `anyio_backend` fixture for trio), each bounded by
`anyio.fail_after(timeout)` (30 s). The parts are separate classes (`CoreContract`,
`LeaseContract`, `PhaseContract`, `FeedContract`, `IsolationContract`, `CapsContract`,
`OperationsContract`, `StepsContract`, `ConcurrencyContract`, `SettleContract`,
`PeekContract`)
for a store that keeps only some of the contract. `PhaseContract` checks
`TaskRecord.phase` and `attempts`, and `start_run` (`fastmcp_tasks.stores.phases`);
`StepsContract` the durable steps (`fastmcp_tasks.stores.steps`), skipping for a
store without them; `SettleContract` the optional `settle` (`fastmcp_tasks.stores.settling`)
against the store's own `transition`, and `PeekContract` the optional `peek`
(`fastmcp_tasks.stores.peeking`) against its own `get`, each skipping for a store
without it.
`make_record` builds the tasks the tests use.
Importing `fastmcp_tasks` never imports this module (nor pytest).
"""

from __future__ import annotations

from fastmcp_tasks.testing.base import ContractBase, make_record
from fastmcp_tasks.testing.caps import CapsContract
from fastmcp_tasks.testing.concurrency import ConcurrencyContract
from fastmcp_tasks.testing.core import CoreContract
from fastmcp_tasks.testing.feed import FeedContract
from fastmcp_tasks.testing.isolation import IsolationContract
from fastmcp_tasks.testing.leases import LeaseContract
from fastmcp_tasks.testing.operations import OperationsContract
from fastmcp_tasks.testing.peeking import PeekContract
from fastmcp_tasks.testing.phases import PhaseContract
from fastmcp_tasks.testing.settling import SettleContract
from fastmcp_tasks.testing.steps import StepsContract

__all__ = [
    "CapsContract",
    "ConcurrencyContract",
    "ContractBase",
    "CoreContract",
    "FeedContract",
    "IsolationContract",
    "LeaseContract",
    "OperationsContract",
    "PeekContract",
    "PhaseContract",
    "SettleContract",
    "StepsContract",
    "StoreContract",
    "make_record",
]


class StoreContract(
    CoreContract,
    LeaseContract,
    PhaseContract,
    FeedContract,
    IsolationContract,
    CapsContract,
    OperationsContract,
    StepsContract,
    ConcurrencyContract,
    SettleContract,
    PeekContract,
):
    """The whole `TaskStore` contract; subclass it and provide the `store` fixture."""
