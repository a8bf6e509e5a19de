"""One trace per claim, as the watcher starts it: the trace id of a claim's changes and of its
Sandbox's, and the watcher's span of each publish, with the ids its event carries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracer, SpanKind, StatusCode, Tracer

from api.keys import ANNOTATION_TRACE_CONTEXT
from events.envelope import ObjectKey
from events.subjects import event_subject
from services.watcher.tracing import PublishSpans, claim_trace_id, trace_context

CARRIER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CARRIER = f"00-{CARRIER_TRACE}-00f067aa0ba902b7-01"
CLAIM_KEY = ObjectKey("SandboxClaim", "default", "c")


def claim(uid: str = "uid-1", carrier: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "c", "namespace": "default", "uid": uid}
    if carrier is not None:
        metadata["annotations"] = {ANNOTATION_TRACE_CONTEXT: json.dumps({"traceparent": carrier})}
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": metadata,
    }


def sandbox(
    owner_kind: str, *, controller: bool = True, carrier: str | None = None
) -> dict[str, Any]:
    group = "extensions.agents.x-k8s.io/v1beta1"
    metadata: dict[str, Any] = {
        "name": "s",
        "namespace": "default",
        "uid": "sandbox-uid",
        "ownerReferences": [
            {
                "apiVersion": group,
                "kind": owner_kind,
                "name": "c",
                "uid": "uid-1",
                "controller": controller,
            }
        ],
    }
    if carrier is not None:
        metadata["annotations"] = {ANNOTATION_TRACE_CONTEXT: json.dumps({"traceparent": carrier})}
    return {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": metadata}


def ids(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


# --- the trace id -----------------------------------------------------------------------------


def test_every_change_of_a_claim_is_one_trace_with_a_span_each() -> None:
    added = trace_context("uid-1:1:added", claim())
    modified = trace_context("uid-1:2:modified", claim())
    assert ids(added.traceparent)[0] == ids(modified.traceparent)[0] == claim_trace_id("uid-1")
    assert ids(added.traceparent)[1] != ids(modified.traceparent)[1]
    assert added == trace_context("uid-1:1:added", claim()), "the same change, the same bytes"
    assert added.parent is None, "the first span of the trace, or one more root of it"
    other = trace_context("uid-2:1:added", claim("uid-2"))
    assert ids(other.traceparent)[0] != ids(added.traceparent)[0], "a trace per claim"


def test_a_claim_a_client_gave_a_carrier_is_in_the_client_s_trace() -> None:
    context = trace_context("uid-1:1:added", claim(carrier=CARRIER))
    assert ids(context.traceparent)[0] == CARRIER_TRACE
    assert context.parent == CARRIER


def test_a_sandbox_a_claim_controls_is_in_the_claim_s_trace_unless_it_names_one() -> None:
    plain = trace_context("sandbox-uid:3:modified", sandbox("SandboxClaim"))
    assert ids(plain.traceparent)[0] == claim_trace_id("uid-1")
    carried = trace_context("sandbox-uid:3:modified", sandbox("SandboxClaim", carrier=CARRIER))
    assert ids(carried.traceparent)[0] == CARRIER_TRACE


@pytest.mark.parametrize(
    "obj",
    [sandbox("SandboxWarmPool"), sandbox("SandboxClaim", controller=False), {"kind": "Pod"}],
    ids=["a pool's member", "not the claim's to control", "anything else"],
)
def test_any_other_object_without_a_carrier_starts_a_trace_per_change(obj: dict[str, Any]) -> None:
    first = ids(trace_context("x:1:added", obj).traceparent)
    second = ids(trace_context("x:2:modified", obj).traceparent)
    assert first[0] != second[0]
    assert claim_trace_id("uid-1") not in (first[0], second[0])


# --- the watcher's span -----------------------------------------------------------------------


def traceparent(span: ReadableSpan) -> str:
    assert span.context is not None
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def test_the_publish_span_has_exactly_the_ids_its_event_carries(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    spans = PublishSpans(tracer)
    context = trace_context("uid-1:1:added", claim())
    with spans.publishing(context, "added", CLAIM_KEY, "uid-1:1:added"):
        pass
    (published,) = exporter.get_finished_spans()
    assert traceparent(published) == context.traceparent
    assert (published.name, published.kind, published.parent) == (
        "PublishSandboxClaim",
        SpanKind.PRODUCER,
        None,
    )
    assert dict(published.attributes or {}) == {
        "messaging.system": "nats",
        "messaging.destination.name": event_subject("SandboxClaim", "default", "c"),
        "messaging.message.id": "uid-1:1:added",
        "sandbus.change": "added",
        "sandbus.object.kind": "SandboxClaim",
        "sandbus.object.namespace": "default",
        "sandbus.object.name": "c",
    }
    with tracer.start_as_current_span("elsewhere") as other:
        drawn = other.get_span_context()
    assert f"{drawn.trace_id:032x}" != claim_trace_id("uid-1"), "other spans draw their ids"


def test_a_publish_joined_to_a_carrier_is_the_carrier_s_child(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    context = trace_context("uid-1:1:added", claim(carrier=CARRIER))
    with PublishSpans(tracer).publishing(context, "added", CLAIM_KEY, "e"):
        pass
    (published,) = exporter.get_finished_spans()
    assert traceparent(published) == context.traceparent
    assert published.parent is not None
    assert f"{published.parent.span_id:016x}" == ids(CARRIER)[1]


def test_a_publish_that_fails_marks_its_span(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    context = trace_context("uid-1:1:added", claim())
    with (
        pytest.raises(ConnectionError),
        PublishSpans(tracer).publishing(context, "added", CLAIM_KEY, "e"),
    ):
        raise ConnectionError("nats is down")
    (published,) = exporter.get_finished_spans()
    assert published.status.status_code == StatusCode.ERROR
    assert "nats is down" in str(published.status.description)


def test_without_a_tracer_there_is_no_span() -> None:
    context = trace_context("uid-1:1:added", claim())
    with PublishSpans(None).publishing(context, "added", CLAIM_KEY, "e") as span:
        assert span is None


def test_a_tracer_that_is_not_the_sdk_s_still_publishes() -> None:
    context = trace_context("uid-1:1:added", claim())
    with PublishSpans(NoOpTracer()).publishing(context, "added", CLAIM_KEY, "e") as span:
        assert span is not None and not span.is_recording()


def test_wrapping_a_tracer_twice_chooses_ids_once(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    PublishSpans(tracer)
    spans = PublishSpans(tracer)  # two watchers of one process, sharing a tracer
    context = trace_context("uid-1:1:added", claim())
    with spans.publishing(context, "added", CLAIM_KEY, "e"):
        pass
    (published,) = exporter.get_finished_spans()
    assert traceparent(published) == context.traceparent
