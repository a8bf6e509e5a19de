"""Rows 14, 16 and 17 of spec/kube-standin.md §2: selectors, pagination, list RV semantics.

The selector grammar itself is tested in test_selectors.py (helper D); here is what a list
does with it.
"""

from __future__ import annotations

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s

from services.devcluster import DevCluster
from tests.component.devcluster.conftest import (
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
