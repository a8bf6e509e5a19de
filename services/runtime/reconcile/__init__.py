"""The reconciler runtime shared by the sandbox, pool, claim and snapshot workers.

controller-runtime's shape on NATS JetStream: events only say *which* key to look at; a
reconcile reads the current state from the cache, a pure planner decides, the shell writes to
the Kubernetes API and records the decision on the bus. The modules, in the order data flows:

- :mod:`.feeding` — the bus into the worker: the state table on start, then the event log
  through one durable consumer per worker; garbage is dead-lettered, never fatal.
- :mod:`.sources` — further inputs (a warm-queue pull consumer): messages joined to a key,
  held until the key's plan acks them.
- :mod:`services.runtime.cache` (beside this package) — the objects, indexed by label and
  by controller owner, with read-your-writes.
- :mod:`.queueing` — the work queue: one task per key at a time, requeue-after, backoff.
- :mod:`.actions` — what planners return: Create / Patch / Replace / Delete / Ack, the Plan
  with its memo, and the plan's digest.
- :mod:`.executing` — each action through the executor registered for its type; the
  Kubernetes writes' answers into the cache. :mod:`.warm` — the warm-queue action kinds.
- :mod:`.memory` and :mod:`.expectations` — what a worker keeps per key on the bus: the plan's
  memo, and the creates and deletes it waits to see.
- :mod:`services.runtime.kube` (beside this package) — the Kubernetes client, one
  :class:`~services.runtime.kube.KubeError` for every failure.
- :mod:`.worker` — the loop that ties them together and records each decision, with its
  inputs by reference (``sandbus explain --rerun`` makes it again).
- :mod:`.serving` — a worker as a process: connections, replicas (Lease or all), the loop.
- :mod:`.tracing` — optional OpenTelemetry spans around reconciles and their steps.

A worker is a :class:`~.worker.WorkerDefinition` plus its reconcilers; see
:mod:`services.sandbox` for one.

Only the pure vocabulary of planners (:mod:`.actions`) is re-exported here, so that importing
it does not load the NATS and Kubernetes clients; the shell parts are imported from their
modules.
"""

from services.runtime.reconcile.actions import (
    Ack,
    Action,
    Create,
    Delete,
    Patch,
    Plan,
    Replace,
    SpanEvent,
    Step,
    merge_patch,
)

__all__ = [
    "Ack",
    "Action",
    "Create",
    "Delete",
    "Patch",
    "Plan",
    "Replace",
    "SpanEvent",
    "Step",
    "merge_patch",
]
