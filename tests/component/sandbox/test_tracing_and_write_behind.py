"""Tracing and the write-behind window with the whole stack: a real nats-server, the development
cluster and the watcher (docs/agent-sandbox.md §2.2 step 2, §2.5, §6)."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from api.keys import ANNOTATION_TRACE_CONTEXT
from devtools.cluster.controllers.kubelet.config import FAIL_ANNOTATION
from tests.support.samples import condition, sandbox_body
from tests.support.stack import decisions_for, ready_sandbox, running_stack
from tests.support.waiting import until


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


async def test_a_starting_pod_s_progress_waits_for_the_pass_that_ends_the_status_window(
    nats_url: str, tmp_path: Path
) -> None:
    """The Pod is scheduled and started (and never becomes Ready) within the status window:
    those changes join the pass that ends the window, which writes the latest of them, instead
    of each waking a pass that writes nothing. The kubelet takes its time, so that the first
    pass is over before the Pod moves."""
    window = 2.0
    body = sandbox_body("slow")
    body["spec"]["podTemplate"]["metadata"] = {"annotations": {FAIL_ANNOTATION: "never-ready"}}
    kubelet = {"schedule_delay": 0.5, "start_delay": 0.5}
    async with running_stack(nats_url, tmp_path, status_window=window, kubelet=kubelet) as stack:
        await stack.create(body)

        async def reported() -> bool:
            found = await stack.get("Sandbox", "slow") or {}
            conditions = (found.get("status") or {}).get("conditions") or ()
            ready = [c["message"] for c in conditions if c["type"] == "Ready"]
            return ready == ["Pod is Running but not Ready"]

        await until(reported, within=window + 10)
        decisions = [d.data for d in await decisions_for(stack, "slow")]
        assert len(decisions) == 2, [d.reason for d in decisions]
        created, ended = decisions
        assert [(a.verb, a.target.kind) for a in created.actions] == [
            ("create", "Pod"),
            ("create", "Event"),  # SandboxPodCreated
        ]
        assert [(a.verb, a.target.kind) for a in ended.actions] == [("patch status", "Sandbox")]
        assert len(ended.triggers) >= 2, "the Pod's scheduling and start joined it"
