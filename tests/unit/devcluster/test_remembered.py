"""The write path remembers results by a value's JSON (validation, defaulting and pruning,
unknown fields, CEL rules): a remembered answer must be the one computing it again gives, and
values whose JSON coincides but that differ (a YAML date and its string) must never share one."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from devtools.cluster.apirules import celrules
from devtools.cluster.apirules.knownfields import unknown_fields
from devtools.cluster.apirules.patching.fields import changed_fields, leaf_values
from devtools.cluster.apirules.strategy import _dropped_paths, _normalized
from devtools.cluster.apirules.structural import StructuralSchema
from devtools.cluster.http.writes import _json_loads
from devtools.cluster.storage.store import Store, decode

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "when": {"type": "string", "format": "date"},
                "size": {"type": "integer", "default": 1, "maximum": 5},
                "tags": {"type": "array", "items": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def long_way(body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    schema = StructuralSchema(SCHEMA)
    defaulted = schema.apply_defaults(body)
    pruned = schema.prune(defaulted)
    return pruned, _dropped_paths(defaulted, pruned)


@pytest.mark.parametrize(
    "body",
    [
        {"spec": {"when": "2026-01-01", "tags": ["a"]}},
        {"spec": {"bogus": 1, "size": None, "free": {"x": {"y": 1}}}, "status": {"no": 2}},
        {"spec": None, "extra": {"a": 1}},
        {"spec": {"when": datetime.date(2026, 1, 1)}},
        {},
    ],
)
def test_normalizing_twice_gives_what_the_long_way_gives(body: dict[str, Any]) -> None:
    expected = long_way(copy.deepcopy(body))
    for _ in range(2):  # the second time from memory
        result = _normalized(SCHEMA, copy.deepcopy(body))
        assert repr(result) == repr(expected)


def test_a_remembered_normalization_is_the_callers_own_copy() -> None:
    body = {"spec": {"tags": ["a"]}}
    first, _ = _normalized(SCHEMA, copy.deepcopy(body))
    first["spec"]["tags"].append("changed")
    second, _ = _normalized(SCHEMA, copy.deepcopy(body))
    assert second == {"spec": {"tags": ["a"], "size": 1}}


def test_validation_remembers_passes_but_not_values_that_only_look_alike() -> None:
    schema = StructuralSchema(SCHEMA)
    assert schema.validate({"spec": {"when": "2026-01-01"}}) == []
    assert schema.validate({"spec": {"when": "2026-01-01"}}) == []
    # The same JSON, but a date object: validated, not taken from memory.
    as_date = schema.validate({"spec": {"when": datetime.date(2026, 1, 1)}})
    assert as_date == StructuralSchema(SCHEMA).validate(
        {"spec": {"when": datetime.date(2026, 1, 1)}}
    )
    # A failure is never remembered as a pass, the second time either.
    for _ in range(2):
        (cause,) = schema.validate({"spec": {"size": 9}})
        assert cause.field == "spec.size"


def test_unknown_fields_are_named_every_time() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    for _ in range(2):
        assert unknown_fields("", "v1", "Pod", copy.deepcopy(pod)) == []
    bad = copy.deepcopy(pod)
    bad["spec"]["containers"][0]["bogus"] = 1
    for _ in range(2):
        wrong = copy.deepcopy(bad)
        assert unknown_fields("", "v1", "Pod", wrong) == ["spec.containers[0].bogus"]
        assert "bogus" not in wrong["spec"]["containers"][0]


@pytest.mark.skipif(not celrules.AVAILABLE, reason="CEL comes with the test extra")
def test_a_rule_that_passed_is_evaluated_again_on_another_value() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "self.size < 3"}],
                "properties": {"size": {"type": "integer"}},
            }
        },
    }
    rules = celrules.compile_rules(schema)
    assert rules is not None
    for _ in range(2):
        assert rules.validate({"spec": {"size": 1}}, None).causes == []
        assert len(rules.validate({"spec": {"size": 4}}, None).causes) == 1
        # The double 1.0 is not the integer 1 (their JSON tells them apart): evaluated anew,
        # it gets what a tree that has remembered nothing gives.
        fresh = celrules.compile_rules(schema)
        assert fresh is not None
        as_double = rules.validate({"spec": {"size": 1.0}}, None).causes
        assert as_double == fresh.validate({"spec": {"size": 1.0}}, None).causes


def test_changed_fields_of_scalars_are_their_leaves() -> None:
    old = {"status": {"phase": "Pending", "message": "m", "n": 1}, "spec": {"a": {"b": 1}}}
    new = {"status": {"phase": "Running", "reason": "r", "n": 1}, "spec": {"a": 2}}
    before, after = leaf_values(old), leaf_values(new)
    expected_changed = {p for p, v in after.items() if before.get(p, object()) != v}
    assert changed_fields(old, new) == (expected_changed, set(before) - set(after))


@pytest.mark.parametrize(
    "raw", [b'{"a": [1, 2.5, null, "\\u00e9"]}', b"1e400", b'"\\ud800"', b"NaN", b"\xef\xbb\xbf{}"]
)
def test_request_bodies_decode_as_json_loads_decodes_them(raw: bytes) -> None:
    import json

    assert repr(_json_loads(raw)) == repr(json.loads(raw))


def test_a_malformed_body_fails_as_json_loads_fails() -> None:
    import json

    with pytest.raises(ValueError) as ours:
        _json_loads(b"[1,2,]")
    with pytest.raises(ValueError) as theirs:
        json.loads(b"[1,2,]")
    assert str(ours.value) == str(theirs.value)


def test_the_store_answers_an_update_with_the_bytes_it_stored() -> None:
    store = Store()
    store.create("things", {"metadata": {"name": "a", "namespace": "n"}, "v": 1})
    raw = store.update_encoded("things", {"metadata": {"name": "a", "namespace": "n"}, "v": 2})
    assert raw == store.get_raw("things", "n", "a")
    assert decode(raw)["metadata"]["resourceVersion"] == "2"
    # A no-op keeps the stored bytes and the resourceVersion.
    same = store.update_encoded("things", {"metadata": {"name": "a", "namespace": "n"}, "v": 2})
    assert same is store.get_raw("things", "n", "a")
    assert store.resource_version == 2
