"""The `Sealer` (server.sealing): round trip, keys, rotation and the task-id binding."""

from __future__ import annotations

import pytest

from fastmcp_tasks.errors import ConfigurationError
from fastmcp_tasks.server.sealing import (
    KEY_ENV,
    NO_KEY,
    WRONG_KEY,
    Sealer,
    SealError,
    open_with,
    secrets_of,
)

PAYLOAD = {"token": "secret-token-value", "headers": {"x-demo": "hello"}}


def test_round_trip_hides_the_payload() -> None:
    sealer = Sealer(["key A"])
    sealed = sealer.seal("task-1", PAYLOAD)
    assert sealed.startswith("v1.")
    assert "secret-token-value" not in sealed and "hello" not in sealed
    assert sealer.open("task-1", sealed) == PAYLOAD
    assert sealer.seal("task-1", PAYLOAD) != sealed  # a fresh nonce each time


def test_wrong_key_and_no_key_fail_clearly() -> None:
    sealed = Sealer(["key A"]).seal("task-1", PAYLOAD)
    with pytest.raises(SealError) as wrong:
        Sealer(["key B"]).open("task-1", sealed)
    assert str(wrong.value) == WRONG_KEY
    assert KEY_ENV in WRONG_KEY
    with pytest.raises(SealError) as missing:
        open_with(None, "task-1", sealed)
    assert str(missing.value) == NO_KEY


def test_sealed_text_is_bound_to_its_task() -> None:
    sealer = Sealer(["key A"])
    sealed = sealer.seal("task-1", PAYLOAD)
    with pytest.raises(SealError):
        sealer.open("task-2", sealed)


def test_damaged_text_is_refused() -> None:
    sealer = Sealer(["key A"])
    sealed = sealer.seal("task-1", PAYLOAD)
    flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
    for text in (flipped, "v2" + sealed[2:], "garbage", "v1.x.!!!"):
        with pytest.raises(SealError):
            sealer.open("task-1", text)


def test_rotation_first_key_seals_all_open() -> None:
    old = Sealer(["key A"]).seal("task-1", PAYLOAD)
    rotated = Sealer(["key B", "key A"])
    assert rotated.open("task-1", old) == PAYLOAD
    new = rotated.seal("task-1", PAYLOAD)
    assert Sealer(["key B"]).open("task-1", new) == PAYLOAD
    with pytest.raises(SealError):
        Sealer(["key A"]).open("task-1", new)


def test_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert Sealer.configured(None) is None
    monkeypatch.setenv(KEY_ENV, " B , A ,")
    assert secrets_of(None) == ["B", "A"]
    assert secrets_of("only") == ["only"]
    assert secrets_of(("x", "y")) == ["x", "y"]
    assert Sealer.configured([]) is None
    with pytest.raises(ConfigurationError):
        secrets_of([b"bytes"])  # type: ignore[list-item]
