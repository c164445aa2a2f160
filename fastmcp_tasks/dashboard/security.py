"""Who may use the dashboard, and from where: token, CSRF, origin, Host, read-only, headers.

`Guard` holds one dashboard's policy; `Guarded` is the ASGI middleware that applies the
request-wide part of it to every request before any route runs:

- Host allowlist (DNS rebinding): a request whose `Host` is not allowed gets 400.
- Tokens: with tokens set (labelled ones, or one `token` labelled `operator`:
  `tokens`), every page, API call, the event stream and every action needs one, as
  `Authorization: Bearer TOKEN` or as the session cookie `fastmcp_tasks_ui`
  (HttpOnly, SameSite=Strict) that a valid `?token=TOKEN` on any GET or `POST /login`
  sets. The cookie holds the token's label and an HMAC of label and token under a
  per-app random secret, never the token itself; every comparison is constant time.
  The label the request's token has is its `Identity` (`request_identity`): who the
  audit log says acted, and whether that role may act at all. Static assets (our own
  CSS and JS) are served without a token, so the login page is styled.
- Security headers on every response: a CSP of `default-src 'self'` (no inline script
  or style; `frame-ancestors 'none'`), `X-Frame-Options: DENY`, `Referrer-Policy:
  same-origin` (a browser then sends the real `Origin` on our own forms),
  `X-Content-Type-Options: nosniff`, `Cache-Control: no-store`.

The per-action part runs in the POST routes (`Guard.check_post`, after the form is
read): a read-only dashboard or role refuses every POST with 403; a POST is refused
when `Sec-Fetch-Site` is `cross-site` or an `Origin` header does not match `Host`, and
needs the form field `csrf`, an HMAC of the per-app secret, the label and its token.
A token is never logged: the query string holding it is rewritten away by a redirect.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
from collections.abc import Iterable, Mapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastmcp_tasks.dashboard.tokens import ANONYMOUS, Credentials, Identity

COOKIE = "fastmcp_tasks_ui"
#: The ASGI scope key holding the request's `Identity` (set by `Guarded`).
IDENTITY = "fastmcp_tasks.identity"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: A `Host` value: a name or IPv4 address, or a bracketed IPv6 one, and maybe a port.
HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::(\d{1,5}))?")
log = logging.getLogger("fastmcp_tasks.dashboard")


class Refusal(Exception):
    """A request the dashboard refuses: HTTP `status` and a message for the person."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def loopback_hosts(port: int) -> list[str]:
    """The `Host` values a browser sends to a loopback server on `port`."""
    return [f"{name}:{port}" for name in LOOPBACK_NAMES]


class Guard:
    """One dashboard's access policy (see the module docstring)."""

    def __init__(
        self,
        token: str | None,
        *,
        tokens: Mapping[str, str] | None = None,
        read_only: bool = False,
        read_only_labels: Iterable[str] = (),
        allowed_hosts: Iterable[str] | None = None,
        cookie_name: str = COOKIE,
    ) -> None:
        self.credentials = Credentials(token, tokens, read_only_labels)
        self.read_only = read_only
        self.cookie_name = cookie_name
        self.allowed_hosts = (
            None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
        )
        #: The entries without a port: they allow their name on any port.
        self._any_port = frozenset(
            h for h in self.allowed_hosts or () if (m := HOST.fullmatch(h)) and not m.group(2)
        )
        self._secret = secrets.token_bytes(32)

    @property
    def has_token(self) -> bool:
        return bool(self.credentials)

    def _mac(self, purpose: str, label: str) -> str:
        message = f"{purpose}\0{label}\0{self.credentials.secret(label)}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    # --- checks -------------------------------------------------------------------------

    def host_allowed(self, host: str | None) -> bool:
        """Whether `Host` names this server (any host when no allowlist is set)."""
        if self.allowed_hosts is None:
            return True
        parsed = HOST.fullmatch((host or "").lower())
        if parsed is None:
            return False  # not `name[:port]`: e.g. `127.0.0.1:8765:1`
        return parsed.group(0) in self.allowed_hosts or parsed.group(1) in self._any_port

    def token_label(self, given: str | None) -> str | None:
        """The label of the token `given` is, or `None` (constant time: `tokens`)."""
        return self.credentials.match(given)

    def token_matches(self, given: str | None) -> bool:
        return self.token_label(given) is not None

    def identity(self, label: str) -> Identity:
        """The identity of `label`: read-only when the dashboard or its role is."""
        return self.credentials.identity(label, read_only=self.read_only)

    def session_value(self, label: str) -> str:
        """What the session cookie holds: the label and an HMAC of its token, not the token."""
        return f"{label}.{self._mac('session', label)}"

    def identify(self, headers: dict[str, str]) -> Identity | None:
        """Who a request is (its token, as a Bearer header or the session cookie), or `None`
        when it carries none; everyone is `ANONYMOUS` on a dashboard without tokens."""
        if not self.has_token:
            return self.identity(ANONYMOUS)
        authorization = headers.get("authorization", "")
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() == "bearer":
            label = self.token_label(credentials.strip())
            if label is not None:
                return self.identity(label)
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except Exception:  # a malformed cookie header is no session
            return None
        morsel = cookies.get(self.cookie_name)
        if morsel is None:
            return None
        label, _, _ = morsel.value.rpartition(".")
        if label not in self.credentials.labels:
            return None
        expected = self.session_value(label)
        if not hmac.compare_digest(morsel.value.encode(), expected.encode()):
            return None
        return self.identity(label)

    def authenticated(self, headers: dict[str, str]) -> bool:
        """Whether a request carries a token (header or cookie); always, without one."""
        return self.identify(headers) is not None

    def csrf_token(self, label: str = "") -> str:
        """The token every POST form of `label`'s pages carries (field `csrf`); the login
        form's is `label` ""."""
        return self._mac("csrf", label)

    def check_origin(self, headers: dict[str, str]) -> None:
        """Refuse a cross-site request (`Sec-Fetch-Site`, `Origin` not matching `Host`)."""
        if headers.get("sec-fetch-site", "").lower() == "cross-site":
            raise Refusal(403, "Refused: a cross-site request (Sec-Fetch-Site: cross-site).")
        origin = headers.get("origin")
        same_origin = headers.get("sec-fetch-site", "").lower() == "same-origin"
        if origin == "null" and same_origin:
            return  # a browser hiding the origin of our own page's form (a no-referrer policy)
        if origin is not None:
            netloc = urlsplit(origin).netloc.lower() if origin != "null" else "null"
            if netloc != headers.get("host", "").lower():
                raise Refusal(403, "Refused: the Origin header does not match this server.")

    def check_post(self, headers: dict[str, str], form: dict[str, str], who: Identity) -> None:
        """The checks of a state-changing request by `who`, after its form is read."""
        if who.read_only:
            raise Refusal(403, "This dashboard is read-only: actions are turned off.")
        self.check_origin(headers)
        given = form.get("csrf", "")
        expected = self.csrf_token(who.label)
        if not given or not hmac.compare_digest(given.encode(), expected.encode()):
            raise Refusal(
                403, "Refused: the form's CSRF token is missing or wrong; reload the page."
            )

    def cookie_header(self, label: str, root: str = "") -> str:
        """`label`'s session cookie, for the paths under the app's `root` (its mount point)."""
        path = quote(root or "/", safe="/")
        value = self.session_value(label)
        return f"{self.cookie_name}={value}; Path={path}; HttpOnly; SameSite=Strict"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def request_headers(scope: Scope) -> dict[str, str]:
    """A request's headers by lower-case name (the last one of a repeated name)."""
    return _headers(scope)


def request_identity(scope: Scope) -> Identity:
    """Who made the request, as `Guarded` found (a read-only nobody when it did not run:
    `/login` without a session)."""
    who = scope.get(IDENTITY)
    return who if isinstance(who, Identity) else Identity(ANONYMOUS, True)


async def _answer(
    send: Send, status: int, body: bytes, content_type: str, extra: list[tuple[bytes, bytes]]
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *HEADERS,
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guarded:
    """ASGI middleware: the Host check, the token, and the security headers (module doc).

    `login_page(message, next_url)` renders the 401 page with its login form.
    """

    def __init__(self, app: ASGIApp, guard: Guard, login_page: Any) -> None:
        self.app = app
        self.guard = guard
        self.login_page = login_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        guard = self.guard
        if not guard.host_allowed(headers.get("host")):
            body = b"Refused: this Host is not one this dashboard serves (DNS rebinding guard).\n"
            await _answer(send, 400, body, "text/plain; charset=utf-8", [])
            return
        path: str = scope.get("path", "")
        root = scope.get("root_path", "")
        route = path[len(root) :] if root and path.startswith(root) else path
        who = guard.identify(headers)
        if guard.has_token and not route.startswith("/static/") and route != "/login":
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if scope["method"] == "GET" and "token" in query:
                await self._login_by_query(scope, send, query, path)
                return
            if who is None:
                await self._refuse(scope, send, route)
                return
        scope[IDENTITY] = who  # `request_identity`: who acts, and whether they may

        started = False

        async def secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        try:
            await self.app(scope, receive, secured)
        except Exception:
            if started:
                raise
            # what a route did not answer: a 500 that still carries the headers
            log.exception("dashboard: %s %s failed", scope["method"], path)
            body = b"The dashboard failed to answer this request; the error is logged.\n"
            await _answer(send, 500, body, "text/plain; charset=utf-8", [])

    async def _login_by_query(
        self, scope: Scope, send: Send, query: dict[str, str], path: str
    ) -> None:
        label = self.guard.token_label(query.pop("token"))
        if label is None:
            await self._refuse(scope, send, path, "That token is not right.")
            return
        # one leading slash (`//host/x` would be another site), the rest percent-quoted
        location = quote("/" + path.lstrip("/"), safe="/:@!$&'()*+,;=~")
        location += f"?{urlencode(query)}" if query else ""
        cookie = self.guard.cookie_header(label, str(scope.get("root_path", "")))
        extra = [(b"location", location.encode()), (b"set-cookie", cookie.encode())]
        await _answer(send, 303, b"", "text/plain; charset=utf-8", extra)

    async def _refuse(self, scope: Scope, send: Send, route: str, message: str = "") -> None:
        wants_json = route.startswith(("/api/", "/events")) or scope["method"] != "GET"
        if wants_json:
            body = json.dumps({"error": message or "unauthorized: this dashboard needs its token"})
            await _answer(send, 401, body.encode(), "application/json", [])
            return
        page = self.login_page(scope, message or "This dashboard needs its token.")
        await _answer(send, 401, page.encode(), "text/html; charset=utf-8", [])


__all__ = [
    "COOKIE",
    "IDENTITY",
    "Guard",
    "Guarded",
    "Identity",
    "Refusal",
    "loopback_hosts",
    "request_headers",
    "request_identity",
]
