"""The command inbox: `AcceptCommand` (runtime-api) and its execution (runtime-worker).

accept.py      the use case: run-as binding, cheap checks, dedupe + enqueue in one commit
execute.py     the worker's handler: the command through record mutation, completed in
               the same transaction (effect once)
loop.py        runtime-worker's inbox loop: own engine, one `Worker`, readiness, metrics
bindings.py    which user a workload's commands run as (`nexus admin bind-workload`)
queue.py       the inbox queue's names, policy and item payload
repository.py  every SQL statement of the inbox (besides the work engine's own)
"""
