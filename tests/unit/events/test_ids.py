"""Deterministic ids: the same change always gets the same id, different changes never share one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.ids import (
    EventIdError,
    change_event_id,
    decision_event_id,
    inputs_digest,
    parse_change_event_id,
)

id_part = st.text(alphabet=st.characters(blacklist_characters=":"), min_size=1, max_size=40)


def test_change_id_is_uid_resource_version_and_change() -> None:
    assert change_event_id("5f0c", "4711", "modified") == "5f0c:4711:modified"


@given(id_part, id_part, st.sampled_from(["added", "modified", "deleted"]))
def test_change_ids_parse_back(uid: str, resource_version: str, change: str) -> None:
    event_id = change_event_id(uid, resource_version, change)  # type: ignore[arg-type]
    assert parse_change_event_id(event_id) == (uid, resource_version, change)


@pytest.mark.parametrize(
    ("uid", "resource_version", "change", "error"),
    [
        ("", "1", "added", "uid is empty"),
        ("u", "", "added", "resourceVersion is empty"),
        ("u:v", "1", "added", "contains ':'"),
        ("u", "1", "created", "not one of"),
    ],
)
def test_change_id_refuses_parts_that_would_break_it(
    uid: str, resource_version: str, change: str, error: str
) -> None:
    with pytest.raises(EventIdError, match=error):
        change_event_id(uid, resource_version, change)  # type: ignore[arg-type]


@pytest.mark.parametrize("event_id", ["u:1", "u:1:added:x", "u::added", "u:1:created"])
def test_malformed_change_ids_do_not_parse(event_id: str) -> None:
    with pytest.raises(EventIdError):
        parse_change_event_id(event_id)


def test_inputs_digest_ignores_dict_order_but_not_content() -> None:
    first = inputs_digest({"a": 1, "b": {"c": [1, 2], "d": None}})
    assert first == inputs_digest({"b": {"d": None, "c": [1, 2]}, "a": 1})
    assert first != inputs_digest({"a": 1, "b": {"c": [2, 1], "d": None}})
    assert first.startswith("sha256:") and len(first) == len("sha256:") + 64


def test_decision_id_names_worker_object_and_inputs() -> None:
    assert decision_event_id("claim", "SandboxClaim", "ns", "c1", "sha256:ab") == (
        "claim:SandboxClaim/ns/c1:sha256:ab"
    )
    assert decision_event_id("pool", "Node", None, "n1", "sha256:ab") == "pool:Node/n1:sha256:ab"
    with pytest.raises(EventIdError, match="digest is empty"):
        decision_event_id("pool", "Pod", "ns", "p", "")
