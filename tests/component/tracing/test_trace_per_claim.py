"""One trace per claim, with the whole stack in this process (the development cluster, a real
nats-server, the watcher, the sandbox, pool and claim workers), each service exporting its
spans under its own ``service.name`` into one in-memory exporter.

A claim adopting from a warm pool and one starting cold each make one trace that holds the
watcher's span of the claim's change, the claim worker's reconcile under it, the Sandbox written
with that reconcile's carrier (the adoption patch, the create body), the watcher's span of the
Sandbox's change under the reconcile, and the sandbox worker's reconciles under that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from api.keys import ANNOTATION_TRACE_CONTEXT, LABEL_LAUNCH_TYPE
from events.envelope import ObjectKey
from events.subjects import WARM_SUBJECTS
from services.watcher.tracing import claim_trace_id
from tests.component.tracing.stack import (
    NS,
    Stack,
    claim_body,
    pool_body,
    stack,
    template_body,
)
from tests.e2e.claim.harness import claim_ready
from tests.support.samples import Json
from tests.support.waiting import until

SERVICES = ("watcher", "sandbox", "pool", "claim")


def tracers(exporter: InMemorySpanExporter) -> dict[str, Tracer]:
    """A provider per service, as each runs in its own process, all into ``exporter``."""
    out: dict[str, Tracer] = {}
    for service in SERVICES:
        provider = TracerProvider(resource=Resource.create({"service.name": f"sandbus-{service}"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        out[service] = provider.get_tracer(f"sandbus-{service}")
    return out


def service_of(span: ReadableSpan) -> str:
    return str(span.resource.attributes.get("service.name"))


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def in_trace(exporter: InMemorySpanExporter, trace_id: str) -> list[ReadableSpan]:
    return [
        span
        for span in exporter.get_finished_spans()
        if span.context is not None and f"{span.context.trace_id:032x}" == trace_id
    ]


def carrier_span(obj: Json) -> tuple[str, int]:
    """(trace id, span id) of the trace-context annotation of ``obj``."""
    carrier = json.loads(obj["metadata"]["annotations"][ANNOTATION_TRACE_CONTEXT])
    _, trace_id, span, _ = carrier["traceparent"].split("-")
    return trace_id, int(span, 16)


async def warm_entries(s: Stack) -> int:
    info = await s.js.stream_info(s.bus.warm_stream, subjects_filter=WARM_SUBJECTS[0])
    return sum((info.state.subjects or {}).values())


async def ready_claim(s: Stack, name: str) -> Json:
    async def ready() -> Json | None:
        claim = await s.kube.get(ObjectKey("SandboxClaim", NS, name))
        return claim if claim_ready(claim) else None

    found: Json = await until(ready, within=30, interval=0.1)
    return found


async def one_trace(
    exporter: InMemorySpanExporter, trace_id: str, sandbox: str, writer: int
) -> list[ReadableSpan]:
    """The claim's trace once it holds the sandbox worker's reconcile of its Sandbox and the
    claim worker's span ``writer`` that gave the Sandbox to the claim (a span is exported when
    it ends, and the claim's pass goes on, writing its status, while the Sandbox's reconcile
    may already have ended)."""

    async def reconciled() -> list[ReadableSpan]:
        spans = in_trace(exporter, trace_id)
        seen = any(
            s.name == "ReconcileSandbox" and (s.attributes or {}).get("sandbox.name") == sandbox
            for s in spans
        )
        written = any(span_id(s) == writer for s in spans)
        return spans if seen and written else []

    found: list[ReadableSpan] = await until(reconciled, within=20, interval=0.1)
    return found


def assert_one_claim_s_trace(spans: list[ReadableSpan], claim: str, sandbox: Json) -> None:
    """The chain: publish of the claim → claim reconcile → (the Sandbox's carrier) → publish of
    the Sandbox → sandbox reconcile, each link a parent reference within the trace."""
    by_id: Mapping[int, ReadableSpan] = {span_id(s): s for s in spans}
    assert {"sandbus-watcher", "sandbus-claim", "sandbus-sandbox"} <= {service_of(s) for s in spans}

    def parent_of(span: ReadableSpan) -> ReadableSpan | None:
        return by_id.get(span.parent.span_id) if span.parent is not None else None

    claim_reconciles = [
        s
        for s in spans
        if s.name == "ReconcileSandboxClaim"
        and (s.attributes or {}).get("sandboxclaim.name") == claim
    ]
    assert claim_reconciles
    first = min(claim_reconciles, key=lambda s: s.start_time or 0)
    published = parent_of(first)
    assert published is not None and published.name == "PublishSandboxClaim"
    assert service_of(published) == "sandbus-watcher"
    assert (published.attributes or {}).get("sandbus.object.name") == claim

    # The Sandbox carries the carrier of the claim worker's reconcile that gave it to the claim.
    _, writer_id = carrier_span(sandbox)
    writer = by_id.get(writer_id)
    assert writer is not None and writer in claim_reconciles

    name = sandbox["metadata"]["name"]
    sandbox_reconciles = [
        s
        for s in spans
        if s.name == "ReconcileSandbox" and (s.attributes or {}).get("sandbox.name") == name
    ]
    assert sandbox_reconciles
    chained = []
    for reconcile in sandbox_reconciles:
        publish = parent_of(reconcile)
        if publish is not None and publish.name == "PublishSandbox":
            assert service_of(publish) == "sandbus-watcher"
            if publish.parent is not None and publish.parent.span_id == writer_id:
                chained.append(reconcile)
    assert chained, "a sandbox reconcile under the publish of the write the claim made"


async def test_a_warm_and_a_cold_claim_are_each_one_trace_across_three_services(
    nats_url: str, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    async with stack(nats_url, tmp_path, tracers(exporter)) as s:
        await s.kube.create(template_body())
        await s.kube.create(pool_body("warm", replicas=1))
        await s.kube.create(pool_body("dry", replicas=0))

        async def queued() -> bool:
            return await warm_entries(s) == 1

        await until(queued, within=30, interval=0.1)

        for name, pool, launch in (("warm-claim", "warm", "warm"), ("cold-claim", "dry", "cold")):
            await s.kube.create(claim_body(name, pool))
            claim = await ready_claim(s, name)
            sandbox_name = claim["status"]["sandbox"]["name"]
            sandbox = await s.kube.get(ObjectKey("Sandbox", NS, sandbox_name))
            assert sandbox["metadata"]["labels"][LABEL_LAUNCH_TYPE] == launch
            trace_id = claim_trace_id(claim["metadata"]["uid"])
            assert carrier_span(sandbox)[0] == trace_id, f"{name}'s Sandbox joins its trace"
            spans = await one_trace(exporter, trace_id, sandbox_name, carrier_span(sandbox)[1])
            assert_one_claim_s_trace(spans, name, sandbox)
