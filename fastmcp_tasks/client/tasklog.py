"""A durable client-side record of tasks still running, to come back to after a crash.

    from fastmcp_tasks.client.handles import ToolTask, call_tool_task
    from fastmcp_tasks.client.tasklog import TaskLog

    log = TaskLog("tasks.sqlite3")
    task = await call_tool_task(client, "render", {"pages": 3}, log=log)   # recorded at once
    ...
    # after a restart:
    for entry in await log.unfinished():
        async with Client(entry.server) as client:
            task = await ToolTask.resume(client, entry.task_id, log=log)
            print(await task)                                              # dropped when done

Each entry is written (and committed) as soon as the `CreateTaskResult`
arrives, and deleted once the task is seen terminal. SQLite work runs in a
worker thread (`anyio.to_thread`), one short connection per call.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

_SCHEMA = """
CREATE TABLE IF NOT EXISTS client_tasks (
    task_id    TEXT PRIMARY KEY,
    server     TEXT NOT NULL,
    tool       TEXT NOT NULL,
    arguments  TEXT,
    created_at REAL NOT NULL
)
"""


@dataclass(frozen=True)
class TaskLogEntry:
    """One unfinished task: where it runs, what was called, and when."""

    server: str
    tool: str
    task_id: str
    arguments: dict[str, Any] | None
    created_at: float


class TaskLog:
    """The unfinished tasks of a client, kept in a SQLite file.

    Args:
        path: the database file (created on first use).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"TaskLog({str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=10.0)
        connection.execute(_SCHEMA)
        return connection

    def _record(self, entry: TaskLogEntry) -> None:
        arguments = None if entry.arguments is None else json.dumps(entry.arguments)
        with self._connect() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO client_tasks VALUES (?, ?, ?, ?, ?)",
                (entry.task_id, entry.server, entry.tool, arguments, entry.created_at),
            )
        connection.close()

    def _unfinished(self) -> list[TaskLogEntry]:
        connection = self._connect()
        try:
            rows = connection.execute(
                "SELECT server, tool, task_id, arguments, created_at FROM client_tasks "
                "ORDER BY created_at"
            ).fetchall()
        finally:
            connection.close()
        return [
            TaskLogEntry(server, tool, task_id, None if args is None else json.loads(args), at)
            for server, tool, task_id, args, at in rows
        ]

    def _finish(self, task_id: str) -> None:
        with self._connect() as connection:
            connection.execute("DELETE FROM client_tasks WHERE task_id = ?", (task_id,))
        connection.close()

    async def record(
        self, server: str, tool: str, task_id: str, arguments: dict[str, Any] | None = None
    ) -> TaskLogEntry:
        """Record a task just created (committed before this returns).

        Args:
            server: where the task runs (the URL to reconnect to).
            tool: the tool called.
            task_id: the task's id.
            arguments: the tool's arguments (JSON-serializable).
        """
        entry = TaskLogEntry(server, tool, task_id, arguments, time.time())
        await anyio.to_thread.run_sync(self._record, entry)
        return entry

    async def unfinished(self) -> list[TaskLogEntry]:
        """The recorded tasks not yet seen terminal, oldest first."""
        return await anyio.to_thread.run_sync(self._unfinished)

    async def finish(self, task_id: str) -> None:
        """Drop a task that is terminal (or abandoned); unknown ids are ignored."""
        await anyio.to_thread.run_sync(self._finish, task_id)
