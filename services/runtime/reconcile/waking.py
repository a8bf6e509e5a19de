"""Changes from the bus into a worker's cache, and the keys they wake into its queue.

Each change of an object goes into the cache, then wakes the keys the definition's ``wakes``
names for the object after the change and before it, as controller-runtime's owner handlers
wake the old and the new owner: a member a claim adopted no longer names its pool, and the pool
must see it go. Only keys of a kind the worker reconciles are queued. Around that:

- ``follows``: an object the worker does not follow is neither cached nor wakes anything; one
  that stops matching leaves the cache, as its deletion would. ``follows`` reads only the
  object's labels and owner references, so :meth:`Waking.wants` can tell from the event's
  metadata alone, before the event is decoded, that the worker has no use for it: the claim
  worker follows the Pods of OpenSandbox, and most Pod events are those of Sandboxes.
- The echo of a key's own write (the watcher bringing our write back) is nothing new for that
  key: it planned with the write's answer in the cache. Unless its reconciler keeps
  expectations: for those the bus showing the write is the news. Every other key still wakes.
- ``unmoved_by``: a change that moves nothing the worker's planners read goes into the cache
  and wakes no key.
- ``patience``: a change that may wait joins a pass already scheduled within that time.
- ``coalesce``: a key of such a kind waits its window, so that a burst is served by one pass;
  at least :data:`COALESCE_PER_PLANNING_SECOND` times its last pass's planning, at most
  :data:`ECHO_COALESCE` when the change echoes its own write.
- With a tracer, the W3C headers of the last event that woke each key are kept: its next span
  hangs under them (:func:`~.tracing.reconcile_parent`).

Nothing wakes before the state table's first read is complete, and that read itself wakes
nothing: the worker then reconciles every key once, never from a partial view.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

from api.objects import Json
from api.workqueue import WorkQueue
from events.codec import EventDecodeError, ObservedState, decode_observed
from events.envelope import ObjectKey, key_of
from events.subjects import event_filter
from events.types import ObjectDeleted, ObjectEvent, ObjectModified
from services.runtime.cache import Change, ObjectCache
from services.runtime.reconcile.definition import Reconciler, WorkerDefinition

__all__ = ["Waking"]

ECHO_COALESCE: Final = 0.05
"""Seconds at most a coalesced key waits when woken by the echo of its own write: a pool that
creates a batch waits for the batch to show on the bus (its expectations), and the rest of the
batch follows within milliseconds, so a longer window would only slow a fill down, step by
step of its slow start."""
COALESCE_PER_PLANNING_SECOND: Final = 4.0
"""A coalesced key waits at least this many times its last pass's planning (observe, digest,
plan): a pool of 1,000 members plans for tens of milliseconds, and woken by each member's
change it would otherwise plan without pause; this way it takes at most a fifth of the worker."""


class Waking:
    """Feeds ``cache`` and wakes keys into ``queue`` (see the module doc)."""

    def __init__(self, cache: ObjectCache, queue: WorkQueue[ObjectKey]) -> None:
        self._cache = cache
        self._queue = queue
        self.woken_by: dict[ObjectKey, dict[str, str]] = {}
        """The W3C headers of the last event that woke each key (only with a tracer)."""
        self._planning: dict[ObjectKey, float] = {}
        """Seconds the last pass of each coalesced key spent planning."""

    def take_event(
        self,
        event: ObjectEvent,
        definition: WorkerDefinition,
        reconcilers: Mapping[str, Reconciler[Any]],
        *,
        loaded: bool,
        traced: bool,
    ) -> None:
        """One change from the bus: into the cache, then wake the keys it concerns (once the
        first load is ``loaded``)."""
        change: Change = (
            "deleted"
            if isinstance(event, ObjectDeleted)
            else "modified"
            if isinstance(event, ObjectModified)
            else "added"
        )
        obj = event.data.object
        cache = self._cache
        follows = definition.follows.get(event.kind)
        if follows is not None and change != "deleted" and not follows(obj):
            if cache.observed(key_of(obj, event.kind)) is None:
                return
            change = "deleted"  # it left what this worker follows
        writer = cache.writer_of_echo(change, obj, kind=event.kind)
        before = cache.observed(key_of(obj, event.kind))
        cache.observe(change, obj, kind=event.kind)
        if not loaded:
            return
        unmoved = definition.unmoved_by.get(event.kind)
        if (
            unmoved is not None
            and before is not None
            and change == "modified"
            and unmoved(before, obj)
        ):
            return
        woken = dict.fromkeys(definition.wakes(event.kind, obj, cache))
        if before is not None and before is not obj:
            woken.update(dict.fromkeys(definition.wakes(event.kind, before, cache)))
        headers = _trace_headers_of(event) if traced else None
        patience = definition.patience.get(event.kind)
        wait = 0.0
        if patience is not None and before is not None and change == "modified":
            wait = patience(before, obj)
        for key in woken:
            reconciler = reconcilers.get(key.kind)
            if reconciler is None or (key == writer and not reconciler.expects):
                continue  # not reconciled here, or the echo of the key's own write
            if wait and self._queue.join_scheduled(key, wait, trigger=event.id):
                continue
            if headers:
                self.woken_by[key] = headers
            window = definition.coalesce.get(key.kind)
            if window:
                if writer == key:
                    window = min(window, ECHO_COALESCE)
                planning = self._planning.get(key, 0.0)
                window = max(window, COALESCE_PER_PLANNING_SECOND * planning)
                self._queue.add_soon(key, window, trigger=event.id)
            else:
                self._queue.add(key, trigger=event.id)

    def wants(self, subject: str, payload: bytes, definition: WorkerDefinition) -> bool:
        """Whether the event in ``payload`` on ``subject`` may matter to the worker: False only
        for a change of an object it does not follow and does not hold, told from the event's
        metadata without decoding the object. A payload that does not decode is wanted: the
        consumer dead-letters it."""
        follows = None
        for kind, predicate in definition.follows.items():
            if subject.startswith(_subject_prefix(kind)):
                follows = predicate
                break
        if follows is None:
            return True
        try:
            state = decode_observed(payload)
        except EventDecodeError:
            return True
        if state is None or state.change == "deleted" or follows(_metadata_of(state)):
            return True
        return self._cache.observed(state.key) is not None  # it leaves what the worker follows

    def take_state(self, state: ObservedState, definition: WorkerDefinition) -> None:
        """One object of a read of the state table: into the cache, kept as the JSON it came
        in. Nothing wakes."""
        follows = definition.follows.get(state.key.kind)
        if follows is not None and state.change != "deleted" and not follows(_metadata_of(state)):
            if self._cache.observed(state.key) is not None:
                self._cache.observe_state(state, "deleted")  # it left what this worker follows
            return
        self._cache.observe_state(state)

    def planned(self, key: ObjectKey, seconds: float, definition: WorkerDefinition) -> None:
        """A pass of ``key`` planned for ``seconds`` (kept for a coalesced kind's window)."""
        if key.kind not in definition.coalesce:
            return
        if key in self._cache:
            self._planning[key] = seconds
        else:
            self._planning.pop(key, None)


def _trace_headers_of(event: ObjectEvent) -> dict[str, str] | None:
    """The W3C headers an event carries (the watcher's span of the change), if any."""
    if not isinstance(event.traceparent, str):
        return None
    headers = {"traceparent": event.traceparent}
    if isinstance(event.tracestate, str) and event.tracestate:
        headers["tracestate"] = event.tracestate
    return headers


@functools.cache
def _subject_prefix(kind: str) -> str:
    """``sandbus.events.pod.`` for Pods: their filter without its namespace and name tokens."""
    return event_filter(kind).rsplit(".", 2)[0] + "."


def _metadata_of(state: ObservedState) -> Json:
    """The part of the object that ``follows`` reads (see the module doc)."""
    return {"metadata": {"labels": state.labels, "ownerReferences": state.owner_references}}
