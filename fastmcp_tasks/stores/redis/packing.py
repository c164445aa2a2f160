"""How the Redis store's connections put a command on the wire: hiredis packs it whole.

redis-py, with hiredis installed, still walks every argument of a command in Python
before hiredis packs it (a memoryview check, then a type check and an encode per
argument): about 35 µs for a script call of 40 arguments, which is what the store's
creation and transition scripts are, and the largest single cost a store call has in
the client. `hiredis_packing` gives a connection class a `pack_command` that hands the
arguments to `hiredis.pack_command` at once (about 3 µs for the same call) whenever it
can pack them exactly as redis-py would: the connection encodes text as strict UTF-8
(redis-py's default, which hiredis always uses), the command name is letters only
(redis-py splits one with whitespace, `"CLIENT SETNAME"`, into two arguments; hiredis
would not), and hiredis accepts every argument (str, bytes, int, float and memoryview,
each packed byte for byte as redis-py packs it, except a memoryview that is not
contiguous, which redis-py refuses and hiredis packs; the store sends none). Anything
else, a `bool`, `None` or a `bytearray`, goes to redis-py's own packing, which packs it
or raises its `DataError`, as before.

The store applies it to the connection class of each pool it builds (`store`, `feed`;
`batching` copies the store pool's), so a `rediss://` or `unix://` URL keeps its TLS or
socket connection class. Without hiredis (redis-py installed alone), classes stay as
they are.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

hiredis: Any
try:
    import hiredis
except ImportError:  # pragma: no cover - hiredis is a dependency of the redis extra
    hiredis = None


class _HiredisPacking:
    """A `pack_command` that packs in one hiredis call where that is exact (module doc)."""

    encoder: Any

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0] if args else None
        encoder = self.encoder
        if (
            type(first) is str
            and first.isalpha()
            and encoder.encoding == "utf-8"
            and encoder.encoding_errors == "strict"
        ):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:  # an argument hiredis takes no view on: redis-py decides
                pass
        packed: list[bytes] = super().pack_command(*args)  # type: ignore[misc]
        return packed


_classes: dict[type[Any], type[Any]] = {}


def _packing_class(base: type[Any]) -> type[Any]:
    made = _classes.get(base)
    if made is None:
        made = _classes[base] = type(base.__name__, (_HiredisPacking, base), {})
    return made


def hiredis_packing(pool: aioredis.ConnectionPool) -> aioredis.ConnectionPool:
    """Make `pool`'s future connections pack with hiredis (module doc); returns `pool`.
    Call it before the pool makes its first connection."""
    base = pool.connection_class
    if hiredis is not None and not issubclass(base, _HiredisPacking):
        pool.connection_class = _packing_class(base)
    return pool


__all__ = ["hiredis_packing"]
