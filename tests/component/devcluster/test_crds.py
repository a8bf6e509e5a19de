"""CustomResourceDefinitions at run time: a POSTed CRD becomes served, established, deletable.

Also row 24 of docs/devcluster.md §2 (dryRun), which is easiest to see on a CR.
"""

from __future__ import annotations

import copy
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from tests.component.devcluster.samples import (
    GROUP,
    PLURAL,
    VERSION,
    WIDGET_CRD,
    create_widget,
    failure,
    widget,
)
from tests.support.waiting import until

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD_STORAGE = "customresourcedefinitions.apiextensions.k8s.io"


def gadget_crd(plural: str = "gadgets", kind: str = "Gadget") -> dict[str, Any]:
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = f"{plural}.example.com"
    crd["spec"]["names"] = {"plural": plural, "singular": kind.lower(), "kind": kind}
    return crd


async def wait_condition(
    cluster: DevCluster, http: aiohttp.ClientSession, name: str, ctype: str
) -> dict[str, Any]:
    def has_condition() -> bool:
        crd = cluster.store.get(CRD_STORAGE, "", name) or {}
        return any(c["type"] == ctype for c in crd.get("status", {}).get("conditions", []))

    await until(has_condition, within=5.0, what=f"CRD {name} to have condition {ctype}")
    async with http.get(f"{CRDS}/{name}") as response:
        crd: dict[str, Any] = await response.json()
    return crd


async def test_posted_crd_is_served_and_established(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """apiextensions: a CRD POSTed at run time is served at once and gets NamesAccepted and
    Established, acceptedNames and storedVersions."""
    async with http.post(CRDS, json=gadget_crd()) as response:
        assert response.status == 201
        created = await response.json()
    assert created["status"]["conditions"] == []
    crd = await wait_condition(cluster, http, "gadgets.example.com", "Established")
    conditions = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conditions["NamesAccepted"]["status"] == "True"
    assert conditions["NamesAccepted"]["reason"] == "NoConflicts"
    assert conditions["Established"]["reason"] == "InitialNamesAccepted"
    assert crd["status"]["acceptedNames"]["kind"] == "Gadget"
    assert crd["status"]["storedVersions"] == ["v1"]
    body = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    async with http.post("/apis/example.com/v1/namespaces/default/gadgets", json=body) as response:
        assert response.status == 201
    async with http.get("/apis/example.com/v1") as response:
        names = [r["name"] for r in (await response.json())["resources"]]
    assert "gadgets" in names


async def test_conflicting_names_are_not_accepted(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """NamingConditionController: a kind already served in the group → NamesAccepted False."""
    async with http.post(CRDS, json=gadget_crd("others", "Widget")) as response:
        assert response.status == 201
    crd = await wait_condition(cluster, http, "others.example.com", "NamesAccepted")
    conditions = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conditions["NamesAccepted"]["status"] == "False"
    assert conditions["NamesAccepted"]["reason"] == "KindConflict"


async def test_invalid_crd_is_422(http: aiohttp.ClientSession) -> None:
    """CRD validation: the name must be plural.group."""
    crd = gadget_crd()
    crd["metadata"]["name"] = "wrong.example.com"
    async with http.post(CRDS, json=crd) as response:
        assert response.status == 422
        error = await response.json()
    assert error["details"]["causes"][0]["message"] == (
        'Invalid value: "wrong.example.com": must be spec.names.plural+"."+spec.group'
    )


async def test_deleting_a_crd_deletes_its_instances_then_stops_serving(
    cluster: DevCluster, http: aiohttp.ClientSession, custom: k8s.CustomObjectsApi
) -> None:
    """CRD deletion (customresourcedefinition/etcd.go, CRDFinalizer): the cleanup finalizer and
    a Terminating condition, instances deleted, then the resource is no longer served."""
    await create_widget(custom, "a")
    async with http.delete(f"{CRDS}/widgets.example.com") as response:
        assert response.status == 200
        body = await response.json()
    assert body["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    await until(
        lambda: cluster.store.get(CRD_STORAGE, "", "widgets.example.com") is None,
        within=5.0,
        what="the CRD to be gone",
    )
    assert cluster.store.count("widgets.example.com") == 0
    async with http.get(f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}") as response:
        assert response.status == 404


async def test_dry_run_create_validates_and_persists_nothing(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """Row 24 (api-concepts #dry-run): the full pipeline runs, including validation and
    defaulting, and nothing is stored."""
    before = cluster.store.resource_version
    answer = await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, widget("w1", size=1), dry_run="All"
    )
    assert answer["spec"]["replicas"] == 1
    assert answer["metadata"]["uid"]
    assert "resourceVersion" not in answer["metadata"]
    assert cluster.store.resource_version == before
    assert cluster.store.get("widgets.example.com", "default", "w1") is None
    status, _ = await failure(
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, widget("w1", size=99), dry_run="All"
        )
    )
    assert status == 422


async def test_dry_run_update_patch_and_delete_change_nothing(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """Row 24: dryRun on update, patch and delete."""
    created = await create_widget(custom, "w1", size=1)
    before = cluster.store.resource_version
    created["spec"]["size"] = 2
    replaced = await custom.replace_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w1", created, dry_run="All"
    )
    assert replaced["spec"]["size"] == 2
    patched = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        {"spec": {"size": 3}},
        dry_run="All",
        _content_type="application/merge-patch+json",
    )
    assert patched["spec"]["size"] == 3
    await custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w1", dry_run="All"
    )
    assert cluster.store.resource_version == before
    current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1")
    assert current["spec"]["size"] == 1


async def test_unsupported_dry_run_value_is_422(http: aiohttp.ClientSession) -> None:
    """Row 24 (ValidateDryRun): only "All" is supported."""
    async with http.post(
        f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}",
        json=widget("w1"),
        params={"dryRun": "Some"},
    ) as response:
        assert response.status == 422
