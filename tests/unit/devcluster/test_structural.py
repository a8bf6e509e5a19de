"""Structural-schema semantics against what kube-apiserver does: defaulting, pruning,
validation messages, and the structural rules of a CRD schema."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devtools.cluster.apirules.structural import (
    Cause,
    StructuralSchema,
    invalid_message,
    is_date_time,
    schema_problems,
)


def obj_schema(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **extra}


def root(spec: dict[str, Any]) -> StructuralSchema:
    return StructuralSchema(
        obj_schema(
            {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": spec,
            }
        )
    )


def errors(schema: StructuralSchema, spec: Any) -> list[str]:
    return [cause.error for cause in schema.validate({"spec": spec})]


# --- Defaulting ----------------------------------------------------------------------------------

DEFAULTED = root(
    obj_schema(
        {
            "mode": {"type": "string", "default": "Fast"},
            "strategy": obj_schema({"type": {"type": "string", "default": "Rolling"}}),
            "limits": obj_schema(
                {"cpu": {"type": "string", "default": "1"}},
                default={},
            ),
            "ports": {
                "type": "array",
                "items": obj_schema(
                    {"port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}
                ),
            },
            "nullableMode": {"type": "string", "nullable": True, "default": "x"},
            "plain": {"type": "string"},
            "labels": {
                "type": "object",
                "additionalProperties": {"type": "string", "default": "v"},
            },
        }
    )
)


def test_defaults_fill_missing_fields_but_never_create_a_parent() -> None:
    spec = DEFAULTED.apply_defaults({"spec": {}})["spec"]

    assert spec["mode"] == "Fast"
    assert "strategy" not in spec
    assert "ports" not in spec


def test_a_defaulted_object_is_itself_defaulted() -> None:
    assert DEFAULTED.apply_defaults({"spec": {}})["spec"]["limits"] == {"cpu": "1"}


def test_defaults_apply_inside_existing_objects_and_every_list_item() -> None:
    spec = DEFAULTED.apply_defaults(
        {"spec": {"strategy": {}, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}}
    )["spec"]

    assert spec["strategy"] == {"type": "Rolling"}
    assert spec["ports"] == [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]


def test_null_is_defaulted_or_dropped_unless_nullable() -> None:
    spec = DEFAULTED.apply_defaults(
        {"spec": {"mode": None, "plain": None, "nullableMode": None, "labels": {"a": None}}}
    )["spec"]

    assert spec["mode"] == "Fast"
    assert "plain" not in spec
    assert spec["nullableMode"] is None
    assert spec["labels"] == {"a": "v"}


def test_defaulting_does_not_touch_its_input() -> None:
    original: dict[str, Any] = {"spec": {"strategy": {}}}
    snapshot = copy.deepcopy(original)

    DEFAULTED.apply_defaults(original)

    assert original == snapshot


def test_defaulting_twice_changes_nothing() -> None:
    once = DEFAULTED.apply_defaults({"spec": {"strategy": {}, "ports": [{}]}})

    assert DEFAULTED.apply_defaults(once) == once


# --- Pruning -------------------------------------------------------------------------------------

PRUNED = root(
    obj_schema(
        {
            "known": {"type": "string"},
            "items": {"type": "array", "items": obj_schema({"name": {"type": "string"}})},
            "free": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"typed": obj_schema({"a": {"type": "string"}})},
            },
            "byName": {
                "type": "object",
                "additionalProperties": obj_schema({"x": {"type": "integer"}}),
            },
            "embedded": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object"}},
            },
        }
    )
)


def test_unknown_fields_are_dropped_and_reported_with_their_paths() -> None:
    manifest = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "notAMetaField": 1},
        "status": {"phase": "x"},
        "spec": {
            "known": "k",
            "extra": 1,
            "items": [{"name": "a"}, {"name": "b", "colour": "red"}],
            "byName": {"one": {"x": 1, "y": 2}},
        },
    }

    assert PRUNED.unknown_fields(manifest) == [
        "spec.byName.one.y",
        "spec.extra",
        "spec.items[1].colour",
        "status",
    ]
    assert PRUNED.prune(manifest) == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "notAMetaField": 1},
        "spec": {
            "known": "k",
            "items": [{"name": "a"}, {"name": "b"}],
            "byName": {"one": {"x": 1}},
        },
    }


def test_preserve_unknown_fields_keeps_unknown_but_prunes_inside_known() -> None:
    spec = {"free": {"anything": {"deep": [1, 2]}, "typed": {"a": "x", "b": "pruned"}}}

    assert PRUNED.prune({"spec": spec})["spec"] == {
        "free": {"anything": {"deep": [1, 2]}, "typed": {"a": "x"}}
    }


def test_embedded_resources_keep_their_type_and_metadata() -> None:
    embedded = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}, "x": 1}

    assert PRUNED.prune({"spec": {"embedded": embedded}})["spec"]["embedded"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {},
    }


def test_pruning_twice_changes_nothing() -> None:
    once = PRUNED.prune({"spec": {"extra": 1, "items": [{"z": 1}]}})

    assert PRUNED.prune(once) == once
    assert PRUNED.unknown_fields(once) == []


# --- Validation messages -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        (
            {"type": "integer", "minimum": 0},
            -1,
            "spec: Invalid value: -1: spec in body should be greater than or equal to 0",
        ),
        (
            {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
            0,
            "spec: Invalid value: 0: spec in body should be greater than 0",
        ),
        (
            {"type": "number", "maximum": 1000000},
            1000001.5,
            "spec: Invalid value: 1.0000015e+06: spec in body should be less than or equal to "
            "1e+06",
        ),
        (
            {"type": "number", "maximum": 2.5, "exclusiveMaximum": True},
            2.5,
            "spec: Invalid value: 2.5: spec in body should be less than 2.5",
        ),
        (
            {"type": "integer", "multipleOf": 5},
            7,
            "spec: Invalid value: 7: spec in body should be a multiple of 5",
        ),
        (
            {"type": "string", "minLength": 1},
            "",
            'spec: Invalid value: "": spec in body should be at least 1 chars long',
        ),
        (
            {"type": "string", "maxLength": 3},
            "abcd",
            "spec: Too long: may not be more than 3 bytes",
        ),
        ({"type": "string", "maxLength": 1}, "ab", "spec: Too long: may not be more than 1 byte"),
        (
            {"type": "string", "pattern": "^[a-z]+$"},
            "Abc",
            "spec: Invalid value: \"Abc\": spec in body should match '^[a-z]+$'",
        ),
        (
            {"type": "string", "pattern": "^[a-z]+$"},
            "abc\n",
            "spec: Invalid value: \"abc\\n\": spec in body should match '^[a-z]+$'",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
            [],
            "spec: Invalid value: 0: spec in body should have at least 1 items",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            ["a", "b", "c"],
            "spec: Too many: 3: must have at most 2 items",
        ),
        (
            {"type": "integer"},
            2.5,
            'spec: Invalid value: "number": spec in body must be of type integer: "number"',
        ),
        (
            {"type": "integer"},
            True,
            'spec: Invalid value: "boolean": spec in body must be of type integer: "boolean"',
        ),
        (
            {"x-kubernetes-int-or-string": True},
            True,
            'spec: Invalid value: "boolean": spec in body must be of type integer,string: '
            '"boolean"',
        ),
        (
            {"type": "string", "format": "date-time"},
            "2030-02-30T00:00:00Z",
            'spec: Invalid value: "2030-02-30T00:00:00Z": spec in body must be of type date-time: '
            '"2030-02-30T00:00:00Z"',
        ),
        (
            {"type": "string", "format": "date-time"},
            5,
            'spec: Invalid value: "int64": spec in body must be of type date-time: "int64"',
        ),
        (
            {"type": "integer", "format": "int32"},
            1.5,
            'spec: Invalid value: "number": spec in body must be of type integer: "number"',
        ),
        (
            {"type": "string", "enum": ["A", "B"]},
            "C",
            'spec: Unsupported value: "C": supported values: "A", "B"',
        ),
        (
            {"type": "number", "enum": [1.0, 2.5]},
            3,
            'spec: Unsupported value: 3: supported values: "1", "2.5"',
        ),
    ],
)
def test_messages_are_the_api_servers(schema: dict[str, Any], value: Any, expected: str) -> None:
    assert errors(root(schema), value) == [expected]


def test_a_wrong_type_stops_the_checks_below_but_not_the_enum() -> None:
    schema = root({"type": "string", "enum": ["A"], "minLength": 5})

    assert errors(schema, 7) == [
        'spec: Invalid value: "integer": spec in body must be of type string: "integer"',
        'spec: Unsupported value: 7: supported values: "A"',
    ]


def test_values_that_pass() -> None:
    assert errors(root({"type": "integer"}), 2.0) == []
    assert errors(root({"type": "number"}), 2) == []
    assert errors(root({"x-kubernetes-int-or-string": True}), 3) == []
    assert errors(root({"x-kubernetes-int-or-string": True}), "25%") == []
    assert errors(root({"type": "string", "nullable": True}), None) == []
    assert errors(root({"x-kubernetes-preserve-unknown-fields": True}), [1, {"a": None}]) == []
    assert errors(root({"type": "number", "enum": [1.0, 2.5]}), 1) == []
    # kube-openapi lets an array through a string field that has a format; so do we.
    assert errors(root({"type": "string", "format": "date-time"}), ["x"]) == []


def test_null_where_not_nullable_is_a_type_error() -> None:
    schema = root({"type": "array", "items": {"type": "string"}})

    assert errors(schema, ["a", None]) == [
        'spec[1]: Invalid value: "null": spec[1] in body must be of type string: "null"'
    ]


def test_required_fields_are_named_and_present_nulls_count_as_present() -> None:
    schema = root(
        obj_schema(
            {"a": {"type": "string", "nullable": True}, "b": {"type": "string"}},
            required=["a", "b"],
        )
    )

    assert errors(schema, {"a": None}) == ["spec.b: Required value"]


def test_paths_name_list_items_and_map_values() -> None:
    schema = root(
        obj_schema(
            {
                "items": {"type": "array", "items": obj_schema({"n": {"type": "integer"}})},
                "byName": {"type": "object", "additionalProperties": {"type": "integer"}},
            }
        )
    )

    assert errors(schema, {"items": [{"n": 1}, {"n": "x"}], "byName": {"k": "v"}}) == [
        'spec.byName.k: Invalid value: "string": spec.byName.k in body must be of type integer: '
        '"string"',
        'spec.items[1].n: Invalid value: "string": spec.items[1].n in body must be of type '
        'integer: "string"',
    ]


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("2030-01-01T00:00:00Z", True),
        ("2030-01-01t00:00:00.123456+02:00", True),
        ("2030-01-01T23:59:59-07:30", True),
        ("2030-01-01T24:00:00Z", False),
        ("2030-01-01T00:60:00Z", False),
        ("2030-13-01T00:00:00Z", False),
        ("2030-01-01 00:00:00Z", False),
        ("2030-01-01T00:00:00", False),
        ("20300101T000000Z", False),
        ("", False),
    ],
)
def test_date_time_is_rfc_3339(text: str, valid: bool) -> None:
    assert is_date_time(text) is valid


# --- List types ----------------------------------------------------------------------------------


def test_a_set_reports_each_duplicate_once() -> None:
    schema = root({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"})

    assert errors(schema, ["a", "b", "a", "a", "b"]) == [
        'spec[2]: Duplicate value: "a"',
        'spec[4]: Duplicate value: "b"',
    ]


def test_a_set_tells_types_apart() -> None:
    schema = root(
        {
            "type": "array",
            "items": {"x-kubernetes-int-or-string": True},
            "x-kubernetes-list-type": "set",
        }
    )

    assert errors(schema, [1, "1"]) == []


def test_a_map_is_unique_by_its_keys() -> None:
    schema = root(
        {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": obj_schema(
                {"type": {"type": "string"}, "status": {"type": "string"}}, required=["type"]
            ),
        }
    )

    assert errors(schema, [{"type": "Ready", "status": "True"}, {"type": "Ready"}]) == [
        'spec[1]: Duplicate value: map[string]interface {}{"type":"Ready"}'
    ]


def test_a_map_with_two_keys_needs_both_to_collide() -> None:
    schema = root(
        {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["port", "protocol"],
            "items": obj_schema({"port": {"type": "integer"}, "protocol": {"type": "string"}}),
        }
    )

    assert errors(schema, [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]) == []
    assert errors(schema, [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "UDP"}]) == [
        'spec[1]: Duplicate value: map[string]interface {}{"port":53, "protocol":"UDP"}'
    ]


def test_duplicates_are_reported_after_schema_errors() -> None:
    schema = root(
        obj_schema(
            {
                "a": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                },
                "b": {"type": "integer"},
            }
        )
    )

    assert [c.reason for c in schema.validate({"spec": {"a": ["x", "x"], "b": "y"}})] == [
        "FieldValueTypeInvalid",
        "FieldValueDuplicate",
    ]


# --- Causes and the Status message ---------------------------------------------------------------


def test_a_cause_carries_the_message_without_the_field() -> None:
    (cause,) = root({"type": "integer", "minimum": 0}).validate({"spec": -1})

    assert cause == Cause(
        field="spec",
        reason="FieldValueInvalid",
        message="Invalid value: -1: spec in body should be greater than or equal to 0",
    )


def test_invalid_message_aggregates_like_apimachinery() -> None:
    one = Cause(field="spec.a", reason="FieldValueRequired", message="Required value")
    two = Cause(field="spec.b", reason="FieldValueRequired", message="Required value")

    assert invalid_message("Sandbox", "agents.x-k8s.io", "s1", [one]) == (
        'Sandbox.agents.x-k8s.io "s1" is invalid: spec.a: Required value'
    )
    assert invalid_message("Sandbox", "agents.x-k8s.io", "s1", [one, two, one]) == (
        'Sandbox.agents.x-k8s.io "s1" is invalid: [spec.a: Required value, spec.b: Required value]'
    )
    assert invalid_message("Pod", "", "p", []) == 'Pod "p" is invalid'


def test_admit_defaults_then_prunes_then_validates() -> None:
    schema = root(obj_schema({"mode": {"type": "string", "enum": ["A"], "default": "B"}}))

    admission = schema.admit({"spec": {"junk": 1}})

    assert admission.object == {"spec": {"mode": "B"}}
    assert admission.unknown_fields == ["spec.junk"]
    assert [c.field for c in admission.causes] == ["spec.mode"]


# --- Choosing the schema of a CRD ----------------------------------------------------------------


def test_from_crd_picks_the_storage_version_or_the_named_one() -> None:
    crd = {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "versions": [
                {
                    "name": "v1alpha1",
                    "storage": False,
                    "schema": {"openAPIV3Schema": {"type": "object", "description": "old"}},
                },
                {
                    "name": "v1",
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "description": "new"}},
                },
            ]
        },
    }

    assert StructuralSchema.from_crd(crd).schema["description"] == "new"
    assert StructuralSchema.from_crd(crd, "v1alpha1").schema["description"] == "old"
    with pytest.raises(KeyError):
        StructuralSchema.from_crd(crd, "v2")


# --- Is a schema structural? ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (obj_schema({"a": {}}), "properties[spec].properties[a].type: Required value"),
        (
            obj_schema({"a": {"type": "string"}}, additionalProperties={"type": "string"}),
            "additionalProperties and properties are mutual exclusive",
        ),
        ({"type": "object", "additionalProperties": False}, "must not be false"),
        (
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "uniqueItems cannot be set to true",
        ),
        ({"type": "string", "x-kubernetes-int-or-string": True}, "must be empty if"),
        ({"type": "string", "format": "date-time", "whatever": 1}, "whatever: Forbidden"),
        ({"type": "string", "maxLength": "3"}, 'maxLength: Invalid value: "3": wrong type'),
        ({"type": "string", "pattern": "("}, "pattern: Invalid value"),
        ({"type": "string", "default": 3}, "default: Invalid value"),
        (obj_schema({"a": {"type": "string"}}, default={"b": "x"}), "must not have unknown fields"),
        ({"type": "string", "enum": ["a", 1]}, "enum[1]: Invalid value: 1: must be of type string"),
        ({"type": "array"}, "items: Required value"),
        (
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": obj_schema({"name": {"type": "string"}}),
            },
            "it must have a default or be a required property",
        ),
        (
            {"type": "array", "items": obj_schema({}), "x-kubernetes-list-type": "set"},
            "must be a scalar type",
        ),
        ({"type": "string", "anyOf": [{"minLength": 1}]}, "anyOf: Forbidden"),
        ({"type": "string", "$ref": "#/x"}, "$ref is not supported"),
        ({"type": "object", "x-kubernetes-preserve-unknown-fields": False}, "must be true"),
    ],
)
def test_schema_problems_are_found(spec: dict[str, Any], problem: str) -> None:
    schema = {"type": "object", "properties": {"spec": spec}}

    found = schema_problems(schema)

    assert any(problem in line for line in found), found


def test_root_metadata_may_only_constrain_name_and_generate_name() -> None:
    allowed = {
        "type": "object",
        "properties": {"metadata": obj_schema({"name": {"type": "string"}})},
    }
    refused = {
        "type": "object",
        "properties": {"metadata": obj_schema({"labels": {"type": "object"}})},
    }

    assert schema_problems(allowed) == []
    assert any("metadata is implicitly specified" in line for line in schema_problems(refused))


def test_the_root_must_be_an_object() -> None:
    assert schema_problems({"type": "string"}) == [
        'openAPIV3Schema.type: Invalid value: "string": must be object'
    ]
