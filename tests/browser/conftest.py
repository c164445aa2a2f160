"""Fixtures of the browser tests: Debian's Chromium under Playwright, and the real processes.

Playwright's async API runs on the suite's asyncio backend; `anyio_backend` is
module-scoped here so one event loop holds a module's browser and processes (each
test is still bounded by the suite's `anyio.fail_after(30)`; the fixtures bound their
own setup). The loop ends with the module, so the next module, browser or not, may
start its own; the suite's parallel run keeps each module in one worker. Playwright
never downloads a browser: it launches
`/usr/bin/chromium` (`$DASHBOARD_CHROMIUM` overrides), which `.ci/run` installs from
Debian's packages. Without that executable or without the `playwright` package the
tests skip with a loud reason, and fail instead when `CI=true`.

The worlds (module-scoped, one per store kind): a store (a SQLite file; a Redis
prefix, cleaned up, skipped or failed as the other Redis tests do), seeded through the
store API (`procs.seed`), a real MCP server on it (`task_server.py`) and a real
`fastmcp-tasks ui` on it. `sqlite_world` serves most tests; `world` runs a test on
SQLite and Redis. Screenshots: see `test_browser_layout.py` (`$DASHBOARD_SCREENSHOTS`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tests.browser.procs import Dashboard, McpServer, clear_redis, seed
from tests.test_store_contract import REDIS_URL, _redis_problem

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page

CHROMIUM = os.environ.get("DASHBOARD_CHROMIUM", "/usr/bin/chromium")
#: As root in a closed network: no sandbox, and no background connections to refuse.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
ACTION_TIMEOUT_MS = 5_000
SETUP_TIMEOUT = 60.0


def _browser_problem() -> str | None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError as exc:
        return f"the playwright package is not installed ({exc}); pip install -e '.[dev]'"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does)"
    return None


def need(problem: str | None, what: str) -> None:
    """Skip loudly on `problem`, or fail when `CI=true` (CI must run every test)."""
    if problem is None:
        return
    message = f"{what} UNTESTED: {problem}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def browser(anyio_backend: str) -> AsyncIterator[Browser]:
    need(_browser_problem(), "BROWSER TESTS")
    from playwright.async_api import async_playwright

    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def open_context(browser: Browser) -> AsyncIterator[Callable[..., Awaitable[BrowserContext]]]:
    """`await open_context(width=1280, height=900, **options)`: a fresh context, closed after."""
    made: list[BrowserContext] = []

    async def open_one(width: int = 1280, height: int = 900, **options: Any) -> BrowserContext:
        context = await browser.new_context(viewport={"width": width, "height": height}, **options)
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        made.append(context)
        return context

    yield open_one
    for context in made:
        with contextlib.suppress(Exception):
            await context.close()


@pytest.fixture
async def page(open_context: Callable[..., Awaitable[BrowserContext]]) -> Page:
    context = await open_context()
    return await context.new_page()


@dataclass
class World:
    """A store with a real MCP server and a real dashboard on it."""

    kind: str
    store_url: str
    markers: Path
    logs: Path
    server: McpServer
    ui: Dashboard
    ids: dict[str, str]
    extra: list[Dashboard] = field(default_factory=list)

    async def dashboard(self, **options: Any) -> Dashboard:
        """Another `fastmcp-tasks ui` on this store (`token=`, `read_only=`, `token_file=`),
        stopped at the end."""
        ui = Dashboard(self.store_url, self.logs, **options)
        self.extra.append(ui)
        with anyio.fail_after(SETUP_TIMEOUT):
            await ui.ready()
        return ui

    def say(self, key: str, message: str) -> None:
        """Ask the running `hold(key)` to set its statusMessage to `message`."""
        partial = self.markers / f"{key}.msg.part"
        partial.write_text(message)
        os.replace(partial, self.markers / f"{key}.msg")

    def release(self, key: str) -> None:
        (self.markers / f"{key}.go").touch()


@contextlib.asynccontextmanager
async def running_world(kind: str, store_url: str, root: Path) -> AsyncIterator[World]:
    markers, logs = root / "markers", root / "logs"
    markers.mkdir(parents=True)
    logs.mkdir()
    with anyio.fail_after(SETUP_TIMEOUT):
        ids = await seed(store_url)  # also creates the SQLite file the ui insists on
    server = McpServer(store_url, markers, logs)
    ui = Dashboard(store_url, logs)
    world = World(kind, store_url, markers, logs, server, ui, ids)
    try:
        with anyio.fail_after(SETUP_TIMEOUT):
            await server.ready()
            await ui.ready()
        yield world
    finally:
        for key in markers.glob("*.msg"):  # let every held tool end
            (markers / f"{key.name[: -len('.msg')]}.go").touch()
        for process in [*world.extra, ui, server]:
            process.stop()


@pytest.fixture(scope="module")
async def sqlite_world(
    browser: Browser, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    root = tmp_path_factory.mktemp("dash-sqlite")
    async with running_world("sqlite", f"sqlite:///{root / 'tasks.db'}", root / "run") as world:
        yield world


@pytest.fixture(scope="module")
async def redis_world(
    browser: Browser, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    need(_redis_problem(), f"REDIS UNREACHABLE at REDIS_URL={REDIS_URL}: the dashboard on Redis")
    url = f"{REDIS_URL}?prefix=dash-{uuid.uuid4().hex[:12]}"
    root = tmp_path_factory.mktemp("dash-redis")
    try:
        async with running_world("redis", url, root / "run") as world:
            yield world
    finally:
        with anyio.fail_after(SETUP_TIMEOUT):
            await clear_redis(url)


@pytest.fixture(params=["sqlite", "redis"])
def world(request: pytest.FixtureRequest) -> World:
    return request.getfixturevalue(f"{request.param}_world")  # type: ignore[no-any-return]


@pytest.fixture
def screenshots(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """`shot(name)`: where to write `name.png`; copied to `$DASHBOARD_SCREENSHOTS` when set."""
    target = os.environ.get("DASHBOARD_SCREENSHOTS")

    def place(name: str) -> Path:
        return tmp_path / f"{name}.png"

    yield place
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        for png in tmp_path.glob("*.png"):
            shutil.copy(png, Path(target) / png.name)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.browser.procs import MEASURED

    if MEASURED:
        terminalreporter.section("dashboard browser measurements")
        for name, value in MEASURED.items():
            terminalreporter.write_line(f"{name}: {value}")
