"""Leader-election decisions: who creates, renews, takes over or waits, and the Lease bodies."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.runtime.lease import (
    LeaseTimings,
    Observation,
    acquired_lease,
    holder_of,
    leader_until,
    next_action,
    observe,
    released_lease,
    renewed_lease,
)

TIMINGS = LeaseTimings(duration=5.0, renew_deadline=3.5, retry_period=1.0)
NOW = datetime(2026, 5, 4, 10, 3, 1, 2000, tzinfo=UTC)


def lease(holder: str, rv: str = "7", duration: int = 5, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "sandbus-test",
            "namespace": "default",
            "resourceVersion": rv,
            "annotations": dict(annotations),
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "leaseTransitions": 2},
    }


def test_a_missing_lease_is_created() -> None:
    assert next_action(None, None, "me", 0.0, TIMINGS) == "create"


def test_the_holder_renews() -> None:
    assert next_action(lease("me"), None, "me", 0.0, TIMINGS) == "renew"


def test_a_released_lease_is_taken_at_once() -> None:
    assert next_action(lease(""), Observation("7", 100.0), "me", 100.0, TIMINGS) == "take_over"


def test_a_standby_waits_a_whole_lease_duration_without_renewal_on_its_own_clock() -> None:
    seen = observe(None, lease("other"), now=100.0)
    assert next_action(lease("other"), seen, "me", 104.9, TIMINGS) == "wait"
    assert next_action(lease("other"), seen, "me", 105.0, TIMINGS) == "take_over"


def test_a_renewal_restarts_the_standbys_clock() -> None:
    seen = observe(None, lease("other", rv="7"), now=100.0)
    assert observe(seen, lease("other", rv="7"), now=103.0) == seen
    renewed = observe(seen, lease("other", rv="8"), now=103.0)
    assert renewed == Observation("8", 103.0)
    assert next_action(lease("other", rv="8"), renewed, "me", 106.0, TIMINGS) == "wait"


def test_the_lease_duration_written_on_the_lease_is_the_one_that_counts() -> None:
    seen = observe(None, lease("other", duration=15), now=0.0)
    assert next_action(lease("other", duration=15), seen, "me", 10.0, TIMINGS) == "wait"


def test_a_leader_stops_before_any_standby_can_take_over() -> None:
    assert leader_until(100.0, TIMINGS) == 103.5
    assert TIMINGS.renew_deadline < TIMINGS.duration


@pytest.mark.parametrize(
    ("retry", "deadline", "duration"), [(1.0, 5.0, 5.0), (0.0, 1.0, 2.0), (2.0, 1.0, 5.0)]
)
def test_inconsistent_timings_are_refused(retry: float, deadline: float, duration: float) -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < duration"):
        LeaseTimings(duration=duration, renew_deadline=deadline, retry_period=retry)


def test_timings_scale_like_client_go() -> None:
    assert LeaseTimings.for_duration(15.0) == LeaseTimings(15.0, 10.5, 3.0)


def test_taking_over_counts_a_transition() -> None:
    body = acquired_lease(
        lease("other", mark="41"),
        namespace="default",
        name="sandbus-test",
        identity="me",
        now=NOW,
        timings=TIMINGS,
    )
    assert holder_of(body) == "me"
    assert body["spec"]["leaseTransitions"] == 3
    assert body["spec"]["acquireTime"] == body["spec"]["renewTime"] == "2026-05-04T10:03:01.002000Z"
    assert body["metadata"]["resourceVersion"] == "7"  # the precondition of the PUT


def test_creating_the_lease() -> None:
    body = acquired_lease(None, namespace="ns", name="l", identity="me", now=NOW, timings=TIMINGS)
    assert body["metadata"] == {"name": "l", "namespace": "ns"}
    assert body["spec"]["leaseTransitions"] == 0
    assert body["spec"]["leaseDurationSeconds"] == 5


def test_a_renewal_moves_the_renew_time_and_keeps_the_rest() -> None:
    before = lease("me", team="x")
    body = renewed_lease(before, now=NOW)
    assert body["spec"]["renewTime"] == "2026-05-04T10:03:01.002000Z"
    assert body["metadata"] == before["metadata"]
    assert holder_of(body) == "me"


def test_a_release_empties_the_holder() -> None:
    body = released_lease(lease("me"), now=NOW)
    assert holder_of(body) == ""
    assert body["spec"]["leaseDurationSeconds"] == 1
