"""Shared fixtures: the asyncio backend, the transports, and a time bound on every test.

Every `async def` test runs inside `anyio.fail_after(ASYNC_TEST_TIMEOUT)`, so a
hang fails the test with a clear timeout instead of stalling the suite. A test that
lives through a real outage longer than that says so: `@pytest.mark.bound(120)`.

Hypothesis runs under a profile loaded here, before any test module builds its
settings (which inherit from it): `ci` when `CI=true` (derandomized, so a run is
the same run every time; bounded; no deadline), else `dev` (random, as locally);
`HYPOTHESIS_PROFILE` picks one explicitly. Both print the falsifying example and
the `@reproduce_failure` blob that replays it.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import Verbosity, settings

ASYNC_TEST_TIMEOUT = 30.0

settings.register_profile("dev", deadline=None, print_blob=True, verbosity=Verbosity.normal)
settings.register_profile(
    "ci", settings.get_profile("dev"), derandomize=True, database=None, max_examples=100
)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or (
    "ci" if os.environ.get("CI") == "true" else "dev"
)
settings.load_profile(HYPOTHESIS_PROFILE)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # FastMCP's client and server run on asyncio


@pytest.fixture(params=["memory", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "bound(seconds): this async test's time bound, instead of ASYNC_TEST_TIMEOUT"
    )


def _bounded(fn: Any, seconds: float) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with anyio.fail_after(seconds):
            return await fn(*args, **kwargs)

    return wrapper


BROWSER_TESTS = Path(__file__).parent / "browser"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the browser tests last, keeping every other order as collected.

    Their event loop is session-scoped (`tests/browser/conftest.py`: one loop holds the
    browser and its processes) and stays open until the session ends; a synchronous test
    calling `anyio.run` in the same thread after them would fail with "Already running
    asyncio in this thread".
    """
    items.sort(key=lambda item: BROWSER_TESTS in Path(item.path).parents)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    function = pyfuncitem.obj
    if inspect.iscoroutinefunction(function):
        marker = pyfuncitem.get_closest_marker("bound")
        seconds = float(marker.args[0]) if marker is not None else ASYNC_TEST_TIMEOUT
        pyfuncitem.obj = _bounded(function, seconds)
    try:
        return (yield)
    finally:
        pyfuncitem.obj = function
