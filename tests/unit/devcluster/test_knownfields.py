"""devtools.cluster.apirules.knownfields: the known fields of built-in kinds (row 27)."""

from __future__ import annotations

import pytest

from devtools.cluster.apirules.knownfields import unknown_fields

pytest.importorskip("kubernetes_validate", reason="the schemas come with kubernetes-validate")


def test_unknown_fields_are_dropped_and_named_in_document_order() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"any": "thing"}, "typo": 1},
        "spec": {
            "bogus": True,
            "containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "env": [{"name": "X", "valu": "1"}]},
            ],
        },
        "status": {"phase": "Running", "extra": 1},
    }
    assert unknown_fields("", "v1", "Pod", pod) == [
        "metadata.typo",
        "spec.bogus",
        "spec.containers[1].env[0].valu",
        "status.extra",
    ]
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"any": "thing"}},
        "spec": {
            "containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "env": [{"name": "X"}]},
            ]
        },
        "status": {"phase": "Running"},
    }


def test_maps_scalars_and_free_form_values_are_not_looked_into() -> None:
    service = {
        "metadata": {"annotations": {"a/b": "c"}},
        "spec": {"ports": [{"port": 80, "targetPort": "http"}], "selector": {"k": "v"}},
    }
    assert unknown_fields("", "v1", "Service", service) == []
    secret = {"data": {"k": "dg=="}, "stringData": {"x": "y"}, "type": "Opaque"}
    assert unknown_fields("", "v1", "Secret", secret) == []
    pod = {"spec": {"overhead": {"cpu": 1}, "containers": [{"resources": {"limits": {"x": 2}}}]}}
    assert unknown_fields("", "v1", "Pod", pod) == []


def test_recursive_types_and_versions_differ() -> None:
    """A CRD's schema is recursive (JSONSchemaProps); its ``default`` is free-form. The two
    Event versions have their own fields."""
    crd = {
        "spec": {
            "versions": [
                {
                    "schema": {
                        "openAPIV3Schema": {
                            "properties": {
                                "spec": {
                                    "properties": {"a": {"type": "string", "typo": 1}},
                                    "default": {"anything": 1},
                                }
                            }
                        }
                    }
                }
            ]
        }
    }
    assert unknown_fields("apiextensions.k8s.io", "v1", "CustomResourceDefinition", crd) == [
        "spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.a.typo"
    ]
    assert unknown_fields("", "v1", "Event", {"note": "x", "message": "y"}) == ["note"]
    assert unknown_fields("events.k8s.io", "v1", "Event", {"note": "x", "message": "y"}) == [
        "message"
    ]


def test_a_kind_without_a_schema_is_left_alone() -> None:
    assert unknown_fields("example.com", "v1", "Widget", {"anything": 1}) == []
