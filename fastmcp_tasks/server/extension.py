"""`TasksExtension`: configuration, and the wiring of FastMCP's four extension hooks.

- `settings()` advertises `capabilities.extensions["io.modelcontextprotocol/tasks"] = {}` (C1).
- `methods()` binds `tasks/get`, `tasks/update`, `tasks/cancel` (see `handlers`).
- `intercept_tool_call()` decides, per `tools/call`, between the synchronous
  path and a task (the mode table in docs/explanation/task-flow.md), creates the task in the store
  and hands it to the runner. It checks the call's idempotency `_meta` first
  (`server.idempotency`), and refuses a resent call it would run synchronously.
- `lifespan()` also advertises `capabilities.experimental["fastmcp-tasks"] =
  {"idempotencyKey": ...}` (through FastMCP's public `experimental_capabilities`,
  so `initialize` and `server/discover` both carry it).
- `lifespan()` warns about task options that do nothing on this server (`misuse`),
  opens the store, serves `subscriptions/listen` (see `listen`), lets a `tasks/get` no
  middleware or tracer could watch skip FastMCP's request seam (`poll_lane`), has a
  task's own requests answered without the SDK's SSE deferral (`json_replies`, plain
  ones at the SDK's entry while the interceptor is this class's own) and runs the runner.

Faults. Handlers, listen and the runner use the store through
`monitored_store` (every request-serving call bounded by `store_timeout`, every
outcome reported to the `HealthMonitor` behind `health()`). A store that is
unreachable at startup does not stop the server by default (`startup`): it
starts degraded and the engine starts when the store answers.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
from fastmcp.server.context import Context
from fastmcp.server.dependencies import extract_version_spec
from fastmcp.server.extensions import MethodBinding, ServerExtension, ToolCallContinuation
from fastmcp.tools.base import InputRequiredToolResult
from mcp_types import CallToolRequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from fastmcp_tasks import _compat
from fastmcp_tasks.errors import (
    ConfigurationError,
    StoreError,
    missing_capability,
)
from fastmcp_tasks.server import json_replies, observability, poll_lane
from fastmcp_tasks.server.creation import TASK_ID_BYTES, Admission, create_task, new_task_id
from fastmcp_tasks.server.durations import Duration, duration, optional_duration
from fastmcp_tasks.server.engine.call import leaf_of
from fastmcp_tasks.server.engine.heartbeat import DEFAULT_INTERVAL
from fastmcp_tasks.server.engine.history import HistoryWriter
from fastmcp_tasks.server.engine.runner import TaskRunner
from fastmcp_tasks.server.handlers import TaskMethods
from fastmcp_tasks.server.health import EngineHealth, HealthMonitor
from fastmcp_tasks.server.idempotency import read as read_idempotency
from fastmcp_tasks.server.idempotency import refuse_resend
from fastmcp_tasks.server.legacy import LegacyTasks, no_task_support, task_required
from fastmcp_tasks.server.legacy_push import announce
from fastmcp_tasks.server.limits import Limits
from fastmcp_tasks.server.listen import ListenService
from fastmcp_tasks.server.misuse import warn_about
from fastmcp_tasks.server.monitored_store import monitored
from fastmcp_tasks.server.options import options_of
from fastmcp_tasks.server.payloads import seal_mode
from fastmcp_tasks.server.related import serving_related
from fastmcp_tasks.server.sealed_store import sealed_store
from fastmcp_tasks.server.sealing import Sealer
from fastmcp_tasks.server.termination import SigtermGuard
from fastmcp_tasks.server.validation import task_arguments
from fastmcp_tasks.stores import store_from_url
from fastmcp_tasks.stores.base import TaskStore
from fastmcp_tasks.stores.flow import keeps_flow_control
from fastmcp_tasks.stores.text import EncodedJSON
from fastmcp_tasks.stores.urls import describe, masked
from fastmcp_tasks.wire.legacy import CAPABILITY as LEGACY_CAPABILITY
from fastmcp_tasks.wire.names import EXPERIMENTAL_CAPABILITY, TASKS_EXTENSION_ID
from fastmcp_tasks.wire.render import render_create_result

URL_ENV = "FASTMCP_TASKS_URL"
DEFAULT_URL = "memory://"
DEFAULT_CONCURRENCY = 100
DEFAULT_RETENTION = timedelta(hours=1)
DEFAULT_MAX_TASKS = 100_000
DEFAULT_STORE_TIMEOUT = timedelta(seconds=5)
DURABLE_SHUTDOWN_GRACE = timedelta(seconds=30)  # the same as `fastmcp-tasks worker --grace`
STARTUP_MODES = ("degraded", "wait", "fail")

_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)


class TasksExtension(ServerExtension):
    """Durable background tasks for `task=True` tools (SEP-2663).

    Every duration is a `timedelta` or a plain number of seconds (`server.durations`).

    Args:
        url: which store keeps the tasks. `None` reads `FASTMCP_TASKS_URL`,
            defaulting to `memory://`.
        store: a ready store object (anything implementing `TaskStore`);
            excludes `url`.
        concurrency: most tasks running at once in this process; the rest wait
            in order, `working` with a "Queued" status message. `0` makes a front
            end that runs nothing: its tasks wait in a durable store for worker
            processes (`fastmcp-tasks worker`).
        retention: how long a finished task stays readable. `None` keeps
            finished tasks until `max_tasks` forces them out (ttlMs `null`).
        max_tasks: most tasks a store built from `url` retains at once.
        sweep_interval: how often expired tasks are purged.
        input_timeout: how long a task waits for the answer to an input request
            (`ctx.elicit`, a returned `InputRequiredResult`) before it counts as
            unanswered; `None` waits while the task lives. Per tool:
            `task_options(input_timeout=...)`.
        lease: how long a running or queued task stays leased to this process
            without a heartbeat; on a durable store another process recovers
            tasks whose lease ran out (see `engine.leases`).
        shutdown_grace: at shutdown, how long running tasks may finish before they
            are interrupted (then handed back on a durable store). `None`: 30 s on
            a durable store (like `fastmcp-tasks worker`), 0 in memory.
        limits: caps on sizes, on active tasks (in all and per principal) and,
            optionally, on polling (`Limits`).
        store_timeout: longest wait for the store while serving a request or a
            running task; past it the request answers -32603 "Task store
            unavailable". `None`: only the store's own timeouts.
        startup: what a store that is unreachable at startup does: `"degraded"`
            (default) starts the server anyway (synchronous tools work, task
            calls answer "Task store unavailable") and the engine starts when the
            store answers; `"wait"` holds startup until it answers; `"fail"`
            stops startup with the error. A malformed URL or a foreign file
            always stops startup.
        app: the application this server's tasks belong to on a shared store
            (default: the FastMCP server's name): a process claims, recovers
            and fails only its own application's tasks.
        legacy_tasks: serve the 2025-11-25 tasks (`server.legacy`) to connections
            of that generation, from the same store; `False` runs their calls
            synchronously, as FastMCP 4 alone does.
        tombstone_retention: how long a store built from `url` remembers a removed
            task, so its owner hears "expired" rather than "not found"; `None`
            remembers none.
        worker_interval: how often a process that runs tasks tells the store it is
            alive (`stores.operations.WorkerInfo`, on a store that keeps workers); it
            counts as gone after three missed beats (at least 15 s).
        history: write each task's history (`engine.history`) on a store that keeps
            operator records; `False` writes none (workers and pauses still work).
        encryption_key: seals the caller's token and headers into the store so any process
            runs its tasks with them (`server.sealing`); several rotate: the first seals.
            `None` reads `FASTMCP_TASKS_ENCRYPTION_KEY` (comma-separated); none: not stored.
        seal: `"all"` also seals every payload at rest (arguments, results, input, errors,
            steps; `server.payloads`), which needs a key; `"caller"` (default) only the
            caller. `None` reads `FASTMCP_TASKS_SEAL`.
    """

    identifier = TASKS_EXTENSION_ID

    def __init__(
        self,
        url: str | None = None,
        *,
        store: TaskStore | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        retention: Duration | None = DEFAULT_RETENTION,
        max_tasks: int | None = DEFAULT_MAX_TASKS,
        sweep_interval: Duration = timedelta(seconds=60),
        input_timeout: Duration | None = None,
        lease: Duration = timedelta(seconds=30),
        shutdown_grace: Duration | None = None,
        limits: Limits | None = None,
        store_timeout: Duration | None = DEFAULT_STORE_TIMEOUT,
        startup: str = "degraded",
        app: str | None = None,
        legacy_tasks: bool = True,
        tombstone_retention: Duration | None = timedelta(hours=24),
        worker_interval: Duration = timedelta(seconds=DEFAULT_INTERVAL),
        history: bool = True,
        encryption_key: str | Sequence[str] | None = None,
        seal: str | None = None,
    ) -> None:
        if store is not None and url is not None:
            raise ConfigurationError("pass either url= or store=, not both")
        if concurrency < 0:
            raise ConfigurationError(f"concurrency must not be negative, got {concurrency}")
        retention = optional_duration("retention", retention)
        sweep_interval = duration("sweep_interval", sweep_interval, positive=True)
        input_timeout = optional_duration("input_timeout", input_timeout)
        lease = duration("lease", lease, positive=True)
        shutdown_grace = optional_duration("shutdown_grace", shutdown_grace)
        store_timeout = optional_duration("store_timeout", store_timeout, positive=True)
        tombstone_retention = optional_duration("tombstone_retention", tombstone_retention)
        worker_interval = duration("worker_interval", worker_interval, positive=True)
        if startup not in STARTUP_MODES:
            raise ConfigurationError(f"startup must be one of {STARTUP_MODES}, got {startup!r}")
        # every argument, durations checked: what `clone` builds another from
        self._config: dict[str, Any] = {k: v for k, v in locals().items() if k != "self"}
        self.sealer = Sealer.configured(encryption_key)  # `None` reads the variable
        self.seal_all = seal_mode(seal, self.sealer)  # `None` reads the variable
        self.limits = limits or Limits()
        self._caps = self.limits.active_caps
        self.lease_seconds = lease.total_seconds()
        self.input_timeout = input_timeout
        self.url = url if url is not None else os.environ.get(URL_ENV) or DEFAULT_URL
        if store is None:
            kept = None if tombstone_retention is None else tombstone_retention.total_seconds()
            store = store_from_url(self.url, max_tasks=max_tasks, tombstone_retention=kept)
        else:
            self.url = f"{getattr(store, 'scheme', 'custom')}://"
        if concurrency == 0 and not store.durable:
            raise ConfigurationError(
                f"concurrency=0 runs nothing in this process, and {masked(self.url)} is not "
                "shared with other processes: use a durable store (sqlite:///..., redis://... "
                "or postgresql://...)"
            )
        self.store: TaskStore = store
        if shutdown_grace is None:
            shutdown_grace = DURABLE_SHUTDOWN_GRACE if store.durable else timedelta(0)
        self.shutdown_grace = shutdown_grace.total_seconds()
        self.store_timeout = None if store_timeout is None else store_timeout.total_seconds()
        self.startup = startup
        self.app = app
        self.health_monitor = HealthMonitor(describe(store))
        sealing = sealed_store(store, self.sealer, self.seal_all)
        self._store = monitored(sealing, self.health_monitor, self.store_timeout)
        self.concurrency = concurrency
        self.retention_ms = None if retention is None else int(retention.total_seconds() * 1000)
        self.sweep_interval = sweep_interval.total_seconds()
        self.worker_interval = worker_interval.total_seconds()
        #: this process's task events (`engine.history`), noted by handlers and engine
        self.history = HistoryWriter(self._store, enabled=history, sealed=self.seal_all)
        self.runner: TaskRunner | None = None
        self.admission = Admission(
            self._store, self.retention_ms, self.lease_seconds, self._caps, input_timeout
        )
        self.legacy = LegacyTasks(self._store, self.history) if legacy_tasks else None
        self._methods = TaskMethods(self._store, self.limits, self.legacy, self.history)
        self.listen = ListenService(self._store)
        self.poll_lane: poll_lane.PollLane | None = None  # these two while the lifespan runs
        self.json_replies: json_replies.JsonReplies | None = None

    def clone(self) -> TasksExtension:
        return TasksExtension(**self._config)

    # --- the four hooks ------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {}

    def methods(self) -> Sequence[MethodBinding]:
        return self._methods.bindings()

    def health(self) -> EngineHealth:
        """The engine's health: store reachable or degraded since when, loops alive."""
        runner = self.runner
        return self.health_monitor.snapshot(runner.pending_outcomes if runner else 0)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[None]:
        observability.log_full_ids(getattr(self.server, "auth", None) is not None)
        _compat.check_server(self.server)
        await warn_about(self.server, self.store)  # options that do nothing here, once
        opened = await self._open_store()
        self.listen.install(_compat.low_level_server(self.server))
        try:
            self.poll_lane = poll_lane.install(self.server)
            direct = self if type(self).intercept_tool_call is _INTERCEPT else None
            self.json_replies = json_replies.install(
                self.server, self.store_timeout, self._methods, direct
            )
            self._advertise_idempotency()
            if self.legacy is not None:  # 2025-11-25 connections get the V1 surface
                _compat.allow_task_results()
                _compat.advertise_tasks(self.server, LEGACY_CAPABILITY)
            monitor = self.health_monitor
            runner = TaskRunner(
                self.server,
                self._store,
                concurrency=self.concurrency,
                sweep_interval=self.sweep_interval,
                lease_seconds=self.lease_seconds,
                shutdown_grace=self.shutdown_grace,
                limits=self.limits,
                health=monitor,
                app=self.app if self.app is not None else self.server.name,
                opened=opened,
                input_timeout=self.input_timeout,
                history=self.history,
                worker_interval=self.worker_interval,
                sealer=self.sealer,
            )
            monitor.running = True
            guard = SigtermGuard(lambda: self.runner, self.shutdown_grace if opened else 0.0)
            async with runner.running():
                self.runner = runner
                guard.install()
                try:
                    yield
                finally:
                    guard.uninstall()
                    self.listen.close()
                    self.runner = None
                    monitor.running = False
        finally:
            poll_lane.uninstall(self.server, self.poll_lane)
            json_replies.uninstall(self.server)
            self.poll_lane = self.json_replies = None
            await self.store.close()

    async def _open_store(self) -> bool:
        """Open the store as `startup` says; whether it is open."""
        monitor = self.health_monitor
        while True:
            try:
                await self._store.open()
            except StoreError:
                if self.startup == "fail":
                    raise
                if self.startup == "degraded":
                    return False
                await anyio.sleep(1.0)  # "wait": the monitor logged why, once
                continue
            monitor.opened = True
            return True

    def lifespan(self) -> Any:
        return self._run()

    def _advertise_idempotency(self) -> None:
        """`capabilities.experimental["fastmcp-tasks"]` on every protocol version: whether
        this server honours idempotency keys (its store keeps the atomic dedupe)."""
        server = self.server
        honoured = {"idempotencyKey": keeps_flow_control(self.store)}
        server.experimental_capabilities = {
            **server.experimental_capabilities,
            EXPERIMENTAL_CAPABILITY: honoured,
        }

    @serving_related  # a synchronous call's `related_tasks()` reads this extension's store
    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        context: Context,
        call_next: ToolCallContinuation,
    ) -> Any:
        request = context.request_context
        if request is None or not _compat.is_client_tool_call():
            return await call_next()  # a nested or direct call: never a task
        idempotency = read_idempotency(request.meta)  # -32602 before any store sees it
        # as core's `_on_call_tool`: the raw `_meta`'s string only, else the highest
        version = extract_version_spec(request.meta)
        tool = await json_replies.call_tool_of(context.fastmcp, params.name, version)
        legacy = request.protocol_version not in _MODERN and self.legacy is not None
        wants_task = legacy and _compat.requested_task(context) is not None  # V1 opt-in
        if tool is None or tool.task_config.mode == "forbidden":
            if wants_task and tool is not None:
                raise no_task_support(params.name)
            if tool is not None:  # (an unknown tool runs nothing: core reports it)
                refuse_resend(idempotency, params.name)
            return await call_next()
        if legacy:
            opted_in = wants_task
        else:
            opted_in = (
                request.protocol_version in _MODERN
                and context.client_extension_settings(TASKS_EXTENSION_ID) is not None
            )
        if not opted_in:
            if tool.task_config.mode == "required":
                if legacy:
                    raise task_required(params.name)
                raise missing_capability(f"tool {params.name!r} runs only as a task")
            refuse_resend(idempotency, params.name)
            return await call_next()
        arguments = task_arguments(self.limits, tool, params.arguments)
        if arguments is None:
            return await call_next()  # the synchronous path reports it, no task made
        options = options_of(await leaf_of(tool))  # a mounted tool's options live on the child's
        if options.foreground_input is not None:  # MRTR rounds before any task (C11)
            ask = await options.foreground_input(context, arguments)
            if ask is not None:
                return InputRequiredToolResult(ask)
            arguments = EncodedJSON(arguments)  # the hook may have changed them
        record = await create_task(
            self.admission,
            self.runner,
            tool,
            params.name,
            arguments,
            context,
            options,
            version,
            result_streams=self.legacy.streams if legacy and self.legacy else None,
            idempotency_key=idempotency.key,
        )
        if legacy and self.legacy is not None:
            return announce(self.legacy, record, context, self.runner)
        return render_create_result(record)


_INTERCEPT = TasksExtension.intercept_tool_call  # the one `direct_calls` repeats the steps of

__all__ = ["TASK_ID_BYTES", "TasksExtension", "new_task_id"]
