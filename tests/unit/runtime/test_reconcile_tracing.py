"""Tracing in the reconciler runtime: the setting, carriers, and the step spans of a plan."""

from __future__ import annotations

import json

import msgspec
import opentelemetry.trace
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan, SpanEvent, Step
from services.runtime.reconcile.executing import execute
from services.runtime.reconcile.tracing import (
    TRACING_ENV,
    parent_context,
    tracing_from_environment,
    tracing_mode,
)
from tests.support.fakeapi import ScriptedApi
from tests.support.fakebus import FakeJetStream
from tests.support.samples import obj
from tests.unit.runtime.toys import WIDGET, PodPerWidget, kube_writes, worker

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (None, "off"),
        ("", "off"),
        ("0", "off"),
        ("off", "off"),
        ("1", "on"),
        (" ON ", "on"),
        ("true", "on"),
        ("console", "console"),
    ],
)
def test_the_tracing_setting_reads_as_off_on_or_console(value: str | None, mode: str) -> None:
    assert tracing_mode(value) == mode


def test_a_tracing_setting_that_means_nothing_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=f"{TRACING_ENV}='otlp'"):
        tracing_mode("otlp")
    with pytest.raises(ValueError):
        tracing_from_environment("svc", {TRACING_ENV: "verbose"})


def test_tracing_is_off_by_default() -> None:
    assert tracing_from_environment("svc", {}) is None


def test_console_tracing_prints_each_span_as_a_json_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tracing = tracing_from_environment("sandbus-test", {TRACING_ENV: "console"})
    assert tracing is not None
    with tracing.tracer.start_as_current_span("ReconcileSandbox", attributes={"a": "b"}):
        pass
    tracing.shutdown()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    printed = json.loads(lines[0])
    assert printed["name"] == "ReconcileSandbox" and printed["attributes"] == {"a": "b"}
    assert printed["resource"]["attributes"]["service.name"] == "sandbus-test"


def test_on_without_an_installed_provider_still_makes_real_spans() -> None:
    tracing = tracing_from_environment("svc", {TRACING_ENV: "on"})
    assert tracing is not None
    with tracing.tracer.start_as_current_span("s") as span:
        assert span.get_span_context().is_valid, "ids for annotations and decision events"
    tracing.shutdown()


def test_on_uses_the_provider_the_process_installed(
    monkeypatch: pytest.MonkeyPatch, tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    installed = TracerProvider()
    installed.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(opentelemetry.trace, "get_tracer_provider", lambda: installed)
    tracing = tracing_from_environment("svc", {TRACING_ENV: "on"})
    assert tracing is not None
    with tracing.tracer.start_as_current_span("exported"):
        pass
    tracing.shutdown()
    assert [span.name for span in exporter.get_finished_spans()] == ["exported"]


@pytest.mark.parametrize(
    "carrier",
    [
        None,
        "",
        "not json",
        "[1, 2]",
        json.dumps({"traceparent": 7}),
        json.dumps({"traceparent": f"00-{'0' * 32}-{SPAN}-01"}),
    ],
)
def test_an_absent_or_unreadable_carrier_names_no_parent(carrier: str | None) -> None:
    assert parent_context(carrier) is None


def test_a_carrier_names_its_parent() -> None:
    context = parent_context(json.dumps({"traceparent": f"00-{TRACE}-{SPAN}-01"}))
    assert context is not None
    parent = opentelemetry.trace.get_current_span(context).get_span_context()
    assert (f"{parent.trace_id:032x}", f"{parent.span_id:016x}") == (TRACE, SPAN)


def spans_by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


async def test_each_step_is_one_child_span_around_its_actions(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    api = ScriptedApi(obj("Service", "s"), obj("ConfigMap", "c"))
    plan = Plan(
        actions=(
            Create(obj("Pod", "p"), step="a"),
            Patch(ObjectKey("Service", "ns", "s"), {"metadata": {"labels": {"x": "y"}}}, step="a"),
            Patch(ObjectKey("Service", "ns", "s"), {"metadata": {"labels": {"x": "z"}}}),
            Delete(ObjectKey("ConfigMap", "ns", "c"), step="b"),
        ),
        steps=(
            Step("a"),
            Step("b", events=(SpanEvent("Seen", {"k": "v"}),)),
            Step("quiet", events=(SpanEvent("Looked", {}),)),
        ),
    )
    with tracer.start_as_current_span("reconcile") as parent:
        done = await execute(plan, *kube_writes(api, ObjectCache()), tracer=tracer)  # type: ignore[arg-type]
    assert done.error is None
    spans = spans_by_name(exporter)
    assert {name: len(found) for name, found in spans.items()} == {
        "a": 1,
        "b": 1,
        "quiet": 1,
        "reconcile": 1,
    }
    for name in ("a", "b", "quiet"):
        (child,) = spans[name]
        assert child.parent is not None
        assert child.parent.span_id == parent.get_span_context().span_id
    (a,), (b,), (quiet,) = spans["a"], spans["b"], spans["quiet"]
    assert [e.name for e in b.events] == ["Seen"] and [e.name for e in quiet.events] == ["Looked"]
    assert quiet.end_time is not None and a.start_time is not None and a.end_time is not None
    assert b.start_time is not None
    assert quiet.end_time <= a.start_time, "a step without writes is traced before the writes"
    assert a.end_time <= b.start_time, "the step ends before the next one's actions"


async def test_without_a_tracer_steps_cost_nothing(exporter: InMemorySpanExporter) -> None:
    plan = Plan(actions=(Create(obj("Pod", "p"), step="a"),), steps=(Step("a"), Step("b")))
    done = await execute(plan, *kube_writes(ScriptedApi(), ObjectCache()))  # type: ignore[arg-type]
    assert done.error is None and exporter.get_finished_spans() == ()


async def test_a_reconciler_that_asks_for_no_span_is_not_traced(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    js = FakeJetStream()
    w = worker(PodPerWidget(), ScriptedApi(), js)
    w.tracer = tracer
    await w.reconcile(WIDGET)
    assert exporter.get_finished_spans() == ()
    (decision,) = js.decisions()
    assert decision.traceparent is msgspec.UNSET
