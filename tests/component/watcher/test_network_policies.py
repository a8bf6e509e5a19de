"""NetworkPolicies that our templates control reach the event log; other NetworkPolicies do not.

The sandbox worker keeps one ``<template>-network-policy`` per SandboxTemplate, controlled by
the template, and needs to hear when it changes or goes (an edit to put right, a policy the
garbage collector removed with its template). A real nats-server, the development cluster
with its garbage collector, and the watcher in-process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from api.objects import Json
from devtools.cluster import DevCluster
from devtools.cluster.controllers.gc import run as garbage_collector
from tests.component.watcher.harness import (
    ClusterHistory,
    Logged,
    by_object,
    event_log,
    example,
    quiet_cluster,
    running_watcher,
    watcher_config,
)
from tests.support.waiting import until

MERGE = "application/merge-patch+json"
TEMPLATES = ("extensions.agents.x-k8s.io", "v1beta1", "default", "sandboxtemplates")


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with quiet_cluster(controllers=[garbage_collector]) as running:
        yield running


def owner(template: Json, *, controller: bool = True) -> Json:
    return {
        "apiVersion": template["apiVersion"],
        "kind": template["kind"],
        "name": template["metadata"]["name"],
        "uid": template["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": controller,
    }


def network_policy(
    name: str, *, owners: list[Json] | None = None, labels: dict[str, str] | None = None
) -> Json:
    metadata: Json = {"name": name, "namespace": "default"}
    if owners:
        metadata["ownerReferences"] = owners
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }


async def policy_events(nc: Client) -> dict[str, list[Logged]]:
    return {
        name: entries
        for (kind, _, name), entries in by_object(await event_log(nc.jetstream())).items()
        if kind == "NetworkPolicy"
    }


async def test_policies_our_templates_control_are_published_and_no_others(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    custom = k8s.CustomObjectsApi(client)
    net = k8s.NetworkingV1Api(client)
    python = await custom.create_namespaced_custom_object(
        *TEMPLATES, example("SandboxTemplate", "python")
    )
    go = await custom.create_namespaced_custom_object(*TEMPLATES, example("SandboxTemplate", "go"))
    tightened = {"spec": {"policyTypes": ["Ingress"]}}

    async with running_watcher(nc, client, watcher_config()):
        # The template's own policy: created, edited, deleted by hand.
        await net.create_namespaced_network_policy(
            "default", network_policy("python-network-policy", owners=[owner(python)])
        )
        await net.patch_namespaced_network_policy(
            "python-network-policy", "default", tightened, _content_type=MERGE
        )
        await net.delete_namespaced_network_policy("python-network-policy", "default")
        # Another template's policy, removed by the garbage collector with its template.
        await net.create_namespaced_network_policy(
            "default", network_policy("go-network-policy", owners=[owner(go)])
        )
        # A policy orphaned (its controller reference removed) leaves the selection.
        await net.create_namespaced_network_policy(
            "default", network_policy("orphaned", owners=[owner(python)])
        )
        await net.patch_namespaced_network_policy(
            "orphaned", "default", {"metadata": {"ownerReferences": None}}, _content_type=MERGE
        )
        # Not ours: nobody's policy (with a label, but not one of ours), and one that names the
        # template as an owner but not as its controller.
        await net.create_namespaced_network_policy(
            "default", network_policy("foreign", labels={"app": "web"})
        )
        await net.create_namespaced_network_policy(
            "default", network_policy("shared", owners=[owner(python, controller=False)])
        )
        for name in ("foreign", "shared"):
            await net.patch_namespaced_network_policy(
                name, "default", tightened, _content_type=MERGE
            )
            await net.delete_namespaced_network_policy(name, "default")
        await custom.delete_namespaced_custom_object(*TEMPLATES, "go")

        async def published() -> bool:
            events = await policy_events(nc)
            return [e.change for e in events.get("go-network-policy", [])] == [
                "added",
                "deleted",
            ] and len(events.get("orphaned", [])) == 2

        await until(published, within=20.0, interval=0.1)
        events = await policy_events(nc)

    assert set(events) == {"python-network-policy", "go-network-policy", "orphaned"}
    commits = [
        (c.rv, c.type.lower())
        for c in history.of(["NetworkPolicy"])
        if c.name == "python-network-policy"
    ]
    assert [(e.rv, e.change) for e in events["python-network-policy"]] == commits
    assert [e.change for e in events["python-network-policy"]] == ["added", "modified", "deleted"]
    assert events["python-network-policy"][1].event.data.object["spec"]["policyTypes"] == [
        "Ingress"
    ]
    assert [e.change for e in events["orphaned"]] == ["added", "deleted"]
    # The objects carry their kind and group, as list and watch items of built-ins do not.
    obj = events["go-network-policy"][0].event.data.object
    assert (obj["apiVersion"], obj["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert obj["metadata"]["ownerReferences"][0]["uid"] == go["metadata"]["uid"]


async def test_a_policy_made_while_the_watcher_was_down_is_found_by_its_relist(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client
) -> None:
    custom = k8s.CustomObjectsApi(client)
    net = k8s.NetworkingV1Api(client)
    python = await custom.create_namespaced_custom_object(
        *TEMPLATES, example("SandboxTemplate", "python")
    )
    await net.create_namespaced_network_policy(
        "default", network_policy("python-network-policy", owners=[owner(python)])
    )
    await net.create_namespaced_network_policy("default", network_policy("foreign"))

    async with running_watcher(nc, client, watcher_config()):
        events = await policy_events(nc)

    assert {name: [e.change for e in entries] for name, entries in events.items()} == {
        "python-network-policy": ["added"]
    }
