"""The executors of the warm-queue actions, for a worker to register (:data:`WARM_EXECUTORS`);
the action kinds themselves are planner vocabulary, in :mod:`.actions`.

:class:`~.actions.Enqueue`
    Put one adoptable sandbox's entry (a ``WarmQueued`` event) on its queue subject. The warm
    stream holds at most one message per subject and refuses a second one (JetStream error
    10077), so an entry already queued is not a failure: the action notes "already queued".
:class:`~.actions.Purge`
    Remove what the queue holds under a subject: one entry (a ghost, a sandbox adopted or gone)
    or, with a wildcard filter, a whole queue (its template or last pool was deleted).

Taking an entry is not an action: a worker reads its queue through a further input source
(:class:`~services.runtime.reconcile.sources.PullSource`) and ends the plan that adopted it
with an :class:`~services.runtime.reconcile.actions.Ack`, after the adoption's writes.
"""

from __future__ import annotations

from collections.abc import Mapping

from events.codec import nats_subject
from services.runtime.bus import enqueue_warm
from services.runtime.reconcile.actions import Enqueue, Purge
from services.runtime.reconcile.executing import ActionFailed, Executed, ExecutionContext, Executor

__all__ = ["WARM_EXECUTORS"]


async def _enqueue(action: Enqueue, context: ExecutionContext) -> Executed:
    if context.js is None:
        raise ActionFailed("no bus to enqueue on")
    if await enqueue_warm(context.js, action.entry, context.bus):
        return Executed(note=f"queued on {nats_subject(action.entry)}")
    return Executed(note="already queued")


async def _purge(action: Purge, context: ExecutionContext) -> Executed:
    if context.js is None:
        raise ActionFailed("no bus to purge")
    await context.js.purge_stream(context.bus.warm_stream, subject=action.subject)
    return Executed(note=f"purged {action.subject}")


WARM_EXECUTORS: Mapping[type, Executor] = {Enqueue: _enqueue, Purge: _purge}
"""Register these in a worker's definition to use ``Enqueue`` and ``Purge``."""
