"""Tracing a Sandbox's reconciles (docs/agent-sandbox.md §2.2 step 2, §6): the real worker shell
with an OpenTelemetry SDK tracer whose spans land in memory."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer

from api.keys import ANNOTATION_TRACE_CONTEXT, LABEL_CREATED_BY
from events.envelope import ObjectKey
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import Patch
from services.runtime.reconcile.worker import Worker
from services.sandbox.core.plan import plan_sandbox
from services.sandbox.worker import sandbox_worker
from tests.support.fakebus import FakeJetStream
from tests.support.samples import stamp
from tests.unit.sandbox.samples import NOW, ClusterApi, FakeCluster, observation, sandbox

SB = ObjectKey("Sandbox", "default", "sb")
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def worker(cluster: FakeCluster, tracer: Tracer | None, js: FakeJetStream | None = None) -> Worker:
    w = Worker(
        sandbox_worker(),
        js=js or FakeJetStream(),  # type: ignore[arg-type]
        api=ClusterApi(cluster),  # type: ignore[arg-type]
        clock=lambda: NOW,
        tracer=tracer,
    )
    for obj in cluster.objects.values():
        w.cache.observe("added", obj)
    return w


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def traceparent(span: ReadableSpan) -> str:
    assert span.context is not None
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def trace_context(cluster: FakeCluster) -> Any:
    found = cluster.get("Sandbox", "sb")
    assert found is not None
    raw = (found["metadata"].get("annotations") or {}).get(ANNOTATION_TRACE_CONTEXT)
    return json.loads(raw) if raw else None


@pytest.mark.parametrize(
    ("label", "attribute"),
    [
        ("go-client", "go-client"),
        ("python-client", "python-client"),
        ("controller", "controller"),
        ("Go-Client", "unknown"),
        ("curl", "unknown"),
        ("", "unknown"),
    ],
)
async def test_the_created_by_span_attribute_is_normalised(
    tracer: Tracer, exporter: InMemorySpanExporter, label: str, attribute: str
) -> None:
    """Upstream TestReconcile_TracingNormalization: the ReconcileSandbox span names the Sandbox
    and carries ``agents.x-k8s.io/created-by`` normalised: anything but go-client,
    python-client and controller reads ``unknown``."""
    cluster = FakeCluster().add(sandbox(labels={LABEL_CREATED_BY: label}))
    await worker(cluster, tracer).reconcile(SB)
    (span,) = named(exporter, "ReconcileSandbox")
    assert dict(span.attributes or {}) == {
        "sandbox.name": "sb",
        "sandbox.namespace": "default",
        LABEL_CREATED_BY: attribute,
    }


async def test_without_the_label_the_span_has_no_created_by(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    await worker(FakeCluster().add(sandbox()), tracer).reconcile(SB)
    (span,) = named(exporter, "ReconcileSandbox")
    assert LABEL_CREATED_BY not in (span.attributes or {})


async def test_a_sandbox_without_a_trace_context_gets_its_first_span_s(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    """§2.2 step 2: tracing on and no trace-context annotation → the pass merge-patches the
    carrier of its own span onto the Sandbox; later passes are children of that span. Each
    decision event carries the traceparent of its reconcile's span."""
    cluster = FakeCluster().add(sandbox())
    js = FakeJetStream()
    w = worker(cluster, tracer, js)
    first = await w.reconcile(SB)
    assert (first.actions[0].verb, first.actions[0].detail) == ("patch", "record the trace context")
    (span,) = named(exporter, "ReconcileSandbox")
    assert trace_context(cluster) == {"traceparent": traceparent(span)}
    assert span.parent is None, "no trace to join: a new one"

    second = await w.reconcile(SB)
    assert all(action.detail != "record the trace context" for action in second.actions)
    _, child = named(exporter, "ReconcileSandbox")
    assert child.parent is not None and span.context is not None and child.context is not None
    assert child.parent.span_id == span.context.span_id
    assert child.context.trace_id == span.context.trace_id
    assert [d.traceparent for d in js.decisions()] == [traceparent(span), traceparent(child)]


async def test_a_client_s_trace_is_joined_and_its_carrier_kept(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    carrier = json.dumps({"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    cluster = FakeCluster().add(sandbox(annotations={ANNOTATION_TRACE_CONTEXT: carrier}))
    decision = await worker(cluster, tracer).reconcile(SB)
    (span,) = named(exporter, "ReconcileSandbox")
    assert span.context is not None and span.parent is not None
    assert f"{span.context.trace_id:032x}" == CLIENT_TRACE
    assert f"{span.parent.span_id:016x}" == CLIENT_SPAN
    assert all(action.detail != "record the trace context" for action in decision.actions)
    assert trace_context(cluster) == json.loads(carrier)


async def test_an_unreadable_carrier_starts_a_new_trace_and_is_left_alone(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    cluster = FakeCluster().add(sandbox(annotations={ANNOTATION_TRACE_CONTEXT: "{not json"}))
    await worker(cluster, tracer).reconcile(SB)
    (span,) = named(exporter, "ReconcileSandbox")
    assert span.parent is None
    found = cluster.get("Sandbox", "sb")
    assert found is not None
    assert found["metadata"]["annotations"][ANNOTATION_TRACE_CONTEXT] == "{not json"


async def test_the_pod_and_pvc_steps_are_child_spans_with_the_pod_events(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    """§6: child spans reconcilePVCs and reconcilePod; NewPodStatusObserved when the Pod is
    created (a new Pod is Pending), ExistingPodStatusObserved when one is found."""
    cluster = FakeCluster().add(sandbox())
    w = worker(cluster, tracer)
    await w.reconcile(SB)
    (parent,) = named(exporter, "ReconcileSandbox")
    (pvcs,) = named(exporter, "reconcilePVCs")
    (pod_step,) = named(exporter, "reconcilePod")
    assert parent.context is not None
    for child in (pvcs, pod_step):
        assert child.parent is not None and child.parent.span_id == parent.context.span_id
    assert [(e.name, dict(e.attributes or {})) for e in pod_step.events] == [
        ("NewPodStatusObserved", {"pod.Name": "sb", "pod.Phase": "Pending"})
    ]
    assert pvcs.end_time is not None and pod_step.start_time is not None
    assert pvcs.end_time <= pod_step.start_time, "the PVCs are looked at before the Pod"

    exporter.clear()
    await w.reconcile(SB)
    (pod_step,) = named(exporter, "reconcilePod")
    assert [(e.name, dict(e.attributes or {})) for e in pod_step.events] == [
        ("ExistingPodStatusObserved", {"pod.Name": "sb", "pod.Phase": "Pending"})
    ]


async def test_a_refused_write_marks_its_step_and_the_reconcile_as_failed(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    cluster = FakeCluster().add(sandbox())
    api_error = KubeError(422, "Invalid", 'Pod "sb" is invalid')
    w = worker(cluster, tracer)
    w.api.failures[("create", "Pod")] = api_error  # type: ignore[attr-defined]
    decision = await w.reconcile(SB)
    assert decision.error is not None
    (pod_step,) = named(exporter, "reconcilePod")
    (parent,) = named(exporter, "ReconcileSandbox")
    assert pod_step.status.status_code == StatusCode.ERROR
    assert parent.status.status_code == StatusCode.ERROR
    assert parent.status.description == decision.error


async def test_a_deleting_sandbox_is_traced_but_not_annotated(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    deleting = sandbox()
    deleting["metadata"]["deletionTimestamp"] = stamp(NOW)
    decision = await worker(FakeCluster().add(deleting), tracer).reconcile(SB)
    assert decision.actions == ()
    assert len(named(exporter, "ReconcileSandbox")) == 1


async def test_a_gone_sandbox_is_not_traced(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    await worker(FakeCluster(), tracer).reconcile(SB)
    assert exporter.get_finished_spans() == ()


async def test_without_a_tracer_nothing_is_traced_or_annotated() -> None:
    cluster = FakeCluster().add(sandbox())
    js = FakeJetStream()
    await worker(cluster, None, js).reconcile(SB)
    assert trace_context(cluster) is None
    (decision,) = js.decisions()
    assert decision.traceparent is msgspec.UNSET


def test_the_planner_records_the_carrier_before_anything_else() -> None:
    """The planner's part, pure: the carrier it is given goes onto a Sandbox without one, first,
    on every path that acts (here: the first expiry pass); never onto one that has one."""
    expired = sandbox(shutdownTime=stamp(NOW))
    carrier = '{"traceparent":"00-' + CLIENT_TRACE + "-" + CLIENT_SPAN + '-01"}'
    obs = msgspec.structs.replace(observation(expired), trace_context=carrier)
    plan = plan_sandbox(obs, NOW)
    first = plan.actions[0]
    assert isinstance(first, Patch) and first.target == SB
    assert first.patch == {"metadata": {"annotations": {ANNOTATION_TRACE_CONTEXT: carrier}}}
    assert isinstance(plan.actions[1], Patch) and plan.actions[1].subresource == "status"

    traced = sandbox(annotations={ANNOTATION_TRACE_CONTEXT: carrier}, shutdownTime=stamp(NOW))
    obs = msgspec.structs.replace(observation(traced), trace_context=carrier)
    assert [
        (a.target.kind, getattr(a, "subresource", None)) for a in plan_sandbox(obs, NOW).actions
    ] == [("Sandbox", "status"), ("Event", None)]  # the status, then SandboxExpired


async def test_a_template_reconcile_is_a_span_of_its_own(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    """§6: ReconcileSandboxTemplate, joined to the template's trace context if it has one."""
    carrier = json.dumps({"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {
            "name": "python",
            "namespace": "default",
            "uid": "t-uid",
            "annotations": {ANNOTATION_TRACE_CONTEXT: carrier},
        },
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "b"}]}}},
    }
    cluster = FakeCluster().add(template)
    await worker(cluster, tracer).reconcile(ObjectKey("SandboxTemplate", "default", "python"))
    (span,) = named(exporter, "ReconcileSandboxTemplate")
    assert span.parent is not None and f"{span.parent.span_id:016x}" == CLIENT_SPAN
