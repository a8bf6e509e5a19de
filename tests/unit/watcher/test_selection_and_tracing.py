"""Which objects the watcher selects, where it finds them, and the trace context of its events."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from api.keys import ANNOTATION_TRACE_CONTEXT, LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH
from api.kinds import ALL_KINDS
from api.opensandbox import LABEL_BATCH_SANDBOX_NAME, LABEL_POOL_NAME, LABEL_SANDBOX_SNAPSHOT_NAME
from events.envelope import TRACEPARENT_PATTERN
from services.watcher.resources import BUILTIN_RESOURCES, CUSTOM_RESOURCES, WATCHED_RESOURCES
from services.watcher.tracing import trace_context

RESOURCES = {r.kind: r for r in WATCHED_RESOURCES}


def labelled(labels: dict[str, str] | None) -> dict[str, Any]:
    return {"metadata": {"labels": labels} if labels is not None else {}}


def test_all_seven_kinds_and_five_builtins_are_watched_cluster_wide() -> None:
    assert {r.kind for r in CUSTOM_RESOURCES} == {k.KIND.kind for k in ALL_KINDS}
    assert {r.kind for r in BUILTIN_RESOURCES} == {
        "Pod",
        "Service",
        "PersistentVolumeClaim",
        "Job",
        "NetworkPolicy",
    }
    assert RESOURCES["Sandbox"].path == "/apis/agents.x-k8s.io/v1beta1/sandboxes"
    assert RESOURCES["Pod"].path == "/api/v1/pods"
    assert RESOURCES["Job"].path == "/apis/batch/v1/jobs"
    assert RESOURCES["Job"].api_version == "batch/v1"
    assert RESOURCES["NetworkPolicy"].path == "/apis/networking.k8s.io/v1/networkpolicies"


def test_our_kinds_are_selected_whole() -> None:
    assert RESOURCES["Sandbox"].selects(labelled(None))
    [whole] = RESOURCES["Sandbox"].selections
    assert whole.label_selector is None and whole.holds(labelled(None))


@pytest.mark.parametrize(
    ("kind", "labels", "selected"),
    [
        ("Pod", {LABEL_SANDBOX_NAME_HASH: "1a2b3c4d"}, True),
        ("Pod", {LABEL_ADOPTABLE: "true"}, True),
        ("Pod", {LABEL_POOL_NAME: "python"}, True),
        ("Pod", {LABEL_BATCH_SANDBOX_NAME: "bs"}, True),
        ("Pod", {LABEL_SANDBOX_SNAPSHOT_NAME: "snap"}, True),
        ("Pod", {"app": "web"}, False),
        ("Pod", None, False),
        ("Service", {LABEL_SANDBOX_NAME_HASH: ""}, True),
        ("Service", {LABEL_POOL_NAME: "python"}, False),
        ("PersistentVolumeClaim", {LABEL_ADOPTABLE: "true"}, True),
        ("Job", {LABEL_SANDBOX_SNAPSHOT_NAME: "snap"}, True),
        ("Job", {LABEL_SANDBOX_NAME_HASH: "x"}, False),
    ],
)
def test_builtins_are_selected_by_any_of_our_label_keys(
    kind: str, labels: dict[str, str] | None, selected: bool
) -> None:
    assert RESOURCES[kind].selects(labelled(labels)) is selected


def test_only_a_sandbox_pods_spec_is_cut_to_what_the_workers_read() -> None:
    spec = {"nodeName": "node-1", "containers": [{"name": "app"}], "tolerations": []}

    def pod(labels: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"labels": labels}, "spec": spec, "status": {"phase": "Running"}}

    sandbox_pod = pod({LABEL_SANDBOX_NAME_HASH: "1a2b3c4d"})
    cut = RESOURCES["Pod"].projected(sandbox_pod)
    assert cut == {**sandbox_pod, "spec": {"nodeName": "node-1"}}
    assert sandbox_pod["spec"] is spec  # the object given is left as it is
    unscheduled = {**sandbox_pod, "spec": {"containers": []}}
    assert RESOURCES["Pod"].projected(unscheduled)["spec"] == {}
    for labels in (
        {LABEL_POOL_NAME: "p"},
        {LABEL_ADOPTABLE: "true", LABEL_BATCH_SANDBOX_NAME: "b"},
    ):
        whole = pod(labels)
        assert RESOURCES["Pod"].projected(whole) is whole
    service = {"metadata": {"labels": {LABEL_SANDBOX_NAME_HASH: "x"}}, "spec": {"ports": []}}
    assert RESOURCES["Service"].projected(service) is service


def controlled_by(*references: Any) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": list(references)}}


def reference(api_version: str, kind: str, *, controller: Any = True) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": "owner",
        "uid": "0000",
        "controller": controller,
    }


TEMPLATE_API = "extensions.agents.x-k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("obj", "selected"),
    [
        (controlled_by(reference(TEMPLATE_API, "SandboxTemplate")), True),
        (controlled_by(reference(TEMPLATE_API, "SandboxClaim")), True),
        # Another served version of the same group names the same owner.
        (controlled_by(reference("extensions.agents.x-k8s.io/v1alpha1", "SandboxTemplate")), True),
        (
            controlled_by(
                reference("apps/v1", "Deployment", controller=False),
                reference(TEMPLATE_API, "SandboxTemplate"),
            ),
            True,
        ),
        # An owner that is not the controller does not make it ours.
        (controlled_by(reference(TEMPLATE_API, "SandboxTemplate", controller=False)), False),
        (controlled_by(reference(TEMPLATE_API, "SandboxTemplate", controller="true")), False),
        (controlled_by(reference("apps/v1", "Deployment")), False),
        (controlled_by(reference("agents.x-k8s.io/v1beta1", "Sandbox")), False),
        (controlled_by(reference("example.com/v1", "SandboxTemplate")), False),
        (controlled_by(), False),
        (labelled({LABEL_SANDBOX_NAME_HASH: "1a2b3c4d"}), False),
        (labelled(None), False),
        ({"metadata": {"ownerReferences": "not a list"}}, False),
        (controlled_by({"kind": "SandboxTemplate", "controller": True}), False),
        ({"metadata": None}, False),
    ],
)
def test_network_policies_are_selected_by_a_controller_of_our_kinds(
    obj: dict[str, Any], selected: bool
) -> None:
    assert RESOURCES["NetworkPolicy"].selects(obj) is selected


def selectors(kind: str) -> list[str | None]:
    return [selection.label_selector for selection in RESOURCES[kind].selections]


def test_label_keys_are_left_to_the_api_server_one_watch_per_key() -> None:
    assert selectors("Job") == [LABEL_SANDBOX_SNAPSHOT_NAME]
    assert selectors("Pod") == [
        LABEL_SANDBOX_NAME_HASH,
        LABEL_ADOPTABLE,
        LABEL_POOL_NAME,
        LABEL_BATCH_SANDBOX_NAME,
        LABEL_SANDBOX_SNAPSHOT_NAME,
    ]
    assert selectors("Service") == [LABEL_SANDBOX_NAME_HASH, LABEL_ADOPTABLE]
    assert selectors("PersistentVolumeClaim") == [LABEL_SANDBOX_NAME_HASH, LABEL_ADOPTABLE]
    assert selectors("NetworkPolicy") == [None]  # an owner is not a selector: one whole watch


def test_a_selection_holds_what_carries_its_key_and_names_itself_in_the_log() -> None:
    adoptable = next(s for s in RESOURCES["Pod"].selections if s.label_key == LABEL_ADOPTABLE)
    assert adoptable.holds(labelled({LABEL_ADOPTABLE: "true", LABEL_POOL_NAME: "p"}))
    assert not adoptable.holds(labelled({LABEL_SANDBOX_NAME_HASH: "1a2b3c4d"}))
    assert not adoptable.holds(labelled(None))
    assert str(adoptable) == f"Pod ({LABEL_ADOPTABLE})"
    assert str(RESOURCES["Job"].selections[0]) == "Job"
    assert {s.name for s in RESOURCES["Pod"].selections} == set(RESOURCES["Pod"].label_keys)
    [policies] = RESOURCES["NetworkPolicy"].selections
    assert policies.name == "*" and not policies.holds(labelled({LABEL_ADOPTABLE: "true"}))


def test_list_items_get_their_kind_back() -> None:
    item: dict[str, Any] = {"metadata": {"name": "p"}}
    assert RESOURCES["Pod"].complete(item) == {
        "metadata": {"name": "p"},
        "apiVersion": "v1",
        "kind": "Pod",
    }


# --- trace context ---------------------------------------------------------------------------

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def carrying(carrier: object) -> dict[str, Any]:
    raw = carrier if isinstance(carrier, str) else json.dumps(carrier)
    return {"metadata": {"annotations": {ANNOTATION_TRACE_CONTEXT: raw}}}


def test_an_object_without_a_carrier_gets_a_trace_per_change_that_never_varies() -> None:
    first = trace_context("u:1:added", {})
    assert re.match(TRACEPARENT_PATTERN, first.traceparent)
    assert first == trace_context("u:1:added", {})
    assert first.traceparent != trace_context("u:2:modified", {}).traceparent
    assert first.tracestate is None


def test_an_object_carrying_a_trace_context_joins_its_trace_with_a_span_of_its_own() -> None:
    context = trace_context("u:1:added", carrying({"traceparent": PARENT, "tracestate": "k=v"}))
    _, trace_id, span_id, flags = context.traceparent.split("-")
    assert trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert span_id != "00f067aa0ba902b7"
    assert flags == "01"
    assert context.tracestate == "k=v"


@pytest.mark.parametrize(
    "carrier",
    [
        "not json",
        ["a list"],
        {"traceparent": "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        {"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
        {"traceparent": 42},
    ],
)
def test_an_invalid_carrier_is_ignored(carrier: object) -> None:
    assert trace_context("u:1:added", carrying(carrier)) == trace_context("u:1:added", {})
