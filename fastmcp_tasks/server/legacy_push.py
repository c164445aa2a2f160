"""2025-11-25 pushes to the session that created a task: status notifications and input.

For each V1 task this process created, `follow()` (run in the engine's task
group from the creating session's first `tasks/get` or `tasks/result` of it, so
no push races the `CreateTaskResult`) watches the task on the store's change
feed until it is terminal and:

- sends `notifications/tasks/status` (the V1 `Task`, with the related-task
  `_meta`) on the creating session's own stream whenever its status or
  `statusMessage` changes, unsolicited, as 2025-11-25 allows;
- while the task waits in `input_required` and no `tasks/result` of this process
  is waiting on it (that one carries the input on its own stream, as the spec
  and the 1.x SDKs expect), puts the input requests on the session's own stream:
  FastMCP 3's client keeps polling `tasks/get` and answers only there. Each
  request key goes to a session once, on whichever of its streams comes first
  (a `tasks/result` from another session is asked again: see `LegacyTasks.asked`).

A session that went away ends the follower quietly; the task goes on.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import mcp_types

from fastmcp_tasks.errors import StoreError
from fastmcp_tasks.server.legacy import LegacyTasks
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.peeking import peek
from fastmcp_tasks.wire.legacy import legacy_create_result, legacy_status, legacy_task, related

logger = logging.getLogger("fastmcp_tasks.legacy")


def announce(tasks: LegacyTasks, record: TaskRecord, context: Any, runner: Any) -> dict[str, Any]:
    """A V1 task was created for `context`'s request: remember it for the session's
    `tasks/list`, follow it for the session once the session knows it (its first
    `tasks/get` or `tasks/result`), and answer its `CreateTaskResult`."""
    try:
        session_id: str | None = context.session_id
    except RuntimeError:
        session_id = None
    tasks.remember(session_id, record.task_id)
    request = context.request_context
    if runner is not None and request is not None:
        shown = (legacy_status(record), record.status_message)
        name = f"fastmcp-task-v1-push {record.task_id}"
        start = functools.partial(
            runner.spawn,
            follow,
            tasks,
            record.task_id,
            request.session,
            shown,
            session_id,
            name=name,
        )
        tasks.follow_when_known(record.task_id, session_id, start)
    return legacy_create_result(record)


async def follow(
    tasks: LegacyTasks,
    task_id: str,
    session: Any,
    created: tuple[Any, ...],
    session_id: str | None = None,
) -> None:
    """Push the task's V1 status changes (and, when nobody waits on it, its input) to `session`
    (whose id is `session_id`).

    `created` is the `(status, statusMessage)` the `CreateTaskResult` showed: not a change.
    """
    last: tuple[Any, ...] | None = created
    try:
        async with tasks.store.changes(frozenset({task_id})) as feed:
            changes = aiter(feed)
            while True:
                record = await peek(tasks.store, task_id)  # no arguments, no context
                if record is None:
                    return
                task = legacy_task(record)
                shown = (task["status"], task.get("statusMessage"))
                if shown != last:
                    last = shown
                    params = mcp_types.TaskStatusNotificationParams.model_validate(
                        {**task, "_meta": related(task_id)}
                    )
                    await session.send_notification(mcp_types.TaskStatusNotification(params=params))
                if record.is_terminal:
                    tasks.forget(task_id)
                    return
                if record.status == "input_required" and task_id not in tasks.waiting:
                    await tasks.put_input(session, None, record, session_id)
                await anext(changes)
    except StoreError as exc:
        logger.debug("V1 status push for a task stopped: the store failed (%s)", exc)
    except Exception as exc:  # the session is gone, or refused: the task goes on
        logger.debug("V1 status push for a task stopped: %s", exc)
