"""Row 9 of docs/devcluster.md §2: PATCH content types, as the HTTP layer maps them.

The patch semantics themselves are tested case by case in test_patch.py (helper D); these tests
pin what the server does around them: which content type goes where, the status codes and
bodies of the failures, preconditions, and create-by-apply.
"""

from __future__ import annotations

import json

import aiohttp
from kubernetes_asyncio import client as k8s

from tests.component.devcluster.samples import (
    GROUP,
    MERGE,
    PLURAL,
    VERSION,
    create_widget,
    failure,
    pod,
    widget,
)

W1 = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/w1"
APPLY = "application/apply-patch+yaml"


async def test_merge_patch_is_rfc7386(custom: k8s.CustomObjectsApi) -> None:
    """Row 9: merge-patch+json merges maps, null deletes, lists replace."""
    await create_widget(custom, size=1, color="red", extra={"a": [1, 2], "b": 1})
    patched = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        {"spec": {"color": None, "extra": {"a": [3], "c": 2}}},
        _content_type=MERGE,
    )
    assert patched["spec"] == {"size": 1, "replicas": 1, "extra": {"a": [3], "b": 1, "c": 2}}


async def test_dict_sent_as_json_patch_is_400(custom: k8s.CustomObjectsApi) -> None:
    """Row 9 (§3 client quirk; handlers/patch.go): the client's default content type for a dict
    body is json-patch, which a real server rejects with Go's unmarshal message."""
    await create_widget(custom)
    status, error = await failure(
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "w1", {"spec": {"size": 2}}
        )
    )
    assert status == 400
    assert error["reason"] == "BadRequest"
    assert error["message"] == (
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
    )


async def test_json_patch_applies_and_a_failing_test_is_422(custom: k8s.CustomObjectsApi) -> None:
    """Row 9 (applyJSPatch): a list body is RFC 6902; a failing op or test is 422."""
    await create_widget(custom, size=1)
    patched = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        [{"op": "replace", "path": "/spec/size", "value": 7}],
    )
    assert patched["spec"]["size"] == 7
    status, error = await failure(
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "w1",
            [{"op": "test", "path": "/spec/size", "value": 1}],
        )
    )
    assert status == 422
    assert error["reason"] == "Invalid"


async def test_strategic_merge_on_custom_resource_is_415(http: aiohttp.ClientSession) -> None:
    """Row 9: strategic merge is for built-in kinds only; on a CR it is 415 listing what is
    accepted."""
    await http.post(f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}", json=widget("w1"))
    async with http.patch(
        W1,
        data=b'{"spec":{"size":2}}',
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    ) as response:
        assert response.status == 415
        body = await response.json()
    assert body["reason"] == "UnsupportedMediaType"
    assert body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


async def test_strategic_merge_on_pod_merges_containers_by_name(core: k8s.CoreV1Api) -> None:
    """Row 9: the Python client sends a dict to a built-in as strategic-merge-patch+json."""
    body = pod("p1")
    body["spec"]["containers"].append({"name": "side", "image": "busybox:1"})
    await core.create_namespaced_pod("default", body)
    patched = await core.patch_namespaced_pod(
        "p1", "default", {"spec": {"containers": [{"name": "side", "image": "busybox:2"}]}}
    )
    images = {c.name: c.image for c in patched.spec.containers}
    assert images == {"app": "nginx:1.25", "side": "busybox:2"}


async def test_unknown_content_type_is_415(http: aiohttp.ClientSession) -> None:
    """Row 9: any other type is 415."""
    await http.post(f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}", json=widget("w1"))
    async with http.patch(W1, data=b"{}", headers={"Content-Type": "text/plain"}) as response:
        assert response.status == 415
        assert (await response.json())["reason"] == "UnsupportedMediaType"


async def test_resource_version_in_patch_body_is_a_precondition(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Row 9: PATCH needs no RV, but an RV in the body must match (409 otherwise)."""
    created = await create_widget(custom)
    rv = created["metadata"]["resourceVersion"]
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w1", {"spec": {"size": 2}}, _content_type=MERGE
    )
    status, error = await failure(
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "w1",
            {"metadata": {"resourceVersion": rv}, "spec": {"size": 3}},
            _content_type=MERGE,
        )
    )
    assert (status, error["reason"]) == (409, "Conflict")


async def test_apply_requires_field_manager(http: aiohttp.ClientSession) -> None:
    """Row 9 (ValidatePatchOptions): an apply without fieldManager is refused. Upstream answers
    422 Invalid on PatchOptions (docs/devcluster.md §2 row 9 records the same)."""
    async with http.patch(
        W1,
        data=b'{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1"}}',
        headers={"Content-Type": APPLY},
    ) as response:
        assert response.status == 422
        body = await response.json()
    assert body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
        "apply patch"
    )
    assert body["details"] == {
        "group": "meta.k8s.io",
        "kind": "PatchOptions",
        "causes": [
            {
                "reason": "FieldValueRequired",
                "message": "Required value: is required for apply patch",
                "field": "fieldManager",
            }
        ],
    }


async def test_apply_creates_with_201_then_updates_with_200(custom: k8s.CustomObjectsApi) -> None:
    """Row 9: SSA creates the object if absent. The create answers 201, which
    CustomObjectsApi.patch_* does not deserialise (§3), so the client returns None."""
    config = widget("w1", size=2)
    answer = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        config,
        field_manager="me",
        _content_type=APPLY,
    )
    assert answer is None
    created = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1")
    assert created["spec"]["size"] == 2
    assert created["metadata"]["managedFields"][0]["manager"] == "me"
    assert created["metadata"]["managedFields"][0]["operation"] == "Apply"
    config["spec"]["size"] = 3
    updated = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        config,
        field_manager="me",
        _content_type=APPLY,
    )
    assert updated["spec"]["size"] == 3
    assert updated["metadata"]["generation"] == 2


async def test_apply_create_status_code(http: aiohttp.ClientSession) -> None:
    """Row 9: an apply that creates answers 201, one that updates 200."""
    body = json.dumps(widget("w1", size=1)).encode()
    headers = {"Content-Type": APPLY}
    async with http.patch(W1, data=body, headers=headers, params={"fieldManager": "m"}) as r:
        assert r.status == 201
    async with http.patch(W1, data=body, headers=headers, params={"fieldManager": "m"}) as r:
        assert r.status == 200


async def test_apply_conflict_is_409_with_field_manager_conflict_causes(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Row 9 (errors.go NewApplyConflict): another manager's field → 409 with causes of type
    FieldManagerConflict, unless force=true."""
    await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        widget("w1", size=2),
        field_manager="alice",
        _content_type=APPLY,
    )
    status, error = await failure(
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "w1",
            widget("w1", size=3),
            field_manager="bob",
            _content_type=APPLY,
        )
    )
    assert (status, error["reason"]) == (409, "Conflict")
    assert error["details"]["causes"][0]["reason"] == "FieldManagerConflict"
    assert error["details"]["causes"][0]["field"] == ".spec.size"
    forced = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        widget("w1", size=3),
        field_manager="bob",
        force=True,
        _content_type=APPLY,
    )
    assert forced["spec"]["size"] == 3


async def test_force_on_non_apply_patch_is_422(http: aiohttp.ClientSession) -> None:
    """Row 9 (ValidatePatchOptions): force may not be specified for non-apply patch."""
    await http.post(f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}", json=widget("w1"))
    async with http.patch(
        W1, data=b"{}", headers={"Content-Type": MERGE}, params={"force": "true"}
    ) as response:
        assert response.status == 422
        assert (await response.json())["message"] == (
            'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for '
            "non-apply patch"
        )


async def test_patch_of_missing_object_is_404(custom: k8s.CustomObjectsApi) -> None:
    """Row 9: patching nothing is NotFound (only apply creates)."""
    status, error = await failure(
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "nope", {"spec": {}}, _content_type=MERGE
        )
    )
    assert (status, error["reason"]) == (404, "NotFound")
