"""Which span a reconcile hangs under: the event that woke its key (the watcher's span of the
change), within the trace the object's carrier names."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import opentelemetry.trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from api.keys import ANNOTATION_TRACE_CONTEXT
from events.types import observed_event
from services.runtime.reconcile.tracing import (
    ReconcileSpan,
    event_context,
    parent_context,
    reconcile_parent,
)
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import Reconciler
from tests.support.fakeapi import ScriptedApi
from tests.support.samples import obj
from tests.unit.runtime.toys import NOW, WIDGET, PodPerWidget, worker

TRACE_A = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"
CARRIER_SPAN = "00f067aa0ba902b7"
EVENT_SPAN = "b7ad6b7169203331"


def headers(trace_id: str, span_id: str) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-{span_id}-01"}


def carrier(trace_id: str, span_id: str) -> str:
    return json.dumps(headers(trace_id, span_id))


def span_ids(context: Context | None) -> tuple[str, str]:
    assert context is not None
    span = opentelemetry.trace.get_current_span(context).get_span_context()
    return f"{span.trace_id:032x}", f"{span.span_id:016x}"


# --- the rule ---------------------------------------------------------------------------------


def test_an_event_s_headers_name_its_span() -> None:
    assert span_ids(event_context(headers(TRACE_A, EVENT_SPAN))) == (TRACE_A, EVENT_SPAN)
    assert event_context(None) is None
    assert event_context({}) is None
    assert event_context({"traceparent": "garbage"}) is None


def test_the_waking_event_is_the_parent_within_the_object_s_trace() -> None:
    own = parent_context(carrier(TRACE_A, CARRIER_SPAN))
    same_trace = event_context(headers(TRACE_A, EVENT_SPAN))
    assert span_ids(reconcile_parent(own, same_trace)) == (TRACE_A, EVENT_SPAN)


def test_an_event_of_another_trace_leaves_the_object_in_its_own() -> None:
    """A Pod's change wakes its Sandbox: the Pod's trace is not the Sandbox's."""
    own = parent_context(carrier(TRACE_A, CARRIER_SPAN))
    other_trace = event_context(headers(TRACE_B, EVENT_SPAN))
    assert span_ids(reconcile_parent(own, other_trace)) == (TRACE_A, CARRIER_SPAN)


def test_an_object_without_a_carrier_follows_the_event() -> None:
    woken = event_context(headers(TRACE_B, EVENT_SPAN))
    assert span_ids(reconcile_parent(None, woken)) == (TRACE_B, EVENT_SPAN)
    own = parent_context(carrier(TRACE_A, CARRIER_SPAN))
    assert span_ids(reconcile_parent(own, None)) == (TRACE_A, CARRIER_SPAN)
    assert reconcile_parent(None, None) is None


# --- in the worker ----------------------------------------------------------------------------


@dataclass
class TracedWidgets(PodPerWidget):
    """The toy reconciler, traced: its parent is the Widget's carrier annotation."""

    def span(self, inputs: dict[str, Any]) -> ReconcileSpan | None:
        widget = inputs["widget"]
        if widget is None:
            return None
        annotations = widget["metadata"].get("annotations") or {}
        return ReconcileSpan("ReconcileWidget", {}, annotations.get(ANNOTATION_TRACE_CONTEXT))

    def reconciler(self) -> Reconciler[dict[str, Any]]:
        return dataclasses.replace(super().reconciler(), span=self.span)


def widget(rv: str, trace: str | None = None) -> dict[str, Any]:
    found = obj("Widget", "w", rv=rv)
    if trace is not None:
        found["metadata"]["annotations"] = {ANNOTATION_TRACE_CONTEXT: carrier(trace, CARRIER_SPAN)}
    return found


async def woken(w: Worker, body: dict[str, Any], trace_id: str) -> None:
    """The watcher's event of ``body``, with a span in ``trace_id``, then the pass it wakes."""
    traceparent = headers(trace_id, EVENT_SPAN)["traceparent"]
    w.take_event(observed_event("modified", body, time=NOW, traceparent=traceparent))
    key, triggers = await w.queue.get()
    try:
        await w.reconcile(key, triggers)
    finally:
        w.queue.done(key)


def parents(exporter: InMemorySpanExporter) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for span in exporter.get_finished_spans():
        if span.name == "ReconcileWidget":
            assert span.parent is not None
            found.append((f"{span.parent.trace_id:032x}", f"{span.parent.span_id:016x}"))
    return found


async def test_a_pass_hangs_under_the_event_that_woke_it_and_a_requeue_under_the_same(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    w = worker(TracedWidgets(), ScriptedApi())
    w.tracer = tracer
    await woken(w, widget("7"), TRACE_B)
    await w.reconcile(WIDGET)  # woken by no event: the requeue the first pass asked for
    assert parents(exporter) == [(TRACE_B, EVENT_SPAN), (TRACE_B, EVENT_SPAN)]


async def test_a_pass_stays_in_the_trace_its_object_names(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    w = worker(TracedWidgets(), ScriptedApi())
    w.tracer = tracer
    await woken(w, widget("7", trace=TRACE_A), TRACE_B)
    await woken(w, widget("8", trace=TRACE_A), TRACE_A)
    assert parents(exporter) == [(TRACE_A, CARRIER_SPAN), (TRACE_A, EVENT_SPAN)]


async def test_a_key_whose_object_is_gone_is_forgotten(tracer: Tracer) -> None:
    w = worker(TracedWidgets(), ScriptedApi())
    w.tracer = tracer
    await woken(w, widget("7"), TRACE_B)
    assert WIDGET in w._woken_by
    w.cache.observe("deleted", widget("8"))
    await w.reconcile(WIDGET)
    assert WIDGET not in w._woken_by


async def test_without_a_tracer_nothing_is_remembered() -> None:
    w = worker(TracedWidgets(), ScriptedApi())
    await woken(w, widget("7"), TRACE_B)
    assert w._woken_by == {}
