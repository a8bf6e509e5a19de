"""The sandbox worker with the watcher, a real nats-server and the development cluster: what a
user of agent-sandbox sees happen to Sandboxes (docs/agent-sandbox.md §2, §3.1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from api.keys import LABEL_SANDBOX_NAME_HASH, LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash
from api.objects import Json
from devtools.cluster.controllers.kubelet.config import FAIL_ANNOTATION
from events.headers import DLQ_REASON
from events.subjects import event_subject
from events.types import Outcome
from services.runtime.streams import read_to_end
from tests.support.samples import NS, condition, sandbox_body, stamp
from tests.support.stack import Stack, decisions_for, gone, ready_sandbox
from tests.support.waiting import until


async def test_a_sandbox_becomes_ready_with_its_pod_ip_and_service(stack: Stack) -> None:
    await stack.create(sandbox_body("web", service=True))
    sandbox = await ready_sandbox(stack, "web")
    status = sandbox["status"]
    assert status["podIPs"] and status["nodeName"]
    assert status["serviceFQDN"] == "web.default.svc.cluster.local"
    assert status["selector"] == f"{LABEL_SANDBOX_NAME_HASH}={name_hash('web')}"
    pod = await stack.get("Pod", "web")
    assert pod is not None and pod["status"]["podIPs"][0]["ip"] == status["podIPs"][0]
    service = await stack.get("Service", "web")
    assert service is not None and service["spec"]["ports"][0]["port"] == 8888

    decisions = await decisions_for(stack, "web")
    created = [a for d in decisions for a in d.data.actions if a.verb == "create"]
    assert {str(a.target) for a in created} >= {"Pod/default/web", "Service/default/web"}
    assert any("Ready=True" in d.data.reason for d in decisions)
    uid = sandbox["metadata"]["uid"]
    first = decisions[0].data
    assert any(t.startswith(f"{uid}:") and t.endswith(":added") for t in first.triggers), (
        "the first decision names the event that woke it: the Sandbox's creation"
    )


async def test_a_deleted_sandbox_takes_its_pod_and_service_along(stack: Stack) -> None:
    await stack.create(sandbox_body("doomed", service=True))
    await ready_sandbox(stack, "doomed")
    await stack.delete("Sandbox", "doomed")
    await gone(stack, "Pod", "doomed")
    await gone(stack, "Service", "doomed")


async def test_suspend_then_resume_gives_a_new_pod(stack: Stack) -> None:
    await stack.create(sandbox_body("nap"))
    await ready_sandbox(stack, "nap")
    first = await stack.get("Pod", "nap")
    assert first is not None
    await stack.patch("Sandbox", "nap", {"spec": {"operatingMode": "Suspended"}})

    async def suspended() -> bool:
        found = await stack.get("Sandbox", "nap")
        return condition(found, "Suspended") == ("True", "PodTerminated")

    await until(suspended)
    assert await stack.get("Pod", "nap") is None
    assert condition(await stack.get("Sandbox", "nap")) == ("False", "SandboxSuspended")

    await stack.patch("Sandbox", "nap", {"spec": {"operatingMode": "Running"}})
    await ready_sandbox(stack, "nap")
    second = await stack.get("Pod", "nap")
    assert second is not None and second["metadata"]["uid"] != first["metadata"]["uid"]


def soon(seconds: float) -> str:
    return stamp(datetime.now(UTC) + timedelta(seconds=seconds))


async def test_expiry_deletes_or_retains(stack: Stack) -> None:
    await stack.create(sandbox_body("brief", shutdownTime=soon(2), shutdownPolicy="Delete"))
    await stack.create(sandbox_body("kept", shutdownTime=soon(2), shutdownPolicy="Retain"))
    await ready_sandbox(stack, "kept")
    await gone(stack, "Sandbox", "brief", within=15)

    async def expired() -> Json | None:
        found = await stack.get("Sandbox", "kept")
        return found if condition(found) == ("False", "SandboxExpired") else None

    kept: Json = await until(expired, within=15)
    await gone(stack, "Pod", "kept")
    kept = await until(expired)
    assert set(kept["status"]) == {"conditions"}


async def test_a_failed_pod_shows_pod_failed_and_finished(stack: Stack) -> None:
    body = sandbox_body("crashy")
    # The simulated kubelet ends the containers with exit code 1; with restartPolicy Never
    # the Pod's phase becomes Failed (with Always it would crash-loop in Running).
    body["spec"]["podTemplate"]["metadata"] = {"annotations": {FAIL_ANNOTATION: "exit-1"}}
    body["spec"]["podTemplate"]["spec"]["restartPolicy"] = "Never"
    await stack.create(body)

    async def failed() -> Json | None:
        found = await stack.get("Sandbox", "crashy")
        return found if condition(found) == ("False", "PodFailed") else None

    sandbox: Json = await until(failed)
    assert condition(sandbox, "Finished") == ("True", "PodFailed")
    pod = await stack.get("Pod", "crashy")
    assert pod is not None and pod["status"]["phase"] == "Failed", "not deleted, not replaced"


async def test_an_invalid_sandbox_is_told_why_and_the_others_still_come_up(stack: Stack) -> None:
    await stack.create(sandbox_body("broken", containers=[]))
    await stack.create(sandbox_body("fine"))
    await ready_sandbox(stack, "fine")

    async def reported() -> Json | None:
        found = await stack.get("Sandbox", "broken")
        return found if condition(found) == ("False", "InvalidConfiguration") else None

    broken: Json = await until(reported)
    ready = next(c for c in broken["status"]["conditions"] if c["type"] == "Ready")
    assert "containers is empty" in ready["message"]
    assert await stack.get("Pod", "broken") is None


async def test_garbage_on_the_bus_is_dead_lettered_and_the_worker_keeps_going(stack: Stack) -> None:
    subject = event_subject("Sandbox", NS, "ghost")
    await stack.js.publish(subject, b"{not json", stream=stack.bus.event_log_stream)
    await stack.js.publish(subject, b'{"specversion": "1.0"}', stream=stack.bus.event_log_stream)

    async def dead_lettered() -> list[Any]:
        return [
            msg
            async for msg in read_to_end(stack.js, stack.bus.dead_letter_stream, ["sandbus.dlq.>"])
            if (msg.headers or {}).get("Sandbus-Dlq-Rejected-By") == "sandbox-worker"
        ]

    letters = await until(dead_lettered)
    assert all((msg.headers or {}).get(DLQ_REASON) for msg in letters)
    await stack.create(sandbox_body("after-garbage"))
    await ready_sandbox(stack, "after-garbage")


async def test_a_template_gets_its_label_and_secure_network_policy(stack: Stack) -> None:
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "python", "namespace": NS},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "b"}]}}},
    }
    await stack.create(template)

    async def policy() -> Json | None:
        return await stack.get("NetworkPolicy", "python-network-policy")

    found: Json = await until(policy)
    assert found["spec"]["podSelector"] == {
        "matchLabels": {LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("python")}
    }

    async def labelled() -> bool:
        stored = await stack.get("SandboxTemplate", "python")
        labels = (stored or {}).get("metadata", {}).get("labels") or {}
        return labels.get(LABEL_SANDBOX_TEMPLATE_REF_HASH) == name_hash("python")

    await until(labelled)
    await stack.patch(
        "SandboxTemplate", "python", {"spec": {"networkPolicyManagement": "Unmanaged"}}
    )
    await gone(stack, "NetworkPolicy", "python-network-policy")


async def test_every_decision_on_the_bus_is_explainable(stack: Stack) -> None:
    await stack.create(sandbox_body("told"))
    await ready_sandbox(stack, "told")
    decisions = await decisions_for(stack, "told")
    assert decisions, "decisions are recorded on sandbus.decisions.sandbox.sandbox.default.told"
    assert {d.data.outcome for d in decisions} <= set(Outcome.ALL)
    for decision in decisions:
        assert decision.data.worker == "sandbox" and decision.data.inputs_digest.startswith(
            "sha256:"
        )
        assert decision.source == "/sandbus/sandbox"


async def test_a_second_owned_pod_is_reported_not_resolved(stack: Stack) -> None:
    """§2.5: a Sandbox that controls two Pods refuses to choose: Ready=False/MultiplePods and
    one Warning event (events.k8s.io) that the API server accepts."""
    await stack.create(sandbox_body("twin"))
    sandbox = await ready_sandbox(stack, "twin")
    reference = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "name": "twin",
        "uid": sandbox["metadata"]["uid"],
        "controller": True,
    }
    await stack.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "twin-extra",
                "namespace": NS,
                "labels": {LABEL_SANDBOX_NAME_HASH: name_hash("twin")},
                "ownerReferences": [reference],
            },
            "spec": {"containers": [{"name": "app", "image": "python:3.12"}]},
        }
    )

    async def reported() -> bool:
        return condition(await stack.get("Sandbox", "twin")) == ("False", "MultiplePods")

    await until(reported)

    async def warned() -> list[Any]:
        return [
            e
            for e in await stack.kube.list("Event", NS)
            if e.get("reason") == "MultiplePods" and e["regarding"]["name"] == "twin"
        ]

    events = await until(warned)
    assert len(events) == 1 and events[0]["type"] == "Warning"
    assert await stack.get("Pod", "twin") is not None, "neither Pod is deleted"
