"""`fastmcp-tasks call` in a pseudo-terminal: what a person sees and types.

Each test runs the real console script with a pty as its controlling terminal
(stdin, stdout and stderr), so Ctrl-C is the byte 0x03 turned into SIGINT by the
terminal, exactly as when a person presses it. Output is read with deadlines;
`Terminal.screen()` is what is left on screen once `\r` rewrites are applied.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from tests.test_durability import release, started_in
from tests.wire import free_port

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent
SCRIPT = str(Path(sys.executable).parent / "fastmcp-tasks")
SERVER_FILE = "tests/cli_server.py"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """A command running in a pseudo-terminal of 100 columns."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        leader, follower = os.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.leader = leader
        self.raw = b""
        self.process = subprocess.Popen(
            [SCRIPT, *args],
            cwd=ROOT,
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env={**os.environ, "TERM": "xterm-256color", **(env or {})},
            start_new_session=True,
            # the pty becomes the controlling terminal: 0x03 is delivered as SIGINT
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(follower)

    @property
    def text(self) -> str:
        """Everything shown so far, without the colour and cursor codes."""
        return ANSI.sub("", self.raw.decode(errors="replace"))

    def screen(self) -> list[str]:
        """The lines left on screen: each line as its last `\r` rewrite left it."""
        lines = self.text.replace("\r\n", "\n").split("\n")
        return [line.rsplit("\r", 1)[-1].rstrip() for line in lines]

    def _read(self, deadline: float) -> bool:
        ready, _, _ = select.select([self.leader], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return True
        try:
            chunk = os.read(self.leader, 4096)
        except OSError:  # EIO: the command has exited and the terminal has no writer
            return False
        self.raw += chunk
        return bool(chunk)

    def expect(self, pattern: str, timeout: float = 20) -> re.Match[str]:
        """Read until `pattern` (a regex) shows up; fail with the screen after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.text)
            if found:
                return found
            if time.monotonic() >= deadline or not self._read(deadline):
                raise AssertionError(f"{pattern!r} never showed; screen:\n{self.text}")

    def type(self, text: str) -> None:
        os.write(self.leader, text.encode())

    def ctrl_c(self) -> None:
        os.write(self.leader, b"\x03")

    def finish(self, timeout: float = 20) -> int:
        """Read to the end and return the exit status."""
        deadline = time.monotonic() + timeout
        while self._read(deadline) and time.monotonic() < deadline:
            pass
        return self.process.wait(timeout=max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        os.close(self.leader)


@pytest.fixture
def terminal() -> Iterator[type[Terminal]]:
    started: list[Terminal] = []

    class Tracked(Terminal):
        def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
            super().__init__(*args, env=env)
            started.append(self)

    yield Tracked
    for term in started:
        term.close()


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-markers")


@pytest.fixture(scope="module")
def url(markers: Path) -> Iterator[str]:
    """`tests/cli_server.py` served over Streamable HTTP by uvicorn, in its own process."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER_FILE, "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "CLI_MARKERS": str(markers)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, "the server exited"
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server never started"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def task_id_of(term: Terminal) -> str:
    return term.expect(r"task (\S+)")[1]


def test_the_live_line_shows_the_message_a_bar_and_the_elapsed_time(
    terminal: type[Terminal],
) -> None:
    term = terminal("call", SERVER_FILE, "render", "pages=3", "delay=1.0")
    term.expect(r"in memory: the task ends with this command")
    term.expect(r"working ━+╺?━* Rendering page 2/3 \d+\.\ds")
    ticks = set(re.findall(r"working ━+╺?━* Rendering page 1/3 (\d+\.\ds)", term.text))
    assert len(ticks) >= 2, term.text  # the clock moved while the message stayed
    assert term.finish() == 0, term.text
    screen = [line for line in term.screen() if line]
    assert re.fullmatch(r"✓ completed ━{24} Rendering page 3/3 \d\.\ds", screen[-2]), screen
    assert screen[-1] == "rendered 3 pages"


def test_an_elicitation_is_answered_by_typing(url: str, terminal: type[Terminal]) -> None:
    term = terminal("call", url, "order", "item=tea")
    term.expect(r"\? Your order of tea\?\s+\(a: answer, d: decline, c: cancel\)")
    term.expect(r"Respond\? \[a/d/c\]: $")
    term.type("a\n")
    term.expect(r"Size \[small/large\]: $")
    term.type("medium\n")
    term.expect(r"Please select one of the available options\s+Size \[small/large\]: $")
    term.type("large\n")
    term.expect(r"Quantity: $")
    term.type("three\n")
    term.expect(r"Please enter a valid integer number\s+Quantity: $")
    term.type("3\n")
    term.expect(r"Gift \[y/n\]: $")
    term.type("y\n")
    assert term.finish() == 0, term.text
    assert term.screen()[-2:] == ["3 large tea as a gift", ""]


def test_an_elicitation_can_be_declined(url: str, terminal: type[Terminal]) -> None:
    term = terminal("call", url, "order", "item=cake")
    term.expect(r"Respond\? \[a/d/c\]: $")
    term.type("d\n")
    assert term.finish() == 0, term.text
    assert "order decline" in term.screen()


async def test_ctrl_c_then_detach_leaves_the_task_running(
    url: str, markers: Path, terminal: type[Terminal]
) -> None:
    term = terminal("call", url, "hold", "key=detached")
    task_id = task_id_of(term)
    term.expect(r"Ctrl-C to cancel or detach")
    await started_in(markers, "detached")
    term.ctrl_c()
    term.expect(r"Cancel the task or detach\? \[c/d\]: $")
    term.type("d\n")
    assert term.finish() == 0, term.text
    assert term.screen()[-3:] == [
        f"detached: task {task_id} keeps running",
        f"resume with: fastmcp-tasks wait {url} {task_id}",
        "",
    ]
    assert json.loads(cli("get", url, task_id).stdout)["status"] == "working"
    args = [SCRIPT, "wait", url, task_id]
    async with await anyio.open_process(args, cwd=ROOT, stdin=subprocess.DEVNULL) as waiting:
        release(markers, "detached")
        assert waiting.stdout is not None
        with anyio.fail_after(20):
            out = b"".join([chunk async for chunk in waiting.stdout]).decode()
            assert await waiting.wait() == 0
    assert out == "held detached\n"


@pytest.mark.parametrize("answer", ["c\n", "\x03"], ids=["typed-c", "second-ctrl-c"])
def test_ctrl_c_then_cancel(url: str, markers: Path, terminal: type[Terminal], answer: str) -> None:
    key = f"cancelled-{len(answer)}"
    term = terminal("call", url, "hold", f"key={key}")
    task_id = task_id_of(term)
    anyio.run(started_in, markers, key)
    term.ctrl_c()
    term.expect(r"Cancel the task or detach\? \[c/d\]: $")
    term.type(answer)
    assert term.finish() == 130, term.text
    assert f"fastmcp-tasks: interrupted: cancelled task {task_id}" in term.screen()
    deadline = time.monotonic() + 10
    while json.loads(cli("get", url, task_id).stdout)["status"] != "cancelled":
        assert time.monotonic() < deadline, "the task was never cancelled"
        time.sleep(0.1)


async def test_ctrl_c_in_memory_cancels_without_asking(
    markers: Path, terminal: type[Terminal]
) -> None:
    term = terminal("call", SERVER_FILE, "hold", "key=in-memory", env={"CLI_MARKERS": str(markers)})
    task_id = task_id_of(term)
    await started_in(markers, "in-memory")
    term.ctrl_c()
    assert term.finish() == 130, term.text
    assert f"fastmcp-tasks: interrupted: cancelled task {task_id}" in term.screen()
    assert "detach?" not in term.text


def test_a_count_or_a_percentage_in_the_message_makes_a_bar() -> None:
    from fastmcp_tasks.cli.terminal import elapsed_text, known_total

    assert known_total("Rendering page 3/5") == (3.0, 5.0)
    assert known_total("40% done") == (40.0, 100.0)
    assert known_total("7/5 is not a count") is None
    assert known_total("on 2024/05/01") is None
    assert known_total("Queued: waiting for a free worker slot") is None
    assert [elapsed_text(s) for s in (4.24, 187, 3787)] == ["4.2s", "3:07", "1:03:07"]
