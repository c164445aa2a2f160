"""Wire and bookkeeping helpers of the load test (`bench/load.py`).

Requests are raw JSON-RPC over Streamable HTTP (2026-07-28 framing, as in `bench.run`),
framed by `bench.proto.request_frame` and sent with `bench.proto.RawHttp` (one keep-alive
connection per caller); listen streams are read with `bench.proto.raw_sse` on a
connection of their own. `Recorder` keeps every latency sample, every error (by kind,
with a few examples) and what each created task became.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.proto import TASKS, RawHttp, RpcError, parse_http, request_frame

#: Per request: longer than this is an error ("timeout"), not just a slow sample.
REQUEST_TIMEOUT_S = 30.0

_ids = itertools.count(1)


def frame(method: str, params: dict[str, Any], opt_in: bool) -> tuple[bytes, dict[str, str]]:
    """Body and headers of one request; `opt_in` declares the tasks extension in `_meta`."""
    capabilities = {"extensions": {TASKS: {}}} if opt_in else {}
    return request_frame(method, params, capabilities, next(_ids), "bench-load")


class Caller:
    """One sequential caller on one keep-alive connection; reconnects after a failure."""

    def __init__(self, port: int) -> None:
        self.http = RawHttp("127.0.0.1", port)

    async def call(self, method: str, params: dict[str, Any], opt_in: bool) -> dict[str, Any]:
        body, headers = frame(method, params, opt_in)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                status, rheaders, payload = await self.http.post("/mcp", body, headers)
        except BaseException:
            await self.http.aclose()  # the connection is in an unknown state
            raise
        message = parse_http(rheaders.get("content-type", ""), payload)
        if "error" in message:
            error = message["error"]
            raise RpcError(f"JSON-RPC {error.get('code')}: {error.get('message')}")
        if status != 200:
            raise RpcError(f"HTTP {status}: {payload[:200]!r}")
        return message["result"]  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        await self.http.aclose()


def pct_ms(samples_ns: list[int], q: float) -> float | None:
    """Nearest-rank percentile in milliseconds (`None` without samples)."""
    if not samples_ns:
        return None
    ordered = sorted(samples_ns)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1] / 1e6, 3)


def summary(samples_ns: list[int]) -> dict[str, Any]:
    return {
        "n": len(samples_ns),
        "p50_ms": pct_ms(samples_ns, 50),
        "p90_ms": pct_ms(samples_ns, 90),
        "p99_ms": pct_ms(samples_ns, 99),
        "max_ms": pct_ms(samples_ns, 100),
        "mean_ms": round(sum(samples_ns) / len(samples_ns) / 1e6, 3) if samples_ns else None,
    }


def expected_text(key: str) -> str:
    return f"done {key}"


def result_ok(result: Any, key: str) -> bool:
    """Whether a completed task's `result` is the `CallToolResult` of `work(key, ...)`."""
    if not isinstance(result, dict) or result.get("isError"):
        return False
    content = result.get("content") or []
    return bool(content) and content[0].get("text") == expected_text(key)


@dataclass
class Tracked:
    """One created task, as the harness saw it."""

    key: str
    ms: int
    created: float  # time.monotonic() when the CreateTaskResult arrived
    status: str = "working"
    polls: int = 0
    terminal_at: float | None = None  # when a tasks/get first showed it terminal
    ok: bool | None = None  # completed with the expected result
    subscribed: int = 0  # listen streams that watched it


@dataclass
class Recorder:
    """Everything one store's run observed."""

    samples: dict[str, list[int]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    tasks: dict[str, Tracked] = field(default_factory=dict)
    duplicate_ids: list[str] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # key -> task id
    terminal_twice: list[str] = field(default_factory=list)  # tasks/get: terminal changed
    listen: Counter[str] = field(default_factory=Counter)
    listen_problems: list[str] = field(default_factory=list)
    poll_late_ns: list[int] = field(default_factory=list)
    measuring: bool = True  # latency samples are kept only during the load window
    ramp: bool = True  # the first `--settle` seconds: samples go to `<kind>_ramp`

    def sample(self, kind: str, elapsed_ns: int) -> None:
        if self.measuring:
            self.samples.setdefault(f"{kind}_ramp" if self.ramp else kind, []).append(elapsed_ns)

    def error(self, kind: str, exc: BaseException | str) -> None:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        self.errors[f"{kind}: {text[:80]}"] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{kind}: {text[:300]}")

    def created(self, task_id: str, key: str, ms: int) -> Tracked | None:
        """Record a new task; `None` (and a duplicate) when the id was seen before."""
        if task_id in self.tasks:
            self.duplicate_ids.append(task_id)
            return None
        tracked = self.tasks[task_id] = Tracked(key, ms, time.monotonic())
        self.keys[key] = task_id
        return tracked

    def problem(self, text: str) -> None:
        self.listen["problems"] += 1
        if len(self.listen_problems) < 20:
            self.listen_problems.append(text[:300])


async def timed(rec: Recorder, kind: str, call: Any) -> dict[str, Any] | None:
    """Await `call` (a coroutine of `Caller.call`), sample its latency as `kind`; an error
    is recorded and gives `None`."""
    start = time.perf_counter_ns()
    try:
        result = await call
    except Exception as exc:  # transport errors, error answers, malformed answers, timeouts
        rec.error(kind, exc)
        return None
    rec.sample(kind, time.perf_counter_ns() - start)
    return result
