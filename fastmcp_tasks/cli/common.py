"""What every `fastmcp-tasks` command shares: usage errors and loading a server file.

`CommandError` reports a usage problem with exit status 2; `load_server` imports
`path/to/server.py[:object]` and finds its FastMCP server (a `ConfigurationError` the
file raises, such as a bad store URL, is reported as one, without a traceback). Both
live here, below the commands, so `cli.target` and `cli.worker` need not import the
`cli` package.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from fastmcp_tasks.errors import ConfigurationError


class CommandError(SystemExit):
    """A usage problem reported to the user with exit status 2."""

    def __init__(self, message: str) -> None:
        print(f"fastmcp-tasks: {message}", file=sys.stderr)
        super().__init__(2)


def load_server(target: str) -> Any:
    """The FastMCP server named by `path/to/server.py[:object]`."""
    from fastmcp import FastMCP

    path_text, _, attribute = target.partition(":")
    path = Path(path_text).resolve()
    if not path.is_file():
        raise CommandError(f"no such server file: {path_text}")
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"_fastmcp_tasks_app_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise CommandError(f"cannot import {path_text}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except ConfigurationError as exc:  # e.g. TasksExtension(url=...) with an unknown option
        raise CommandError(f"{path_text}: {exc}") from None
    if attribute:
        server = getattr(module, attribute, None)
        if not isinstance(server, FastMCP):
            raise CommandError(f"{path_text} has no FastMCP server named {attribute!r}")
        return server
    for name in ("mcp", "server", "app"):
        if isinstance(getattr(module, name, None), FastMCP):
            return getattr(module, name)
    found = [value for value in vars(module).values() if isinstance(value, FastMCP)]
    if len(found) != 1:
        raise CommandError(f"name the server to run: {path_text}:<object>")
    return found[0]
