"""The Kubernetes client's pure parts: the kind→resource table, its paths, and how an answer
becomes a KubeError. (Requests against real sockets: tests/component/runtime/test_kube.py.)"""

from __future__ import annotations

import pytest

from api.kinds import ALL_KINDS
from services.runtime.kube import (
    RESOURCES,
    Expired,
    KubeError,
    StreamBroken,
    StreamStalled,
    resource_for,
)
from services.watcher.resources import WATCHED_RESOURCES, WatchedResource


def test_paths_of_objects_collections_and_subresources() -> None:
    pod = resource_for("Pod")
    assert pod.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert pod.path("ns") == "/api/v1/namespaces/ns/pods"
    assert pod.path() == "/api/v1/pods"
    sandbox = resource_for("Sandbox")
    assert sandbox.path("ns", "a.b", "status") == (
        "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/a.b/status"
    )
    assert resource_for("Lease").path("default", "l") == (
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/l"
    )


def test_every_kind_of_sandbus_and_every_watched_kind_is_in_the_one_table() -> None:
    assert {kind.KIND.kind for kind in ALL_KINDS} <= set(RESOURCES)
    for watched in WATCHED_RESOURCES:
        assert watched.resource is RESOURCES[watched.kind]
        assert watched.path == RESOURCES[watched.kind].path()


def test_a_watched_resource_must_be_in_the_table() -> None:
    with pytest.raises(ValueError, match="kind→resource table"):
        WatchedResource(kind="Gadget")


def test_an_unknown_kind_is_a_kube_error() -> None:
    with pytest.raises(KubeError) as raised:
        resource_for("Gadget")
    assert raised.value.status == 0 and raised.value.reason == "UnknownKind"


def test_a_status_answer_names_its_reason_and_message() -> None:
    body = {"kind": "Status", "reason": "AlreadyExists", "message": 'pods "p" already exists'}
    error = KubeError.from_status(409, body, reason="Conflict")
    assert (error.status, error.reason, error.message) == (409, "AlreadyExists", body["message"])
    assert error.already_exists and not error.conflict and not error.unanswered
    assert str(error) == 'AlreadyExists (409): pods "p" already exists'


def test_an_answer_without_a_status_keeps_the_http_reason_and_the_body() -> None:
    error = KubeError.from_status(502, None, raw=b"<html>bad gateway</html>")
    assert (error.status, error.reason, error.message) == (
        502,
        "Bad Gateway",
        "<html>bad gateway</html>",
    )


def test_410_is_expired_and_an_error_event_takes_its_code_from_the_status() -> None:
    assert isinstance(KubeError.from_status(410, None), Expired)
    event_status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    assert isinstance(KubeError.from_status(500, event_status), Expired)


def test_broken_and_stalled_streams_are_kube_errors_without_an_answer() -> None:
    for error in (StreamBroken("cut"), StreamStalled("silent")):
        assert isinstance(error, KubeError) and error.unanswered
    assert StreamStalled("silent").reason == "Timeout"
