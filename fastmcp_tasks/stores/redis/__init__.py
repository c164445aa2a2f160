"""The Redis task store (the optional `redis` extra): shared by any number of hosts.

`store` owns `RedisTaskStore`; `keys` the key layout, `scripts` the Lua
scripts (`flow_scripts` those that queue, lease, end and remove tasks, with the
helpers of `flow_lua` and the claim of `claim_lua`, `operations_lua` those of the
operator records), `feed` the
change stream, `leases`, `listing`, `flow` (creation, retry waits, tombstones) and
`operations` (histories, workers, pauses, audit) those parts of the store API. Imported lazily
by `fastmcp_tasks.stores` for `redis://` URLs.
Absolute imports only: `import redis` in these modules is redis-py, never this
package.
"""

from __future__ import annotations

from fastmcp_tasks.stores.redis.store import RedisTaskStore

__all__ = ["RedisTaskStore"]
