"""The task engine: takes tasks from the store and runs each one in its own Context.

`runner` (the bounded pool and its loops) owns the `jobs`; `call` executes one
tool call (guard rounds included) and `outcomes` records how it ended with a
compare-and-set transition; `leases` keeps and recovers leases, `watcher`
follows the change feed, `supervision` keeps every loop alive; `context`,
`inputs` and `progress` are what a running tool sees. Nothing is re-exported.
"""
