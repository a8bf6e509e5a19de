"""Row 27 of docs/devcluster.md §2: unknown fields of built-in kinds, by ``fieldValidation``.

A real server decodes a built-in object strictly into its Go type: ``Strict`` (what kubectl
sends) refuses an unknown field with 400 ``strict decoding error: unknown field "spec.bogus"``,
``Warn`` (the default) drops it with one ``Warning`` header per field, ``Ignore`` drops it
silently. Maps (labels, annotations, ``data``), int-or-string, quantities and free-form fields
(RawExtension, a CRD schema's ``default``) are not looked into. kubectl's side is in
test_kubectl_builtin_fields below.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from tests.component.devcluster.samples import MERGE, failure, pod
from tests.support.kubectl import KUBECTL, Kubectl

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
PODS = "/api/v1/namespaces/default/pods"
JSON_PATCH = "application/json-patch+json"


def warned(*paths: str) -> list[str]:
    return [f'299 - "unknown field \\"{p}\\""' for p in paths]


def configmap(name: str = "cm", **extra: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"any.label/key": "v"}},
        "data": {"any-key": "x"},
        **extra,
    }


async def test_warn_drops_unknown_fields_with_a_warning_each(http: aiohttp.ClientSession) -> None:
    """Row 27 (Warn, the default): stored and returned without the field, one Warning per
    field, nested paths dotted, list items indexed."""
    body = pod("p", bogus=2)
    body["metadata"]["typo"] = 1
    body["spec"]["containers"][0]["imagePullPolice"] = "Always"
    async with http.post(PODS, json=body) as response:
        assert response.status == 201
        created = await response.json()
        assert response.headers.getall("Warning") == warned(
            "metadata.typo", "spec.bogus", "spec.containers[0].imagePullPolice"
        )
    assert "bogus" not in created["spec"]
    assert "typo" not in created["metadata"]
    async with http.get(f"{PODS}/p") as response:
        stored = await response.json()
    assert "bogus" not in stored["spec"]
    assert stored["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


async def test_strict_refuses_unknown_fields_naming_all(core: k8s.CoreV1Api) -> None:
    """Row 27 (Strict): 400 BadRequest, every unknown field joined with ", "; nothing stored."""
    status, error = await failure(
        core.create_namespaced_config_map(
            "default", configmap(bogus=1, other={"x": 1}), field_validation="Strict"
        )
    )
    assert (status, error["reason"]) == (400, "BadRequest")
    assert error["message"] == (
        'strict decoding error: unknown field "bogus", unknown field "other"'
    )
    assert (await core.list_namespaced_config_map("default")).items == []

    status, error = await failure(
        core.create_namespaced_pod("default", pod("p", bogus=1), field_validation="Strict")
    )
    assert status == 400
    assert error["message"] == 'strict decoding error: unknown field "spec.bogus"'


async def test_ignore_drops_unknown_fields_silently(http: aiohttp.ClientSession) -> None:
    """Row 27 (Ignore): dropped, no Warning."""
    async with http.post(
        CONFIGMAPS, json=configmap(bogus=1), params={"fieldValidation": "Ignore"}
    ) as response:
        assert response.status == 201
        assert "Warning" not in response.headers
        created = await response.json()
    assert "bogus" not in created


async def test_maps_int_or_string_and_free_form_fields_are_not_flagged(
    http: aiohttp.ClientSession,
) -> None:
    """Row 27: labels, annotations, data, resource quantities, int-or-string ports, a Job's
    pod template, and a CRD's free-form ``default`` pass Strict untouched."""
    strict = {"fieldValidation": "Strict"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "annotations": {"a/b": "c"}},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80, "targetPort": "http"}]},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "metadata": {"labels": {"x": "y"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"limits": {"cpu": 1, "memory": "64Mi"}},
                            "env": [{"name": "A", "value": "1"}],
                        }
                    ],
                },
            }
        },
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.org"},
        "spec": {
            "group": "example.org",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "default": {"free": {"form": True}},
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    for path, body in (
        (CONFIGMAPS, configmap()),
        ("/api/v1/namespaces/default/services", service),
        ("/apis/batch/v1/namespaces/default/jobs", job),
        ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd),
    ):
        async with http.post(path, json=body, params=strict) as response:
            assert response.status == 201, await response.text()
            assert "Warning" not in response.headers


async def test_update_and_patches_check_the_result(http: aiohttp.ClientSession) -> None:
    """Row 27: PUT, merge patch and JSON patch are checked like a create (the patched object);
    Strict refuses and changes nothing, Warn drops the field."""
    async with http.post(CONFIGMAPS, json=configmap()) as response:
        created = await response.json()
    strict = {"fieldValidation": "Strict"}
    put = {**created, "bogus": 1}
    async with http.put(f"{CONFIGMAPS}/cm", json=put, params=strict) as response:
        assert response.status == 400
        assert (await response.json())["message"] == (
            'strict decoding error: unknown field "bogus"'
        )
    merge = json.dumps({"metadata": {"bogus": 1}})
    headers = {"Content-Type": MERGE}
    async with http.patch(f"{CONFIGMAPS}/cm", data=merge, headers=headers) as response:
        assert response.status == 200
        assert response.headers.getall("Warning") == warned("metadata.bogus")
        assert "bogus" not in (await response.json())["metadata"]
    ops = json.dumps([{"op": "add", "path": "/bogus", "value": 1}])
    headers = {"Content-Type": JSON_PATCH}
    async with http.patch(f"{CONFIGMAPS}/cm", data=ops, headers=headers, params=strict) as response:
        assert response.status == 400
        assert (await response.json())["message"] == (
            'strict decoding error: unknown field "bogus"'
        )
    async with http.get(f"{CONFIGMAPS}/cm") as response:
        assert "bogus" not in await response.json()


async def test_events_are_checked_against_their_own_version(http: aiohttp.ClientSession) -> None:
    """Row 27: events.k8s.io/v1 names ``note``; core/v1 has no such field (it says
    ``message``)."""
    core_event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started",
        "note": "wrong version's field",
    }
    async with http.post(
        "/api/v1/namespaces/default/events", json=core_event, params={"fieldValidation": "Strict"}
    ) as response:
        assert response.status == 400
        assert (await response.json())["message"] == ('strict decoding error: unknown field "note"')


# -- kubectl ---------------------------------------------------------------------------------


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[Kubectl]:
    if not KUBECTL.exists():
        pytest.skip(f"no kubectl at {KUBECTL}")
    settings = SimulationSettings(kubelet=False)
    async with DevCluster(port=0, latency=LatencyModel.zero(), simulation=settings) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        home = tmp_path / "home"
        home.mkdir()
        yield Kubectl(kubeconfig, tmp_path / "kube-cache", home)


async def test_kubectl_apply_strict_refuses_and_warn_prints_the_warning(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """Row 27 through kubectl: ``--validate=strict`` (its default) sends Strict and prints the
    BadRequest; ``--validate=warn`` sends Warn and prints the server's Warning."""
    path = tmp_path / "pod.yaml"
    document = pod("p", bogus=1)
    path.write_text(yaml.safe_dump(document))

    result = await kubectl("apply", "--validate=strict", "-f", str(path))
    assert result.code == 1
    assert result.err == (
        f'Error from server (BadRequest): error when creating "{path}": strict decoding error: '
        'unknown field "spec.bogus"\n'
    )

    result = await kubectl("apply", "--validate=warn", "-f", str(path))
    assert result.code == 0
    assert result.err == 'Warning: unknown field "spec.bogus"\n'
    assert result.out == "pod/p created\n"
    stored = await kubectl.json("get", "pod", "p", "-o", "json")
    assert "bogus" not in stored["spec"]
