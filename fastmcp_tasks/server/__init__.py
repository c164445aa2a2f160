"""The server half: `TasksExtension` and what serves the `tasks/*` methods.

`server.extension` wires the extension into FastMCP (the `tools/call`
interceptor, the `tasks/*` handlers, the listen service, the lifespan);
`creation`, `handlers` and `listen` answer requests; `ownership`, `limits`,
`pacing`, `validation` and `options` are the per-request policies;
`observability`, `health` and `monitored_store` watch the running engine;
`server.engine` runs the tasks. Nothing is re-exported here: import from the
module that owns a name (the public names are re-exported by `fastmcp_tasks`).
"""
