"""The NATS headers that go with our messages, built as plain dicts (no NATS import here).

Event messages carry:

``Nats-Msg-Id``
    The event id, so JetStream drops a duplicate inside the stream's duplicate window.
``traceparent`` / ``tracestate``
    The W3C Trace Context, copied from the event's attributes so that tracing (nats-server
    2.11 message tracing, OpenTelemetry propagators) works without decoding the payload.
``content-type``
    ``application/cloudevents+json``: the payload is a structured-mode CloudEvent, as the
    NATS protocol binding of CloudEvents names it.

Dead letters keep the original payload byte for byte (it is what could not be decoded, so it
is the evidence) and say what happened in ``Sandbus-Dlq-*`` headers: the reason, the subject
the message was on, who rejected it, and where it came from in JetStream. A header value may
not contain CR or LF (it would end the header block), so free text is flattened to one line
and bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CLOUDEVENTS_JSON",
    "CONTENT_TYPE",
    "DLQ_REASON",
    "DLQ_REJECTED_BY",
    "DLQ_SEQUENCE",
    "DLQ_STREAM",
    "DLQ_SUBJECT",
    "MAX_REASON_LENGTH",
    "MSG_ID",
    "TRACEPARENT",
    "TRACESTATE",
    "dead_letter_headers",
    "event_headers",
    "header_value",
]

MSG_ID = "Nats-Msg-Id"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
CONTENT_TYPE = "content-type"
CLOUDEVENTS_JSON = "application/cloudevents+json"

DLQ_REASON = "Sandbus-Dlq-Reason"
DLQ_SUBJECT = "Sandbus-Dlq-Subject"
DLQ_REJECTED_BY = "Sandbus-Dlq-Rejected-By"
DLQ_STREAM = "Sandbus-Dlq-Stream"
DLQ_SEQUENCE = "Sandbus-Dlq-Sequence"

MAX_REASON_LENGTH = 1024


def header_value(text: str, limit: int = MAX_REASON_LENGTH) -> str:
    """``text`` made safe for a NATS header value: one line, no control characters, bounded."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat


def event_headers(
    event_id: str,
    *,
    traceparent: Any = None,
    tracestate: Any = None,
    dedup: bool = True,
) -> dict[str, str]:
    """Headers for publishing one event; ``dedup=False`` leaves out ``Nats-Msg-Id``.

    ``traceparent``/``tracestate`` take the event's attribute values as they are (a string,
    ``None`` or ``msgspec.UNSET``); only a non-empty string becomes a header.
    """
    headers = {CONTENT_TYPE: CLOUDEVENTS_JSON}
    if dedup:
        headers[MSG_ID] = event_id
    if isinstance(traceparent, str) and traceparent:
        headers[TRACEPARENT] = traceparent
    if isinstance(tracestate, str) and tracestate:
        headers[TRACESTATE] = header_value(tracestate)
    return headers


def dead_letter_headers(
    *,
    reason: str,
    original_subject: str,
    rejected_by: str | None = None,
    stream: str | None = None,
    sequence: int | None = None,
    original_headers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Headers for a dead letter.

    When the message came from a stream, ``stream`` and ``sequence`` identify it and also make
    the dead letter's ``Nats-Msg-Id``, so a message that is redelivered and rejected again is
    dead-lettered once. The original trace context is kept so the dead letter joins the trace.
    """
    headers = {
        DLQ_REASON: header_value(reason) or "unspecified",
        DLQ_SUBJECT: header_value(original_subject, limit=4096),
    }
    if rejected_by:
        headers[DLQ_REJECTED_BY] = header_value(rejected_by)
    if stream is not None and sequence is not None:
        headers[DLQ_STREAM] = stream
        headers[DLQ_SEQUENCE] = str(sequence)
        headers[MSG_ID] = f"dlq:{stream}:{sequence}"
    for name in (TRACEPARENT, TRACESTATE):
        value = (original_headers or {}).get(name)
        if value:
            headers[name] = header_value(value)
    return headers
