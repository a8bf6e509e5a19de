"""What a real kube-apiserver validates in Events and Leases, through kubernetes_asyncio:
events.k8s.io/v1 Events get ``ValidateEventCreate``'s strict rules (eventTime, a reporter, an
action, a reason, their limits, a Normal/Warning type, no deprecated fields) and are immutable
on update; core/v1 Events only the legacy ones; a Lease's duration is positive and its
transitions not negative (devtools/cluster/apirules/builtins.py, ``EventStrategy`` and
``LeaseStrategy``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from services.runtime.kube_events import event_about
from tests.component.devcluster.samples import failure

Json = dict[str, Any]
NS = "default"
NOW = "2026-01-02T03:04:05.123456Z"


@pytest.fixture
def events(api: k8s.ApiClient) -> k8s.EventsV1Api:
    return k8s.EventsV1Api(api)


@pytest.fixture
def leases(api: k8s.ApiClient) -> k8s.CoordinationV1Api:
    return k8s.CoordinationV1Api(api)


def v1_event(name: str = "e1", **fields: Any) -> Json:
    body: Json = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": NOW,
        "reportingController": "example.com/widget-controller",
        "reportingInstance": "widget-controller-0",
        "action": "Reconciling",
        "reason": "Started",
        "note": "hello",
        "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p", "namespace": NS},
    }
    for key, value in fields.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def fields(error: Json) -> list[str]:
    return [cause.get("field", "") for cause in error["details"]["causes"]]


async def test_an_events_v1_event_needs_an_event_time(events: k8s.EventsV1Api) -> None:
    status, error = await failure(events.create_namespaced_event(NS, v1_event(eventTime=None)))
    assert status == 422 and error["reason"] == "Invalid"
    assert error["message"] == 'Event.events.k8s.io "e1" is invalid: eventTime: Required value'
    assert error["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "eventTime"}
    ]


async def test_an_events_v1_event_needs_a_reporter_an_action_and_a_reason(
    events: k8s.EventsV1Api,
) -> None:
    body = v1_event(reportingController=None, reportingInstance=None, action=None, reason=None)
    status, error = await failure(events.create_namespaced_event(NS, body))
    assert status == 422
    assert fields(error) == [
        "reportingController",
        "reportingController",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ]
    assert error["message"].startswith(
        'Event.events.k8s.io "e1" is invalid: [reportingController: Required value, '
        'reportingController: Invalid value: "": name part must be non-empty, '
    )
    assert error["message"].endswith(
        "reportingInstance: Required value, action: Required value, reason: Required value]"
    )


async def test_the_length_limits_of_an_events_v1_event(events: k8s.EventsV1Api) -> None:
    body = v1_event(
        reportingInstance="i" * 129, action="a" * 129, reason="r" * 129, note="n" * 1025
    )
    status, error = await failure(events.create_namespaced_event(NS, body))
    assert status == 422
    assert [c["field"] + ": " + c["message"] for c in error["details"]["causes"]] == [
        'reportingInstance: Invalid value: "": can have at most 128 characters',
        'action: Invalid value: "": can have at most 128 characters',
        'reason: Invalid value: "": can have at most 128 characters',
        'message: Invalid value: "": can have at most 1024 characters',
    ]
    at_limits = v1_event(
        "e2", reportingInstance="i" * 128, action="a" * 128, reason="r" * 128, note="n" * 1024
    )
    created = await events.create_namespaced_event(NS, at_limits)
    assert created.reason == "r" * 128


async def test_type_series_and_deprecated_fields_of_an_events_v1_event(
    events: k8s.EventsV1Api,
) -> None:
    body = v1_event(
        reportingController="not a qualified name",
        type="Info",
        series={"count": 1},
        deprecatedCount=3,
        deprecatedSource={"component": "kubelet"},
    )
    status, error = await failure(events.create_namespaced_event(NS, body))
    assert status == 422
    assert fields(error) == [
        "reportingController",
        "series.count",
        "series.lastObservedTime",
        "type",
        "count",
        "source",
    ]
    messages = [c["message"] for c in error["details"]["causes"]]
    assert messages[1:] == [
        'Invalid value: "": should be at least 2',
        "Required value",
        'Invalid value: "": has invalid value: Info',
        'Invalid value: "": needs to be unset',
        'Invalid value: "": needs to be unset',
    ]


async def test_an_events_v1_event_name_is_a_dns_subdomain(events: k8s.EventsV1Api) -> None:
    status, error = await failure(events.create_namespaced_event(NS, v1_event("Bad_Name")))
    assert status == 422
    assert fields(error) == ["metadata.name"]
    assert "a lowercase RFC 1123 subdomain" in error["message"]


async def test_an_events_v1_event_may_only_grow_its_series(events: k8s.EventsV1Api) -> None:
    await events.create_namespaced_event(NS, v1_event())
    series = {"series": {"count": 2, "lastObservedTime": NOW}}
    patched = await events.patch_namespaced_event("e1", NS, series)
    assert patched.series.count == 2
    status, error = await failure(events.patch_namespaced_event("e1", NS, {"note": "changed"}))
    assert status == 422
    assert error["message"] == (
        'Event.events.k8s.io "e1" is invalid: message: Invalid value: "changed": field is immutable'
    )
    status, error = await failure(
        events.patch_namespaced_event("e1", NS, {"series": {"count": 1, "lastObservedTime": NOW}})
    )
    assert status == 422 and fields(error) == ["series.count"]


async def test_sandbus_recorder_events_are_accepted(events: k8s.EventsV1Api) -> None:
    """What services/runtime/kube_events.py writes passes the strict rules."""
    pool = {
        "apiVersion": "agents.x-k8s.io/v1alpha1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "pool", "namespace": NS, "uid": "u-1", "resourceVersion": "7"},
    }
    body = event_about(
        pool,
        reason="WarmPoolProgressing",
        note="every member can be scheduled again",
        type="Normal",
        now=datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        controller="sandboxwarmpool-controller",
    )
    created = await events.create_namespaced_event(NS, body)
    assert created.reporting_controller == "sandboxwarmpool-controller"


async def test_core_v1_events_keep_the_legacy_rules(core: k8s.CoreV1Api) -> None:
    """core/v1 needs no eventTime; it checks the involved object's namespace, and with an
    eventTime a reportingComponent, an instance, an action and a reason."""
    event: Json = {
        "metadata": {"name": "old"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": NS},
        "reason": "Started",
        "message": "hello",
        "type": "Whatever",
        "count": 4,
    }
    created = await core.create_namespaced_event(NS, event)
    assert created.count == 4
    elsewhere = {**event, "metadata": {"name": "other"}}
    elsewhere["involvedObject"] = {"kind": "Pod", "name": "p", "namespace": "kube-system"}
    status, error = await failure(core.create_namespaced_event(NS, elsewhere))
    assert status == 422
    assert error["message"] == (
        'Event "other" is invalid: involvedObject.namespace: Invalid value: "kube-system": '
        "does not match event.namespace"
    )
    timed = {**event, "metadata": {"name": "timed"}, "eventTime": NOW}
    status, error = await failure(core.create_namespaced_event(NS, timed))
    assert status == 422
    assert fields(error)[0] == "reportingComponent"
    assert fields(error)[-2:] == ["reportingInstance", "action"]


def lease(name: str = "l", **spec: Any) -> Json:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "me", **spec},
    }


@pytest.mark.parametrize("duration", [0, -5])
async def test_a_lease_duration_must_be_positive(
    leases: k8s.CoordinationV1Api, duration: int
) -> None:
    status, error = await failure(
        leases.create_namespaced_lease(NS, lease(leaseDurationSeconds=duration))
    )
    assert status == 422
    assert error["message"] == (
        f'Lease.coordination.k8s.io "l" is invalid: spec.leaseDurationSeconds: Invalid value: '
        f"{duration}: must be greater than 0"
    )


async def test_lease_transitions_must_not_be_negative(leases: k8s.CoordinationV1Api) -> None:
    status, error = await failure(
        leases.create_namespaced_lease(NS, lease(leaseDurationSeconds=0, leaseTransitions=-1))
    )
    assert status == 422
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0: must be greater than 0",
            "field": "spec.leaseDurationSeconds",
        },
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: -1: must be greater than or equal to 0",
            "field": "spec.leaseTransitions",
        },
    ]


async def test_a_lease_update_is_validated_too(leases: k8s.CoordinationV1Api) -> None:
    created = await leases.create_namespaced_lease(
        NS, lease(leaseDurationSeconds=15, leaseTransitions=0)
    )
    assert created.spec.lease_duration_seconds == 15
    status, error = await failure(
        leases.patch_namespaced_lease("l", NS, {"spec": {"leaseDurationSeconds": 0}})
    )
    assert status == 422 and fields(error) == ["spec.leaseDurationSeconds"]
    renewed = await leases.patch_namespaced_lease(
        "l", NS, {"spec": {"holderIdentity": "you", "leaseTransitions": 1}}
    )
    assert renewed.spec.lease_transitions == 1
