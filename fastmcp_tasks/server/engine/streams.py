"""Where a 2025-11-25 caller hears its task's progress: the `tasks/result` it waits in.

A 2025-11-25 `tools/call` that carries a `progressToken` keeps that token for the
task's life (`caller.Caller`). Each progress report of the running tool becomes one
`notifications/progress` for it, tagged with the related-task `_meta`, sent on one
stream the creating session reads:

- while that session waits in `tasks/result` on the task (in this process), on that
  request's response stream: a client waiting there reads it, with or without a GET
  stream (the newest such request, when the session has several);
- otherwise on the session's own stream (its GET stream), which the clients that poll
  `tasks/get` keep open;
- never on another session's stream: the token means nothing there, or worse (the
  TypeScript SDK hands a progress to whichever of its requests has that number).

`ResultStreams` is the register of waiting `tasks/result` requests that
`server.legacy` keeps. The SDK builds a `ServerSession` per request (mcp 2.x): a
notification sent with a `related_request_id` rides the stream of the request that
session object was built for, so each entry keeps its own request's session object.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class ResultStream:
    """One `tasks/result` request waiting on a task: its stream, and its session's id."""

    session: Any  # the SDK's ServerSession of that request
    request_id: Any
    session_id: str


class ResultStreams:
    """The `tasks/result` requests of this process waiting on each task, by task id."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[ResultStream]] = {}

    @contextmanager
    def waiting(
        self, task_id: str, session: Any, request_id: Any, session_id: str | None
    ) -> Iterator[None]:
        """Inside, request `request_id` of session `session_id` waits on `task_id` (a
        request of no known session is not registered: nothing could match it)."""
        if session_id is None:
            yield
            return
        stream = ResultStream(session, request_id, session_id)
        self._waiting.setdefault(task_id, []).append(stream)
        try:
            yield
        finally:
            streams = self._waiting.get(task_id, [])
            if stream in streams:
                streams.remove(stream)
            if not streams:
                self._waiting.pop(task_id, None)

    def of(self, task_id: str, session_id: str) -> ResultStream | None:
        """The newest request of session `session_id` waiting on `task_id`, if any."""
        for stream in reversed(self._waiting.get(task_id, ())):
            if stream.session_id == session_id:
                return stream
        return None
