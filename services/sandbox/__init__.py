"""The sandbox worker: agent-sandbox's Sandbox and SandboxTemplate controllers, driven by the bus.

Pure planners (no I/O, no clock, no randomness), each the behaviour of one part of
spec/agent-sandbox.md §2 and §3.1:

- :mod:`.plan` — ``plan_sandbox``: one reconcile of a Sandbox, in upstream's order.
- :mod:`.volumes` — the PVCs of its volume claim templates.
- :mod:`.pods` — finding, creating, adopting, relabelling and (when suspended) deleting its Pod.
- :mod:`.headless` — its headless Service and the port derivation.
- :mod:`.status` — its conditions, status fields and when a status write is due.
- :mod:`.lifecycle` — expiry at ``shutdownTime``, in two passes.
- :mod:`.validation` — specs that cannot be acted on, reported so a person can fix them.
- :mod:`.template` — ``plan_template``: the template's ref-hash label and NetworkPolicy.
- :mod:`.observation` — what the planners see, read from the worker's cache.
- :mod:`.objects` — reading child objects, deciding ownership, and which writes carry a
  resourceVersion precondition (every adoption) and why the others need none.

The shell: :mod:`.worker` (what wakes what, for the reconciler runtime) and :mod:`.service`
(``serve(settings)``, the process).
"""
