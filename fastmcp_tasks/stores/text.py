"""The text a store keeps: compact JSON and status messages, always valid UTF-8.

A client may send a lone surrogate (in an argument, an answer, a message): the
durable stores need valid UTF-8, so JSON with one is written with ASCII escapes
(which decode back to the same value), and a plain-text message gets U+FFFD.

A payload the engine has already encoded to check its size (a task's arguments, its
result) travels to the store as `EncodedJSON`, a dict that carries its text, so it is
encoded once per task, not once per layer: `encode_json` (and so every durable store,
and sealing) returns that text as it is. Any other store sees a plain dict.
"""

from __future__ import annotations

import json
import re
from typing import Any


def encode_json(value: Any) -> str:
    """The compact JSON text a store keeps; always valid UTF-8 (the durable stores need it).

    Text with a lone surrogate (a client may send one) cannot be UTF-8: such a value
    is written with ASCII escapes instead, which decode back to exactly the same value.
    An `EncodedJSON` gives the text it was made with.
    """
    if type(value) is EncodedJSON:
        return value.text
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=True)
    return text


class EncodedJSON(dict[str, Any]):
    """A JSON object and its `encode_json` text, made once (module doc). Made just
    before the object goes to the store, and never changed after: the text is not
    made again."""

    __slots__ = ("text",)

    def __init__(self, *args: Any, **items: Any) -> None:
        super().__init__(*args, **items)  # as `dict(...)`, as `dataclasses.asdict` makes one
        self.text = encode_json(dict(self))

    @property
    def size(self) -> int:
        """Bytes of the text (what a size limit counts)."""
        text = self.text
        return len(text) if text.isascii() else len(text.encode("utf-8"))


def encoded(value: dict[str, Any]) -> EncodedJSON:
    """`value` with its text (itself if it already has it)."""
    return value if type(value) is EncodedJSON else EncodedJSON(value)


#: The compact JSON text a store keeps for a completed result.
encode_result = encode_json


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str | None) -> str | None:
    """Plain text (a status message) as valid UTF-8: lone surrogates become U+FFFD."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text
