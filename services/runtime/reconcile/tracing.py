"""Tracing reconciles with OpenTelemetry: one span per reconcile, one child span per step.

Tracing is off unless ``SANDBUS_TRACING`` turns it on, or an OTLP endpoint is set
(:func:`tracing_from_environment`):

``off`` (the default without an OTLP endpoint; also ``0``, ``false``, ``no``)
    No spans, no trace-context annotations; the worker makes no OpenTelemetry calls at all.
``on`` (also ``1``, ``true``, ``yes``; the default when an OTLP endpoint is set)
    Spans are made and joined to the trace a client asked for. They are exported wherever the
    process's global TracerProvider sends them, when one was installed (``opentelemetry-instrument``
    with an OTLP exporter, or an embedding program); else to the OTLP endpoint, when one is set
    (below); otherwise nowhere, and tracing still gives every Sandbox its trace context and every
    decision event its ``traceparent``.
``console``
    As ``on``, with each finished span printed to stderr as one JSON line (for development).

What a reconcile looks like: a reconciler that wants spans sets ``span`` on its
:class:`~.definition.Reconciler`. It names the span and its attributes from its inputs, and hands
the worker the object's trace-context carrier (the ``opentelemetry.io/trace-context`` annotation:
a JSON object of W3C headers), which becomes the span's parent: a client that wrote one sees our
reconciles in its trace. Only the W3C Trace Context propagator is used, as upstream does.

The planner stays pure: it never sees a tracer. The worker gives it the carrier of the running
span *as an input* (the reconciler's ``with_trace_context``, so that it can, for instance,
write it onto an object that has none), and the plan describes its parts as
:class:`~.actions.Step` values, which :class:`StepSpans` turns into child spans around the
execution of each step's writes. The decision event of a traced reconcile carries the span's
``traceparent``, so the decision record and the trace point at each other.

Which span is a reconcile's parent (:func:`reconcile_parent`): the object's carrier names the
trace it belongs to, and the event that woke the key (its CloudEvents ``traceparent``, the
watcher's span of that change, :mod:`services.watcher.tracing`) says where in that trace the
pass comes from. So the parent is the waking event when it is in the object's trace, or when
the object names none; else the carrier (a Pod's change waking its Sandbox is another trace,
and the Sandbox's reconcile stays in its own). A pass woken by no event (a requeue, a taken
queue entry) hangs under the last event that woke its key. That is how one claim is one trace:
the watcher's span of the claim's change, the claim worker's reconcile under it, the Sandbox
written with that reconcile's carrier, the watcher's span of the Sandbox's change under that,
and the sandbox worker's reconciles under those.

Export: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set,
spans go over OTLP/HTTP in protobuf (opentelemetry-exporter-otlp-proto-http, batched) to that
collector, and setting it turns tracing on unless ``SANDBUS_TRACING`` says otherwise. The
exporter's other settings (headers, timeout, compression) come from the ``OTEL_EXPORTER_OTLP_*``
variables as the exporter reads them. A process that installed its own provider
(``opentelemetry-instrument``) keeps exporting where that one does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from services.runtime.reconcile.actions import Plan

if TYPE_CHECKING:
    from services.runtime.reconcile.definition import Reconciler

__all__ = [
    "ReconcileSpan",
    "StepSpans",
    "Tracing",
    "trace_carrier",
    "trace_headers",
    "traced_reconcile",
    "tracing_from_environment",
]

log = logging.getLogger(__name__)

TRACING_ENV = "SANDBUS_TRACING"
OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTLP_TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
TracingMode = Literal["off", "on", "console"]

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class ReconcileSpan:
    """The span a reconciler asks for: its name, attributes, and the parent carrier."""

    name: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    parent: str | None = None
    """The W3C carrier the object holds, as JSON (``{"traceparent": "00-…"}``); None: a new
    trace."""


def parent_context(carrier: str | None) -> Context | None:
    """The context a carrier annotation names; None when there is none or it does not parse
    (an unreadable carrier starts a new trace, as the W3C spec asks of a receiver)."""
    if not carrier:
        return None
    try:
        headers = json.loads(carrier)
    except ValueError:
        return None
    if not isinstance(headers, Mapping):
        return None
    return event_context(headers)


def event_context(headers: Mapping[str, object] | None) -> Context | None:
    """The context W3C headers name (an event's ``traceparent`` and ``tracestate``); None
    when there are none or they do not parse."""
    strings = {
        k: v for k, v in (headers or {}).items() if isinstance(k, str) and isinstance(v, str)
    }
    if not strings.get("traceparent"):
        return None
    context = _PROPAGATOR.extract(strings)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def _trace_id(context: Context) -> int:
    return trace.get_current_span(context).get_span_context().trace_id


def reconcile_parent(own: Context | None, woken_by: Context | None) -> Context | None:
    """The parent of a reconcile's span: the event that woke it when that event is in the
    trace the object's carrier names (or the object names none), else the carrier."""
    if woken_by is None:
        return own
    if own is None or _trace_id(own) == _trace_id(woken_by):
        return woken_by
    return own


def trace_headers(span: Span | None) -> dict[str, str]:
    """The W3C headers (``traceparent``, and ``tracestate`` when there is one) of ``span``."""
    headers: dict[str, str] = {}
    if span is not None and span.get_span_context().is_valid:
        _PROPAGATOR.inject(headers, context=trace.set_span_in_context(span))
    return headers


@contextlib.contextmanager
def traced_reconcile(
    tracer: Tracer | None,
    reconciler: Reconciler[Any],
    inputs: Any,
    woken_by: Mapping[str, str] | None = None,
) -> Iterator[tuple[Span | None, Any]]:
    """Run a reconcile inside its span, when tracing is on and the reconciler asks for one.

    ``woken_by`` is the W3C headers of the event that woke the key (see
    :func:`reconcile_parent`). Yields the span (None: not traced) and the inputs for the
    planner, completed with the span's carrier. The span is the current one inside the block,
    so that step spans and anything else started there become its children.
    """
    if tracer is None or reconciler.span is None:
        yield None, inputs
        return
    request = reconciler.span(inputs)
    if request is None:
        yield None, inputs
        return
    with tracer.start_as_current_span(
        request.name,
        context=reconcile_parent(parent_context(request.parent), event_context(woken_by)),
        attributes=dict(request.attributes),
    ) as span:
        carrier = trace_carrier(span)
        complete = reconciler.with_trace_context
        yield span, (complete(inputs, carrier) if carrier and complete is not None else inputs)


def trace_carrier(span: Span) -> str | None:
    """The span's W3C headers as one JSON text, what a planner records on its object."""
    headers = trace_headers(span)
    return json.dumps(headers, separators=(",", ":"), sort_keys=True) if headers else None


class StepSpans:
    """The child spans of a plan's steps, opened and closed as the executor runs its actions.

    A step's span opens at its first action and closes when an action of another step (or of
    none) comes, or the plan ends; a step without any action in the plan is an instant span,
    made before the first write (the planner looked at it, in order, before anything was
    written). Each step's events go on its span. Without a tracer every call does nothing.
    """

    def __init__(self, tracer: Tracer | None, plan: Plan) -> None:
        self._tracer = tracer
        self._steps = {step.name: step for step in plan.steps}
        self._open: tuple[str, Span] | None = None
        if tracer is not None:
            acting = {action.step for action in plan.actions}
            for step in plan.steps:
                if step.name not in acting:
                    self._start(step.name).end()

    def enter(self, name: str) -> None:
        """The next action belongs to step ``name`` ("" for none)."""
        if self._tracer is None or (self._open is not None and self._open[0] == name):
            return
        self.close()
        if name:
            self._open = (name, self._start(name))

    def failed(self, error: str) -> None:
        if self._open is not None:
            self._open[1].set_status(Status(StatusCode.ERROR, error))

    def close(self) -> None:
        if self._open is not None:
            self._open[1].end()
            self._open = None

    def _start(self, name: str) -> Span:
        assert self._tracer is not None
        span = self._tracer.start_span(name)
        for event in self._steps[name].events if name in self._steps else ():
            span.add_event(event.name, dict(event.attributes))
        return span


# --- configuration ---------------------------------------------------------------------------


def tracing_mode(value: str | None) -> TracingMode:
    """Read ``SANDBUS_TRACING``; raises ValueError for a value that means nothing."""
    text = (value or "").strip().lower()
    if text in ("", "0", "off", "false", "no"):
        return "off"
    if text in ("1", "on", "true", "yes"):
        return "on"
    if text == "console":
        return "console"
    raise ValueError(f"{TRACING_ENV}={value!r}: expected off, on or console")


@dataclass(frozen=True)
class Tracing:
    tracer: Tracer
    shutdown: Callable[[], None]
    """Flushes and stops what this module set up (nothing, for an installed provider)."""


def otlp_traces_endpoint(environ: Mapping[str, str] = os.environ) -> str | None:
    """Where OTLP/HTTP spans go: the traces endpoint as given, or the general endpoint with the
    signal's path, as the OpenTelemetry specification composes them; None: not configured."""
    traces = environ.get(OTLP_TRACES_ENDPOINT_ENV, "").strip()
    if traces:
        return traces
    base = environ.get(OTLP_ENDPOINT_ENV, "").strip()
    return f"{base.rstrip('/')}/v1/traces" if base else None


def tracing_from_environment(
    service_name: str, environ: Mapping[str, str] = os.environ
) -> Tracing | None:
    """The tracer of a service, as ``SANDBUS_TRACING`` and the OTLP endpoint ask (None:
    tracing is off)."""
    endpoint = otlp_traces_endpoint(environ)
    setting = environ.get(TRACING_ENV, "")
    # A collector configured and tracing not mentioned: the operator wants the spans.
    mode = tracing_mode(setting) if setting.strip() else ("on" if endpoint else "off")
    if mode == "off":
        return None
    # The SDK takes a tenth of a second to import; services that do not trace never load it.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    installed = trace.get_tracer_provider()
    if mode == "on" and isinstance(installed, TracerProvider):
        return Tracing(installed.get_tracer(service_name), lambda: None)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if endpoint is not None:
        exporter = _otlp_exporter(endpoint)
        if exporter is not None:
            # Batched: a reconcile never waits for the collector, and a collector that is
            # down costs dropped spans, not a slower controller.
            provider.add_span_processor(BatchSpanProcessor(exporter))
            log.info("%s: exporting spans over OTLP/HTTP to %s", service_name, endpoint)
    if mode == "console":
        console = ConsoleSpanExporter(
            out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + os.linesep
        )
        provider.add_span_processor(SimpleSpanProcessor(console))
    return Tracing(provider.get_tracer(service_name), provider.shutdown)


def _otlp_exporter(endpoint: str) -> Any:
    """The OTLP/HTTP span exporter for ``endpoint``, or None (and why, in the log) when
    the exporter package is not installed: tracing goes on without export."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning(
            "%s is set but opentelemetry-exporter-otlp-proto-http is not installed: spans are "
            "not exported (pip install opentelemetry-exporter-otlp-proto-http)",
            OTLP_ENDPOINT_ENV,
        )
        return None
    return OTLPSpanExporter(endpoint=endpoint)
