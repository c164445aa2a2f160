"""`fastmcp-tasks ui`: serve the operator dashboard of a shared task store.

    fastmcp-tasks ui [--url STORE_URL] [--host 127.0.0.1] [--port 8765]
                     [--token TOKEN] [--token-file FILE] [--read-only-label LABEL ...]
                     [--read-only]

No MCP server is needed: the dashboard (`fastmcp_tasks.dashboard`) opens the store
itself, by `--url` or `FASTMCP_TASKS_URL`; `memory://` is refused as `ls` refuses it
(no other process can see its tasks: mount the dashboard in the server instead). It
listens on loopback by default and then accepts only the `Host` names of loopback
(`127.0.0.1`, `localhost`, `[::1]` with the port, against DNS rebinding). Any other
`--host` needs a token (`--token`, or `FASTMCP_TASKS_UI_TOKEN`, which keeps it out of
the process list; or labelled ones): without one the command exits 2.

Labelled tokens name who acts in the audit log: `--token-file FILE` (or
`FASTMCP_TASKS_UI_TOKEN_FILE`) holds `label:token` lines (`#` comments and blank lines
skipped), e.g. `alice:...` and `viewer:...`; `--read-only-label viewer` (repeatable)
lets that label look but not act. `--token` alone is the label `operator`; it may be
given beside the file. The URL printed never contains
the token; open it and log in with the token, or append `?token=...` once (it is
turned into a session cookie, `fastmcp_tasks_ui_<port>`, so dashboards on other
ports of the host keep their own sessions, and dropped from the URL). uvicorn's access
log is off, so no token in a query string is logged. SIGTERM or Ctrl-C stops it: the
dashboard closes the store as uvicorn shuts down, and the command exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from fastmcp_tasks.cli.operator import URL_ENV, OperatorError, open_store
from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.stores.urls import masked

TOKEN_ENV = "FASTMCP_TASKS_UI_TOKEN"
TOKEN_FILE_ENV = "FASTMCP_TASKS_UI_TOKEN_FILE"
COMMANDS = ("ui",)


def add_ui_command(commands: Any) -> None:
    """Add `ui` to the `fastmcp-tasks` subcommands."""
    ui = commands.add_parser("ui", help="serve the live operator dashboard of a task store")
    ui.add_argument(
        "--url", default=os.environ.get(URL_ENV), help=f"the task store URL (default ${URL_ENV})"
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ui.add_argument(
        "--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)"
    )
    ui.add_argument(
        "--token",
        default=None,
        help=f"require this token on every request (default ${TOKEN_ENV}); needed off loopback",
    )
    ui.add_argument(
        "--token-file",
        default=os.environ.get(TOKEN_FILE_ENV),
        help=f"labelled tokens, 'label:token' a line (default ${TOKEN_FILE_ENV}); the label "
        "is who acts in the audit log",
    )
    ui.add_argument(
        "--read-only-label",
        action="append",
        default=[],
        metavar="LABEL",
        help="a label of --token-file that may look but not act (repeatable)",
    )
    ui.add_argument("--read-only", action="store_true", help="show everything, allow no actions")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_tokens(path: str | None) -> dict[str, str]:
    """The labelled tokens of `--token-file` (none without one); OperatorError (exit 2)."""
    if not path:
        return {}
    from fastmcp_tasks.dashboard.tokens import parse_token_lines  # the dashboard: lazily

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise OperatorError(
            f"cannot read the token file {path}: {exc.strerror or exc}", 2
        ) from None
    try:
        return parse_token_lines(text, f"token file {path}")
    except ConfigurationError as exc:
        raise OperatorError(str(exc), 2) from None


def run_ui_command(args: argparse.Namespace) -> int:
    """Run `fastmcp-tasks ui`; the exit status (errors reported on stderr)."""
    from fastmcp_tasks.dashboard.tokens import Credentials  # the dashboard: lazily

    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        tokens = read_tokens(args.token_file)
        try:
            Credentials(token, tokens, args.read_only_label)  # refused here, before serving
        except ConfigurationError as exc:
            raise OperatorError(str(exc), 2) from None
        open_store(args.url)  # checks the URL: shared, listable, the file exists
        if not 0 <= args.port <= 65_535:
            raise OperatorError(f"--port must be 0..65535, got {args.port}", 2)
        loopback = is_loopback(args.host)
        if not loopback and token is None and not tokens:
            raise OperatorError(
                f"refusing to serve the dashboard on {args.host} without a token: anyone who "
                f"can reach it could cancel and purge tasks. Set --token or ${TOKEN_ENV}, or "
                "listen on 127.0.0.1",
                2,
            )
    except OperatorError as exc:
        print(f"fastmcp-tasks: {exc}", file=sys.stderr)
        return exc.status
    try:
        asyncio.run(_serve(args, token, tokens, loopback))
    except KeyboardInterrupt:
        pass
    return 0


def _server(config: Any, on_shutdown: Callable[[], Awaitable[None]]) -> Any:
    """A uvicorn server that runs `on_shutdown` as it shuts down, and whose SIGTERM is
    a clean exit (uvicorn re-raises the signal it caught once `serve()` returns, which
    for SIGTERM would kill the process there)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            try:
                await super().shutdown(sockets)
            finally:
                await on_shutdown()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                captured = getattr(self, "_captured_signals", None)
                if captured is not None:  # handled: the store is closed, exit 0
                    captured[:] = [s for s in captured if s != signal.SIGTERM]

    return Server(config)


async def _serve(
    args: argparse.Namespace, token: str | None, tokens: dict[str, str], loopback: bool
) -> None:
    import uvicorn

    from fastmcp_tasks.dashboard import app
    from fastmcp_tasks.dashboard.security import COOKIE, loopback_hosts

    holder: dict[str, Any] = {}
    built = asyncio.Event()

    async def late(scope: Any, receive: Any, send: Any) -> None:
        # the app is built once the port is bound (`--port 0`): its Host allowlist names
        # it; a request accepted before then waits for it
        await built.wait()
        await holder["app"](scope, receive, send)

    async def close() -> None:
        if "app" in holder:
            await holder["app"].state.dashboard.aclose()

    config = uvicorn.Config(
        late,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,  # a ?token= query string must never reach a log
        lifespan="off",
    )
    server = _server(config, close)
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():  # noqa: ASYNC110 - no started event
        await asyncio.sleep(0.02)
    if serving.done():
        await serving  # the bind failed: uvicorn said why and exits
        raise SystemExit(1)
    port = server.servers[0].sockets[0].getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    hosts = [*loopback_hosts(port), f"{host}:{port}"] if loopback else None  # 127.0.0.2 too
    holder["app"] = app(
        args.url,
        token=token,
        tokens=tokens,
        read_only=args.read_only,
        read_only_labels=args.read_only_label,
        allowed_hosts=hosts,
        cookie_name=f"{COOKIE}_{port}",
    )
    built.set()
    url = f"http://{host}:{port}/"
    mode = " (read-only)" if args.read_only else ""
    print(f"fastmcp-tasks ui: dashboard of {masked(args.url)}{mode} at {url}", flush=True)
    if token is not None or tokens:
        labels = sorted({*tokens, *(["operator"] if token is not None else [])})
        print(
            f"fastmcp-tasks ui: it needs a token (labels: {', '.join(labels)}): log in on the "
            "page, or open the URL once with ?token=<token> appended",
            flush=True,
        )
    try:
        await serving
    finally:
        await close()  # when uvicorn did not get to its shutdown (idempotent)


__all__ = ["COMMANDS", "add_ui_command", "run_ui_command"]
