"""The command inbox: `AcceptCommand` (runtime-api) and its execution (runtime-worker).

endpoints.py   AcceptCommand over HTTP, single and batch, workload-authenticated
accept.py      the use case: run-as binding, cheap checks, dedupe + enqueue in one commit
execute.py     the worker's handler: groups of commands through record mutation, completed
               in the same transaction (effect once)
group.py       one group of commands in one transaction: callers, batches, results
command.py     one command's steps and how its outcome is classified for the work engine
loop.py        runtime-worker's inbox loop: own engine, one `Worker` under a RestartingLoop,
               readiness, metrics
bindings.py    which user a workload's commands run as (`nexus admin bind-workload`)
queue.py       the inbox queue's names, policy and item payload
repository.py  the inbox's SQL (besides the work engine's own)
models.py      the inbox's work-engine tables, dedupe rows and run-as bindings
"""
