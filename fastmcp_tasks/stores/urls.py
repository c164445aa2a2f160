"""Store URLs as people see them, and the options each scheme's URL accepts.

- `masked(url)`: the one way a store URL is shown anywhere (the worker's startup
  line, `fastmcp-tasks ls`/`show`/`ui`, logs, health, spans, exceptions): the
  password of the user part and the value of every secret query option
  (`password`, `sslpassword`, `ssl_password`, `oauth_client_secret`, ... : any
  name with "password", "secret" or a SCRAM key) become `***`, also inside a URL
  given as an option's value (`listen_url=`). A URL that does not parse is
  masked by pattern instead, so nothing that looks like `user:secret@` escapes.
- `describe(store)`: how a store names itself in logs and messages. Every
  built-in store has `describe()`, in one form: its masked URL without the
  query, plus what sets it apart on a shared server (`(prefix 'p')` on Redis,
  `(schema s)` on PostgreSQL). A third-party store without one is named by its
  class and scheme (`MyStore (dynamo://)`).
- `refuse_unknown(url, given, ...)`: the `ConfigurationError` for query options
  a scheme does not take, naming each one (with a close match, if any) and every
  option the scheme does take, as the backend's driver defines them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from fastmcp_tasks.errors import ConfigurationError

#: Query option names whose values are secrets.
SECRET_OPTION = re.compile(r"password|secret|scram_.*key", re.IGNORECASE)
MASK = "***"
_USERINFO = re.compile(r"(://[^/?#@:]*):[^/?#@]*@")


def masked(url: str | None, *, query: bool = True) -> str:
    """`url` fit to print: every password and secret option `***` (module doc); without
    its query (and fragment) when `query` is false."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # an unparsable URL (a bad port, a lone "["): mask by pattern
        head = _USERINFO.sub(rf"\1:{MASK}@", url)
        return head if query else re.split(r"[?#]", head, maxsplit=1)[0]
    netloc, shown_query = parts.netloc, parts.query if query else ""
    if password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:{MASK}@{host}"
    if shown_query:
        pairs = parse_qsl(shown_query, keep_blank_values=True)
        shown = [(name, _masked_value(name, value)) for name, value in pairs]
        if shown != pairs:
            shown_query = urlencode(shown, safe="*", quote_via=quote)
    if netloc == parts.netloc and shown_query == parts.query and (query or not parts.fragment):
        return url  # nothing to hide (and `memory://` stays `memory://`, not `memory:`)
    fragment = parts.fragment if query else ""
    return urlunsplit(parts._replace(netloc=netloc, query=shown_query, fragment=fragment))


def _masked_value(name: str, value: str) -> str:
    if SECRET_OPTION.search(name):
        return MASK
    return masked(value) if "://" in value else value


def describe(store: object) -> str:
    """How `store` names itself in logs and messages (module doc)."""
    own = getattr(store, "describe", None)
    if callable(own):
        return str(own())
    return f"{type(store).__name__} ({getattr(store, 'scheme', 'custom')}://)"


def refuse_unknown(
    url: str,
    given: Iterable[str],
    ours: Iterable[str] = (),
    theirs: Iterable[str] = (),
    driver: str = "",
) -> None:
    """Raise `ConfigurationError` when `given` (the URL's query option names) has one that
    is neither `ours` (read by the store) nor `theirs` (passed to `driver`, e.g. libpq)."""
    known_ours, known_theirs = sorted(set(ours)), sorted(set(theirs) - set(ours))
    known = {*known_ours, *known_theirs}
    unknown = list(dict.fromkeys(name for name in given if name not in known))
    if not unknown:
        return
    scheme = url.partition("://")[0]
    names = ", ".join(repr(name) for name in unknown)
    close = [m for name in unknown for m in difflib.get_close_matches(name, known, n=1)]
    hint = f" (did you mean {', '.join(repr(m) for m in close)}?)" if close else ""
    if not known:
        takes = "take no options"
    else:
        groups = [f"{', '.join(known_ours)} (fastmcp-tasks)"] if known_ours else []
        groups += [f"{driver}'s {', '.join(known_theirs)}"] if known_theirs else []
        takes = "take " + " and ".join(groups)
    raise ConfigurationError(
        f"Task store URL {masked(url)!r}: unknown option{'s' if len(unknown) > 1 else ''} "
        f"{names}{hint}; {scheme}:// URLs {takes}"
    )


__all__ = ["MASK", "SECRET_OPTION", "describe", "masked", "refuse_unknown"]
