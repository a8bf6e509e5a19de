"""The record of a pass: a ``DecisionMade`` event on the bus.

A decision carries the events that woke the key, the inputs by reference (every object observe
read, by resourceVersion, plus memo, expectations, messages and last error: :func:`decision_inputs`)
and their digest, the time (the event's ``time`` *is* the ``now`` the planner was given, so a
re-run can make the same call), each action with its outcome, the digest of what the plan
decided, the planner's reason, the error, and when the key comes back.

A decision is a record of what was done, not a change: one the bus does not take loses history,
never state, so :class:`Recorder` says so loudly and the worker keeps serving. For the same
reason a pass does not wait for the bus to take its decision: the decision is sent, and its
acknowledgement is counted when it comes (JetStream's asynchronous publish). Waiting for it cost
each pass a round trip to the server and a timer, about a tenth of what a pass costs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec
from nats.js import JetStreamContext

from api.objects import Json, metadata_of
from events.codec import encode_event, nats_subject
from events.envelope import ObjectKey, ObjectRef
from events.headers import event_headers
from events.types import (
    Decision,
    DecisionAction,
    DecisionInputs,
    ObservedVersion,
    Outcome,
    decision_event,
)
from services.runtime.bus import BusConfig
from services.runtime.reconcile.actions import Plan, plan_digest
from services.runtime.reconcile.executing import Execution

if TYPE_CHECKING:
    from services.runtime.reconcile.definition import Observed

__all__ = ["Recorder", "decision_inputs", "decision_of"]

log = logging.getLogger(__name__)

_MAX_RECORDED_ERROR: Final = 4000


def decision_inputs(given: Observed, reads: Mapping[ObjectKey, Json | None]) -> DecisionInputs:
    """The inputs of a pass by reference: what a re-run needs besides the event log."""
    observed = []
    for key in sorted(reads):
        meta = metadata_of(reads[key] or {})
        observed.append(
            ObservedVersion(
                kind=key.kind,
                namespace=key.namespace or None,
                name=key.name,
                resource_version=str(meta["resourceVersion"])
                if "resourceVersion" in meta
                else None,
                uid=str(meta["uid"]) if "uid" in meta else None,
            )
        )
    return DecisionInputs(
        observed=tuple(observed),
        memo=msgspec.to_builtins(given.memo) if given.memo is not None else None,
        expectations=msgspec.to_builtins(given.expectations) if given.expectations else None,
        last_error=given.last_error,
        failure_persists=given.failure_persists,
        messages=given.messages,
    )


def decision_of(
    worker: str,
    key: ObjectKey,
    *,
    triggers: tuple[str, ...],
    digest: str,
    inputs: DecisionInputs,
    plan: Plan,
    execution: Execution,
    requeue_after: float | None,
    note: str,
) -> Decision:
    """The decision of one pass of ``worker`` over ``key``."""
    error = execution.error or plan.error
    if error is not None:
        outcome = Outcome.FAILED
    elif execution.outcomes:
        outcome = Outcome.APPLIED
    elif requeue_after is not None:
        outcome = Outcome.REQUEUED
    else:
        outcome = Outcome.NOOP
    actions = tuple(
        DecisionAction(
            verb=done.action.verb,
            target=_ref(done.target, done.action),
            detail="; ".join(part for part in (done.action.why, done.note) if part),
            error=done.error,
        )
        for done in execution.outcomes
    )
    reason = "; ".join(part for part in (plan.reason, note) if part)
    return Decision(
        worker=worker,
        key=_ref(key),
        inputs_digest=digest,
        outcome=outcome,
        triggers=triggers,
        actions=actions,
        reason=reason,
        error=error[:_MAX_RECORDED_ERROR] if error else None,
        requeue_after_seconds=requeue_after,
        inputs=inputs,
        plan_digest=plan_digest(plan),
    )


class Recorder:
    """Publishes a worker's decisions to the event log, deduplicated by their ids, without
    waiting for the acknowledgements; counts those the bus took, and says which it did not (an
    error answer, or none within ``ack_timeout``)."""

    def __init__(
        self, js: JetStreamContext, bus: BusConfig, *, worker: str, ack_timeout: float
    ) -> None:
        self._js = js
        self._bus = bus
        self._worker = worker
        self._ack_timeout = ack_timeout
        self._unanswered: dict[asyncio.Future[Any], tuple[str, float]] = {}
        """Each decision sent and not acknowledged yet: its id, and when it counts as lost."""
        self._sweep: asyncio.TimerHandle | None = None
        self.published = 0

    async def record(self, decision: Decision, now: datetime, trace: Mapping[str, str]) -> None:
        event = decision_event(
            decision,
            time=now,
            traceparent=trace.get("traceparent"),
            tracestate=trace.get("tracestate"),
        )
        headers = event_headers(
            event.id, traceparent=event.traceparent, tracestate=event.tracestate, dedup=True
        )
        try:
            answer = await self._js.publish_async(
                nats_subject(event),
                encode_event(event),
                stream=self._bus.event_log_stream,
                headers=headers,
            )
        except Exception as error:
            log.warning("%s: could not record %s: %s", self._worker, event.id, error)
            return
        loop = asyncio.get_running_loop()
        self._unanswered[answer] = (event.id, loop.time() + self._ack_timeout)
        answer.add_done_callback(self._answered)
        if self._sweep is None:
            self._sweep = loop.call_later(self._ack_timeout, self._give_up_on_late_answers)

    def _answered(self, answer: asyncio.Future[Any]) -> None:
        event_id, _ = self._unanswered.pop(answer, ("?", 0.0))
        if answer.cancelled():
            log.warning(
                "%s: could not record %s: no answer from the bus within %gs",
                self._worker,
                event_id,
                self._ack_timeout,
            )
        elif answer.exception() is not None:
            log.warning("%s: could not record %s: %s", self._worker, event_id, answer.exception())
        else:
            self.published += 1

    def _give_up_on_late_answers(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for answer, (_, deadline) in list(self._unanswered.items()):
            if deadline <= now:
                answer.cancel()  # frees its slot in nats-py's table of pending publishes
        self._sweep = None
        if self._unanswered:
            soonest = min(deadline for _, deadline in self._unanswered.values())
            self._sweep = loop.call_later(max(0.0, soonest - now), self._give_up_on_late_answers)


def _ref(key: ObjectKey, action: Any = None) -> ObjectRef:
    name = key.name
    if not name and action is not None:
        body = getattr(action, "body", None)
        name = str(metadata_of(body).get("generateName") or "") if body else ""
    return ObjectRef(kind=key.kind, namespace=key.namespace or None, name=name or "-")
