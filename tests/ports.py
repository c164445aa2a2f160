"""Free TCP ports for the suite's servers, safe when pytest-xdist runs it in parallel.

`bind(("127.0.0.1", 0))` then close is racy between processes: another worker's bind
to port 0 may get the same number before our server binds it. Here every xdist worker
owns its own slice of ports below Linux's ephemeral range (32768 and up by default),
so no other worker picks from it and no outgoing connection is ever given one of its
ports. Within its slice a process walks on from a random start, taking the next port
that binds cleanly (not in use, not in TIME_WAIT).
"""

from __future__ import annotations

import itertools
import os
import random
import re
import socket

FIRST = 12_000  # the slices: [FIRST + k * SLICE, FIRST + (k + 1) * SLICE)
SLICE = 1_000
SLICES = 20  # up to 20 workers: 12000..31999, below the ephemeral range


def _slice_index() -> int:
    """0 for a serial run (or the xdist controller); 1 + N for xdist worker `gwN`."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    found = re.fullmatch(r"gw(\d+)", worker)
    return 0 if found is None else 1 + int(found.group(1)) % (SLICES - 1)


_BASE = FIRST + _slice_index() * SLICE
_walk = itertools.count(random.randrange(SLICE))


def free_port() -> int:
    """A port of this worker's slice that nothing is bound to right now."""
    for _ in range(SLICE):
        port = _BASE + next(_walk) % SLICE
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_BASE}..{_BASE + SLICE - 1}")
