"""The load of one store (`bench/load.py`): creators, pollers, subscribers, a sync prober.

- **creators** (`--creators`, each on its own connection) keep `--tasks` tasks in flight:
  a token per slot (the first ones released evenly over one poll interval), a slot freed
  when a poller sees its task terminal; each creation is
  `work(key, ms)` with a unique key and `ms` uniform in `--min-ms..--max-ms`.
- **pollers** (`--pollers`) honour `pollIntervalMs`: a task is due one interval after its
  creation and after each non-terminal `tasks/get`; a dispatcher hands due tasks to
  whichever poller is free (lateness = send time - due time, in the JSON).
- **subscribers** (`--subscribers`) loop: pick `--watch` random in-flight tasks, open
  `subscriptions/listen` on them (tasks opt-in in `_meta`), read until the stream ends, and
  check the ack names every id, that each id got exactly one terminal frame with the
  right result, and no frame after it.
- **prober**: one caller; every `--probe-ms`, a synchronous `tools/call ping` and a
  `tasks/get` of a random in-flight task (`get_probe`), in alternating order: the same
  moments under the same load, so `get_probe / sync` is a fair ratio (the pollers' gets
  come in bursts, whenever many polls fall due together).

After `--duration` the creators stop, the pollers drain what is in flight (`--drain`
seconds at most), and every created task is read once more (`verify`).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench.load_wire import (
    Caller,
    Recorder,
    Tracked,
    frame,
    result_ok,
    timed,
)
from bench.proto import TERMINAL, Stream, raw_sse


@dataclass
class Load:
    duration: float
    tasks: int
    pollers: int
    subscribers: int
    creators: int
    watch: int
    min_ms: int
    max_ms: int
    poll_ms: int
    probe_ms: int
    drain: float
    settle: float


class Driver:
    def __init__(
        self,
        store: str,
        port: int,
        load: Load,
        sample: Callable[[], None],
        at_stop: Callable[[], Awaitable[dict[str, Any]]],
    ) -> None:
        self.store, self.port, self.load = store, port, load
        self.sample_memory, self.at_stop = sample, at_stop
        self.rec = Recorder()
        self.in_flight: dict[str, Tracked] = {}
        self.free: asyncio.Queue[bool] = asyncio.Queue()
        self.due: list[tuple[float, str]] = []
        self.ready: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
        self.stopping = asyncio.Event()
        self.drained = asyncio.Event()
        self.keys = itertools.count(1)
        self.in_flight_samples: list[int] = []
        self.ramp_seconds: float | None = None
        self.lags: list[float] = []

    # --- the actors ------------------------------------------------------------------------

    async def creator(self) -> None:
        caller = Caller(self.port)
        try:
            while await self.free.get() and not self.stopping.is_set():
                key = f"{self.store}-{next(self.keys)}"
                ms = random.randint(self.load.min_ms, self.load.max_ms)
                params = {"name": "work", "arguments": {"key": key, "ms": ms}}
                result = await timed(self.rec, "create", caller.call("tools/call", params, True))
                if result is None or result.get("resultType") != "task":
                    if result is not None:
                        self.rec.error("create", f"not a task: {str(result)[:200]}")
                    self.free.put_nowait(True)
                    await asyncio.sleep(0.05)
                    continue
                task_id = result["taskId"]
                tracked = self.rec.created(task_id, key, ms)
                if tracked is None:
                    self.free.put_nowait(True)
                    continue
                self.in_flight[task_id] = tracked
                if self.ramp_seconds is None and len(self.rec.tasks) >= self.load.tasks:
                    self.ramp_seconds = time.monotonic() - self.started
                self.schedule(task_id, result.get("pollIntervalMs"))
        finally:
            await caller.aclose()

    def schedule(self, task_id: str, interval_ms: Any) -> None:
        ms = interval_ms if isinstance(interval_ms, int) else self.load.poll_ms
        heapq.heappush(self.due, (time.monotonic() + ms / 1000, task_id))

    async def dispatcher(self) -> None:
        while True:
            now = time.monotonic()
            while self.due and self.due[0][0] <= now:
                self.ready.put_nowait(heapq.heappop(self.due))
            wait = min(0.01, self.due[0][0] - now) if self.due else 0.01
            await asyncio.sleep(max(0.001, wait))

    async def poller(self) -> None:
        caller = Caller(self.port)
        try:
            while True:
                due, task_id = await self.ready.get()
                tracked = self.in_flight.get(task_id)
                if tracked is None:
                    continue
                if self.rec.measuring and not self.rec.ramp:
                    self.rec.poll_late_ns.append(int((time.monotonic() - due) * 1e9))
                params = {"taskId": task_id}
                result = await timed(self.rec, "get", caller.call("tasks/get", params, True))
                tracked.polls += 1
                if result is None:
                    self.schedule(task_id, None)
                elif result.get("status") in TERMINAL:
                    self.finish(task_id, tracked, result)
                else:
                    self.schedule(task_id, result.get("pollIntervalMs"))
        finally:
            await caller.aclose()

    def finish(self, task_id: str, tracked: Tracked, result: dict[str, Any]) -> None:
        tracked.status = result["status"]
        tracked.terminal_at = time.monotonic()
        tracked.ok = tracked.status == "completed" and result_ok(result.get("result"), tracked.key)
        del self.in_flight[task_id]
        if not self.stopping.is_set():
            self.free.put_nowait(True)
        elif not self.in_flight:
            self.drained.set()

    async def subscriber(self) -> None:
        while not self.stopping.is_set():
            if len(self.in_flight) < self.load.watch:
                await asyncio.sleep(0.05)
                continue
            await self.watch(random.sample(list(self.in_flight), self.load.watch))

    async def watch(self, ids: list[str]) -> None:
        """One listen stream on `ids`, read to its end."""
        rec, stream = self.rec, Stream()
        body, headers = frame("subscriptions/listen", {"notifications": {"taskIds": ids}}, True)

        async def pump() -> None:
            try:
                await raw_sse("127.0.0.1", self.port, "/mcp", body, headers, stream)
            except Exception as exc:
                stream.put({"eof": f"{type(exc).__name__}: {exc}"})
            else:
                stream.put({"eof": None})

        keys = {task_id: self.rec.tasks[task_id].key for task_id in ids}
        terminal: Counter[str] = Counter()
        acked: list[str] = []
        start = time.perf_counter_ns()
        reader = asyncio.create_task(pump())
        limit = self.load.max_ms / 1000 + 30
        try:
            while True:
                _, message = await stream.next(limit)
                method = message.get("method")
                if method == "notifications/subscriptions/acknowledged":
                    rec.sample("listen_ack", time.perf_counter_ns() - start)
                    acked = list(message["params"].get("notifications", {}).get("taskIds", []))
                    if sorted(acked) != sorted(ids):
                        rec.problem(f"ack names {len(acked)} of {len(ids)} ids")
                        rec.listen["ack_mismatch"] += 1
                elif method == "notifications/tasks":
                    params = message["params"]
                    rec.listen["frames"] += 1
                    task_id, status = params.get("taskId"), params.get("status")
                    if terminal[task_id] and status not in TERMINAL:
                        rec.error("listen", f"a {status} frame after the terminal one")
                    if status in TERMINAL:
                        terminal[task_id] += 1
                        key = keys.get(task_id)
                        if key is None or not result_ok(params.get("result"), key):
                            rec.problem(f"bad terminal frame for {task_id}: {str(params)[:200]}")
                            rec.listen["bad_terminal"] += 1
                elif "error" in message:
                    rec.error("listen", f"JSON-RPC {message['error']}")
                    break
                elif "result" in message:
                    break
                elif "eof" in message:
                    rec.error("listen", f"stream ended without a result: {message['eof']}")
                    break
        except TimeoutError:
            rec.error("listen", f"no message for {limit:.0f} s")
        finally:
            reader.cancel()
        rec.listen["streams"] += 1
        for task_id in acked:
            rec.listen["watched"] += 1
            if task_id in self.rec.tasks:
                self.rec.tasks[task_id].subscribed += 1
            if terminal[task_id] == 0:
                rec.listen["missed_terminal"] += 1
                rec.problem(f"no terminal frame for {task_id}")
            elif terminal[task_id] > 1:
                rec.listen["duplicate_terminal"] += 1
                rec.problem(f"{terminal[task_id]} terminal frames for {task_id}")

    async def prober(self) -> None:
        caller = Caller(self.port)
        ping: dict[str, Any] = {"name": "ping", "arguments": {}}
        try:
            for turn in itertools.count():
                for kind in ("sync", "get_probe") if turn % 2 else ("get_probe", "sync"):
                    if kind == "sync":
                        result = await timed(self.rec, kind, caller.call("tools/call", ping, False))
                        if result is not None and result.get("resultType") == "task":
                            self.rec.error("sync", "a sync call got a task")
                    elif self.in_flight:  # a read only: polling stays the pollers' job
                        params = {"taskId": random.choice(list(self.in_flight))}
                        await timed(self.rec, kind, caller.call("tasks/get", params, True))
                await asyncio.sleep(self.load.probe_ms / 1000)
        finally:
            await caller.aclose()

    async def release(self, tokens: int, seconds: float) -> None:
        """The initial slots, at an even pace over `seconds` (one poll interval): each task's
        polls keep the phase of its creation, and a replacement is created when a poll sees a
        task finished, so a burst here would come back every poll interval for the whole run.
        """
        start = time.monotonic()
        for i in range(tokens):
            await asyncio.sleep(max(0.0, start + i * seconds / tokens - time.monotonic()))
            self.free.put_nowait(True)

    async def lag(self) -> None:
        """This process's event-loop lag (a 20 ms sleep, how late it woke), after the ramp."""
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.02)
            if self.rec.measuring and not self.rec.ramp:
                self.lags.append(time.perf_counter() - start - 0.02)

    async def sampler(self) -> None:
        while True:
            self.sample_memory()
            if self.rec.measuring and not self.rec.ramp:
                self.in_flight_samples.append(len(self.in_flight))
            await asyncio.sleep(0.25)

    # --- the run -------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """The load window, then the drain; what happened (verification is separate)."""
        load = self.load
        self.started = time.monotonic()
        background = [
            asyncio.create_task(actor())
            for actor in (
                functools.partial(self.release, load.tasks, load.poll_ms / 1000),
                self.sampler,
                self.dispatcher,
                self.prober,
                self.lag,
                *[self.poller] * load.pollers,
                *[self.subscriber] * load.subscribers,
            )
        ]
        creators = [asyncio.create_task(self.creator()) for _ in range(load.creators)]
        try:
            await asyncio.sleep(min(load.settle, load.duration))
            self.rec.ramp = False
            at_settle = {**await self.at_stop(), "client_cpu": time.process_time()}
            await asyncio.sleep(max(0.0, load.duration - load.settle))
            self.rec.measuring = False
            self.stopping.set()
            at_stop = {**await self.at_stop(), "client_cpu": time.process_time()}
            for _ in creators:
                self.free.put_nowait(False)
            await asyncio.wait_for(asyncio.gather(*creators), 60)
            stopped = time.monotonic()
            if self.in_flight:
                try:
                    await asyncio.wait_for(self.drained.wait(), load.drain)
                except TimeoutError:
                    pass
            drain_seconds = time.monotonic() - stopped
            subscribers = background[5 + load.pollers :]
            if subscribers:
                await asyncio.wait(subscribers, timeout=load.max_ms / 1000 + 35)
        finally:
            for task in [*background, *creators]:
                task.cancel()
            await asyncio.gather(*background, *creators, return_exceptions=True)
        flights, lags = self.in_flight_samples, sorted(self.lags)
        return {
            "at_settle": at_settle,
            "at_stop": at_stop,
            "ramp_seconds": self.ramp_seconds,
            "drain_seconds": round(drain_seconds, 2),
            "in_flight_mean": round(sum(flights) / len(flights), 1) if flights else None,
            "in_flight_left": len(self.in_flight),
            "client_loop_lag_ms": {
                "n": len(lags),
                "p50": round(lags[len(lags) // 2] * 1000, 1) if lags else None,
                "p99": round(lags[int(len(lags) * 0.99)] * 1000, 1) if lags else None,
                "max": round(lags[-1] * 1000, 1) if lags else None,
            },
        }

    async def verify(self, callers: int = 50) -> dict[str, Any]:
        """Read every created task once more (after the drain): a task that reads differently
        from what the pollers saw, or no longer resolves, is counted."""
        todo = list(self.rec.tasks.items())
        changed: list[str] = []
        errors = 0

        async def reader() -> None:
            nonlocal errors
            caller = Caller(self.port)
            try:
                while todo:
                    task_id, tracked = todo.pop()
                    try:
                        result = await caller.call("tasks/get", {"taskId": task_id}, True)
                    except Exception as exc:
                        errors += 1
                        self.rec.error("verify", exc)
                        continue
                    ok = result.get("status") == "completed" and result_ok(
                        result.get("result"), tracked.key
                    )
                    if tracked.status in TERMINAL and (
                        result.get("status") != tracked.status or ok != tracked.ok
                    ):
                        changed.append(task_id)
            finally:
                await caller.aclose()

        await asyncio.gather(*[reader() for _ in range(callers)])
        return {
            "read": len(self.rec.tasks),
            "changed": changed[:20],
            "n_changed": len(changed),
            "errors": errors,
        }
