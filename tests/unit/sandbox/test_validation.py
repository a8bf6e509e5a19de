"""Sandboxes the planner cannot act on get Ready=False/``InvalidConfiguration`` (upstream's
reason, v1.0.4) with a message a person can act on, and nothing else happens to them until the
spec changes (invariant 7 of docs/architecture.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from api.agents import REASON_INVALID_CONFIGURATION
from services.sandbox.core.plan import plan_sandbox
from tests.support.samples import conditions_by_type
from tests.unit.sandbox.samples import NOW, FakeCluster, observation, sandbox, status_written

LONG = "s" * 70


def invalid_sandboxes() -> dict[str, tuple[dict[str, Any], str]]:
    no_containers = sandbox(containers=[])
    missing_volume = sandbox(
        containers=[
            {"name": "app", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}
        ]
    )
    return {
        "no containers": (no_containers, "containers is empty"),
        "a container without an image": (sandbox(containers=[{"name": "app"}]), "has no image"),
        "a mount of a volume that is not there": (
            missing_volume,
            "mounts volume 'data', which is neither in spec.podTemplate.spec.volumes nor a "
            "volumeClaimTemplate",
        ),
        "a claim template without a name": (
            sandbox(volumeClaimTemplates=[{"spec": {}}]),
            "has no metadata.name",
        ),
        "a name too long for its Service": (sandbox(LONG, service=True), "cannot name a Service"),
        "a name too long for its PVC": (
            sandbox("s" * 250, volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {}}]),
            "is not a valid object name",
        ),
        "a shutdownTime without a zone": (
            sandbox(shutdownTime="2026-03-01T12:00:00"),
            "is not an RFC 3339 time",
        ),
    }


@pytest.mark.parametrize("case", list(invalid_sandboxes()))
def test_an_invalid_sandbox_gets_invalid_configuration_and_no_children(case: str) -> None:
    sb, words = invalid_sandboxes()[case]
    plan = plan_sandbox(observation(sb), NOW)
    written = status_written(plan)
    assert written is not None and len(plan.actions) == 1, plan.actions
    ready = next(c for c in written["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidConfiguration")
    assert words in ready["message"]
    assert plan.error is None and plan.requeue_after is None, "waits for the spec to change"


def test_a_mount_of_a_claim_template_volume_is_fine() -> None:
    sb = sandbox(
        containers=[
            {"name": "app", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}
        ],
        volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {}}],
    )
    assert status_written(plan_sandbox(observation(sb), NOW)) is None


def test_fixing_the_spec_brings_the_sandbox_up() -> None:
    cluster = FakeCluster().add(sandbox(containers=[]))
    cluster.converge()
    assert (
        conditions_by_type(cluster.get("Sandbox", "sb") or {})["Ready"]["reason"]
        == "InvalidConfiguration"
    )
    assert cluster.get("Pod", "sb") is None
    fixed = sandbox(containers=[{"name": "app", "image": "x"}])
    stored = cluster.get("Sandbox", "sb")
    assert stored is not None
    stored["spec"] = fixed["spec"]
    cluster.converge()
    assert cluster.get("Pod", "sb") is not None
    assert conditions_by_type(cluster.get("Sandbox", "sb") or {})["Ready"]["reason"] == (
        "DependenciesNotReady"
    )


def test_the_reason_is_terminal_a_second_pass_writes_nothing_and_asks_for_no_retry() -> None:
    cluster = FakeCluster().add(sandbox(containers=[]))
    cluster.converge()
    stored = cluster.get("Sandbox", "sb")
    assert stored is not None
    again = plan_sandbox(observation(stored), NOW + timedelta(minutes=5))
    assert again.actions == ()
    assert again.error is None and again.requeue_after is None


def test_a_sandbox_an_older_sandbus_marked_invalid_spec_gets_the_new_reason() -> None:
    """Before upstream named the reason, sandbus wrote ``InvalidSpec``: the next pass writes
    ``InvalidConfiguration`` in its place, and the transition time stays (still False)."""
    sb = sandbox(containers=[])
    sb["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "InvalidSpec",
                "message": "spec.podTemplate.spec.containers is empty",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ]
    }
    plan = plan_sandbox(observation(sb), NOW)
    written = status_written(plan)
    assert written is not None
    ready = next(c for c in written["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidConfiguration")
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert plan.error is None and plan.requeue_after is None


def test_the_reason_is_one_the_sdk_gives_up_on() -> None:
    """The SDK (``k8s-agent-sandbox`` 1.0.8) fails fast on a claim's terminal Ready reasons; a
    claim forwards its Sandbox's, so the Sandbox's reason must be one of them."""
    constants = pytest.importorskip("k8s_agent_sandbox.constants")
    assert REASON_INVALID_CONFIGURATION in constants.TERMINAL_CLAIM_READY_REASONS


def test_an_object_that_is_not_a_sandbox_is_an_error_not_a_crash() -> None:
    broken = sandbox()
    broken["spec"]["operatingMode"] = "Sideways"
    plan = plan_sandbox(observation(broken), NOW)
    assert plan.actions == ()
    assert plan.error is not None and "operatingMode" in plan.error
