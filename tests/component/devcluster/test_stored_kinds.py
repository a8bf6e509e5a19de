"""The kinds a deployment of sandbus applies besides its own (ServiceAccounts, RBAC, Deployments,
StatefulSets, PodDisruptionBudgets): served and validated, so that deploy/ applies and dry-runs
as against a real cluster, and never acted on."""

from __future__ import annotations

import aiohttp
import pytest

from api.objects import Json

MERGE = "application/merge-patch+json"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def deployment(
    name: str = "d", *, selector: Json | None = None, labels: Json | None = None
) -> Json:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": selector if selector is not None else {"matchLabels": {"app": "a"}},
            "template": {
                "metadata": {"labels": labels if labels is not None else {"app": "a"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


async def _json(response: aiohttp.ClientResponse) -> tuple[int, Json]:
    body: Json = await response.json()
    return response.status, body


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/api/v1", "ServiceAccount"),
        ("/apis/apps/v1", "Deployment"),
        ("/apis/apps/v1", "StatefulSet"),
        ("/apis/policy/v1", "PodDisruptionBudget"),
        (RBAC, "Role"),
        (RBAC, "RoleBinding"),
        (RBAC, "ClusterRole"),
        (RBAC, "ClusterRoleBinding"),
    ],
)
async def test_each_kind_is_discovered(http: aiohttp.ClientSession, path: str, kind: str) -> None:
    status, document = await _json(await http.get(path))

    assert status == 200
    assert kind in {resource["kind"] for resource in document["resources"]}


async def test_a_deployment_is_stored_with_its_generation_and_no_pods(
    http: aiohttp.ClientSession,
) -> None:
    path = "/apis/apps/v1/namespaces/default/deployments"
    status, created = await _json(await http.post(path, json=deployment()))
    assert status == 201
    assert created["metadata"]["generation"] == 1

    changed = {"spec": {"replicas": 3}}
    status, patched = await _json(
        await http.patch(f"{path}/d", json=changed, headers={"Content-Type": MERGE})
    )

    assert status == 200
    assert patched["metadata"]["generation"] == 2
    status, pods = await _json(await http.get("/api/v1/namespaces/default/pods"))
    assert pods["items"] == []


async def test_a_deployment_must_select_its_own_template(http: aiohttp.ClientSession) -> None:
    path = "/apis/apps/v1/namespaces/default/deployments"

    status, refused = await _json(await http.post(path, json=deployment(labels={"app": "b"})))
    assert (status, refused["reason"]) == (422, "Invalid")
    (cause,) = refused["details"]["causes"]
    assert cause["field"] == "spec.template.metadata.labels"
    assert cause["message"].endswith("`selector` does not match template `labels`")

    status, refused = await _json(await http.post(path, json=deployment(selector={})))
    assert (status, refused["details"]["causes"][0]["field"]) == (422, "spec.selector")


async def test_a_deployment_selector_never_changes(http: aiohttp.ClientSession) -> None:
    path = "/apis/apps/v1/namespaces/default/deployments"
    await http.post(path, json=deployment())
    changed = deployment(selector={"matchLabels": {"app": "a", "tier": "x"}})
    changed["spec"]["template"]["metadata"]["labels"]["tier"] = "x"

    status, refused = await _json(
        await http.patch(
            f"{path}/d", json={"spec": changed["spec"]}, headers={"Content-Type": MERGE}
        )
    )

    assert status == 422
    assert [cause["field"] for cause in refused["details"]["causes"]] == ["spec.selector"]


async def test_a_binding_keeps_its_role_ref(http: aiohttp.ClientSession) -> None:
    path = f"{RBAC}/clusterrolebindings"
    binding: Json = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "b"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}],
    }
    assert (await http.post(path, json=binding)).status == 201

    moved = {"roleRef": {**binding["roleRef"], "name": "other"}}
    status, refused = await _json(
        await http.patch(f"{path}/b", json=moved, headers={"Content-Type": MERGE})
    )

    assert status == 422
    assert refused["details"]["causes"][0]["field"] == "roleRef"
    assert refused["details"]["causes"][0]["message"].endswith("cannot change roleRef")
    status, refused = await _json(
        await http.post(path, json={**binding, "metadata": {"name": "c"}, "roleRef": {}})
    )
    assert (status, refused["details"]["causes"][0]["field"]) == (422, "roleRef.name")
