"""Flow control across real processes: two servers on one SQLite file or one Redis.

Each server is `tests/flow_server.py` in its own process; runs log their start and end
to one file, so overlaps are measured across processes, not inside one. A limit, the
fair order, deduplication and a retry's backoff must hold whichever process takes the
call, and a retry waiting for its backoff survives SIGKILL of the only server.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from tests.test_durability import Server, store_at, wire_to
from tests.wire import Wire, free_port

__all__ = ["store_at"]  # the fixture, re-used

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).parent / "flow_server.py"
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}


class FlowServer(Server):
    def __init__(self, db: str, logs: Path, concurrency: int = 100) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        command = [sys.executable, str(SCRIPT), "--db", db, "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--dir", str(logs), "--concurrency", str(concurrency)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )


@contextmanager
def flow_servers(
    db: str, logs: Path, count: int, concurrency: int = 100
) -> Iterator[list[FlowServer]]:
    logs.mkdir(exist_ok=True)
    started = [FlowServer(db, logs, concurrency) for _ in range(count)]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


def runs(logs: Path) -> list[tuple[str, str, float, int]]:
    lines = (logs / "runs.log").read_text().splitlines()
    parsed = [line.split() for line in lines]
    return [(event, label, float(at), int(pid)) for event, label, at, pid in parsed]


def most_at_once(events: list[tuple[str, str, float, int]], prefix: str) -> int:
    now = most = 0
    for event, _label, _at, _pid in sorted(
        (e for e in events if e[1].startswith(prefix)), key=lambda e: (e[2], e[0] == "start")
    ):
        now += 1 if event == "start" else -1
        most = max(most, now)
    return most


async def wait_all(wires: list[Wire], ids: list[str], headers: dict[str, str]) -> list[str]:
    statuses = []
    for index, task_id in enumerate(ids):
        done = await wires[index % len(wires)].wait(task_id, within=60, headers=headers)
        statuses.append(done["status"])
    return statuses


async def test_a_limit_of_three_holds_across_two_processes(tmp_path: Path, store_at: str) -> None:
    # each process runs at most 2 tasks at once, so reaching the tool's limit of 3 takes
    # both; without one gate in the store they would run 4 at once
    logs = tmp_path / "logs"
    with flow_servers(store_at, logs, 2, concurrency=2) as (a, b), anyio.fail_after(90):
        async with wire_to(a) as wa, wire_to(b) as wb:
            wires = [wa, wb]
            ids = [
                (await wires[n % 2].call_tool("render", {"n": n}, headers=ALICE))["taskId"]
                for n in range(12)
            ]
            assert await wait_all(wires, ids, ALICE) == ["completed"] * 12
    events = runs(logs)
    assert most_at_once(events, "r") == 3
    assert len({pid for *_, pid in events}) == 2, "both processes ran some of them"


async def test_a_lone_task_of_another_principal_starts_second(
    tmp_path: Path, store_at: str
) -> None:
    logs = tmp_path / "logs"
    with flow_servers(store_at, logs, 2) as (a, b), anyio.fail_after(90):
        async with wire_to(a) as wa, wire_to(b) as wb:
            alice = [
                (await wa.call_tool("serial", {"who": "a", "n": n}, headers=ALICE))["taskId"]
                for n in range(20)
            ]
            bob = (await wb.call_tool("serial", {"who": "b", "n": 0}, headers=BOB))["taskId"]
            (logs / "open.go").touch()
            assert (await wb.wait(bob, within=60, headers=BOB))["status"] == "completed"
            assert await wait_all([wa], alice, ALICE) == ["completed"] * 20
    order = [label for event, label, *_ in runs(logs) if event == "start"]
    assert order.index("b0") <= 1, order[:4]
    assert most_at_once(runs(logs), "") == 1


async def test_identical_calls_on_two_processes_make_one_task(
    tmp_path: Path, store_at: str
) -> None:
    logs = tmp_path / "logs"
    with flow_servers(store_at, logs, 2) as (a, b), anyio.fail_after(60):
        async with wire_to(a) as wa, wire_to(b) as wb:
            answers: list[str] = []

            async def call(wire: Wire) -> None:
                created = await wire.call_tool("expensive", {"n": 7}, headers=ALICE)
                answers.append(created["taskId"])

            async with anyio.create_task_group() as group:
                for index in range(10):
                    group.start_soon(call, (wa, wb)[index % 2])
            assert len(set(answers)) == 1
            assert (await wa.wait(answers[0], within=30, headers=ALICE))["status"] == "completed"
    assert [label for event, label, *_ in runs(logs) if event == "start"] == ["e7"]


async def test_a_retry_waiting_for_its_backoff_survives_sigkill(
    tmp_path: Path, store_at: str
) -> None:
    logs = tmp_path / "logs"
    with flow_servers(store_at, logs, 1) as (first,), anyio.fail_after(90):
        async with wire_to(first) as wire:
            task_id = (await wire.call_tool("fetch", {"key": "k"}, headers=ALICE))["taskId"]
            waiting = await wire.wait_for(
                task_id,
                lambda t: t.get("statusMessage", "").startswith("Retrying"),
                within=30,
                headers=ALICE,
            )
        assert waiting["status"] == "working"
        assert waiting["statusMessage"] == (
            "Retrying (attempt 2 of 3) after: Error calling tool 'fetch': first attempt of k failed"
        )
        first.process.send_signal(signal.SIGKILL)  # during the 3 s backoff
        first.process.wait(timeout=10)
        with flow_servers(store_at, logs, 1) as (second,):
            async with wire_to(second) as wire:
                done = await wire.wait(task_id, within=60, headers=ALICE)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == f"k on attempt 2 in {second.process.pid}"
