"""What a client command of `fastmcp-tasks` talks to and sends: SERVER, headers, arguments.

SERVER is a Streamable HTTP URL or `path/to/server.py[:object]` (loaded in memory).
For a URL, `--token` (default `$FASTMCP_TASKS_TOKEN`) sends `Authorization: Bearer ...`
and `--header 'Name: value'` (repeatable) any other header, e.g. for a proxy; neither is
ever printed. Tool arguments are `key=value` pairs whose values are JSON when they parse.
`--reconnect-timeout` (on `call` and `wait`) is how long to follow a task the server
cannot be reached about.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastmcp_tasks.cli.common import CommandError, load_server
from fastmcp_tasks.client.watch import DEFAULT_RECONNECT_TIMEOUT

TOKEN_ENV = "FASTMCP_TASKS_TOKEN"

SERVER_HELP = (
    "the server: its http(s) URL, or path/to/server.py[:object] run in memory "
    "(its tasks end with this command)"
)


@dataclass(frozen=True)
class Target:
    """The SERVER argument: an http(s) URL (with its headers), or a server file in memory."""

    text: str
    url: str | None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def detachable(self) -> bool:
        """Whether a task outlives this command (not for an in-memory server)."""
        return self.url is not None

    async def refusal(self) -> Refusal | None:
        """Why the HTTP server refused us, if it answered with an error status."""
        return None if self.url is None else await http_refusal(self.url, self.headers)

    def transport(self) -> Any:
        """What `fastmcp.Client` connects with: a retrying HTTP transport, or the server."""
        if self.url is None:
            return load_server(self.text)
        from fastmcp_tasks.client.http import TasksHttpTransport

        # resends polls whose keep-alive connection the server closed (client.http)
        return TasksHttpTransport(self.url, headers=self.headers or None)


#: Statuses that may not be the server's last word: a proxy whose backend is (re)starting,
#: a rate limit, and 400, which a server that is up answers to our probe (a request
#: outside a session) in the moment between a failed connect and the probe.
PASSING = frozenset({400, 408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Refusal:
    """An HTTP error status the server answered with, for a person to read."""

    reason: str
    passing: bool  # worth trying again (`PASSING`), not a refusal to act on


async def http_refusal(url: str, headers: dict[str, str]) -> Refusal | None:
    """Why an HTTP server refuses to start a session, when it says so with a 4xx/5xx.

    The mcp SDK reports a refused `initialize` only as "Server returned an error
    response"; one plain POST shows the status a person can act on (401: no or a
    wrong token). `None` when the server cannot be reached or accepts the request.
    """
    import httpx2

    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "ping",
    }
    sent = {"Accept": "application/json, text/event-stream", **headers}
    try:
        async with httpx2.AsyncClient(timeout=10) as http:
            response = await http.post(url, json=body, headers=sent)
    except Exception:
        return None
    status = response.status_code
    if status < 400:
        return None
    reason = f"HTTP {status} {response.reason_phrase}".strip()
    if status in (401, 403):
        given = "Authorization" in headers
        hint = "the token was refused" if given else f"pass --token or set ${TOKEN_ENV}"
        reason = f"{reason}: {hint}"
    return Refusal(reason, status in PASSING)


def parse_target(
    text: str, *, token: str | None = None, headers: list[str] | None = None
) -> Target:
    """The SERVER argument, checked: an http(s) URL or an existing `path/to/server.py`.

    Args:
        text: SERVER as typed.
        token: a bearer token (`None`: `$FASTMCP_TASKS_TOKEN`, if set).
        headers: `Name: value` items.
    """
    if text.startswith(("http://", "https://")):
        return Target(text, text, parse_headers(headers or [], token))
    path = text.partition(":")[0]
    if not Path(path).is_file():
        raise CommandError(
            f"SERVER must be an http(s) URL or path/to/server.py[:object]; no such file: {path}"
        )
    if token or headers:
        raise CommandError("--token and --header apply to an http(s) SERVER only")
    return Target(text, None)


def parse_headers(items: list[str], token: str | None) -> dict[str, str]:
    """`Name: value` items (and the bearer token) as request headers."""
    headers: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise CommandError(f"a header is 'Name: value', got {item.split(':')[0]!r}...")
        headers[name.strip()] = value.strip()
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def parse_arguments(items: list[str]) -> dict[str, Any]:
    """`key=value` pairs as tool arguments; a value is JSON when it parses, else a string."""
    arguments: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise CommandError(f"arguments are key=value, got {item!r}")
        try:
            arguments[key] = json.loads(raw)
        except ValueError:
            arguments[key] = raw
    return arguments


def add_connection_options(command: Any) -> None:
    """`--token` and `--header` on a client command's parser."""
    command.add_argument(
        "--token", default=None, help=f"bearer token for an http(s) SERVER (default ${TOKEN_ENV})"
    )
    command.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an HTTP header to send (repeatable)",
    )


def reconnect_seconds(text: str) -> float | None:
    """`--reconnect-timeout`: seconds (at least 0), or `none` for no limit."""
    if text.strip().lower() in ("none", "inf", "infinite"):
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, or 'none': {text!r}")
    return seconds


def add_reconnect_option(command: Any) -> None:
    """`--reconnect-timeout` on `call` and `wait`."""
    command.add_argument(
        "--reconnect-timeout",
        type=reconnect_seconds,
        default=DEFAULT_RECONNECT_TIMEOUT,
        metavar="SECONDS",
        help="keep following the task while the server cannot be reached for this long "
        f"(default {DEFAULT_RECONNECT_TIMEOUT:.0f}; 'none': no limit)",
    )
