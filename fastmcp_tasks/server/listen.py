"""Push: `subscriptions/listen` with `taskIds`, answered with `notifications/tasks` (C44-C49).

This module is the one adapter between fastmcp-tasks and the SDK's low-level
server. `MethodBinding` refuses spec methods, and FastMCP 4 serves no
`subscriptions/listen`, so `install()` registers `ListenService` as the
low-level server's handler for it (`add_request_handler`, the SDK's
documented registration call, on the server `_compat.low_level_server()`
reaches through FastMCP's private attribute). `_compat.check_server()` and
`tests/test_listen.py` fail loudly if a FastMCP upgrade moves or takes over
that seam.

A listen without `taskIds` is served unchanged by the SDK's own
`ListenHandler` over `ListenService.bus` (publish `ToolsListChanged` and
friends there). A listen with `taskIds`:

1. needs the per-request tasks opt-in (-32021 otherwise, C46);
2. acks first, with the ids that exist (unknown ids are left out, never an
   error that leaks existence, C49) plus the core kinds it honours;
3. sends every acked task's current state right after the ack, then a
   `notifications/tasks` for each change, each the full DetailedTask exactly as
   `tasks/get` renders it at that moment, without `resultType` (C44);
4. coalesces: a task that changes faster than the client reads has at most one
   pending notification, rendered from the store when it is sent, so the
   latest state (and a terminal one) is never dropped nor overtaken by an older;
5. stamps `_meta["io.modelcontextprotocol/subscriptionId"]` on every frame and
   never sends progress, log messages, or ids and kinds that were not acked;
6. ends gracefully (`{"resultType": "complete", "_meta": {subscriptionId}}`)
   once every acked task is terminal and no core kind was asked for, or when
   the server shuts down.

A slow or dead subscriber blocks only its own stream: the feed reader just
marks tasks dirty, and core events beyond `max_buffered_events` end that stream.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from typing import Any

import anyio
from anyio.abc import TaskStatus
from fastmcp.server.dependencies import bind_request_context
from fastmcp.server.extensions import read_client_extension_settings
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ServerEvent,
    event_matches,
    event_to_notification,
)
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from fastmcp_tasks.errors import (
    StoreError,
    missing_capability,
    store_unavailable,
)
from fastmcp_tasks.server.engine.supervision import Backoff, retry_store
from fastmcp_tasks.server.observability import shown_id
from fastmcp_tasks.server.ownership import current_principal, may_access
from fastmcp_tasks.server.payloads import unreadable
from fastmcp_tasks.stores.base import TaskStore, get_many
from fastmcp_tasks.wire.models import task_notification
from fastmcp_tasks.wire.names import (
    METHOD_LISTEN,
    TASKS_EXTENSION_ID,
    TERMINAL_STATUSES,
)
from fastmcp_tasks.wire.render import could_be_task_id, render_task

logger = logging.getLogger("fastmcp_tasks.listen")

_PUSHED_CHANGES = frozenset({"status", "message", "inputs", "answered"})


def _core_filter(requested: SubscriptionFilter) -> SubscriptionFilter:
    """The core kinds of `requested` that are honoured (every requested one)."""
    return SubscriptionFilter(
        tools_list_changed=True if requested.tools_list_changed else None,
        prompts_list_changed=True if requested.prompts_list_changed else None,
        resources_list_changed=True if requested.resources_list_changed else None,
        resource_subscriptions=list(requested.resource_subscriptions)
        if requested.resource_subscriptions
        else None,
    )


def _requested_task_ids(requested: SubscriptionFilter) -> list[str] | None:
    extra = requested.model_extra or {}
    if "taskIds" not in extra:
        return None
    ids = extra["taskIds"]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise MCPError(INVALID_PARAMS, "notifications.taskIds must be a list of strings")
    return list(dict.fromkeys(ids))


class _Stream:
    """One open listen stream's pending work."""

    def __init__(self, max_events: int) -> None:
        self.dirty: dict[str, None] = {}
        self.events: deque[ServerEvent] = deque()
        self.max_events = max_events
        self.wake = anyio.Event()
        self.closing = False
        self.overflowed = False

    def mark(self, task_id: str) -> None:
        self.dirty[task_id] = None
        self.wake.set()

    def push(self, event: ServerEvent) -> None:
        if len(self.events) >= self.max_events:
            self.overflowed = True
        else:
            self.events.append(event)
        self.wake.set()

    def close(self) -> None:
        self.closing = True
        self.wake.set()


class ListenService:
    """The `subscriptions/listen` handler: core kinds through the SDK, `taskIds` here."""

    def __init__(
        self,
        store: TaskStore,
        *,
        max_subscriptions: int = 1024,
        max_buffered_events: int = 1024,
    ) -> None:
        self.store = store
        self.bus = InMemorySubscriptionBus()
        self.max_subscriptions = max_subscriptions
        self.max_buffered_events = max_buffered_events
        self._core = ListenHandler(
            self.bus,
            max_subscriptions=max_subscriptions,
            max_buffered_events=max_buffered_events,
        )
        self._streams: set[_Stream] = set()

    def install(self, low_level_server: Any) -> None:
        """Serve `subscriptions/listen` on the SDK low-level server."""
        low_level_server.add_request_handler(METHOD_LISTEN, SubscriptionsListenRequestParams, self)

    def close(self) -> None:
        """End every open stream gracefully (server shutdown)."""
        self._core.close()
        for stream in list(self._streams):
            stream.close()

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        requested = params.notifications
        task_ids = _requested_task_ids(requested)
        if task_ids is None:
            return await self._core(ctx, params)
        with bind_request_context(ctx):  # for the caller's principal
            principal = current_principal()
        if read_client_extension_settings(ctx, TASKS_EXTENSION_ID) is None:
            raise missing_capability("subscriptions/listen with taskIds needs the tasks extension")
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        if len(self._streams) >= self.max_subscriptions:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        candidates = list(dict.fromkeys(t for t in task_ids if could_be_task_id(t)))
        try:
            found = await get_many(self.store, candidates)
        except StoreError:
            raise store_unavailable() from None
        acked = [
            task_id
            for task_id in candidates
            if (record := found.get(task_id)) is not None and may_access(record, principal)
        ]
        return await self._serve(ctx, subscription_id, requested, acked)

    async def _serve(
        self,
        ctx: ServerRequestContext[Any, Any],
        subscription_id: Any,
        requested: SubscriptionFilter,
        acked: list[str],
    ) -> SubscriptionsListenResult:
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        core = _core_filter(requested)
        core_uris = frozenset(core.resource_subscriptions or ())
        wants_core = bool(
            core.tools_list_changed
            or core.prompts_list_changed
            or core.resources_list_changed
            or core_uris
        )
        honored = SubscriptionFilter.model_validate(
            {**core.model_dump(by_alias=True, exclude_none=True), "taskIds": acked}
        )
        stream = _Stream(self.max_buffered_events)
        watched = set(acked)

        def deliver(event: ServerEvent) -> None:
            if event_matches(core, core_uris, event):
                stream.push(event)

        unsubscribe = self.bus.subscribe(deliver) if wants_core else None
        self._streams.add(stream)
        try:
            async with anyio.create_task_group() as group:
                await group.start(self._follow, frozenset(acked), stream)
                await ctx.session.send_notification(
                    SubscriptionsAcknowledgedNotification(
                        params=SubscriptionsAcknowledgedNotificationParams(
                            notifications=honored, _meta=meta
                        )
                    ),
                    related_request_id=subscription_id,
                )
                for task_id in acked:  # the current state right after the ack
                    stream.mark(task_id)
                await self._write(ctx, subscription_id, meta, stream, watched, wants_core)
                group.cancel_scope.cancel()
        finally:
            if unsubscribe is not None:
                unsubscribe()
            self._streams.discard(stream)
        return SubscriptionsListenResult(_meta=meta)

    async def _follow(
        self, task_ids: frozenset[str], stream: _Stream, *, task_status: TaskStatus[None]
    ) -> None:
        """Mark changed tasks dirty; after a broken feed, subscribe again and mark them all
        (the writer renders each from the store, so the subscriber gets the latest state)."""
        backoff = Backoff()
        started = False
        while True:
            try:
                async with self.store.changes(task_ids, _PUSHED_CHANGES) as feed:
                    if not started:
                        started = True
                        task_status.started()
                    else:
                        for task_id in task_ids:
                            stream.mark(task_id)
                    backoff.reset()
                    async for change in feed:
                        stream.mark(change.task_id)
                return
            except StoreError as exc:
                if not started:
                    raise  # the listen request itself answers "Task store unavailable"
                logger.debug("listen: change feed failed (%s); subscribing again", exc)
                await anyio.sleep(backoff.next())

    async def _write(
        self,
        ctx: ServerRequestContext[Any, Any],
        subscription_id: Any,
        meta: dict[str, Any],
        stream: _Stream,
        watched: set[str],
        wants_core: bool,
    ) -> None:
        session = ctx.session
        while True:
            if not watched and not wants_core and not stream.events:
                return  # nothing (left) to follow: end gracefully
            await stream.wake.wait()
            stream.wake = anyio.Event()
            while stream.events:
                event = stream.events.popleft()
                await session.send_notification(
                    event_to_notification(event, meta), related_request_id=subscription_id
                )
            while stream.dirty:
                # the marked tasks still followed (a terminal one's later marks are stale),
                # read in one round trip where the store can
                batch = [task_id for task_id in stream.dirty if task_id in watched]
                stream.dirty.clear()
                records = await retry_store(functools.partial(get_many, self.store, batch))
                for task_id in batch:
                    record = records.get(task_id)
                    if record is None or task_id not in watched:
                        watched.discard(task_id)
                        continue
                    if (reason := unreadable(record)) is not None:  # sealed, no key here
                        logger.warning("listen: task %s not sent: %s", shown_id(task_id), reason)
                        watched.discard(task_id)
                        continue
                    task = render_task(record)  # just before the send: records may be live
                    if task["status"] in TERMINAL_STATUSES:
                        watched.discard(task_id)
                    await session.send_notification(
                        task_notification(task, meta),  # type: ignore[arg-type]
                        related_request_id=subscription_id,
                    )
            if stream.overflowed:
                logger.warning("listen stream %r backlog full; ending it", subscription_id)
                return
            if stream.closing or (not watched and not wants_core):
                return
