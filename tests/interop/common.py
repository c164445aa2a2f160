"""What the Python interop scripts share: their command line and their JSON-lines output.

Standard library only: each script runs in its client's own venv (.interop/*), never
in the project's, and imports this module as `tests.interop.common` (it puts the
repository on `sys.path` first, as tests/durable_server.py does).

    <python> tests/interop/<client>.py URL SCENARIO [--key KEY] [--peer TASK_ID]

`KEY` names the `hold` tool's marker files; `TASK_ID` is a task another client
created on the same server, read with this client's own `tasks/get`. Every line
on stdout is one JSON object with an `event` key; the last one is `{"event": "done"}`.

Scenarios: `complete` (`double`), `error` (`refuse`), `cancel` (`hold`, cancelled by
the client), `elicit` (`order`, answered by the client's elicitation handler with
`ANSWER`), `progress` (`steps`: created with a `progressToken` as the client's API
makes one, then waited on; every `notifications/progress` one of the client's handlers
gets is printed at once as a `progress` line, whose `via` names the handler) and
`counted` (the same with `counted`, which reports through core's `Progress`).
`cancel` and `elicit` pause once, after the task is created and inside the
handler respectively: they print `{"event": "paused"}` and wait for one line on
stdin, so the test can look at the live task from the 2026 side meanwhile.
`resume` (not FastMCP 3) creates nothing: it reads the `--peer` task's outcome with
`tasks/result`, answering the input it carries (another client created the task).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

SCENARIOS = ("complete", "error", "cancel", "elicit", "progress", "counted", "resume")
#: the scenarios whose tool reports progress, and that tool
PROGRESS = {"progress": "steps", "counted": "counted"}
TERMINAL = ("completed", "failed", "cancelled")
NOTIFIED_WITHIN = 5.0  # how long a script waits for its task's terminal status notification
ANSWER = {"size": "large", "quantity": 3}  # what every elicitation handler answers


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--key", default="held")
    parser.add_argument("--peer", default=None)
    return parser.parse_args()


def emit(event: str, **fields: Any) -> None:
    """One observation, as one JSON line (flushed: the test reads them as they come)."""
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


async def pause(at: str) -> None:
    """Let the test look at the task: `paused`, then wait for a line on stdin."""
    emit("paused", at=at)
    await asyncio.to_thread(sys.stdin.readline)


def progressed(via: str, progress: Any, total: Any, message: Any, **fields: Any) -> None:
    """A `progress` line: one `notifications/progress` as the handler `via` got it."""
    emit("progress", via=via, progress=progress, total=total, message=message, **fields)


class Notified:
    """The `notifications/tasks/status` a client handed to its application, per task:
    their statuses, and the `statusMessage`s they carried."""

    def __init__(self) -> None:
        self.statuses: dict[str, list[str]] = {}
        self.messages: dict[str, list[str]] = {}
        self._ended: dict[str, asyncio.Event] = {}

    def _event(self, task_id: str) -> asyncio.Event:
        return self._ended.setdefault(task_id, asyncio.Event())

    def record(self, task_id: str, status: str, message: str | None = None) -> None:
        self.statuses.setdefault(task_id, []).append(status)
        if message is not None:
            self.messages.setdefault(task_id, []).append(message)
        if status in TERMINAL:
            self._event(task_id).set()

    async def report(self, task_id: str, wait: bool = True) -> None:
        """`notified`: the statuses heard for `task_id`, once the terminal one came (bounded),
        or at once with `wait=False`."""
        if wait:
            try:
                await asyncio.wait_for(self._event(task_id).wait(), NOTIFIED_WITHIN)
            except TimeoutError:
                pass
        emit(
            "notified",
            statuses=self.statuses.get(task_id, []),
            messages=self.messages.get(task_id, []),
        )


def failure(exc: BaseException) -> dict[str, Any]:
    """An exception as JSON: its type, message and (for a JSON-RPC error) code."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]  # the first leaf says what went wrong
    error = getattr(exc, "error", None)
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "code": getattr(error, "code", None),
    }


def main_guard(run: Any) -> None:
    """Run the scenario; an unexpected exception is reported as a `crash` line, exit 1."""
    try:
        run()
    except BaseException as exc:  # the test reads what happened
        emit("crash", **failure(exc))
        sys.exit(1)
    emit("done")
