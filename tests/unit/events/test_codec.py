"""Encoding and strict decoding of events: round trips, forward compatibility, precise errors."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from events.codec import (
    EventDecodeError,
    ObservedState,
    UnknownEventType,
    decode_event,
    decode_observed,
    encode_event,
    nats_subject,
    state_table_subject,
)
from events.types import (
    ObjectAdded,
    ObjectDeleted,
    ObjectModified,
    ObservedObjectError,
    observed_event,
)
from tests.unit.events.samples import NOW, TRACEPARENT, a_decision, a_warm_entry, sandbox

# --- building and round trips ------------------------------------------------------------


@pytest.mark.parametrize("change", ["added", "modified", "deleted"])
def test_observed_events_round_trip(change: str) -> None:
    event = observed_event(change, sandbox(), time=NOW, traceparent=TRACEPARENT)  # type: ignore[arg-type]
    assert decode_event(encode_event(event)) == event
    assert event.id == f"0b8c5a9e-1111-4c2e-9d6f-2a7d3c1e5f00:42:{change}"
    assert event.type == f"io.sandbus.object.{change}.v1"


def test_decisions_and_warm_entries_round_trip() -> None:
    for event in (a_decision(), a_warm_entry()):
        assert decode_event(encode_event(event)) == event


def test_an_observed_event_is_a_plain_cloudevent() -> None:
    wire = json.loads(encode_event(observed_event("added", sandbox(), time=NOW)))
    assert wire["specversion"] == "1.0"
    assert wire["type"] == "io.sandbus.object.added.v1"
    assert wire["source"] == "/sandbus/watcher"
    assert wire["subject"] == "Sandbox/default/my.app"
    assert wire["time"] == "2026-05-04T10:03:01.002000Z"
    assert wire["datacontenttype"] == "application/json"
    assert (wire["kind"], wire["namespace"], wire["name"]) == ("Sandbox", "default", "my.app")
    assert "traceparent" not in wire, "an absent optional attribute is omitted, not null"
    assert wire["data"]["synthetic"] is False
    assert "managedFields" not in wire["data"]["object"]["metadata"]


def test_managed_fields_are_stripped_without_touching_the_input() -> None:
    obj = sandbox()
    before = copy.deepcopy(obj)
    event = observed_event("modified", obj, time=NOW)
    assert obj == before
    assert "managedFields" not in event.data.object["metadata"]
    assert event.data.object["spec"] == obj["spec"]


def test_a_synthetic_deletion_carries_the_last_known_state() -> None:
    event = observed_event("deleted", sandbox(resource_version="40"), time=NOW, synthetic=True)
    assert isinstance(event, ObjectDeleted)
    assert event.data.synthetic is True
    assert event.id.endswith(":40:deleted")


def test_cluster_scoped_objects_omit_the_namespace() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "uid": "u-1", "resourceVersion": "5"},
    }
    event = observed_event("added", obj, time=NOW)
    wire = json.loads(encode_event(event))
    assert "namespace" not in wire
    assert wire["subject"] == "Namespace/team-a"
    assert decode_event(encode_event(event)) == event
    assert nats_subject(event) == "sandbus.events.namespace.=.team-a"


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda o: o.pop("kind"), "has no kind"),
        (lambda o: o.pop("metadata"), "has no metadata"),
        (lambda o: o["metadata"].pop("uid"), "has no metadata.uid"),
        (lambda o: o["metadata"].pop("resourceVersion"), "has no metadata.resourceVersion"),
        (lambda o: o["metadata"].update(name=""), "has no metadata.name"),
        (lambda o: o["metadata"].update(namespace=7), "metadata.namespace is not a string"),
    ],
)
def test_objects_without_identity_cannot_become_events(
    mutate: Callable[[dict[str, Any]], object], error: str
) -> None:
    obj = sandbox()
    mutate(obj)
    with pytest.raises(ObservedObjectError, match=error):
        observed_event("added", obj, time=NOW)


def test_events_route_to_their_subjects() -> None:
    added = observed_event("added", sandbox(), time=NOW)
    assert nats_subject(added) == "sandbus.events.sandbox.default.my_app"
    assert state_table_subject(added) == "sandbus.state.sandbox.default.my_app"
    assert nats_subject(a_decision()) == "sandbus.decisions.claim.sandboxclaim.default.claim_1"
    assert nats_subject(a_warm_entry()) == "sandbus.warm.default.abc123.python.n-1.p-7xk2f"


# --- what decoding tolerates -------------------------------------------------------------


def wire_of(event: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(encode_event(event))
    return result


def test_unknown_attributes_and_data_fields_are_ignored() -> None:
    payload = wire_of(observed_event("added", sandbox(), time=NOW))
    payload["comexampleextension"] = "from another producer"
    payload["data"]["addedInV2"] = {"anything": True}
    event = decode_event(json.dumps(payload))
    assert isinstance(event, ObjectAdded)


def test_null_optional_attributes_count_as_absent() -> None:
    payload = wire_of(observed_event("modified", sandbox(), time=NOW))
    payload["traceparent"] = None
    payload["tracestate"] = None
    event = decode_event(json.dumps(payload))
    assert isinstance(event, ObjectModified)
    assert not event.traceparent


def test_an_absent_datacontenttype_means_json() -> None:
    payload = wire_of(observed_event("added", sandbox(), time=NOW))
    del payload["datacontenttype"]
    assert decode_event(json.dumps(payload)).datacontenttype == "application/json"


# --- what decoding rejects, and how precisely --------------------------------------------

Mutation = Callable[[dict[str, Any]], object]


def _set(path: str, value: object) -> Mutation:
    *parents, leaf = path.split(".")

    def mutate(payload: dict[str, Any]) -> None:
        node = payload
        for part in parents:
            node = node[part]
        node[leaf] = value

    return mutate


def _delete(path: str) -> Mutation:
    *parents, leaf = path.split(".")

    def mutate(payload: dict[str, Any]) -> None:
        node = payload
        for part in parents:
            node = node[part]
        del node[leaf]

    return mutate


OBSERVED_CASES: list[tuple[str, Mutation, str, str]] = [
    ("no specversion", _delete("specversion"), "specversion", "required"),
    ("old specversion", _set("specversion", "0.3"), "specversion", "unsupported value '0.3'"),
    ("no type", _delete("type"), "type", "required"),
    ("numeric type", _set("type", 7), "type", "expected a string"),
    ("no id", _delete("id"), "id", "required"),
    ("empty id", _set("id", ""), "id", "length >= 1"),
    ("no source", _delete("source"), "source", "required"),
    ("local time", _set("time", "2026-05-04T10:03:01"), "time", "timezone"),
    ("garbage time", _set("time", "yesterday"), "time", "RFC3339"),
    ("xml data", _set("datacontenttype", "application/xml"), "datacontenttype", "Invalid"),
    ("bad traceparent", _set("traceparent", "00-xyz-01"), "traceparent", "regex"),
    ("bad kind", _set("kind", "my kind"), "kind", "regex"),
    ("no data", _delete("data"), "data", "required"),
    ("object as string", _set("data.object", "{}"), "data.object", "Expected `object`"),
    ("synthetic as text", _set("data.synthetic", "yes"), "data.synthetic", "Expected `bool`"),
    ("no uid", _delete("data.object.metadata.uid"), "data.object.metadata.uid", "required"),
    ("empty uid", _set("data.object.metadata.uid", ""), "data.object.metadata.uid", ">= 1"),
    ("no apiVersion", _delete("data.object.apiVersion"), "data.object.apiVersion", "required"),
    (
        "numeric rv",
        _set("data.object.metadata.resourceVersion", 42),
        "data.object.metadata.resourceVersion",
        "Expected `str`",
    ),
    ("other name", _set("name", "other"), "name", "data.object.metadata.name"),
    ("other kind", _set("kind", "Pod"), "kind", "data.object.kind"),
    (
        "other namespace",
        _set("namespace", "kube-system"),
        "namespace",
        "data.object.metadata.namespace",
    ),
    ("wrong subject", _set("subject", "Sandbox/default/x"), "subject", "kind/namespace/name"),
    ("random id", _set("id", "4f1d2c"), "id", "<uid>:<resourceVersion>:<change>"),
    (
        "id of another change",
        _set("id", "0b8c5a9e-1111-4c2e-9d6f-2a7d3c1e5f00:42:modified"),
        "id",
        "does not match",
    ),
    (
        "uid with the separator",
        _set("data.object.metadata.uid", "a:b"),
        "data.object.metadata",
        "contains ':'",
    ),
]


DECODERS: dict[str, Callable[[str], object]] = {
    "decode_event": decode_event,
    "decode_observed": decode_observed,
}


@pytest.mark.parametrize("decode", list(DECODERS.values()), ids=list(DECODERS))
@pytest.mark.parametrize(
    ("mutate", "attribute", "problem"),
    [case[1:] for case in OBSERVED_CASES],
    ids=[case[0] for case in OBSERVED_CASES],
)
def test_malformed_observed_events_are_rejected_precisely(
    mutate: Mutation, attribute: str, problem: str, decode: Callable[[str], object]
) -> None:
    payload = wire_of(observed_event("added", sandbox(), time=NOW, traceparent=TRACEPARENT))
    mutate(payload)
    with pytest.raises(EventDecodeError) as caught:
        decode(json.dumps(payload))
    assert caught.value.attribute == attribute
    assert problem in caught.value.problem
    assert f"attribute `{attribute}`" in str(caught.value)


DECISION_CASES: list[tuple[str, Mutation, str, str]] = [
    (
        "empty verb",
        lambda p: p["data"]["actions"][0].update(verb=""),
        "data.actions[0].verb",
        "length >= 1",
    ),
    ("no digest", _delete("data.inputsDigest"), "data.inputsDigest", "required"),
    (
        "triggers not a list",
        _set("data.triggers", "u:7:added"),
        "data.triggers",
        "Expected `array`",
    ),
    ("negative requeue", _set("data.requeueAfterSeconds", -1), "data.requeueAfterSeconds", ">= 0"),
    ("key of another object", _set("data.key.name", "claim.2"), "name", "data.key.name"),
    ("id not from inputs", _set("id", "claim:whatever"), "id", "derived from data"),
]


@pytest.mark.parametrize(
    ("mutate", "attribute", "problem"),
    [case[1:] for case in DECISION_CASES],
    ids=[case[0] for case in DECISION_CASES],
)
def test_malformed_decisions_are_rejected_precisely(
    mutate: Mutation, attribute: str, problem: str
) -> None:
    payload = wire_of(a_decision())
    mutate(payload)
    with pytest.raises(EventDecodeError) as caught:
        decode_event(json.dumps(payload))
    assert (caught.value.attribute, problem in caught.value.problem) == (attribute, True), str(
        caught.value
    )


def test_a_warm_entry_whose_id_does_not_match_its_data_is_rejected() -> None:
    payload = wire_of(a_warm_entry())
    payload["data"]["uid"] = "u-10"
    with pytest.raises(EventDecodeError, match="queued of data"):
        decode_event(json.dumps(payload))


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"io.sandbus.object.added.v1"', "must be a JSON object"),
    ],
)
@pytest.mark.parametrize("decode", list(DECODERS.values()), ids=list(DECODERS))
def test_payloads_that_are_not_json_objects_are_rejected(
    payload: bytes, problem: str, decode: Callable[[bytes], object]
) -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode(payload)
    assert caught.value.attribute is None
    assert problem in str(caught.value)


@pytest.mark.parametrize("decode", list(DECODERS.values()), ids=list(DECODERS))
def test_an_unknown_type_is_distinguishable_from_garbage(decode: Callable[[str], object]) -> None:
    payload = wire_of(observed_event("added", sandbox(), time=NOW))
    payload["type"] = "io.sandbus.object.added.v2"
    with pytest.raises(UnknownEventType) as caught:
        decode(json.dumps(payload))
    assert caught.value.event_type == "io.sandbus.object.added.v2"
    assert caught.value.attribute == "type"
    assert "io.sandbus.object.added.v1" in str(caught.value), "lists the known types"


# --- the state table's bulk reads --------------------------------------------------------


@pytest.mark.parametrize("change", ["added", "modified", "deleted"])
def test_an_observed_state_is_the_event_with_its_object_still_json(change: str) -> None:
    obj = sandbox()
    obj["metadata"]["labels"] = {"app": "agent"}
    obj["metadata"]["ownerReferences"] = [{"uid": "pool-uid", "controller": True}]
    event = observed_event(change, obj, time=NOW)  # type: ignore[arg-type]
    state = decode_observed(encode_event(event))
    assert isinstance(state, ObservedState)
    assert state.change == change
    assert tuple(state.key) == ("Sandbox", obj["metadata"]["namespace"], obj["metadata"]["name"])
    assert (state.uid, state.resource_version) == (
        obj["metadata"]["uid"],
        obj["metadata"]["resourceVersion"],
    )
    assert state.labels == {"app": "agent"}
    assert state.owner_references == [{"uid": "pool-uid", "controller": True}]
    assert json.loads(state.object_json) == event.data.object


def test_an_observed_state_of_a_cluster_scoped_object_has_no_namespace() -> None:
    obj = sandbox()
    del obj["metadata"]["namespace"]
    obj["kind"] = "Node"
    state = decode_observed(encode_event(observed_event("added", obj, time=NOW)))
    assert state is not None
    assert state.key.namespace == ""
    assert state.labels is None and state.owner_references is None


def test_other_events_are_no_observed_state_and_bad_ones_still_fail() -> None:
    assert decode_observed(encode_event(a_decision())) is None
    assert decode_observed(encode_event(a_warm_entry())) is None
    payload = wire_of(a_decision())
    payload["id"] = "claim:whatever"
    with pytest.raises(EventDecodeError) as caught:
        decode_observed(json.dumps(payload))
    assert caught.value.attribute == "id"
