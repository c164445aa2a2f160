"""Shared fixtures: the asyncio backend, the transports, and a time bound on every test.

Every `async def` test runs inside `anyio.fail_after(ASYNC_TEST_TIMEOUT)`, so a
hang fails the test with a clear timeout instead of stalling the suite.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import anyio
import pytest

ASYNC_TEST_TIMEOUT = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # FastMCP's client and server run on asyncio


@pytest.fixture(params=["memory", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _bounded(fn: Any) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with anyio.fail_after(ASYNC_TEST_TIMEOUT):
            return await fn(*args, **kwargs)

    return wrapper


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    function = pyfuncitem.obj
    if inspect.iscoroutinefunction(function):
        pyfuncitem.obj = _bounded(function)
    try:
        return (yield)
    finally:
        pyfuncitem.obj = function
