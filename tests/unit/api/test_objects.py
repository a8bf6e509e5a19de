"""The Kubernetes-object vocabulary reads what the API serves, and an object that lacks a part,
or carries it in the wrong shape, reads as empty instead of raising: an object from the wire is
not trusted to have the shape its kind promises."""

from __future__ import annotations

from typing import Any

import pytest

from api.objects import (
    compare_resource_versions,
    condition_is_true,
    condition_of,
    controller_of,
    controller_reference,
    is_deleting,
    is_ready,
    labels_of,
    metadata_of,
    name_of,
)

POD: dict[str, Any] = {
    "metadata": {
        "name": "p",
        "labels": {"app": "x"},
        "deletionTimestamp": "2026-12-05T00:00:00Z",
        "ownerReferences": [
            {"kind": "ReplicaSet", "name": "rs", "uid": "u1"},
            controller_reference("agents.x-k8s.io/v1beta1", "Sandbox", "sb", "u2"),
        ],
    },
    "status": {
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
        ]
    },
}


def test_a_served_object_reads_as_served() -> None:
    assert metadata_of(POD) is POD["metadata"]
    assert name_of(POD) == "p"
    assert labels_of(POD) == {"app": "x"}
    assert is_deleting(POD)
    controller = controller_of(POD)
    assert controller is not None and controller["uid"] == "u2"
    assert controller["blockOwnerDeletion"] is True
    assert condition_of(POD, "Ready") == POD["status"]["conditions"][1]
    assert condition_is_true(POD, "PodScheduled")
    assert not is_ready(POD)


@pytest.mark.parametrize(
    "broken",
    [
        {},
        {"metadata": None, "status": None},
        {"metadata": [], "status": []},
        {"metadata": {"labels": ["a"], "ownerReferences": {"controller": True}}},
        {"status": {"conditions": "Ready"}},
        {"status": {"conditions": [None, "Ready", {"type": "Ready"}]}},
    ],
)
def test_a_malformed_object_reads_as_empty(broken: dict[str, Any]) -> None:
    assert name_of(broken) == ""
    assert labels_of(broken) == {}
    assert controller_of(broken) is None
    assert not is_deleting(broken)
    assert not is_ready(broken)


def test_resource_versions_order_only_when_both_are_decimal() -> None:
    assert compare_resource_versions("9", "10") == -1
    assert compare_resource_versions("10", "9") == 1
    assert compare_resource_versions("abc", "abc") == 0
    assert compare_resource_versions("abc", "10") is None
