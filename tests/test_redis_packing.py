"""The Redis store's command packing (`stores.redis.packing`) against redis-py's own.

Every command is packed byte for byte as redis-py packs it, and what redis-py refuses
it still refuses with the same error; the store's pools (TCP, TLS and unix-socket URLs)
make connections of the packing class without losing theirs; and a store whose
connections pack this way answers through a real Redis.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from fastmcp_tasks.stores.redis import RedisTaskStore
from fastmcp_tasks.stores.redis.packing import hiredis_packing
from fastmcp_tasks.testing import make_record
from tests.test_store_contract import redis_store

ARGUMENTS: list[Any] = [
    "plain",
    "",
    "é ü 漢字 🎉",
    "with space",
    "line\r\nbreak",
    b"\x00\xff bytes",
    0,
    -7,
    10**30,
    1.5,
    -0.0,
    1e300,
    float("inf"),
    float("nan"),
    memoryview(b"view"),
    bytearray(b"array"),
    "x" * 10_000,
]


def packed(connection: Connection, *args: Any) -> bytes | str:
    """The bytes `connection` sends for `args`, or the error it raises, by type and text."""
    try:
        return b"".join(bytes(part) for part in connection.pack_command(*args))
    except Exception as error:  # compared, not hidden: both sides must raise alike
        return f"{type(error).__name__}: {error}"


def pair(**kwargs: Any) -> tuple[Connection, Connection]:
    """A plain redis-py connection and one of the packing class, with `kwargs` both."""
    pool = hiredis_packing(aioredis.ConnectionPool(**kwargs))
    fast = pool.connection_class(**pool.connection_kwargs)
    assert type(fast) is not Connection and isinstance(fast, Connection)
    return Connection(**kwargs), fast


@pytest.mark.parametrize("argument", ARGUMENTS, ids=lambda a: type(a).__name__)
def test_every_argument_packs_as_redis_py_packs_it(argument: Any) -> None:
    plain, fast = pair()
    for command in (("SET", "key", argument), ("EVALSHA", "f" * 40, 1, "key", argument, 3)):
        assert packed(fast, *command) == packed(plain, *command)


def test_a_long_script_call_and_a_spaced_command_name_pack_alike() -> None:
    plain, fast = pair()
    script = ("EVALSHA", "a" * 40, 8, *[f"k:{n}" for n in range(8)], *ARGUMENTS)
    assert packed(fast, *script) == packed(plain, *script)
    assert packed(fast, "CLIENT SETNAME", "me") == packed(plain, "CLIENT SETNAME", "me")
    assert packed(fast, "SET\tX", "y") == packed(plain, "SET\tX", "y")  # split there too
    assert packed(fast, b"CLIENT", "LIST") == packed(plain, b"CLIENT", "LIST")


@pytest.mark.parametrize(
    "refused", [True, None, object(), "\udcff"], ids=["bool", "none", "object", "surrogate"]
)
def test_what_redis_py_refuses_is_refused_alike(refused: Any) -> None:
    plain, fast = pair()
    mine, theirs = packed(fast, "SET", "key", refused), packed(plain, "SET", "key", refused)
    assert isinstance(theirs, str)  # an error, not bytes
    assert mine == theirs
    if isinstance(refused, bool):  # redis-py's own error, not hiredis's TypeError
        with pytest.raises(DataError):
            fast.pack_command("SET", "key", refused)


def test_another_text_encoding_is_left_to_redis_py() -> None:
    for kwargs in ({"encoding": "latin-1"}, {"encoding_errors": "replace"}):
        plain, fast = pair(**kwargs)
        for value in ("é", "\udcff", "漢"):
            assert packed(fast, "SET", "key", value) == packed(plain, "SET", "key", value)


def test_the_store_keeps_each_urls_connection_class() -> None:
    for url, base in (
        ("redis://127.0.0.1:6379/0", Connection),
        ("rediss://127.0.0.1:6379/0", SSLConnection),
        ("unix:///tmp/redis.sock", UnixDomainSocketConnection),
    ):
        pool = hiredis_packing(aioredis.ConnectionPool.from_url(url))
        assert issubclass(pool.connection_class, base)
        assert pool.connection_class is not base
        again = hiredis_packing(aioredis.ConnectionPool.from_url(url))
        assert again.connection_class is pool.connection_class  # one class per base
        assert hiredis_packing(again).connection_class is pool.connection_class


@pytest.mark.anyio
async def test_a_store_packing_this_way_answers_through_redis() -> None:
    store = redis_store()
    assert isinstance(store, RedisTaskStore)
    await store.open()
    try:
        with anyio.fail_after(10):
            record = make_record(arguments={"text": "é 漢字 🎉\r\n", "n": 10**30, "x": 1.5})
            assert await store.create(record) is None
            got = await store.get(record.task_id)
            assert got is not None and got.arguments == record.arguments
            client = store._require()
            connection = await client.connection_pool.get_connection()
            try:
                assert type(connection).__module__ == "fastmcp_tasks.stores.redis.packing"
            finally:
                await client.connection_pool.release(connection)
    finally:
        await store.close()
