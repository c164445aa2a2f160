"""Metrics 5-7, on a `Probe` server (memory store): `bench_input` (the `ctx.elicit()`
round trip through `tasks/update`), `bench_push` (completion to a `subscriptions/listen`
frame, against polling at `pollIntervalMs`) and `bench_flood` (a task setting its status
message 10,000 times, with and without a subscriber).
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
import tracemalloc
from typing import Any

import anyio
from fastmcp import FastMCP

from bench.calls import call_probe, get_task, summary, sync_call, timed
from bench.config import Config
from bench.processes import rss_bytes
from bench.proto import TERMINAL, Conn, Send
from bench.server import Probe, extension, make_server
from bench.transports import TRANSPORTS

#: The client capabilities a request declares so that `ctx.elicit()` may park its task.
ELICITATION: dict[str, Any] = {"elicitation": {}}


YES = {"action": "accept", "content": {"value": True}}


async def parked_key(send: Send, task_id: str, previous: str | None = None) -> str:
    """Untimed: poll until the task is parked on one key other than `previous`; that key."""
    with anyio.fail_after(10):
        while True:
            task = await get_task(send, task_id)
            requests = task.get("inputRequests") or {}
            if task["status"] == "input_required" and requests and previous not in requests:
                (key,) = requests
                return key  # type: ignore[no-any-return]


async def bench_input(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 5: the `ctx.elicit()` round trip, `tasks/update` until the run has resumed.

    One task (`asker`) parks on `ctx.elicit("go?", bool)` round after round. Each
    round: a sync `tools/call` (the interleaved reference), then the clock starts,
    `tasks/update` answers the outstanding key and `tasks/get` polls in a tight
    loop. `applied`: the first get showing the update took effect (`working`, or
    parked on the next key); `next_key`: the first get showing the task parked on
    the next key, i.e. the coroutine resumed and asked again.
    """
    server = make_server(probe=Probe())
    warm = min(cfg.warmup, 50)
    total = warm + cfg.input_rounds
    async with TRANSPORTS[kind](server) as conn:
        send = conn.send
        task_id = await call_probe(send, "asker", {"rounds": total + 1}, ELICITATION)
        key = await parked_key(send, task_id)
        samples: dict[str, list[int]] = {"sync": [], "applied": [], "next_key": []}
        gets: list[int] = []
        gc.collect()
        for i in range(total):
            sync_ns = await timed(lambda: sync_call(send))
            start = time.perf_counter_ns()
            await send("tasks/update", {"taskId": task_id, "inputResponses": {key: YES}}, True)
            applied_ns, polls = 0, 0
            while True:
                task = await get_task(send, task_id)
                now = time.perf_counter_ns()
                polls += 1
                status, requests = task["status"], task.get("inputRequests") or {}
                assert status in ("working", "input_required"), task
                moved = key not in requests
                if not applied_ns and moved:
                    applied_ns = now - start
                if status == "input_required" and requests and moved:
                    (key,) = requests
                    break
            if i >= warm:
                samples["sync"].append(sync_ns)
                samples["applied"].append(applied_ns)
                samples["next_key"].append(now - start)
                gets.append(polls)
        await send("tasks/update", {"taskId": task_id, "inputResponses": {key: YES}}, True)
        with anyio.fail_after(10):
            while (await get_task(send, task_id))["status"] != "completed":
                pass
    return {
        "rounds": cfg.input_rounds,
        "sync_reference": summary(samples["sync"]),
        "applied": summary(samples["applied"]),
        "next_key": summary(samples["next_key"]),
        "gets_per_round_mean": sum(gets) / len(gets),
    }


async def bench_push(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 6: completion-to-observed latency, pushed (`subscriptions/listen`) vs. polled.

    Push: `push_tasks` tasks one after another; each `waiter` task gets a listen
    stream of its own, and once its current state has arrived the harness opens
    the tool's gate. Latency: from the tool's clock reading just before it
    returns to the subscriber's parsing of the `completed` frame.

    Poll (when `kind` is in `poll_transports`): `poll_tasks` tasks at once, each
    with a client that polls `tasks/get` every `pollIntervalMs` (the tool's
    default) from a random phase (stratified over the interval); every gate opens
    0.1 s after the polling starts. Latency: from the tool's clock reading to the
    client's receipt of the `tasks/get` that shows `completed`.
    """
    probe = Probe()
    server = make_server(probe=probe)
    out: dict[str, Any] = {}
    async with TRANSPORTS[kind](server, listen=True) as conn:
        assert conn.listen is not None
        send = conn.send
        warm = min(cfg.warmup, 20)
        push_ns: list[int] = []
        frames_per_task: list[int] = []
        for i in range(warm + cfg.push_tasks):
            key = f"push-{i}"
            task_id = await call_probe(send, "waiter", {"key": key})
            async with conn.listen([task_id]) as stream:
                _, first = await stream.task_frame()
                assert first["status"] == "working", first
                probe.gate(key).set()
                frames, end = 1, {}
                while True:
                    stamp, task = await stream.task_frame()
                    frames += 1
                    if task["status"] in TERMINAL:
                        break
                assert task["status"] == "completed", task
                while "result" not in end and "error" not in end:  # frames may follow
                    _, end = await stream.next()
                assert end.get("result", {}).get("resultType") == "complete", end
            if i >= warm:
                push_ns.append(stamp - probe.done_ns[key])
                frames_per_task.append(frames)
        out["push"] = summary(push_ns)
        out["push_frames_per_task_max"] = max(frames_per_task)
        if kind in cfg.poll_transports and cfg.poll_tasks > 0:
            out["poll"] = await _poll_baseline(conn, probe, cfg.poll_tasks)
    return out


async def _poll_baseline(conn: Conn, probe: Probe, count: int) -> dict[str, Any]:
    rng = random.Random(2663)
    keys = [f"poll-{i}" for i in range(count)]
    task_ids: dict[str, str] = {}
    interval_ms = None
    for key in keys:
        created = await conn.send("tools/call", {"name": "waiter", "arguments": {"key": key}}, True)
        task_ids[key] = created["taskId"]
        interval_ms = created.get("pollIntervalMs")
    assert isinstance(interval_ms, int), "the waiter tool's tasks carry no pollIntervalMs"
    interval = interval_ms / 1000
    phases = [(i + rng.random()) / count * interval for i in range(count)]
    rng.shuffle(phases)
    observed: dict[str, int] = {}
    polls: list[int] = []
    release_after = 0.1

    async def poller(key: str, phase: float, t0: float) -> None:
        async with conn.channel() as send:
            await anyio.sleep_until(t0 + phase)
            n = 0
            while True:
                task = await get_task(send, task_ids[key])
                n += 1
                if task["status"] in TERMINAL:
                    observed[key] = time.perf_counter_ns()
                    polls.append(n)
                    return
                await anyio.sleep(interval)

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        t0 = anyio.current_time() + 0.05
        for key, phase in zip(keys, phases, strict=True):
            group.start_soon(poller, key, phase, t0)
        await anyio.sleep_until(t0 + release_after)
        for key in keys:
            probe.gate(key).set()
    return {
        **summary([observed[key] - probe.done_ns[key] for key in keys]),
        "poll_interval_ms": interval_ms,
        "tasks": count,
        "gets_per_task_mean": sum(polls) / len(polls),
        "seconds": round(time.perf_counter() - started, 2),
    }


def feed_backlogs(server: FastMCP) -> list[int]:
    """Changes queued, unread, in each subscription to the memory store's change feed."""
    subscribers = getattr(extension(server).store, "_subscribers", {})
    return sorted(s.statistics().current_buffer_used for s in subscribers)


async def quiesce(server: FastMCP) -> None:
    """Untimed: wait until every change-feed reader has caught up (no run disturbs the next)."""
    with anyio.fail_after(60):
        while any(feed_backlogs(server)):  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    gc.collect()


async def _flood_once(
    server: FastMCP,
    conn: Conn,
    probe: Probe,
    key: str,
    n: int,
    subscribe: bool,
    trace: bool = False,
) -> dict[str, Any]:
    """One `flood` task, with or without a subscriber; durations from the gate opening."""
    send = conn.send
    task_id = await call_probe(send, "flood", {"key": key, "n": n})
    await quiesce(server)
    if not subscribe:
        if trace:
            tracemalloc.start()
        opened = time.perf_counter_ns()
        probe.gate(key).set()
        with anyio.fail_after(120):
            await probe.finish(key).wait()
        out = {
            "tool_s": (probe.done_ns[key] - opened) / 1e9,
            "feed_backlogs_at_done": feed_backlogs(server),
        }
        if trace:
            with anyio.fail_after(30):  # until the run has been recorded as completed
                while (await get_task(send, task_id))["status"] not in TERMINAL:
                    pass
            out["traced_peak_kib"] = tracemalloc.get_traced_memory()[1] / 1024
            tracemalloc.stop()
        return out
    assert conn.listen is not None
    async with conn.listen([task_id]) as stream:
        _, first = await stream.task_frame()
        assert first["status"] == "working", first
        statuses: list[str] = []
        terminal_at: int | None = None
        ended_at: int | None = None
        backlogs: list[int] = []
        gc.collect()
        rss_before = rss_bytes()
        if trace:
            tracemalloc.start()
        opened = time.perf_counter_ns()
        probe.gate(key).set()
        # In memory the listen answer may overtake the last notifications (the client
        # dispatches them through its binding queue): read until both have arrived.
        while terminal_at is None or ended_at is None:
            stamp, message = await stream.next(limit_s=120)
            if message.get("method") == "notifications/tasks":
                statuses.append(message["params"]["status"])
                if terminal_at is None and statuses[-1] in TERMINAL:
                    terminal_at = stamp
                    backlogs = feed_backlogs(server)
                    if trace:  # traced until the subscriber has seen the outcome
                        _, peak = tracemalloc.get_traced_memory()
                        tracemalloc.stop()
            elif "result" in message or "error" in message:
                ended_at = stamp
        rss_after = rss_bytes()
    out = {
        # task frames after the gate opened (the current state before it is not counted)
        "frames": len(statuses),
        "frames_active": sum(1 for s in statuses if s not in TERMINAL),
        "frames_terminal": sum(1 for s in statuses if s in TERMINAL),
        "last_status": statuses[-1],
        "tool_s": (probe.done_ns[key] - opened) / 1e9,
        "observed_s": (terminal_at - opened) / 1e9,  # first terminal frame
        "stream_end_s": (max(ended_at, terminal_at) - opened) / 1e9,
        "rss_delta_kib": (rss_after - rss_before) / 1024,
        "feed_backlogs_at_terminal_frame": backlogs,
    }
    if trace:
        out["traced_peak_kib"] = peak / 1024
    return out


async def bench_flood(kind: str, cfg: Config) -> dict[str, Any]:
    """Metric 7: a task setting its status message `flood_updates` times, one subscriber.

    Runs alternate with and without a subscriber (`flood_runs` each, medians
    reported), then one more run of each under `tracemalloc`: with a subscriber,
    started once the stream has delivered the current state and stopped when
    the subscriber receives the terminal frame; without, from the gate opening
    until the task is completed. The peak is the traced growth of the whole
    process (server included). Timings come from runs without tracemalloc.
    """
    probe = Probe()
    server = make_server(probe=probe)
    n = cfg.flood_updates
    async with TRANSPORTS[kind](server, listen=True) as conn:
        await _flood_once(server, conn, probe, "warm-sub", min(n, 1000), True)
        await _flood_once(server, conn, probe, "warm-nosub", min(n, 1000), False)
        with_sub: list[dict[str, Any]] = []
        without: list[dict[str, Any]] = []
        for i in range(cfg.flood_runs):
            with_sub.append(await _flood_once(server, conn, probe, f"sub-{i}", n, True))
            without.append(await _flood_once(server, conn, probe, f"nosub-{i}", n, False))
        traced = await _flood_once(server, conn, probe, "traced", n, True, trace=True)
        traced_alone = await _flood_once(server, conn, probe, "traced-alone", n, False, trace=True)

    def median(values: list[float]) -> float:
        return sorted(values)[(len(values) - 1) // 2]

    worst = max([*with_sub, traced], key=lambda r: r["frames"])

    return {
        "updates": n,
        "runs": cfg.flood_runs,
        "frames_max": worst["frames"],
        "frames_median": median([r["frames"] for r in with_sub]),
        "frames_active_of_max": worst["frames_active"],
        "frames_terminal_of_max": worst["frames_terminal"],
        "last_statuses": sorted({str(r["last_status"]) for r in [*with_sub, traced]}),
        "subscribed_tool_s": median([r["tool_s"] for r in with_sub]),
        "subscribed_observed_s": median([r["observed_s"] for r in with_sub]),
        "subscribed_stream_end_s": median([r["stream_end_s"] for r in with_sub]),
        "unsubscribed_tool_s": median([r["tool_s"] for r in without]),
        "rss_delta_kib_max": max(r["rss_delta_kib"] for r in with_sub),
        "traced_peak_kib": traced["traced_peak_kib"],
        "traced_peak_kib_no_subscriber": traced_alone["traced_peak_kib"],
        "traced_run": traced,
        "traced_run_no_subscriber": traced_alone,
        "with_subscriber": with_sub,
        "without_subscriber": without,
    }
