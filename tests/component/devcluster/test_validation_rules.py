"""CRD validation rules (``x-kubernetes-validations``, CEL) through real clients: the Sandbox
CRD's immutable ``spec.volumeClaimTemplates`` and a CRD installed by the test, with root, list
item, transition and status rules. Row 29 of docs/devcluster.md §2;
devtools/cluster/apirules/celrules.py evaluates the rules."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster, LatencyModel
from devtools.cluster.apirules import celrules
from tests.component.devcluster.samples import failure, fast_watch
from tests.support.kubectl import KUBECTL, Kubectl
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(not celrules.AVAILABLE, reason="CEL comes with the test extra")

Json = dict[str, Any]
NS = "default"
GROUP, VERSION = "agents.x-k8s.io", "v1beta1"
MERGE = "application/merge-patch+json"
VCT = [
    {
        "metadata": {"name": "workspace"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
]
IMMUTABLE_MESSAGE = (
    'Sandbox.agents.x-k8s.io "{name}" is invalid: spec: Invalid value: "object": '
    "volumeClaimTemplates is immutable"
)
IMMUTABLE_CAUSE = {
    "reason": "FieldValueInvalid",
    "message": 'Invalid value: "object": volumeClaimTemplates is immutable',
    "field": "spec",
}


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    """sandbus's own CRDs (the default), no controllers: the API server alone."""
    async with DevCluster(
        port=0, latency=LatencyModel.zero(), controllers=[], watch=fast_watch()
    ) as running:
        yield running


def sandbox(name: str, vct: list[Json] | None = None, **spec: Any) -> Json:
    body: Json = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            **spec,
        },
    }
    if vct is not None:
        body["spec"]["volumeClaimTemplates"] = vct
    return body


async def create_sandbox(custom: k8s.CustomObjectsApi, body: Json) -> Json:
    created: Json = await custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, "sandboxes", body
    )
    return created


def patch(custom: k8s.CustomObjectsApi, name: str, body: Any, **kwargs: Any) -> Any:
    return custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "sandboxes", name, body, _content_type=MERGE, **kwargs
    )


def assert_immutable(status: int, error: Json, name: str) -> None:
    assert status == 422
    assert error["reason"] == "Invalid"
    assert error["message"] == IMMUTABLE_MESSAGE.format(name=name)
    assert error["details"] == {
        "name": name,
        "group": GROUP,
        "kind": "Sandbox",
        "causes": [IMMUTABLE_CAUSE],
    }


# -- the Sandbox CRD ------------------------------------------------------------------------


async def test_changing_volume_claim_templates_is_refused(custom: k8s.CustomObjectsApi) -> None:
    """The CRD's transition rule on ``spec``: a different claim template → 422 with the rule's
    message, by merge patch, by PUT, and with dryRun; other spec fields still change."""
    created = await create_sandbox(custom, sandbox("s1", VCT))
    bigger = copy.deepcopy(VCT)
    bigger[0]["spec"]["resources"]["requests"]["storage"] = "2Gi"

    assert_immutable(
        *await failure(patch(custom, "s1", {"spec": {"volumeClaimTemplates": bigger}})), "s1"
    )
    assert_immutable(
        *await failure(
            patch(custom, "s1", {"spec": {"volumeClaimTemplates": bigger}}, dry_run="All")
        ),
        "s1",
    )
    replaced = copy.deepcopy(created)
    replaced["spec"]["volumeClaimTemplates"] = bigger
    status, error = await failure(
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, "sandboxes", "s1", replaced)
    )
    assert_immutable(status, error, "s1")
    removed = await failure(patch(custom, "s1", {"spec": {"volumeClaimTemplates": None}}))
    assert_immutable(*removed, "s1")

    changed = await patch(custom, "s1", {"spec": {"operatingMode": "Suspended"}})
    assert changed["spec"]["operatingMode"] == "Suspended"
    assert changed["spec"]["volumeClaimTemplates"] == VCT
    assert changed["metadata"]["generation"] == 2


async def test_adding_volume_claim_templates_later_is_refused(
    custom: k8s.CustomObjectsApi,
) -> None:
    await create_sandbox(custom, sandbox("s2"))
    status, error = await failure(patch(custom, "s2", {"spec": {"volumeClaimTemplates": VCT}}))
    assert_immutable(status, error, "s2")
    labelled = await patch(custom, "s2", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["labels"] == {"a": "b"}


async def test_a_status_write_does_not_trip_the_spec_rule(custom: k8s.CustomObjectsApi) -> None:
    """``/status`` keeps the stored spec, so the transition rule sees no change."""
    await create_sandbox(custom, sandbox("s3", VCT))
    updated = await custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, "sandboxes", "s3", {"status": {"nodeName": "n1"}}, _content_type=MERGE
    )
    assert updated["status"]["nodeName"] == "n1"


# -- a CRD with rules of every kind, installed through the API ------------------------------

GADGETS = "gadgets.example.com"
GADGET_CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": GADGETS},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-validations": [
                            {
                                "rule": "!has(self.spec.service) || !self.spec.service || "
                                "size(self.metadata.name) <= 63",
                                "message": "a name of at most 63 characters with a service",
                            }
                        ],
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "service": {"type": "boolean"},
                                    "label": {"type": "string", "maxLength": 8},
                                    "ports": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["name"],
                                        "items": {
                                            "type": "object",
                                            "required": ["name"],
                                            "properties": {
                                                "name": {"type": "string"},
                                                "port": {"type": "integer"},
                                            },
                                            "x-kubernetes-validations": [
                                                {
                                                    "rule": "self.port > 1024",
                                                    "messageExpression": "'port ' + "
                                                    "string(self.port) + ' is privileged'",
                                                },
                                                {
                                                    "rule": "self.port == oldSelf.port",
                                                    "message": "a port is immutable",
                                                    "reason": "FieldValueForbidden",
                                                },
                                            ],
                                        },
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "ready": {
                                        "type": "integer",
                                        "x-kubernetes-validations": [
                                            {"rule": "self >= 0", "message": "never negative"}
                                        ],
                                    }
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture
async def gadgets(cluster: DevCluster, api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    await k8s.ApiextensionsV1Api(api).create_custom_resource_definition(GADGET_CRD)

    def established() -> bool:
        crd = cluster.store.get("customresourcedefinitions.apiextensions.k8s.io", "", GADGETS)
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await until(established, within=5.0, what="the gadgets CRD to be established")
    return k8s.CustomObjectsApi(api)


def gadget(name: str, **spec: Any) -> Json:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": name},
        "spec": spec,
    }


def create_gadget(custom: k8s.CustomObjectsApi, body: Json, **kwargs: Any) -> Any:
    return custom.create_namespaced_custom_object(
        "example.com", "v1", NS, "gadgets", body, **kwargs
    )


async def test_a_root_rule_sees_the_name(gadgets: k8s.CustomObjectsApi) -> None:
    name = "g" * 64
    status, error = await failure(create_gadget(gadgets, gadget(name, service=True)))
    assert status == 422
    assert error["message"] == (
        f'Gadget.example.com "{name}" is invalid: <nil>: Invalid value: "object": '
        "a name of at most 63 characters with a service"
    )
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": a name of at most 63 characters with a service',
            "field": "<nil>",
        }
    ]
    status, _ = await failure(create_gadget(gadgets, gadget(name, service=True), dry_run="All"))
    assert status == 422
    await create_gadget(gadgets, gadget(name, service=False))


async def test_list_item_rules_and_transition_rules(gadgets: k8s.CustomObjectsApi) -> None:
    status, error = await failure(
        create_gadget(
            gadgets,
            gadget("g1", ports=[{"name": "http", "port": 8080}, {"name": "ssh", "port": 22}]),
        )
    )
    assert status == 422
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": port 22 is privileged',
            "field": "spec.ports[1]",
        }
    ]
    await create_gadget(gadgets, gadget("g1", ports=[{"name": "http", "port": 8080}]))
    status, error = await failure(
        gadgets.patch_namespaced_custom_object(
            "example.com",
            "v1",
            NS,
            "gadgets",
            "g1",
            {"spec": {"ports": [{"name": "admin", "port": 9000}, {"name": "http", "port": 8081}]}},
            _content_type=MERGE,
        )
    )
    assert status == 422
    assert error["message"] == (
        'Gadget.example.com "g1" is invalid: spec.ports[1]: Forbidden: a port is immutable'
    )
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: a port is immutable",
            "field": "spec.ports[1]",
        }
    ]
    added = await gadgets.patch_namespaced_custom_object(
        "example.com",
        "v1",
        NS,
        "gadgets",
        "g1",
        {"spec": {"ports": [{"name": "admin", "port": 9000}, {"name": "http", "port": 8080}]}},
        _content_type=MERGE,
    )
    assert [p["name"] for p in added["spec"]["ports"]] == ["admin", "http"]


async def test_status_rules_are_evaluated_on_status_writes(gadgets: k8s.CustomObjectsApi) -> None:
    await create_gadget(gadgets, gadget("g2"))
    status, error = await failure(
        gadgets.patch_namespaced_custom_object_status(
            "example.com", "v1", NS, "gadgets", "g2", {"status": {"ready": -1}}, _content_type=MERGE
        )
    )
    assert status == 422
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "integer": never negative',
            "field": "status.ready",
        }
    ]


async def test_a_blocking_schema_error_skips_the_rules(gadgets: k8s.CustomObjectsApi) -> None:
    """strategy.go's hasBlockingErr: a too-long string means the rules are not evaluated, and
    the answer says so."""
    status, error = await failure(
        create_gadget(gadgets, gadget("g" * 64, service=True, label="far-too-long"))
    )
    assert status == 422
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 8 bytes",
            "field": "spec.label",
        },
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "null": some validation rules were not checked because '
            "the object was invalid; correct the existing errors to complete validation",
            "field": "<nil>",
        },
    ]


async def test_an_unchanged_invalid_value_only_warns(
    cluster: DevCluster, gadgets: k8s.CustomObjectsApi
) -> None:
    """Ratcheting: a value a rule refuses, stored before the rule existed, may stay; the update
    answers 200 with the failure as a ``Warning`` header."""
    await create_gadget(gadgets, gadget("g3", ports=[{"name": "http", "port": 8080}]))
    stored = cluster.store.get("gadgets.example.com", NS, "g3")
    assert stored is not None
    stored["spec"]["ports"][0]["port"] = 80  # as if the rule had been added afterwards
    cluster.store.update("gadgets.example.com", stored)
    async with (
        aiohttp.ClientSession(base_url=cluster.url) as http,
        http.patch(
            "/apis/example.com/v1/namespaces/default/gadgets/g3",
            json={"metadata": {"labels": {"a": "b"}}, "spec": {"service": False}},
            headers={"Content-Type": MERGE},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        warnings = response.headers.getall("Warning", [])
    assert warnings == ['299 - "spec.ports[0]: Invalid value: \\"object\\": port 80 is privileged"']


# -- kubectl ----------------------------------------------------------------------------------


@pytest.mark.skipif(not KUBECTL.exists(), reason=f"no kubectl at {KUBECTL}")
async def test_kubectl_apply_of_changed_claim_templates_is_refused(
    cluster: DevCluster, tmp_path: Path
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    home = tmp_path / "home"
    home.mkdir()
    kubectl = Kubectl(kubeconfig, tmp_path / "kube-cache", home)
    manifest = tmp_path / "sandbox.yaml"
    manifest.write_text(yaml.safe_dump(sandbox("k1", VCT)))
    assert await kubectl.ok("apply", "-f", str(manifest)) == "sandbox.agents.x-k8s.io/k1 created\n"
    changed = sandbox("k1", [{**VCT[0], "metadata": {"name": "scratch"}}])
    manifest.write_text(yaml.safe_dump(changed))
    result = await kubectl("apply", "-f", str(manifest))
    assert result.code != 0
    assert (
        'The Sandbox "k1" is invalid: spec: Invalid value: "object": '
        "volumeClaimTemplates is immutable" in result.err
    )
    result = await kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    assert result.code != 0
    assert "volumeClaimTemplates is immutable" in result.err
