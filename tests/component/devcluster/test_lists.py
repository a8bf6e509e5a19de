"""Rows 14, 16 and 17 of docs/devcluster.md §2: selectors, pagination, list RV semantics.

The selector grammar itself is tested in test_selectors.py (helper D); here is what a list
does with it.
"""

from __future__ import annotations

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from tests.component.devcluster.samples import (
    GROUP,
    MERGE,
    PLURAL,
    VERSION,
    create_widget,
    failure,
    pod,
)


async def names(items: list) -> list[str]:
    return [i["metadata"]["name"] if isinstance(i, dict) else i.metadata.name for i in items]


async def test_label_selectors_filter_lists(core: k8s.CoreV1Api) -> None:
    """Row 14 (labels/selector.go): equality, set-based and existence, commas meaning AND;
    != and notin also match objects without the key."""
    await core.create_namespaced_pod("default", pod("a", labels={"tier": "web", "env": "prod"}))
    await core.create_namespaced_pod("default", pod("b", labels={"tier": "db"}))
    await core.create_namespaced_pod("default", pod("c"))

    async def select(selector: str) -> list[str]:
        listed = await core.list_namespaced_pod("default", label_selector=selector)
        return await names(listed.items)

    assert await select("tier=web") == ["a"]
    assert await select("tier in (web,db)") == ["a", "b"]
    assert await select("tier!=web") == ["b", "c"]
    assert await select("tier notin (db)") == ["a", "c"]
    assert await select("tier") == ["a", "b"]
    assert await select("!tier") == ["c"]
    assert await select("tier=web,env=prod") == ["a"]


async def test_bad_label_selector_is_400(core: k8s.CoreV1Api) -> None:
    """Row 14: a syntax error is a 400 BadRequest."""
    status, error = await failure(core.list_namespaced_pod("default", label_selector="a in (b"))
    assert (status, error["reason"]) == (400, "BadRequest")


async def test_field_selectors_on_custom_resources(custom: k8s.CustomObjectsApi) -> None:
    """Row 14 (CR strategy objectMetaFieldsSet): metadata.name and metadata.namespace, plus the
    CRD's selectableFields; anything else is 400 "field label not supported"."""
    await create_widget(custom, "a", color="red")
    await create_widget(custom, "b", color="blue")
    by_name = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, field_selector="metadata.name=b"
    )
    assert await names(by_name["items"]) == ["b"]
    by_color = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, field_selector="spec.color!=blue"
    )
    assert await names(by_color["items"]) == ["a"]
    status, error = await failure(
        custom.list_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, field_selector="spec.size=1"
        )
    )
    assert status == 400
    assert error["message"] == "field label not supported: spec.size"


async def test_pod_field_selectors(core: k8s.CoreV1Api) -> None:
    """Row 14: Pods also select on spec.nodeName and status.phase."""
    await core.create_namespaced_pod("default", pod("a", nodeName="n1"))
    await core.create_namespaced_pod("default", pod("b"))
    on_node = await core.list_namespaced_pod("default", field_selector="spec.nodeName=n1")
    assert await names(on_node.items) == ["a"]
    pending = await core.list_pod_for_all_namespaces(field_selector="status.phase=Pending")
    assert await names(pending.items) == ["a", "b"]


async def test_pagination_is_a_consistent_snapshot(custom: k8s.CustomObjectsApi) -> None:
    """Row 16 (api-concepts #retrieving-large-results-sets-in-chunks): limit/continue with
    remainingItemCount; later pages show the list as of the first page's RV."""
    for i in range(5):
        await create_widget(custom, f"w{i}")
    first = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, limit=2)
    assert await names(first["items"]) == ["w0", "w1"]
    assert first["metadata"]["remainingItemCount"] == 3
    token = first["metadata"]["continue"]
    await create_widget(custom, "w5")
    await custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w3")
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w2", {"spec": {"size": 9}}, _content_type=MERGE
    )
    second = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, limit=2, _continue=token
    )
    assert await names(second["items"]) == ["w2", "w3"]
    assert second["items"][0]["spec"]["size"] == 1  # as it was
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    third = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, limit=2, _continue=second["metadata"]["continue"]
    )
    assert await names(third["items"]) == ["w4"]
    assert "continue" not in third["metadata"]


async def walk(http: aiohttp.ClientSession, path: str, **params: str) -> list[dict]:
    """Every page of a paginated LIST, following the continue tokens."""
    pages = []
    token = ""
    while True:
        query = dict(params, **({"continue": token} if token else {}))
        async with http.get(path, params=query) as response:
            assert response.status == 200, await response.text()
            pages.append(await response.json())
        token = pages[-1]["metadata"].get("continue", "")
        if not token:
            return pages


async def test_pagination_with_a_label_selector_counts_only_matches(
    http: aiohttp.ClientSession,
) -> None:
    """Row 16 with row 14: a page holds ``limit`` matching objects, skipping the rest; no
    remainingItemCount, which upstream gives only for unfiltered lists."""
    for i in range(7):
        body = pod(f"p{i}", labels={"tier": "web" if i % 3 else "db"})
        async with http.post("/api/v1/namespaces/default/pods", json=body) as response:
            assert response.status == 201
    pages = await walk(http, "/api/v1/namespaces/default/pods", limit="2", labelSelector="tier=web")
    assert [[i["metadata"]["name"] for i in page["items"]] for page in pages] == [
        ["p1", "p2"],
        ["p4", "p5"],
    ]
    assert all("remainingItemCount" not in page["metadata"] for page in pages)
    assert "kind" not in pages[0]["items"][0]  # a typed list: items carry no TypeMeta


async def test_a_cluster_wide_walk_is_one_snapshot_across_namespaces(
    http: aiohttp.ClientSession,
) -> None:
    """Row 16: pages of a list over all namespaces, ordered by namespace then name, all at the
    first page's resourceVersion while objects are created, changed and deleted in between;
    remainingItemCount counts the snapshot, not the live objects."""
    for namespace in ("ns-b", "ns-a"):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        async with http.post("/api/v1/namespaces", json=body) as response:
            assert response.status == 201
        for name in ("c1", "c2", "c3"):
            cm = {"metadata": {"name": name}, "data": {"v": "1"}}
            async with http.post(f"/api/v1/namespaces/{namespace}/configmaps", json=cm) as response:
                assert response.status == 201
    path = "/api/v1/configmaps"
    async with http.get(path, params={"limit": "2"}) as response:
        first = await response.json()
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in first["items"]] == [
        ("ns-a", "c1"),
        ("ns-a", "c2"),
    ]
    assert first["metadata"]["remainingItemCount"] == 4
    changes = [
        ("DELETE", "/api/v1/namespaces/ns-b/configmaps/c1", None),
        ("POST", "/api/v1/namespaces/ns-a/configmaps", {"metadata": {"name": "c25"}}),
        ("PATCH", "/api/v1/namespaces/ns-a/configmaps/c3", {"data": {"v": "2"}}),
    ]
    for method, url, body in changes:
        headers = {"Content-Type": MERGE} if method == "PATCH" else {}
        async with http.request(method, url, json=body, headers=headers) as response:
            assert response.status in (200, 201), await response.text()

    rest = await walk(http, path, limit="2", **{"continue": first["metadata"]["continue"]})
    seen = [
        (i["metadata"]["namespace"], i["metadata"]["name"], i["data"].get("v"))
        for page in rest
        for i in page["items"]
    ]
    assert seen == [
        ("ns-a", "c3", "1"),
        ("ns-b", "c1", "1"),
        ("ns-b", "c2", "1"),
        ("ns-b", "c3", "1"),
    ]
    assert [page["metadata"].get("remainingItemCount") for page in rest] == [2, None]
    assert {page["metadata"]["resourceVersion"] for page in rest} == {
        first["metadata"]["resourceVersion"]
    }
    # A new walk sees the live state.
    fresh = await walk(http, path, limit="3")
    assert [i["metadata"]["name"] for page in fresh for i in page["items"]] == [
        "c1",
        "c2",
        "c25",
        "c3",
        "c2",
        "c3",
    ]


async def test_expired_continue_token_is_410_with_a_fresh_token(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """Row 16: a token older than the compaction window is 410 Expired; the Status carries an
    inconsistent continue token to go on with."""
    for i in range(3):
        await create_widget(custom, f"w{i}")
    first = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, limit=1)
    await create_widget(custom, "w9")
    cluster.faults.compact()
    status, error = await failure(
        custom.list_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, limit=1, _continue=first["metadata"]["continue"]
        )
    )
    assert (status, error["reason"]) == (410, "Expired")
    assert error["message"].startswith("The provided continue parameter is too old")
    fresh = error["metadata"]["continue"]
    rest = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, limit=10, _continue=fresh
    )
    assert await names(rest["items"]) == ["w1", "w2", "w9"]


async def test_bad_continue_token_is_400(http: aiohttp.ClientSession) -> None:
    """Row 16: an undecodable token is a 400."""
    async with http.get(
        "/api/v1/namespaces/default/pods", params={"limit": "1", "continue": "garbage"}
    ) as response:
        assert response.status == 400


async def test_list_exact_resource_version(custom: k8s.CustomObjectsApi) -> None:
    """Row 17: resourceVersionMatch=Exact serves the state at that RV."""
    created = await create_widget(custom, "a", size=1)
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", {"spec": {"size": 2}}, _content_type=MERGE
    )
    await create_widget(custom, "b")
    then = await custom.list_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        resource_version=created["metadata"]["resourceVersion"],
        resource_version_match="Exact",
    )
    assert await names(then["items"]) == ["a"]
    assert then["items"][0]["spec"]["size"] == 1
    assert then["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_list_exact_after_compaction_is_410(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """Row 17 (api-concepts #unavailable-resource-versions): Exact on a compacted RV is 410."""
    created = await create_widget(custom, "a")
    await create_widget(custom, "b")
    cluster.faults.compact()
    status, error = await failure(
        custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            resource_version=created["metadata"]["resourceVersion"],
            resource_version_match="Exact",
        )
    )
    assert (status, error["reason"]) == (410, "Expired")


async def test_list_not_older_than_and_any(custom: k8s.CustomObjectsApi) -> None:
    """Row 17: NotOlderThan and "0" serve the latest state."""
    created = await create_widget(custom, "a")
    await create_widget(custom, "b")
    for params in (
        {
            "resource_version": created["metadata"]["resourceVersion"],
            "resource_version_match": "NotOlderThan",
        },
        {"resource_version": "0"},
        {"resource_version": created["metadata"]["resourceVersion"]},
    ):
        listed = await custom.list_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, **params
        )
        assert await names(listed["items"]) == ["a", "b"]


async def test_list_future_resource_version_is_504(custom: k8s.CustomObjectsApi) -> None:
    """Row 17: an RV above the current one waits, then 504 "Too large resource version"."""
    status, error = await failure(
        custom.list_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, resource_version="99999"
        )
    )
    assert (status, error["reason"]) == (504, "Timeout")
    assert error["message"].startswith("Timeout: Too large resource version: 99999, current: ")
    assert error["details"]["retryAfterSeconds"] == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"resourceVersionMatch": "Exact"},
            'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            {"resourceVersionMatch": "Exact", "resourceVersion": "0"},
            'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
            'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
        ),
    ],
)
async def test_inconsistent_list_options_are_422(
    http: aiohttp.ClientSession, params: dict[str, str], message: str
) -> None:
    """Row 17 (ValidateListOptions)."""
    async with http.get("/api/v1/namespaces/default/pods", params=params) as response:
        assert response.status == 422
        assert (await response.json())["message"] == message


async def test_typed_list_items_carry_no_type_meta(http: aiohttp.ClientSession) -> None:
    """Built-in lists serialise items without apiVersion/kind; CR lists keep them."""
    async with http.get("/api/v1/namespaces") as response:
        body = await response.json()
    assert body["kind"] == "NamespaceList" and body["apiVersion"] == "v1"
    assert "kind" not in body["items"][0]
    assert [n["metadata"]["name"] for n in body["items"]] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]
