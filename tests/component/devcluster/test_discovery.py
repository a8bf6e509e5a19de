"""Row 23 of docs/devcluster.md §2: discovery, as the DynamicClient and kubectl read it."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from tests.component.devcluster.samples import GROUP, VERSION, widget


async def test_version(http: aiohttp.ClientSession) -> None:
    """Row 23: /version."""
    async with http.get("/version") as response:
        body = await response.json()
    assert (body["major"], body["minor"]) == ("1", "33")
    assert body["gitVersion"].startswith("v1.33")


async def test_core_and_group_discovery(http: aiohttp.ClientSession) -> None:
    """Row 23: /api (APIVersions), /apis (APIGroupList), /apis/G (APIGroup)."""
    async with http.get("/api") as response:
        api = await response.json()
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]
    async with http.get("/apis") as response:
        groups = await response.json()
    names = [g["name"] for g in groups["groups"]]
    for expected in (
        "apiextensions.k8s.io",
        "batch",
        "coordination.k8s.io",
        "events.k8s.io",
        "networking.k8s.io",
        "example.com",
    ):
        assert expected in names
    async with http.get("/apis/example.com") as response:
        group = await response.json()
    assert group["kind"] == "APIGroup"
    assert group["preferredVersion"] == {"groupVersion": "example.com/v1", "version": "v1"}


async def test_resource_lists_include_subresources(http: aiohttp.ClientSession) -> None:
    """Row 23: /apis/G/V lists widgets/status and widgets/scale (as autoscaling/v1 Scale);
    /api/v1 lists pods with short names and pods/status."""
    async with http.get(f"/apis/{GROUP}/{VERSION}") as response:
        body = await response.json()
    assert body["kind"] == "APIResourceList" and body["groupVersion"] == "example.com/v1"
    by_name = {r["name"]: r for r in body["resources"]}
    assert by_name["widgets"]["kind"] == "Widget"
    assert by_name["widgets"]["shortNames"] == ["wd"]
    assert by_name["widgets"]["namespaced"] is True
    assert set(by_name["widgets"]["verbs"]) >= {"get", "list", "watch", "create", "patch"}
    assert by_name["widgets/status"]["verbs"] == ["get", "patch", "update"]
    assert by_name["widgets/scale"]["group"] == "autoscaling"
    assert by_name["widgets/scale"]["kind"] == "Scale"
    async with http.get("/api/v1") as response:
        core = {r["name"]: r for r in (await response.json())["resources"]}
    assert core["pods"]["shortNames"] == ["po"]
    assert "pods/status" in core and "pods/binding" in core
    assert core["namespaces"]["namespaced"] is False


async def test_dynamic_client_round_trip(api: k8s.ApiClient, tmp_path: Path) -> None:
    """Row 23 (§3): DynamicClient discovers resources and can create, patch (merge) and
    server-side apply custom resources."""
    client = await DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
    widgets = await client.resources.get(api_version=f"{GROUP}/{VERSION}", kind="Widget")
    created = await client.create(widgets, body=widget("w1", size=1), namespace="default")
    assert created.metadata.name == "w1"
    patched = await client.patch(
        widgets,
        name="w1",
        namespace="default",
        body={"spec": {"size": 2}},
        content_type="application/merge-patch+json",
    )
    assert patched.spec.size == 2
    applied = await client.server_side_apply(
        widgets,
        body=widget("w1", size=3),
        name="w1",
        namespace="default",
        field_manager="dyn",
        force_conflicts=True,
    )
    assert applied.spec.size == 3
    pods = await client.resources.get(api_version="v1", kind="Pod")
    listed = await client.get(pods, namespace="default")
    assert listed.items == []


async def test_openapi_v3_advertises_field_validation(http: aiohttp.ClientSession) -> None:
    """kubectl asks /openapi/v3 whether PATCH takes fieldValidation before it applies."""
    async with http.get("/openapi/v3") as response:
        root = await response.json()
    url = root["paths"]["apis/example.com/v1"]["serverRelativeURL"]
    async with http.get(url) as response:
        doc = await response.json()
    (operation,) = [p["patch"] for p in doc["paths"].values() if "patch" in p]
    assert operation["x-kubernetes-group-version-kind"] == {
        "group": "example.com",
        "version": "v1",
        "kind": "Widget",
    }
    assert "fieldValidation" in [p["name"] for p in operation["parameters"]]
