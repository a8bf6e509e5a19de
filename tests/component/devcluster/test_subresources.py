"""Rows 10, 11 and 18 of docs/devcluster.md §2: generation, the status and scale subresources."""

from __future__ import annotations

import aiohttp
from kubernetes_asyncio import client as k8s

from tests.component.devcluster.samples import GROUP, MERGE, PLURAL, VERSION, create_widget, failure

W1 = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/w1"


async def merge(custom: k8s.CustomObjectsApi, body: dict, **kw: object) -> dict:
    result: dict = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w1", body, _content_type=MERGE, **kw
    )
    return result


async def test_generation_moves_on_spec_changes_only(custom: k8s.CustomObjectsApi) -> None:
    """Row 10 (CR strategy PrepareForUpdate): +1 on any change outside metadata; labels,
    annotations, finalizers and ownerReferences alone never change it."""
    created = await create_widget(custom, size=1)
    assert created["metadata"]["generation"] == 1
    relabelled = await merge(
        custom,
        {"metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}, "finalizers": ["x.io/f"]}},
    )
    assert relabelled["metadata"]["generation"] == 1
    resized = await merge(custom, {"spec": {"size": 2}})
    assert resized["metadata"]["generation"] == 2


async def test_main_endpoint_ignores_status_and_status_writes_keep_generation(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Rows 10-11: with the status subresource, status written to the main endpoint is
    discarded, and /status writes never change generation."""
    await create_widget(custom, size=1)
    ignored = await merge(custom, {"status": {"phase": "Nope"}})
    assert "status" not in ignored
    assert ignored["metadata"]["generation"] == 1
    with_status = await custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "w1", {"status": {"phase": "Ready"}}, _content_type=MERGE
    )
    assert with_status["status"] == {"phase": "Ready"}
    assert with_status["metadata"]["generation"] == 1
    kept = await merge(custom, {"spec": {"size": 3}, "status": {"phase": "Nope"}})
    assert kept["status"] == {"phase": "Ready"}


async def test_status_write_ignores_spec_and_metadata(custom: k8s.CustomObjectsApi) -> None:
    """Row 11 (status_strategy.go): /status copies the old object wholesale and replaces only
    .status; spec and metadata sent there are silently dropped."""
    created = await create_widget(custom, size=1)
    body = dict(created)
    body["metadata"] = {**created["metadata"], "labels": {"sneaky": "yes"}}
    body["spec"] = {"size": 9}
    body["status"] = {"phase": "Ready"}
    updated = await custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "w1", body
    )
    assert updated["spec"] == created["spec"]
    assert "labels" not in updated["metadata"]
    assert updated["status"] == {"phase": "Ready"}


async def test_status_put_with_stale_resource_version_conflicts(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Rows 8/11: /status PUT still honours the RV precondition."""
    created = await create_widget(custom)
    await merge(custom, {"spec": {"size": 2}})
    created["status"] = {"phase": "Ready"}
    status, error = await failure(
        custom.replace_namespaced_custom_object_status(
            GROUP, VERSION, "default", PLURAL, "w1", created
        )
    )
    assert (status, error["reason"]) == (409, "Conflict")


async def test_scale_get_maps_the_crd_paths(custom: k8s.CustomObjectsApi) -> None:
    """Row 18: GET /scale is an autoscaling/v1 Scale built from specReplicasPath,
    statusReplicasPath and labelSelectorPath."""
    await create_widget(custom, size=1, replicas=3)
    await custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        {"status": {"replicas": 2, "selector": "app=w1"}},
        _content_type=MERGE,
    )
    scale = await custom.get_namespaced_custom_object_scale(GROUP, VERSION, "default", PLURAL, "w1")
    assert scale["kind"] == "Scale"
    assert scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 2, "selector": "app=w1"}
    assert scale["metadata"]["name"] == "w1"


async def test_scale_writes_set_spec_replicas_and_bump_generation(
    custom: k8s.CustomObjectsApi,
) -> None:
    """Row 18: PUT/PATCH /scale write specReplicasPath; generation moves as for any spec write."""
    await create_widget(custom, size=1, replicas=1)
    scaled = await custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, "default", PLURAL, "w1", {"spec": {"replicas": 4}}, _content_type=MERGE
    )
    assert scaled["spec"] == {"replicas": 4}
    current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1")
    assert current["spec"]["replicas"] == 4
    assert current["metadata"]["generation"] == 2
    scale = await custom.get_namespaced_custom_object_scale(GROUP, VERSION, "default", PLURAL, "w1")
    scale["spec"]["replicas"] = 6
    replaced = await custom.replace_namespaced_custom_object_scale(
        GROUP, VERSION, "default", PLURAL, "w1", scale
    )
    assert replaced["spec"]["replicas"] == 6
    scale["spec"]["replicas"] = 7  # stale resourceVersion now
    status, error = await failure(
        custom.replace_namespaced_custom_object_scale(
            GROUP, VERSION, "default", PLURAL, "w1", scale
        )
    )
    assert (status, error["reason"]) == (409, "Conflict")


async def test_negative_scale_is_invalid(http: aiohttp.ClientSession) -> None:
    """Row 18: Scale validation (spec.replicas >= 0)."""
    await http.post(
        f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}",
        json={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}},
    )
    async with http.patch(
        f"{W1}/scale", json={"spec": {"replicas": -1}}, headers={"Content-Type": MERGE}
    ) as response:
        assert response.status == 422
        body = await response.json()
    assert body["details"]["causes"][0]["field"] == "spec.replicas"


async def test_unknown_subresource_is_404(http: aiohttp.ClientSession) -> None:
    """Row 23: only declared subresources are served."""
    async with http.get(f"{W1}/logs") as response:
        assert response.status == 404
        assert (await response.json())["reason"] == "NotFound"
