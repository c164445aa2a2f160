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

from tests import spawn

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
    spawn.install()  # our own Python processes fork this one (tests/spawn.py)
    config.addinivalue_line(
        "markers", "bound(seconds): this async test's time bound, instead of ASYNC_TEST_TIMEOUT"
    )
    for name in CATEGORIES:
        config.addinivalue_line("markers", f"{name}: a test of the {name} category (conftest)")


def _bounded(fn: Any, seconds: float) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with anyio.fail_after(seconds):
            return await fn(*args, **kwargs)

    return wrapper


#: Modules the quick loop (`scripts/check.sh --quick`, `-m quick`) leaves out, by what
#: makes them slow: `faults` (real faults: processes killed, private Redis, PostgreSQL
#: and PgBouncer servers stopped or cut off), `processes` (several processes of ours:
#: servers, workers, the command line, another process on one SQLite file), `browser`
#: (the dashboard in Chromium) and `interop` (other SDKs' clients, in their own
#: environments). Every other test is marked `quick`. CI always runs everything.
SLOW_MODULES = {
    "faults": (
        "test_caller_survives.py test_deploys.py test_durability.py test_flow_processes.py "
        "test_lost_replies.py test_postgres_faults.py test_postgres_outages.py "
        "test_postgres_pgbouncer.py test_postgres_processes.py test_private_postgres.py "
        "test_real_faults.py test_recorded_state.py test_redis_outages.py test_steps_processes.py"
    ).split(),
    "processes": (
        "test_cli.py test_cli_operator.py test_cli_store_actions.py test_cli_terminal.py "
        "test_docs_examples.py "
        "test_dashboard_cli.py test_dashboard_hardening_cli.py test_handles.py test_newcomer.py "
        "test_operations_processes.py test_postgres_misconfigured.py test_related.py "
        "test_sealed_caller.py test_sqlite_contention.py"
    ).split(),
    "interop": ["test_legacy_clients.py"],
}
CATEGORIES = ("faults", "interop", "browser", "processes", "quick")  # the run's order


def _category(item: pytest.Item) -> str:
    path = Path(item.path)
    if path.parent.name == "browser":
        return "browser"
    return next((name for name, files in SLOW_MODULES.items() if path.name in files), "quick")


def _shares_fixtures(item: pytest.Item) -> bool:
    """Does `item` use a module- or session-scoped fixture of this suite (a server, a
    browser, a built environment)? Plugins' own (`tmp_path_factory`) do not count."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definitions[-1].scope != "function" and definitions[-1].baseid
        for definitions in info.name2fixturedefs.values()
        if definitions
    )


#: Modules whose tests share a module- or session-scoped fixture of ours (a PgBouncer, a
#: served subprocess, the browser): a parallel run keeps each in one worker, which starts
#: the fixture once. Collection fails if a module shares one and is not listed here.
SHARING_MODULES = frozenset(
    {
        "tests/test_cli.py",
        "tests/test_cli_terminal.py",
        "tests/test_legacy_clients.py",
        "tests/test_observability.py",
        "tests/test_postgres_pgbouncer.py",
        "tests/browser/test_browser_actions.py",
        "tests/browser/test_browser_layout.py",
        "tests/browser/test_browser_live.py",
        "tests/browser/test_browser_load.py",
        "tests/browser/test_browser_operations.py",
        "tests/browser/test_browser_outcomes.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its category (`SLOW_MODULES`) and put the slow ones first,
    so that a parallel run starts the long tests of real faults and processes early
    instead of running them alone at the end; check `SHARING_MODULES`."""
    categories = {item: _category(item) for item in items}
    items.sort(key=lambda item: CATEGORIES.index(categories[item]))
    for item in items:
        item.add_marker(categories[item])
        module = item.nodeid.split("::")[0]
        if _shares_fixtures(item) and module not in SHARING_MODULES:
            raise pytest.UsageError(
                f"{module} has module- or session-scoped fixtures: add it to "
                "SHARING_MODULES in tests/conftest.py so a parallel run keeps it in one worker"
            )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scheduler for this suite: any test to any free worker, except that
    a module of `SHARING_MODULES` goes whole to one worker. Units are handed out in
    order: the shared modules first (larger first), then the tests as collected."""
    from xdist.scheduler import LoadScopeScheduling

    class ModulesThatShare(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return module if module in SHARING_MODULES else nodeid

    return ModulesThatShare(config, log)


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
