"""The Redis task store (the optional `redis` extra): shared by any number of hosts.

`store` owns `RedisTaskStore`; `keys` the key layout, `scripts` the Lua
scripts, `feed` the change stream, `leases` and `listing` those parts of the
store API. Imported lazily by `fastmcp_tasks.stores` for `redis://` URLs.
Absolute imports only: `import redis` in these modules is redis-py, never this
package.
"""

from __future__ import annotations

from fastmcp_tasks.stores.redis.store import RedisTaskStore

__all__ = ["RedisTaskStore"]
