"""The text a store keeps: compact JSON and status messages, always valid UTF-8.

A client may send a lone surrogate (in an argument, an answer, a message): the
durable stores need valid UTF-8, so JSON with one is written with ASCII escapes
(which decode back to the same value), and a plain-text message gets U+FFFD.
"""

from __future__ import annotations

import json
import re
from typing import Any


def encode_json(value: Any) -> str:
    """The compact JSON text a store keeps; always valid UTF-8 (the durable stores need it).

    Text with a lone surrogate (a client may send one) cannot be UTF-8: such a value
    is written with ASCII escapes instead, which decode back to exactly the same value.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=True)
    return text


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
