"""The check of every seam: at import (`check_seams`) and at startup (`check_server`)."""

from __future__ import annotations

from fastmcp import FastMCP

from fastmcp_tasks._compat.client import client_seams
from fastmcp_tasks._compat.core import core_seams
from fastmcp_tasks._compat.legacy import legacy_seams
from fastmcp_tasks._compat.modern_entry import modern_entry_seams
from fastmcp_tasks._compat.mounts import task_run_seams
from fastmcp_tasks._compat.proxy import proxy_seams
from fastmcp_tasks._compat.shape import _raise_for, missing_of


def missing_seams() -> list[str]:
    """The seams the installed FastMCP / SDK no longer provides in the shape we need."""
    checks = (
        core_seams()
        | task_run_seams()
        | client_seams()
        | proxy_seams()
        | legacy_seams()
        | modern_entry_seams()
    )
    return missing_of(checks)


def check_seams() -> None:
    """Raise `IncompatibleFastMCP` unless every seam has the shape we need."""
    _raise_for(missing_seams())


def check_server(server: FastMCP) -> None:
    """At startup: the seams that live on a server instance are there on `server`."""
    missing = [
        f"FastMCP.{name}"
        for name in ("_mask_error_details", "_mcp_server", "_extensions")
        if not hasattr(server, name)
    ]
    if not callable(getattr(getattr(server, "_mcp_server", None), "add_request_handler", None)):
        missing.append("FastMCP._mcp_server.add_request_handler")
    _raise_for(missing)
