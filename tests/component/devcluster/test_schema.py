"""Row 20 of docs/devcluster.md §2: CRD structural schema on the wire.

The schema semantics are :mod:`devtools.cluster.apirules.structural`'s, unit-tested in
tests/unit/devcluster/test_structural*.py; these tests pin how the server applies them: 422
bodies, pruning with warnings or Strict refusal, defaulting on create and on patch, and status
validated through /status.
"""

from __future__ import annotations

import aiohttp
from kubernetes_asyncio import client as k8s

from tests.component.devcluster.samples import (
    GROUP,
    MERGE,
    PLURAL,
    VERSION,
    create_widget,
    failure,
    widget,
)

WIDGETS = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"


async def test_invalid_custom_resource_is_422_with_causes(custom: k8s.CustomObjectsApi) -> None:
    """Row 20 (CR strategy Validate) + row 13 (NewInvalid): Kind.group "name" is invalid: [...]
    with one cause per violation."""
    status, error = await failure(
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, widget("w1", size=11, color="green")
        )
    )
    assert status == 422
    assert error["reason"] == "Invalid"
    assert error["message"] == (
        'Widget.example.com "w1" is invalid: [spec.color: Unsupported value: "green": supported '
        'values: "red", "blue", spec.size: Invalid value: 11: spec.size in body should be less '
        "than or equal to 10]"
    )
    assert error["details"] == {
        "name": "w1",
        "group": "example.com",
        "kind": "Widget",
        "causes": [
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: "green": supported values: "red", "blue"',
                "field": "spec.color",
            },
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 11: spec.size in body should be less than or equal "
                "to 10",
                "field": "spec.size",
            },
        ],
    }


async def test_unknown_fields_are_pruned_with_a_warning(http: aiohttp.ClientSession) -> None:
    """Row 20: unknown fields are dropped silently from the object; the default
    fieldValidation=Warn says so in a Warning header. preserve-unknown-fields subtrees keep
    them."""
    body = widget("w1", size=1, typo=True, extra={"anything": {"goes": 1}})
    async with http.post(WIDGETS, json=body) as response:
        assert response.status == 201
        created = await response.json()
        assert response.headers.getall("Warning") == ['299 - "unknown field \\"spec.typo\\""']
    assert "typo" not in created["spec"]
    assert created["spec"]["extra"] == {"anything": {"goes": 1}}


async def test_strict_field_validation_refuses_unknown_fields(http: aiohttp.ClientSession) -> None:
    """Row 20 (fieldValidation=Strict, what kubectl sends): 400 strict decoding error."""
    async with http.post(
        WIDGETS, json=widget("w1", size=1, typo=True), params={"fieldValidation": "Strict"}
    ) as response:
        assert response.status == 400
        error = await response.json()
    assert error["message"] == 'strict decoding error: unknown field "spec.typo"'


async def test_defaults_apply_on_create_and_patch(custom: k8s.CustomObjectsApi) -> None:
    """Row 20: `default:` fills missing fields on create and after a patch removes them."""
    created = await create_widget(custom, size=1)
    assert created["spec"]["replicas"] == 1
    patched = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w1", {"spec": {"replicas": None}}, _content_type=MERGE
    )
    assert patched["spec"]["replicas"] == 1


async def test_status_is_validated_through_the_status_subresource(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Row 20: /status writes are validated against the schema too."""
    await create_widget(custom)
    status, error = await failure(
        custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "w1",
            {"status": {"replicas": "many"}},
            _content_type=MERGE,
        )
    )
    assert status == 422
    assert error["details"]["causes"][0]["field"] == "status.replicas"


async def test_invalid_update_is_422_and_leaves_the_object(custom: k8s.CustomObjectsApi) -> None:
    """Row 20: validation applies to updates; a refused write changes nothing."""
    created = await create_widget(custom, size=1)
    status, _ = await failure(
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "w1", {"spec": {"size": -1}}, _content_type=MERGE
        )
    )
    assert status == 422
    current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1")
    assert current == created
