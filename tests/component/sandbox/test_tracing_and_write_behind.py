"""Tracing and the write-behind window with the whole stack: a real nats-server, the development
cluster and the watcher (spec/agent-sandbox.md §2.2 step 2, §2.5, §6)."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from api.keys import ANNOTATION_TRACE_CONTEXT
from tests.component.sandbox.conftest import condition, running_stack, sandbox_body, until
from tests.component.sandbox.test_sandbox_worker import decisions_for, ready_sandbox


async def test_a_traced_sandbox_s_reconciles_and_decisions_share_one_trace(
    nats_url: str, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with running_stack(nats_url, tmp_path, tracer=provider.get_tracer("test")) as stack:
        await stack.create(sandbox_body("traced"))
        sandbox = await ready_sandbox(stack, "traced")
        carrier = json.loads(sandbox["metadata"]["annotations"][ANNOTATION_TRACE_CONTEXT])
        trace_id = carrier["traceparent"].split("-")[1]

        decisions = await decisions_for(stack, "traced")
        assert decisions
        assert {str(d.traceparent).split("-")[1] for d in decisions} == {trace_id}
        reconciles = [
            span
            for span in exporter.get_finished_spans()
            if span.name == "ReconcileSandbox"
            and (span.attributes or {}).get("sandbox.name") == "traced"
        ]
        assert reconciles
        assert {f"{span.context.trace_id:032x}" for span in reconciles if span.context} == {
            trace_id
        }
        steps = {span.name for span in exporter.get_finished_spans()}
        assert {"reconcilePod", "reconcilePVCs"} <= steps


async def test_a_pod_relabel_is_held_back_briefly_then_written_once(
    nats_url: str, tmp_path: Path
) -> None:
    async with running_stack(nats_url, tmp_path, write_behind=0.3) as stack:
        await stack.create(sandbox_body("relabel"))
        await ready_sandbox(stack, "relabel")
        labels = {"spec": {"podTemplate": {"metadata": {"labels": {"team": "a"}}}}}
        await stack.patch("Sandbox", "relabel", labels)

        async def relabelled() -> bool:
            pod = await stack.get("Pod", "relabel")
            return (pod or {}).get("metadata", {}).get("labels", {}).get("team") == "a"

        await until(relabelled, within=10)
        decisions = [d.data for d in await decisions_for(stack, "relabel")]
        held = [d for d in decisions if "held back" in d.reason]
        assert held, "the relabel waited for the window"
        for decision in held:
            assert decision.reason.startswith("Ready=True"), "readiness does not wait for it"
            assert decision.requeue_after_seconds is not None
            assert 0 < decision.requeue_after_seconds <= 0.3
        pod_patches = [
            action
            for decision in decisions
            for action in decision.actions
            if action.verb == "patch" and str(action.target) == "Pod/default/relabel"
        ]
        assert len(pod_patches) == 1
        assert condition(await stack.get("Sandbox", "relabel")) == ("True", "DependenciesReady")
