"""Who a dashboard request is: labelled tokens, their roles, and the token file.

A dashboard takes labelled tokens (`tokens={"alice": "...", "bob": "..."}`), one
unlabelled `token` (its label is `operator`), both, or none (then every request is
`dashboard`). A request carrying a token is the `Identity` of its label: the name
the audit log records as who acted, and the role it has (`read_only_labels` may
look at everything and change nothing; a read-only dashboard makes every label so).

`Credentials.match` finds the label of a presented token in constant time: it
compares a keyed digest of the presented text with the digest of every token
(fixed-length `hmac.compare_digest`, all of them, no early exit), so neither which
token matched nor how long a token is shows in the timing.

`parse_token_lines` reads `fastmcp-tasks ui --token-file`: `label:token` a line,
blank lines and `#` comments skipped (a token may hold `:`; a label may not).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fastmcp_tasks.errors import ConfigurationError

#: What a label may be (it is shown, logged in the audit, and held in the session cookie).
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}")
#: The label of the unlabelled `token`.
OPERATOR = "operator"
#: Who every request is on a dashboard without a token.
ANONYMOUS = "dashboard"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who made a request: the label of its token, and whether it may act."""

    label: str
    read_only: bool


class Credentials:
    """A dashboard's tokens by label, and which labels are read-only (module docstring)."""

    def __init__(
        self,
        token: str | None = None,
        tokens: Mapping[str, str] | None = None,
        read_only_labels: Iterable[str] = (),
    ) -> None:
        named = dict(tokens or {})
        if token:
            if OPERATOR in named:
                raise ConfigurationError(
                    f"token= is the label {OPERATOR!r}, which tokens= names too: give one"
                )
            named[OPERATOR] = token
        for label, secret in named.items():
            if not isinstance(label, str) or not LABEL.fullmatch(label):
                raise ConfigurationError(
                    f"token label {str(label)[:70]!r} is not a name: letters, digits and "
                    "_ . @ + - (at most 64, starting with a letter or digit)"
                )
            if not isinstance(secret, str) or not secret:
                raise ConfigurationError(f"the token of {label!r} is empty")
        if len(set(named.values())) < len(named):
            raise ConfigurationError("two labels share one token: who acted could not be told")
        self.read_only_labels = frozenset(read_only_labels)
        unknown = sorted(self.read_only_labels - set(named))
        if unknown:
            raise ConfigurationError(f"read_only_labels names labels with no token: {unknown}")
        self._secrets = named
        self._key = secrets.token_bytes(32)
        self._digests = [(label, self._digest(secret)) for label, secret in named.items()]

    def __bool__(self) -> bool:
        return bool(self._secrets)

    @property
    def labels(self) -> list[str]:
        return sorted(self._secrets)

    def secret(self, label: str) -> str:
        """The token of `label` ("" for a label without one, as `ANONYMOUS`)."""
        return self._secrets.get(label, "")

    def _digest(self, text: str) -> bytes:
        return hmac.new(self._key, text.encode(), hashlib.sha256).digest()

    def match(self, given: str | None) -> str | None:
        """The label whose token `given` is, or `None` (constant time, module docstring)."""
        if given is None or not self._digests:
            return None
        presented = self._digest(given)
        found: str | None = None
        for label, digest in self._digests:
            if hmac.compare_digest(presented, digest) and found is None:
                found = label
        return found

    def identity(self, label: str, *, read_only: bool = False) -> Identity:
        """The identity of `label`, read-only when its role or the dashboard says so."""
        return Identity(label, read_only or label in self.read_only_labels)


def parse_token_lines(text: str, source: str = "the token file") -> dict[str, str]:
    """`label:token` lines (blank lines and `# comments` skipped); ConfigurationError."""
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        label, sep, token = line.partition(":")
        label, token = label.strip(), token.strip()
        if not sep or not token or not LABEL.fullmatch(label):
            raise ConfigurationError(
                f"{source}, line {number}: expected 'label:token' (a label of letters, "
                "digits and _ . @ + -, then the token)"
            )
        if label in found:
            raise ConfigurationError(f"{source}, line {number}: label {label!r} given twice")
        found[label] = token
    return found


__all__ = [
    "ANONYMOUS",
    "LABEL",
    "OPERATOR",
    "Credentials",
    "Identity",
    "parse_token_lines",
]
