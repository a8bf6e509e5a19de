"""NATS headers of events and dead letters: dedup id, trace context, safe free text."""

from __future__ import annotations

import msgspec

from events.headers import (
    CLOUDEVENTS_JSON,
    CONTENT_TYPE,
    DLQ_REASON,
    DLQ_SEQUENCE,
    DLQ_STREAM,
    DLQ_SUBJECT,
    MAX_REASON_LENGTH,
    MSG_ID,
    TRACEPARENT,
    dead_letter_headers,
    event_headers,
)

TRACEPARENT_VALUE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_event_headers_carry_the_id_and_trace_context() -> None:
    headers = event_headers("u:1:added", traceparent=TRACEPARENT_VALUE)
    assert headers == {
        CONTENT_TYPE: CLOUDEVENTS_JSON,
        MSG_ID: "u:1:added",
        TRACEPARENT: TRACEPARENT_VALUE,
    }


def test_absent_trace_context_and_disabled_dedup_leave_headers_out() -> None:
    headers = event_headers("u:1:queued", traceparent=msgspec.UNSET, tracestate=None, dedup=False)
    assert headers == {CONTENT_TYPE: CLOUDEVENTS_JSON}


def test_dead_letter_reason_is_one_bounded_line() -> None:
    headers = dead_letter_headers(
        reason="attribute `id`: bad\r\nInjected-Header: x\t" + "y" * 5000,
        original_subject="sandbus.events.pod.ns.p",
    )
    reason = headers[DLQ_REASON]
    assert "\r" not in reason and "\n" not in reason and "\t" not in reason
    assert reason.startswith("attribute `id`: bad Injected-Header: x y")
    assert len(reason) == MAX_REASON_LENGTH and reason.endswith("…")
    assert headers[DLQ_SUBJECT] == "sandbus.events.pod.ns.p"
    assert MSG_ID not in headers, "without a stream position there is nothing to dedup on"


def test_dead_letters_of_stream_messages_are_deduplicated_by_position() -> None:
    headers = dead_letter_headers(
        reason="",
        original_subject="sandbus.events.pod.ns.p",
        stream="SANDBUS_EVENTS",
        sequence=17,
        original_headers={TRACEPARENT: TRACEPARENT_VALUE, "other": "dropped"},
    )
    assert headers[DLQ_REASON] == "unspecified"
    assert (headers[DLQ_STREAM], headers[DLQ_SEQUENCE]) == ("SANDBUS_EVENTS", "17")
    assert headers[MSG_ID] == "dlq:SANDBUS_EVENTS:17"
    assert headers[TRACEPARENT] == TRACEPARENT_VALUE
    assert "other" not in headers
