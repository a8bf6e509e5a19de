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


def test_all_seven_kinds_and_four_builtins_are_watched_cluster_wide() -> None:
    assert {r.kind for r in CUSTOM_RESOURCES} == {k.KIND.kind for k in ALL_KINDS}
    assert {r.kind for r in BUILTIN_RESOURCES} == {
        "Pod",
        "Service",
        "PersistentVolumeClaim",
        "Job",
    }
    assert RESOURCES["Sandbox"].path == "/apis/agents.x-k8s.io/v1beta1/sandboxes"
    assert RESOURCES["Pod"].path == "/api/v1/pods"
    assert RESOURCES["Job"].path == "/apis/batch/v1/jobs"
    assert RESOURCES["Job"].api_version == "batch/v1"


def test_our_kinds_are_selected_whole() -> None:
    assert RESOURCES["Sandbox"].selects(labelled(None))
    assert RESOURCES["Sandbox"].label_selector is None


@pytest.mark.parametrize(
    ("kind", "labels", "selected"),
    [
        ("Pod", {LABEL_SANDBOX_NAME_HASH: "1a2b3c4d"}, True),
        ("Pod", {LABEL_ADOPTABLE: "true"}, True),
        ("Pod", {LABEL_POOL_NAME: "python"}, True),
        ("Pod", {LABEL_BATCH_SANDBOX_NAME: "bs"}, True),
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


def test_only_a_single_key_is_left_to_the_api_server() -> None:
    assert RESOURCES["Job"].label_selector == LABEL_SANDBOX_SNAPSHOT_NAME
    assert RESOURCES["Pod"].label_selector is None  # "any of four keys" is not a selector


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
