"""Sealing a task's caller context at rest: the encryption keys and the `Sealer`.

`TasksExtension(encryption_key=...)` or `FASTMCP_TASKS_ENCRYPTION_KEY` names one
secret or several (a list, or comma-separated in the variable): the first seals,
every one opens, so a key is rotated by putting the new one first and dropping
the old one once no task sealed with it is left.

Each secret (any string) is stretched into a 256-bit AES key with HKDF-SHA256
(`KEY_INFO`), and into a short key id (`ID_INFO`) written before the sealed text
so the process opening it knows which of its keys sealed it. The payload (a JSON
object) is sealed with AES-GCM, a random 96-bit nonce, and the task id as
associated data: a sealed text copied onto another task does not open there.

Sealed text: `v1.<key id>.<base64url(nonce || ciphertext)>`.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fastmcp_tasks.errors import ConfigurationError, TasksError
from fastmcp_tasks.stores.text import encode_json

#: The variable read when `TasksExtension(encryption_key=None)`.
KEY_ENV = "FASTMCP_TASKS_ENCRYPTION_KEY"
#: HKDF's info for the AES key of a secret, and for its public id.
KEY_INFO = b"fastmcp-tasks caller v1"
ID_INFO = b"fastmcp-tasks caller v1 key id"
SALT = b"fastmcp-tasks"
VERSION = "v1"
NONCE_BYTES = 12

#: What a task fails with where its sealed caller context cannot be opened.
NO_KEY = (
    "the task's caller context is sealed and this process has no encryption key: set "
    f"{KEY_ENV} to the key of the accepting process"
)
WRONG_KEY = (
    "the task's caller context is sealed and this process cannot decrypt it with its "
    f"keys: set {KEY_ENV} to the key of the accepting process"
)

KeySetting = str | Sequence[str] | None


class SealError(TasksError):
    """A sealed text that this process cannot open (no key, wrong key, damaged)."""


def _derive(secret: str, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=SALT, info=info).derive(
        secret.encode()
    )


def secrets_of(setting: KeySetting) -> list[str]:
    """The configured secrets, first the sealing one; `None` reads `KEY_ENV`."""
    if setting is None:
        setting = os.environ.get(KEY_ENV) or ""
        setting = setting.split(",")
    elif isinstance(setting, str):
        setting = [setting]
    if any(not isinstance(key, str) for key in setting):
        raise ConfigurationError("encryption_key must be a string or a list of strings")
    return [key.strip() for key in setting if key.strip()]


class Sealer:
    """Seals and opens JSON objects bound to a task id with the configured keys."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ConfigurationError("a Sealer needs at least one encryption key")
        self._keys = [
            (
                base64.urlsafe_b64encode(_derive(key, ID_INFO, 6)).decode(),
                AESGCM(_derive(key, KEY_INFO, 32)),
            )
            for key in keys
        ]

    @classmethod
    def configured(cls, setting: KeySetting) -> Sealer | None:
        """The sealer of `encryption_key=setting` (or the variable); `None` without keys."""
        keys = secrets_of(setting)
        return cls(keys) if keys else None

    def seal(self, task_id: str, payload: dict[str, Any]) -> str:
        """`payload` sealed with the first key, bound to `task_id`."""
        return self.seal_text(task_id, encode_json(payload))  # as a store would keep it

    def open(self, task_id: str, text: str) -> dict[str, Any]:
        """What `seal(task_id, ...)` sealed; `SealError` when no key of ours opens it."""
        loaded = json.loads(self.open_text(task_id, text))
        if not isinstance(loaded, dict):
            raise SealError(f"{WRONG_KEY} (not a sealed object)")
        return loaded

    def seal_text(self, binding: str, plain: str) -> str:
        """`plain` sealed with the first key, bound to `binding` (associated data)."""
        key_id, aead = self._keys[0]
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = aead.encrypt(nonce, plain.encode(), binding.encode())
        return f"{VERSION}.{key_id}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open_text(self, binding: str, text: str) -> str:
        """What `seal_text(binding, ...)` sealed; `SealError` when no key of ours opens it."""
        version, _, rest = text.partition(".")
        key_id, _, body = rest.partition(".")
        if version != VERSION or not body:
            raise SealError(f"{WRONG_KEY} (unknown sealed format)")
        try:
            raw = base64.urlsafe_b64decode(body)
        except ValueError:
            raise SealError(f"{WRONG_KEY} (damaged sealed text)") from None
        for candidate, aead in self._keys:
            if candidate != key_id:
                continue
            try:
                opened = aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], binding.encode())
            except InvalidTag:
                break
            return opened.decode()
        raise SealError(WRONG_KEY)


def open_with(sealer: Sealer | None, task_id: str, text: str) -> dict[str, Any]:
    """`sealer.open(...)`, or `SealError(NO_KEY)` in a process without keys."""
    if sealer is None:
        raise SealError(NO_KEY)
    return sealer.open(task_id, text)
