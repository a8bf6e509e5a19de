"""sandbus's pool worker taking over SandboxWarmPools from agent-sandbox's Go controller: the
pool, its template and its members exist already, written exactly as upstream writes them
(docs/agent-sandbox.md §4.3, ``buildSandboxCR``), when the pool worker first starts; the
development cluster, NATS, the watcher, the sandbox worker and the pool worker in this process.

What must hold, under either update strategy: upstream's members are sandbus's members. None is
deleted, none recreated, none added; the pool reports them as its replicas, Ready.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from api.keys import name_hash
from events.envelope import ObjectKey
from services.domain.agentsandbox.hashes import blueprint_hash, pod_template_hash
from services.runtime.kube import KubeApi
from tests.component.watcher.harness import record_history
from tests.support.samples import NS, Json, condition
from tests.support.stack import (
    api_client,
    bounded,
    cluster_and_watcher,
    pool_worker_running,
    sandbox_worker_running,
)
from tests.support.waiting import until

POOL = "upstream-pool"
TEMPLATE = "upstream-tpl"
MEMBERS = ("upstream-pool-b7x2k", "upstream-pool-q9dmf", "upstream-pool-4hzrt")
"""Names as the API server generates them for ``generateName: upstream-pool-``."""


def template_body() -> Json:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": TEMPLATE, "namespace": NS},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "app", "image": "python:3.12"}]}}
        },
    }


def pool_body(strategy: str) -> Json:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "replicas": len(MEMBERS),
            "sandboxTemplateRef": {"name": TEMPLATE},
            "updateStrategy": {"type": strategy},
        },
    }


def upstream_member(name: str, pool: Json, template: Json) -> Json:
    """A member as upstream's ``buildSandboxCR`` makes it from ``template`` (as the API server
    serves it), written out by hand rather than by sandbus's own builder."""
    labels = {
        "agents.x-k8s.io/warm-pool-sandbox": name_hash(POOL),
        "agents.x-k8s.io/sandbox-template-ref-hash": name_hash(TEMPLATE),
        "agents.x-k8s.io/sandbox-pod-template-hash": pod_template_hash(template["spec"]),
        "agents.x-k8s.io/sandbox-template-hash": blueprint_hash(template["spec"]),
    }
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                **labels,
                "agents.x-k8s.io/launch-type": "warm",
                "agents.x-k8s.io/created-by": "controller",
            },
            "annotations": {"agents.x-k8s.io/sandbox-template-ref": TEMPLATE},
            "ownerReferences": [
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxWarmPool",
                    "name": POOL,
                    "uid": pool["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "podTemplate": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
                },
                "spec": {
                    # Go marshals the typed container: an empty resources struct included.
                    "containers": [{"name": "app", "image": "python:3.12", "resources": {}}],
                    "automountServiceAccountToken": False,
                    "dnsPolicy": "None",
                    "dnsConfig": {"nameservers": ["8.8.8.8", "1.1.1.1"]},
                },
            }
        },
    }


@pytest.mark.parametrize("strategy", ["Recreate", "OnReplenish"])
async def test_upstream_members_are_kept_as_they_are(
    nats_url: str, tmp_path: Path, strategy: str
) -> None:
    async with cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus):
        history = record_history(cluster)
        async with bounded(
            api_client(cluster, tmp_path, "test"), "the test's API client"
        ) as client:
            kube = KubeApi(client, field_manager="e2e-test")
            template = await kube.create(template_body())
            pool = await kube.create(pool_body(strategy))
            uids = {}
            for name in MEMBERS:
                created = await kube.create(upstream_member(name, pool, template))
                uids[name] = created["metadata"]["uid"]

            async with (
                sandbox_worker_running(cluster, js, bus, tmp_path),
                pool_worker_running(cluster, js, bus, tmp_path),
            ):

                async def reported() -> Json:
                    status = (await kube.get(ObjectKey("SandboxWarmPool", NS, POOL))).get("status")
                    ready = (status or {}).get("readyReplicas") == len(MEMBERS)
                    return status if ready else {}

                status = await until(reported, within=20, interval=0.1)
                assert status["replicas"] == len(MEMBERS)
                assert status["selector"] == f"agents.x-k8s.io/warm-pool-sandbox={name_hash(POOL)}"
                await asyncio.sleep(2)  # a late delete or create would show by now

                sandboxes = await kube.list("Sandbox", NS)
                assert {s["metadata"]["name"]: s["metadata"]["uid"] for s in sandboxes} == uids
                assert all(condition(s) == ("True", "DependenciesReady") for s in sandboxes)
                assert all(
                    s["metadata"]["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
                    for s in sandboxes
                )
                written = [
                    (change.type, change.name)
                    for change in history.of(["Sandbox"])
                    if change.type != "MODIFIED"
                ]
                assert written == [("ADDED", name) for name in MEMBERS], "no delete, no create"
