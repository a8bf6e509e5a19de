"""The claim worker is not woken by a Sandbox that only acknowledged a generation: its conditions'
``observedGeneration`` is all that changed, and a claim copies the Sandbox's Ready without it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.claim.worker import claim_worker

UNMOVED = claim_worker().unmoved_by["Sandbox"]


def sandbox() -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "s", "namespace": "default", "resourceVersion": "5", "generation": 2},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "DependenciesReady",
                    "message": "Pod is Ready",
                    "observedGeneration": 1,
                },
            ],
            "podIPs": ["10.0.0.1"],
        },
    }


def test_a_new_observed_generation_alone_moves_nothing() -> None:
    after = copy.deepcopy(sandbox())
    after["metadata"]["resourceVersion"] = "6"
    after["status"]["conditions"][0]["observedGeneration"] = 2
    assert UNMOVED(sandbox(), after)


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s["status"]["conditions"][0].update(status="False"),
        lambda s: s["status"]["conditions"][0].update(message="Pod is not Ready"),
        lambda s: s["status"].update(podIPs=["10.0.0.2"]),
        lambda s: s["metadata"].update(deletionTimestamp="2026-12-05T00:00:00Z"),
        lambda s: s["metadata"].update(labels={"a": "b"}),
        lambda s: s["spec"].update(replicas=0),
    ],
    ids=["readiness", "its message", "pod IPs", "deletion", "labels", "spec"],
)
def test_anything_else_a_claim_reads_moves_it(change: Any) -> None:
    after = copy.deepcopy(sandbox())
    after["metadata"]["resourceVersion"] = "6"
    after["status"]["conditions"][0]["observedGeneration"] = 2
    change(after)
    assert not UNMOVED(sandbox(), after)
