"""The claim worker's part of one trace per claim: its ``ReconcileSandboxClaim`` span under the
event that woke it, and the Sandbox it creates carrying that span's carrier, in the create
body (no write of its own), while the claim itself is never written for it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from api.keys import ANNOTATION_TRACE_CONTEXT, LABEL_CREATED_BY
from events.envelope import ObjectKey
from services.claim.worker import SPAN_NAME, claim_reconciler
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Create, Patch
from services.runtime.reconcile.tracing import traced_reconcile
from services.runtime.worker_api import Observed
from tests.support.plans import actions_of

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NS = "default"
KEY = ObjectKey("SandboxClaim", NS, "c")
EVENT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
CLIENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def claim(*, carrier: str | None = None, created_by: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": "c",
        "namespace": NS,
        "uid": "claim-uid",
        "resourceVersion": "5",
        "creationTimestamp": "2026-03-01T11:59:59Z",
    }
    if carrier is not None:
        metadata["annotations"] = {ANNOTATION_TRACE_CONTEXT: json.dumps({"traceparent": carrier})}
    if created_by is not None:
        metadata["labels"] = {LABEL_CREATED_BY: created_by}
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": metadata,
        "spec": {"warmPoolRef": {"name": "pool"}},
    }


def cache_with(*objects: dict[str, Any]) -> ObjectCache:
    cache = ObjectCache()
    pool = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "pool", "namespace": NS, "uid": "pool-uid", "resourceVersion": "2"},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "python"}},
    }
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "python", "namespace": NS, "uid": "t-uid", "resourceVersion": "1"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "python"}]}}},
    }
    for obj in (pool, template, *objects):
        cache.observe("added", obj, kind=obj["kind"])
    return cache


def test_a_claim_s_span_is_named_and_labelled_as_upstream_s() -> None:
    reconciler = claim_reconciler()
    inputs = reconciler.observe(KEY, Observed(cache_with(claim(created_by="python-sdk-v2"))))
    request = reconciler.span(inputs)
    assert request is not None
    assert request.name == SPAN_NAME == "ReconcileSandboxClaim"
    assert request.attributes == {
        "sandboxclaim.name": "c",
        "sandboxclaim.namespace": NS,
        LABEL_CREATED_BY: "unknown",
    }
    assert request.parent is None
    gone = reconciler.observe(KEY, Observed(cache_with()))
    assert reconciler.span(gone) is None


def test_a_cold_start_carries_the_reconcile_s_trace_onto_the_sandbox(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    reconciler = claim_reconciler()
    observed = reconciler.observe(KEY, Observed(cache_with(claim())))
    with traced_reconcile(tracer, reconciler, observed, EVENT) as (span, inputs):
        assert span is not None
        plan = reconciler.plan(inputs, NOW)
        carrier = json.loads(inputs.claim["metadata"]["annotations"][ANNOTATION_TRACE_CONTEXT])
    actions = actions_of(plan)
    (create,) = [a for a in actions if isinstance(a, Create) and a.body["kind"] == "Sandbox"]
    written = json.loads(create.body["metadata"]["annotations"][ANNOTATION_TRACE_CONTEXT])
    assert written == carrier
    assert carrier["traceparent"].split("-")[1] == EVENT["traceparent"].split("-")[1]
    claim_patches = [a for a in actions if isinstance(a, Patch) and a.target == KEY]
    assert claim_patches, "the claim is written in this pass (its name for the Sandbox)"
    for patch in claim_patches:
        annotations = (patch.patch.get("metadata") or {}).get("annotations") or {}
        assert ANNOTATION_TRACE_CONTEXT not in annotations, "the claim is not written for it"
    (reconcile,) = [s for s in exporter.get_finished_spans() if s.name == SPAN_NAME]
    assert reconcile.parent is not None
    assert f"{reconcile.parent.span_id:016x}" == EVENT["traceparent"].split("-")[2]


def test_a_client_s_carrier_is_kept_and_is_the_parent_across_traces(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    reconciler = claim_reconciler()
    observed = reconciler.observe(KEY, Observed(cache_with(claim(carrier=CLIENT))))
    with traced_reconcile(tracer, reconciler, observed, EVENT) as (_, inputs):
        assert inputs is observed, "nothing to add"
    (reconcile,) = exporter.get_finished_spans()
    assert reconcile.parent is not None
    assert f"{reconcile.parent.trace_id:032x}" == CLIENT.split("-")[1]


def test_a_claim_with_its_sandbox_is_shown_as_it_is(tracer: Tracer) -> None:
    sandbox = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": "c",
            "namespace": NS,
            "uid": "s-uid",
            "resourceVersion": "9",
            "ownerReferences": [
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxClaim",
                    "name": "c",
                    "uid": "claim-uid",
                    "controller": True,
                }
            ],
        },
    }
    reconciler = claim_reconciler()
    observed = reconciler.observe(KEY, Observed(cache_with(claim(), sandbox)))
    assert observed.controlled
    with traced_reconcile(tracer, reconciler, observed, EVENT) as (_, inputs):
        assert inputs is observed, "the digest of a bound claim's inputs stays the same"
