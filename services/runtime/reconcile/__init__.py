"""The reconciler runtime shared by the sandbox, pool, claim and snapshot workers.

controller-runtime's shape on NATS JetStream: events only say *which* key to look at; a
reconcile reads the current state from the cache, a pure planner decides, the shell writes to
the Kubernetes API and records the decision on the bus. A worker's modules import what they
need from :mod:`services.runtime.worker_api`; its planners import their vocabulary from
:mod:`.actions`, which is pure (importing it loads neither the NATS nor the Kubernetes client).
docs/writing-a-worker.md shows how the parts fit.

What a worker declares:

- :mod:`.definition` — the :class:`~.definition.WorkerDefinition`, a
  :class:`~.definition.Reconciler` per kind, and what ``observe`` is given.
- :mod:`.wakes` — which keys a change wakes, as rules.
- :mod:`.actions` — what planners return: the actions and the Plan with its memo.

What runs it, in the order data flows:

- :mod:`.feeding` — the bus into the worker: the state table on start, then the event log
  through one durable consumer per worker; garbage is dead-lettered, never fatal.
- :mod:`.waking` — each change into the cache (:mod:`services.runtime.cache`), and the keys it
  wakes into the work queue (:class:`api.workqueue.WorkQueue`: one task per key at a time,
  requeue-after, backoff; :mod:`.queueing`: when a key comes back after a pass).
- :mod:`.sources` — further inputs (a warm-queue pull consumer): messages joined to a key,
  held until the key's plan acks them.
- :mod:`.worker` — a pass: observe, plan, execute (:mod:`.executing`; the warm queues'
  executors in :mod:`.warm`), record (:mod:`.recording`), with the key's memo and
  expectations kept on the bus (:mod:`.memory`, :mod:`.expectations`).
- :mod:`.resting` — memory given back while the queue is idle.
- :mod:`.serving` — a worker as a process: connections, replicas (Lease, shards
  (:mod:`.sharding`) or all), the loop.
- :mod:`.tracing` — optional OpenTelemetry spans around reconciles and their steps.
"""
