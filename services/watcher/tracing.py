"""The W3C trace context of an observed change, derived without a clock or randomness.

A client that wants its request followed across the control plane puts a trace-context carrier
on the object (``opentelemetry.io/trace-context``, a JSON object with ``traceparent`` and
optionally ``tracestate``, the agent-sandbox convention in :mod:`api.keys`). The watcher's event
then joins that trace: same trace id, a span of its own, the carrier's sampling flag, and the
carrier's ``tracestate``. An object without a carrier starts a trace per change.

The span (and, without a carrier, the trace) id is taken from a hash of the event id, not drawn
at random: the same change observed twice (a retry, a relist, a second leader) yields the same
message byte for byte, so deduplication by id never hides a difference.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from api.keys import ANNOTATION_TRACE_CONTEXT

__all__ = ["TraceContext", "trace_context"]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_INVALID_TRACE_ID = "0" * 32
_INVALID_SPAN_ID = "0" * 16
_SAMPLED = "01"


class TraceContext(NamedTuple):
    traceparent: str
    tracestate: str | None = None


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


def trace_context(event_id: str, obj: Mapping[str, Any]) -> TraceContext:
    """The trace context of the event ``event_id`` about ``obj``."""
    digest = hashlib.sha256(event_id.encode()).hexdigest()
    span_id = digest[:16]
    carrier = _carrier(obj)
    parent = _parent(carrier)
    if parent is None:
        return TraceContext(f"00-{digest[16:48]}-{span_id}-{_SAMPLED}")
    trace_id, flags = parent
    state = (carrier or {}).get("tracestate")
    return TraceContext(
        f"00-{trace_id}-{span_id}-{flags}", state if isinstance(state, str) and state else None
    )
