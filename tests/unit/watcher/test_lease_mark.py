"""The watcher's own state on the Lease: its event-log low-water mark, in one annotation."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.runtime.lease import (
    LeaseTimings,
    acquired_lease,
    annotations_of,
    released_lease,
    renewed_lease,
)
from services.watcher.core.recovery import LOW_WATER_ANNOTATION, low_water_annotations, low_water_of

NOW = datetime(2026, 5, 4, 10, 3, 1, 2000, tzinfo=UTC)


def lease(holder: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "sandbus-watcher",
            "namespace": "default",
            "resourceVersion": "7",
            "annotations": dict(annotations),
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 5, "leaseTransitions": 2},
    }


def mark_of(body: dict[str, Any]) -> int | None:
    return low_water_of(annotations_of(body))


def test_a_takeover_keeps_the_predecessors_mark() -> None:
    body = acquired_lease(
        lease("other", **{LOW_WATER_ANNOTATION: "41"}),
        namespace="default",
        name="sandbus-watcher",
        identity="me",
        now=NOW,
        timings=LeaseTimings(),
    )
    assert mark_of(body) == 41


def test_a_renewal_records_the_current_mark_and_keeps_the_rest() -> None:
    body = renewed_lease(lease("me", team="x"), now=NOW, annotations=low_water_annotations(99))
    assert mark_of(body) == 99
    assert body["metadata"]["annotations"]["team"] == "x"
    unknown = renewed_lease(
        lease("me", **{LOW_WATER_ANNOTATION: "5"}), now=NOW, annotations=low_water_annotations(None)
    )
    assert unknown["metadata"]["annotations"][LOW_WATER_ANNOTATION] == "5"


def test_a_release_records_the_final_mark() -> None:
    assert (
        mark_of(released_lease(lease("me"), now=NOW, annotations=low_water_annotations(12))) == 12
    )


@pytest.mark.parametrize("value", ["", "0", "-3", "x", "1.5"])
def test_an_invalid_mark_is_no_mark(value: str) -> None:
    assert low_water_of({LOW_WATER_ANNOTATION: value}) is None
