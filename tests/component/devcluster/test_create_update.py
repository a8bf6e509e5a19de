"""Rows 1, 7, 8 and 15 of docs/devcluster.md §2: resourceVersion, create, update, bool params."""

from __future__ import annotations

import re

import aiohttp
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from devtools.cluster.apirules.meta import GENERATE_ALPHABET
from tests.component.devcluster.samples import (
    GROUP,
    PLURAL,
    VERSION,
    create_widget,
    failure,
    pod,
    widget,
)


async def test_one_global_resource_version_across_resources(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    """Row 1 (api-concepts #resource-versions): one monotonic counter across all resources, as a
    decimal string; a list's RV is the global RV at the snapshot."""
    w = await create_widget(custom)
    p = await core.create_namespaced_pod("default", pod("p1"))
    cm = await core.create_namespaced_config_map(
        "default", {"metadata": {"name": "c"}, "data": {"k": "v"}}
    )
    rvs = [int(w["metadata"]["resourceVersion"]), int(p.metadata.resource_version)]
    rvs.append(int(cm.metadata.resource_version))
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    assert rvs[1] == rvs[0] + 1 and rvs[2] == rvs[1] + 1
    listed = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert listed["metadata"]["resourceVersion"] == str(rvs[2])


async def test_noop_update_keeps_resource_version_and_emits_nothing(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """Row 1: a write whose bytes equal the stored object does not bump the RV or emit an event."""
    created = await create_widget(custom)
    before = cluster.store.resource_version
    same = await custom.replace_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w1", created
    )
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert cluster.store.resource_version == before
    patched = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        {"spec": {"size": 1}},
        _content_type="application/merge-patch+json",
    )
    assert patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert [c.type for c in cluster.store.history() if c.name == "w1"] == ["ADDED"]


async def test_create_returns_201_with_server_fields(custom: k8s.CustomObjectsApi) -> None:
    """Row 7 (CR strategy PrepareForCreate): 201; uid, creationTimestamp (whole seconds, Z),
    resourceVersion, generation 1, namespace from the URL; status dropped with the status
    subresource on."""
    body = widget("w1", size=2)
    body["status"] = {"phase": "Sneaky"}
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    meta = created["metadata"]
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert meta["generation"] == 1
    assert meta["namespace"] == "default"
    assert meta["resourceVersion"].isdigit()
    assert "status" not in created


async def test_create_status_code_is_201_on_the_wire(http: aiohttp.ClientSession) -> None:
    """Row 7: the client deserialises only a 201; the server must send exactly that."""
    async with http.post(
        f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}", json=widget("w1")
    ) as response:
        assert response.status == 201
        assert response.content_type == "application/json"


async def test_generate_name_uses_the_upstream_alphabet_and_length(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Row 7 (storage/names/generate.go): prefix[:58] + 5 chars of bcdfghjklmnpqrstvwxz2456789."""
    body = widget("")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "x" * 70
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    name = created["metadata"]["name"]
    assert len(name) == 63
    assert name[:58] == "x" * 58
    assert all(ch in GENERATE_ALPHABET for ch in name[58:])
    short = widget("")
    short["metadata"] = {"generateName": "w-"}
    second = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, short)
    assert re.fullmatch(rf"w-[{GENERATE_ALPHABET}]{{5}}", second["metadata"]["name"])


async def test_create_without_name_is_422(custom: k8s.CustomObjectsApi) -> None:
    """Row 7: name or generateName is required (ValidateObjectMeta)."""
    body = widget("")
    body["metadata"] = {}
    status, error = await failure(
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    )
    assert status == 422
    assert error["reason"] == "Invalid"
    assert error["message"] == (
        'Widget.example.com "" is invalid: metadata.name: Required value: name or generateName '
        "is required"
    )
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        }
    ]


async def test_duplicate_create_is_409_already_exists(custom: k8s.CustomObjectsApi) -> None:
    """Row 7 (errors.go NewAlreadyExists): 409 AlreadyExists, details.kind is the plural."""
    await create_widget(custom)
    status, error = await failure(create_widget(custom))
    assert status == 409
    assert error == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'widgets.example.com "w1" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "w1", "group": "example.com", "kind": "widgets"},
        "code": 409,
    }


async def test_update_with_stale_resource_version_is_409_conflict(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Row 8 (store.go Update, OptimisticLockErrorMsg)."""
    created = await create_widget(custom)
    created["spec"]["size"] = 2
    await custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1", created)
    created["spec"]["size"] = 3  # still carries the old resourceVersion
    status, error = await failure(
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1", created)
    )
    assert status == 409
    assert error["reason"] == "Conflict"
    assert error["message"] == (
        'Operation cannot be fulfilled on widgets.example.com "w1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert error["details"] == {"name": "w1", "group": "example.com", "kind": "widgets"}


async def test_custom_resource_update_without_resource_version_is_422(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Row 8: CRs have AllowUnconditionalUpdate=false, so a PUT without RV is 422 Invalid."""
    await create_widget(custom)
    status, error = await failure(
        custom.replace_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "w1", widget("w1", size=5)
        )
    )
    assert status == 422
    assert error["message"] == (
        'widgets.example.com "w1" is invalid: metadata.resourceVersion: Invalid value: 0x0: must '
        "be specified for an update"
    )
    assert error["details"]["kind"] == "widgets"


async def test_pod_update_without_resource_version_is_last_write_wins(
    core: k8s.CoreV1Api,
) -> None:
    """Row 8: Pods allow unconditional update (AllowUnconditionalUpdate=true)."""
    created = await core.create_namespaced_pod("default", pod("p1"))
    first = await core.read_namespaced_pod("p1", "default")
    first.metadata.labels = {"a": "b"}
    await core.replace_namespaced_pod("p1", "default", first)
    stale = await core.read_namespaced_pod("p1", "default")
    stale.metadata.labels = {"c": "d"}
    stale.metadata.resource_version = None
    updated = await core.replace_namespaced_pod("p1", "default", stale)
    assert updated.metadata.labels == {"c": "d"}
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version) + 1


async def test_update_keeps_server_owned_fields_and_rejects_identity_changes(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Row 8 (rest.BeforeUpdate): uid/creationTimestamp/generation kept; changing uid is 422,
    a name differing from the URL is 400."""
    created = await create_widget(custom)
    body = dict(created)
    body["metadata"] = {
        "name": "w1",
        "resourceVersion": created["metadata"]["resourceVersion"],
        "generation": 99,
        "creationTimestamp": "2000-01-01T00:00:00Z",
    }
    body["spec"] = {"size": 4}
    updated = await custom.replace_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w1", body
    )
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert updated["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    assert updated["metadata"]["generation"] == 2
    body["metadata"] = {**updated["metadata"], "uid": "0000"}
    status, error = await failure(
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1", body)
    )
    assert (status, error["reason"]) == (422, "Invalid")
    assert error["details"]["causes"][0]["field"] == "metadata.uid"
    body["metadata"] = {**updated["metadata"], "name": "other"}
    status, error = await failure(
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1", body)
    )
    assert status == 400
    assert error["message"] == (
        "the name of the object (other) does not match the name on the URL (w1)"
    )


async def test_update_of_missing_object_is_404(custom: k8s.CustomObjectsApi) -> None:
    """Row 8: CRs do not allow create-on-update."""
    status, error = await failure(
        custom.replace_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "nope", widget("nope")
        )
    )
    assert status == 404
    assert error["message"] == 'widgets.example.com "nope" not found'


async def test_bool_query_params_parse_like_go(http: aiohttp.ClientSession) -> None:
    """Row 15 (strconv.ParseBool): 1/t/T/TRUE/true/True are true; garbage is a 400."""
    for value in ("1", "t", "T", "TRUE", "true", "True"):
        async with http.get(
            "/api/v1/namespaces/default/pods", params={"watch": value, "timeoutSeconds": "0"}
        ) as response:
            assert response.status == 200
            assert response.content_type == "application/json"
    async with http.get("/api/v1/namespaces/default/pods", params={"watch": "yes"}) as response:
        assert response.status == 400
        body = await response.json()
        assert body["message"] == 'strconv.ParseBool: parsing "yes": invalid syntax'
