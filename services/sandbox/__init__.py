"""The sandbox worker: agent-sandbox's Sandbox and SandboxTemplate controllers, driven by the bus.

Pure planners (no I/O, no clock, no randomness) live in :mod:`.core`, each the behaviour of
one part of docs/agent-sandbox.md §2 and §3.1:

- :mod:`.core.plan` — ``plan_sandbox``: one reconcile of a Sandbox, in upstream's order.
- :mod:`.core.volumes` — the PVCs of its volume claim templates.
- :mod:`.core.pods` — finding, creating, adopting, relabelling and (when suspended) deleting its
  Pod.
- :mod:`.core.headless` — its headless Service and the port derivation.
- :mod:`.core.status` — its conditions, status fields and when a status write is due.
- :mod:`.core.lifecycle` — expiry at ``shutdownTime``, in two passes.
- :mod:`.core.validation` — specs that cannot be acted on, reported so a person can fix them.
- :mod:`.core.template` — ``plan_template``: the template's ref-hash label and NetworkPolicy.
- :mod:`.core.observation` — what the planners see, read from the worker's cache.
- :mod:`.core.objects` — reading child objects, deciding ownership, and which writes carry a
  resourceVersion precondition (every adoption) and why the others need none.

The shell: :mod:`.worker` (what wakes what, for the reconciler runtime) and :mod:`.service`
(``serve(settings)``, the process).
"""
