"""The Sandbox CRD's rule at its root (upstream v1.0.6): a name longer than 63 characters is
refused while ``spec.service`` is true, since the Sandbox's Service takes its name and a
Service name is a DNS label; without a Service any object name will do. Through a real client
against the development cluster, which evaluates the CRD's CEL rules
(devtools/cluster/apirules/celrules.py) from the CRD generated out of ``api.agents``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from api.agents import SERVICE_NAME_LENGTH
from devtools.cluster import DevCluster, LatencyModel
from devtools.cluster.apirules import celrules

pytestmark = pytest.mark.skipif(not celrules.AVAILABLE, reason="CEL comes with the test extra")

Json = dict[str, Any]
NS = "default"
GROUP, VERSION, PLURAL = "agents.x-k8s.io", "v1beta1", "sandboxes"
MESSAGE = SERVICE_NAME_LENGTH[1]
LONG = "s" * 64


@pytest.fixture
async def custom(tmp_path: Path) -> AsyncIterator[k8s.CustomObjectsApi]:
    """The API server alone (sandbus's CRDs, no controllers), through kubernetes_asyncio."""
    async with DevCluster(port=0, latency=LatencyModel.zero(), controllers=[]) as cluster:
        configuration = k8s.Configuration()
        await k8s_config.load_kube_config(
            config_file=str(cluster.write_kubeconfig(tmp_path / "kubeconfig")),
            client_configuration=configuration,
        )
        async with k8s.ApiClient(configuration) as api:
            yield k8s.CustomObjectsApi(api)


def sandbox(name: str, **spec: Any) -> Json:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            **spec,
        },
    }


def create(custom: k8s.CustomObjectsApi, body: Json, **kwargs: Any) -> Awaitable[Json]:
    return custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body, **kwargs)


async def refused(call: Awaitable[Any], name: str) -> None:
    """``call`` fails as kube-apiserver fails a root rule: 422 Invalid, the rule's message."""
    with pytest.raises(ApiException) as caught:
        await call
    assert caught.value.status == 422
    error = json.loads(caught.value.body or b"{}")
    assert error["reason"] == "Invalid"
    assert error["message"] == (
        f'Sandbox.agents.x-k8s.io "{name}" is invalid: <nil>: Invalid value: "object": {MESSAGE}'
    )
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f'Invalid value: "object": {MESSAGE}',
            "field": "<nil>",
        }
    ]


async def test_a_long_name_with_a_service_is_refused(custom: k8s.CustomObjectsApi) -> None:
    await refused(create(custom, sandbox(LONG, service=True)), LONG)
    await refused(create(custom, sandbox(LONG, service=True), dry_run="All"), LONG)


@pytest.mark.parametrize("service", [False, None], ids=["service false", "service unset"])
async def test_a_long_name_without_a_service_is_accepted(
    custom: k8s.CustomObjectsApi, service: bool | None
) -> None:
    body = sandbox(LONG) if service is None else sandbox(LONG, service=service)
    created = await create(custom, body)
    assert created["metadata"]["name"] == LONG


async def test_sixty_three_characters_with_a_service_are_accepted(
    custom: k8s.CustomObjectsApi,
) -> None:
    name = "s" * 63
    created = await create(custom, sandbox(name, service=True))
    assert created["spec"]["service"] is True


async def test_turning_the_service_on_under_a_long_name_is_refused(
    custom: k8s.CustomObjectsApi,
) -> None:
    await create(custom, sandbox(LONG, service=False))
    await refused(
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            LONG,
            {"spec": {"service": True}},
            _content_type="application/merge-patch+json",
        ),
        LONG,
    )
