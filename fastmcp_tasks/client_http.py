"""Public path of the retrying Streamable HTTP transport; it lives in `client.http`."""

from __future__ import annotations

from fastmcp_tasks.client.http import (
    RETRY_SAFE_METHODS,
    RetryingTransport,
    TasksHttpTransport,
    tasks_http_client,
)

__all__ = ["RETRY_SAFE_METHODS", "RetryingTransport", "TasksHttpTransport", "tasks_http_client"]
