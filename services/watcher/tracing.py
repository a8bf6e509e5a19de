"""The W3C trace context of an observed change, derived without a clock or randomness, and the
watcher's span of its publish.

A client that wants its request followed across the control plane puts a trace-context carrier
on the object (``opentelemetry.io/trace-context``, a JSON object with ``traceparent`` and
optionally ``tracestate``, the agent-sandbox convention in :mod:`api.keys`). The watcher's event
then joins that trace: same trace id, a span of its own, the carrier's sampling flag, and the
carrier's ``tracestate``.

An object without a carrier gets a trace that follows what it is part of. A SandboxClaim is one
request, so all its changes are one trace, whose id is taken from the claim's uid: the claim's
first event starts it, and every later one (the status the claim worker writes, the deletion)
joins it without anyone writing the trace down. A Sandbox a claim controls and that carries no
carrier of its own (a claim worker that does not trace adopted or created it) is in its claim's
trace the same way, through its controller reference's uid. Any other object starts a trace
per change.

The span (and, without a carrier or a claim, the trace) id is taken from a hash of the event id,
not drawn at random: the same change observed twice (a retry, a relist, a second leader) yields
the same message byte for byte, so deduplication by id never hides a difference.

With a tracer, the watcher makes that span (:class:`PublishSpans`): ``Publish<Kind>``, a
producer span around the change's writes (event log, state table), with exactly the ids
its event carries, so that what a consumer hangs under the event's ``traceparent`` (the claim
worker's reconcile, :mod:`services.runtime.reconcile.tracing`) is under a span that exists. An
SDK tracer is told the ids to use (OpenTelemetry draws them at random otherwise); any other
tracer's spans keep their own ids, and consumers still join the event's trace.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from api.agents import EXTENSIONS_GROUP
from api.keys import ANNOTATION_TRACE_CONTEXT
from events.envelope import ObjectKey
from events.subjects import event_subject

__all__ = ["PublishSpans", "TraceContext", "claim_trace_id", "failed", "trace_context"]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_INVALID_TRACE_ID = "0" * 32
_INVALID_SPAN_ID = "0" * 16
_SAMPLED = "01"
_CLAIM = "SandboxClaim"

_PROPAGATOR = TraceContextTextMapPropagator()


class TraceContext(NamedTuple):
    traceparent: str
    tracestate: str | None = None
    parent: str | None = None
    """The carrier's ``traceparent``, which the event's span is a child of (None: the span has
    no parent, the first of its trace or one more root of its claim's)."""


def _carrier(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    raw = annotations.get(ANNOTATION_TRACE_CONTEXT) if isinstance(annotations, Mapping) else None
    if not isinstance(raw, str):
        return None
    try:
        carrier = json.loads(raw)
    except ValueError:
        return None
    return carrier if isinstance(carrier, Mapping) else None


def _parent(carrier: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(trace id, flags) of a valid carrier traceparent; an invalid one is ignored, as the W3C
    spec asks a receiver to do."""
    value = (carrier or {}).get("traceparent")
    match = _TRACEPARENT.match(value) if isinstance(value, str) else None
    if match is None or match.group(1) == _INVALID_TRACE_ID or match.group(2) == _INVALID_SPAN_ID:
        return None
    return match.group(1), match.group(3)


def _claim_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the claim whose trace ``obj``'s changes are in: the claim's own, or its
    controller's when that is a claim (its Sandbox)."""
    raw = obj.get("metadata")
    metadata: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    if obj.get("kind") == _CLAIM:
        uid = metadata.get("uid")
        return uid if isinstance(uid, str) and uid else None
    for ref in metadata.get("ownerReferences") or ():
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        group = str(ref.get("apiVersion") or "").split("/")[0]
        uid = ref.get("uid")
        if ref.get("kind") == _CLAIM and group == EXTENSIONS_GROUP and isinstance(uid, str) and uid:
            return uid
        return None
    return None


def claim_trace_id(uid: str) -> str:
    """The trace id of a claim without a carrier (the hash of its uid)."""
    return hashlib.sha256(f"claim-trace:{uid}".encode()).hexdigest()[:32]


def trace_context(event_id: str, obj: Mapping[str, Any]) -> TraceContext:
    """The trace context of the event ``event_id`` about ``obj``."""
    digest = hashlib.sha256(event_id.encode()).hexdigest()
    span_id = digest[:16]
    carrier = _carrier(obj)
    parent = _parent(carrier)
    if parent is None:
        claim = _claim_uid(obj)
        trace_id = claim_trace_id(claim) if claim is not None else digest[16:48]
        return TraceContext(f"00-{trace_id}-{span_id}-{_SAMPLED}")
    trace_id, flags = parent
    state = (carrier or {}).get("tracestate")
    return TraceContext(
        f"00-{trace_id}-{span_id}-{flags}",
        state if isinstance(state, str) and state else None,
        str((carrier or {}).get("traceparent")),
    )


# --- the watcher's spans ----------------------------------------------------------------------

_CHOSEN: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "sandbus_watcher_span_ids", default=None
)
"""(trace id, span id) for the span being started, while it is."""


def _choose_ids(tracer: Tracer) -> None:
    """Make an SDK tracer take a span's ids from :data:`_CHOSEN` when they are set there."""
    # The SDK is loaded only by a watcher that traces (it takes a tenth of a second).
    from opentelemetry.sdk.trace import Tracer as SdkTracer
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    if not isinstance(tracer, SdkTracer) or getattr(tracer.id_generator, "chooses", False):
        return
    drawn = tracer.id_generator

    class ChosenIds(IdGenerator):
        chooses = True

        def generate_trace_id(self) -> int:
            chosen = _CHOSEN.get()
            return chosen[0] if chosen is not None else drawn.generate_trace_id()

        def generate_span_id(self) -> int:
            chosen = _CHOSEN.get()
            return chosen[1] if chosen is not None else drawn.generate_span_id()

        def is_trace_id_random(self) -> bool:
            # A chosen trace id is a hash, not random; the flag is what the event says.
            return _CHOSEN.get() is None and drawn.is_trace_id_random()

    tracer.id_generator = ChosenIds()


class PublishSpans:
    """The spans of the watcher's publishes; without a tracer, none and no cost."""

    def __init__(self, tracer: Tracer | None) -> None:
        self._tracer = tracer
        if tracer is not None:
            _choose_ids(tracer)

    def publishing(
        self, context: TraceContext, change: str, key: ObjectKey, event_id: str
    ) -> contextlib.AbstractContextManager[Span | None]:
        """The span of one change's publish, open while it is written, with the ids of
        ``context`` (the event's). Gives None without a tracer, at no cost beyond the call."""
        if self._tracer is None:
            return contextlib.nullcontext()
        attributes = {
            "messaging.system": "nats",
            "messaging.destination.name": event_subject(key.kind, key.namespace or None, key.name),
            "messaging.message.id": event_id,
            "sandbus.change": change,
            "sandbus.object.kind": key.kind,
            "sandbus.object.namespace": key.namespace or "",
            "sandbus.object.name": key.name,
        }
        return self._span(self._tracer, context, f"Publish{key.kind}", attributes)

    @staticmethod
    @contextlib.contextmanager
    def _span(
        tracer: Tracer, context: TraceContext, name: str, attributes: Mapping[str, str]
    ) -> Iterator[Span]:
        match = _TRACEPARENT.match(context.traceparent)
        assert match is not None, context.traceparent  # trace_context made it
        headers = {"traceparent": context.parent} if context.parent else {}
        if headers and context.tracestate:
            headers["tracestate"] = context.tracestate
        # An empty context, not the current one: the span's parent is the carrier's or none.
        parent = _PROPAGATOR.extract(headers, context=Context()) if headers else Context()
        token = _CHOSEN.set((int(match.group(1), 16), int(match.group(2), 16)))
        try:
            span = tracer.start_span(
                name, context=parent, kind=SpanKind.PRODUCER, attributes=attributes
            )
        finally:
            _CHOSEN.reset(token)
        try:
            yield span
        except BaseException as error:
            failed(span, f"not published: {error!r}")
            raise
        finally:
            span.end()


def failed(span: Span | None, reason: str) -> None:
    """Mark a publish's span as failed (a dead letter, an error); nothing without one."""
    if span is not None:
        span.set_status(Status(StatusCode.ERROR, reason))
