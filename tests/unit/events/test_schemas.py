"""schemas/: current with the types, usable on its own, and in agreement with the decoder."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from events.codec import EventDecodeError, decode_event, encode_event, nats_subject
from events.envelope import event_type_of
from events.schema_gen import ASYNCAPI_FILE, render_schemas
from events.types import EVENT_CLASSES, observed_event
from tests.unit.events.samples import NOW, TRACEPARENT, a_decision, a_warm_entry, sandbox

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


def schema_for(event_type: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((SCHEMAS / f"{event_type}.json").read_text())
    return result


def validator_for(event_type: str) -> jsonschema.Draft202012Validator:
    schema = schema_for(event_type)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def test_checked_in_schemas_are_current() -> None:
    expected = render_schemas()
    on_disk = {path.name: path.read_text(encoding="utf-8") for path in SCHEMAS.iterdir()}
    stale = sorted(name for name, text in expected.items() if on_disk.get(name) != text)
    extra = sorted(set(on_disk) - set(expected))
    assert not stale and not extra, (
        f"schemas/ is out of date (stale: {stale}, not generated: {extra}); "
        "run: sandbus generate schemas"
    )


def test_every_event_type_has_a_schema() -> None:
    assert {f"{event_type}.json" for event_type in EVENT_CLASSES} <= set(render_schemas())


SAMPLES = [
    observed_event("added", sandbox(), time=NOW, traceparent=TRACEPARENT),
    observed_event("modified", sandbox(), time=NOW),
    observed_event("deleted", sandbox(), time=NOW, synthetic=True),
    a_decision(),
    a_warm_entry(),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda event: event.type)
def test_encoded_events_validate_against_their_schema(event: Any) -> None:
    validator_for(event.type).validate(json.loads(encode_event(event)))


# Malformations a JSON Schema can express: the schema and the decoder must both reject them.
SHAPE_CASES = {
    "no specversion": lambda p: p.pop("specversion"),
    "old specversion": lambda p: p.update(specversion="0.3"),
    "no id": lambda p: p.pop("id"),
    "empty id": lambda p: p.update(id=""),
    "no source": lambda p: p.pop("source"),
    "no time": lambda p: p.pop("time"),
    "no kind": lambda p: p.pop("kind"),
    "bad kind": lambda p: p.update(kind="my kind"),
    "bad traceparent": lambda p: p.update(traceparent="00-xyz-01"),
    "xml data": lambda p: p.update(datacontenttype="application/xml"),
    "other type": lambda p: p.update(type="io.sandbus.decision.made.v1"),
    "no data": lambda p: p.pop("data"),
    "object as string": lambda p: p["data"].update(object="{}"),
    "no uid": lambda p: p["data"]["object"]["metadata"].pop("uid"),
    "empty uid": lambda p: p["data"]["object"]["metadata"].update(uid=""),
    "no resourceVersion": lambda p: p["data"]["object"]["metadata"].pop("resourceVersion"),
    "no apiVersion": lambda p: p["data"]["object"].pop("apiVersion"),
    "synthetic as text": lambda p: p["data"].update(synthetic="yes"),
}


@pytest.mark.parametrize("mutate", SHAPE_CASES.values(), ids=SHAPE_CASES.keys())
def test_schema_and_decoder_reject_the_same_malformed_shapes(mutate: Any) -> None:
    payload = json.loads(encode_event(SAMPLES[0]))
    mutate(payload)
    assert not validator_for("io.sandbus.object.added.v1").is_valid(payload)
    with pytest.raises(EventDecodeError):
        decode_event(json.dumps(payload))


# Fields that v1 requires. A field added later must have a default, so this set never grows:
# if this test fails, give the new field a default instead of editing the set.
REQUIRED_IN_V1 = {
    "ObjectAdded": {
        "specversion",
        "type",
        "id",
        "source",
        "subject",
        "time",
        "kind",
        "name",
        "data",
    },
    "ObjectChange": {"object"},
    "Decision": {"worker", "key", "inputsDigest", "outcome"},
    "DecisionAction": {"verb", "target"},
    "ObjectRef": {"kind", "name"},
    "WarmEntry": {"uid", "resourceVersion", "templateHash"},
}


def test_no_field_became_required_after_v1() -> None:
    required: dict[str, set[str]] = {}
    for event_type in EVENT_CLASSES:
        schema = schema_for(event_type)
        required[schema["title"]] = set(schema["required"])
        for name, definition in schema.get("$defs", {}).items():
            required[name] = set(definition.get("required", []))
    for name, fields in required.items():
        baseline = REQUIRED_IN_V1.get(name, REQUIRED_IN_V1["ObjectAdded"])
        assert fields <= baseline, f"{name} requires {sorted(fields - baseline)}: add defaults"


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def test_asyncapi_references_resolve() -> None:
    document = yaml.safe_load((SCHEMAS / ASYNCAPI_FILE).read_text())
    assert document["asyncapi"] == "3.0.0"
    for ref in _refs(document):
        if ref.startswith("#/"):
            node: Any = document
            for part in ref[2:].split("/"):
                node = node[part]
        else:
            assert (SCHEMAS / ref).is_file(), ref
    named = {message["name"] for message in document["components"]["messages"].values()}
    assert set(EVENT_CLASSES) <= named


@pytest.mark.parametrize("event", SAMPLES, ids=lambda event: event.type)
def test_asyncapi_channel_addresses_describe_the_real_subjects(event: Any) -> None:
    document = yaml.safe_load((SCHEMAS / ASYNCAPI_FILE).read_text())
    carrying = [
        channel["address"]
        for channel in document["channels"].values()
        if any(
            document["components"]["messages"][ref["$ref"].rsplit("/", 1)[1]]["name"]
            == event_type_of(type(event))
            for ref in channel["messages"].values()
        )
    ]
    patterns = [re.sub(r"\\\{\w+\\\}", "[^.]+", re.escape(address)) for address in carrying]
    assert any(re.fullmatch(pattern, nats_subject(event)) for pattern in patterns), carrying
