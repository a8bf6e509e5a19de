"""The one-line diff between two versions of an object."""

from __future__ import annotations

from typing import Any

from services.cli.history.core.diffing import (
    ABSENT,
    FieldChange,
    describe_change,
    describe_changes,
    render_value,
    version_changes,
)
from tests.unit.cli.histories import sandbox


def _described(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [describe_change(change) for change in version_changes(before, after)]


def test_a_ready_condition_flip_reads_as_the_brief_shows() -> None:
    before = sandbox("a", 1, ready="False", reason="PodPending")
    after = sandbox("a", 2, ready="True", reason="PodReady")
    assert _described(before, after) == ["status.conditions[Ready]: False→True"]


def test_a_first_status_is_walked_not_dumped() -> None:
    assert _described(sandbox("a", 1), sandbox("a", 2, ready="False")) == [
        "status.conditions[Ready]: ∅→False"
    ]


def test_a_reason_change_shows_when_the_status_stays() -> None:
    before = sandbox("a", 1, ready="False", reason="PodPending")
    after = sandbox("a", 2, ready="False", reason="ImagePullBackOff")
    assert _described(before, after) == [
        "status.conditions[Ready].reason: PodPending→ImagePullBackOff"
    ]


def test_bookkeeping_is_not_a_change() -> None:
    # New resourceVersion, new lastTransitionTime, new managedFields: nothing a person reads.
    before = sandbox("a", 1, ready="True")
    after = sandbox("a", 2, ready="True")
    after["metadata"]["managedFields"] = [{"manager": "other"}]
    after["metadata"]["generation"] = 7
    assert version_changes(before, after) == []
    assert describe_changes([]) == "no change to labels, spec or status"


def test_labels_are_bracketed_because_their_keys_have_dots_and_slashes() -> None:
    before = sandbox("a", 1, labels={"pool": "python"})
    after = sandbox("a", 2, labels={"claim": "c1", "app.kubernetes.io/name": "x"})
    assert _described(before, after) == [
        "metadata.labels[pool]: python→∅",
        "metadata.labels[claim]: ∅→c1",
        "metadata.labels[app.kubernetes.io/name]: ∅→x",
    ]


def test_containers_are_matched_by_name() -> None:
    before = sandbox("a", 1, image="python:3.12")
    after = sandbox("a", 2, image="python:3.13")
    assert _described(before, after) == [
        "spec.podTemplate.spec.containers[main].image: python:3.12→python:3.13"
    ]


def test_conditions_are_matched_by_type_not_position() -> None:
    before = sandbox("a", 1, ready="True")
    after = sandbox("a", 2, ready="True")
    extra = {"type": "Paused", "status": "False"}
    before["status"]["conditions"].insert(0, extra)
    after["status"]["conditions"].append(extra)
    assert version_changes(before, after) == []


def test_deletion_and_finalizers_are_changes() -> None:
    before = sandbox("a", 1)
    after = sandbox("a", 2)
    after["metadata"]["deletionTimestamp"] = "2026-05-04T10:04:00Z"
    after["metadata"]["finalizers"] = ["sandbus.io/cleanup"]
    assert _described(before, after) == [
        'metadata.finalizers: ∅→["sandbus.io/cleanup"]',
        "metadata.deletionTimestamp: ∅→2026-05-04T10:04:00Z",
    ]


def test_an_unkeyed_list_is_one_value() -> None:
    before = {"spec": {"args": ["a", "b"]}}
    after = {"spec": {"args": ["a", "c"]}}
    assert version_changes(before, after) == [FieldChange("spec.args", ["a", "b"], ["a", "c"])]


def test_values_are_short() -> None:
    assert render_value(ABSENT) == "∅"
    assert render_value(None) == "∅"
    assert render_value(3) == "3"
    assert render_value(True) == "true"
    assert render_value("has spaces") == '"has spaces"'
    long = render_value("x" * 200)
    assert len(long) == 48 and long.endswith("…")


def test_many_changes_are_cut_with_a_count() -> None:
    changes = [FieldChange(f"spec.f{i}", i, i + 1) for i in range(10)]
    text = describe_changes(changes, limit=3)
    assert text == "spec.f0: 0→1; spec.f1: 1→2; spec.f2: 2→3; +7 more"
