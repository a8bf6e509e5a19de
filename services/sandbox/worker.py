"""The sandbox worker as the reconciler runtime sees it: what it follows, what wakes what, and
its two reconcilers (Sandbox, SandboxTemplate).

Following upstream's watches (spec/agent-sandbox.md §2.1, §3.1): a change of a Sandbox wakes
it; a change of a Pod, Service or PVC wakes the Sandbox that controls it, and a Pod or Service
also wakes the Sandbox it is named after (the Pod a new Sandbox is about to adopt has no owner
yet). A change of a SandboxTemplate wakes it, and a NetworkPolicy wakes the template that
controls it or whose name it carries (``<template>-network-policy``).

Pods are indexed by their ``agents.x-k8s.io/sandbox-name-hash`` label: that is how a Sandbox
finds the Pods it controls without reading every Pod of its namespace.

NetworkPolicies reach the worker only if the watcher publishes them. Until it does, the template
reconciler knows its NetworkPolicy from the answers to its own writes (a create that finds one
already there reads it back), which the cache keeps for ``written_ttl`` seconds: enough to
converge, not enough to notice a later edit or to delete the policy when a template turns
Unmanaged long after.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from api.agents import EXTENSIONS_GROUP, GROUP
from api.keys import LABEL_SANDBOX_NAME_HASH, NETWORK_POLICY_NAME_SUFFIX
from services.runtime.cache import Json, ObjectCache, ObjectKey, controller_of, key_of
from services.runtime.reconcile import Plan
from services.runtime.reconcile.worker import WorkerDefinition
from services.sandbox.observation import (
    DEFAULT_CLUSTER_DOMAIN,
    SandboxObservation,
    TemplateObservation,
    observe_sandbox,
    observe_template,
)
from services.sandbox.plan import plan_sandbox
from services.sandbox.template import plan_template

__all__ = [
    "WATCHED_KINDS",
    "WORKER_NAME",
    "SandboxReconciler",
    "TemplateReconciler",
    "sandbox_worker",
    "wakes",
]

WORKER_NAME = "sandbox"
WATCHED_KINDS = (
    "Sandbox",
    "Pod",
    "Service",
    "PersistentVolumeClaim",
    "SandboxTemplate",
    "NetworkPolicy",
)


@dataclass(frozen=True)
class SandboxReconciler:
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    kind: str = field(default="Sandbox", init=False)

    def observe(
        self, key: ObjectKey, cache: ObjectCache, last_error: str | None
    ) -> SandboxObservation:
        return observe_sandbox(key, cache, last_error, cluster_domain=self.cluster_domain)

    def plan(self, inputs: SandboxObservation, now: datetime) -> Plan:
        return plan_sandbox(inputs, now)


@dataclass(frozen=True)
class TemplateReconciler:
    kind: str = field(default="SandboxTemplate", init=False)

    def observe(
        self, key: ObjectKey, cache: ObjectCache, last_error: str | None
    ) -> TemplateObservation:
        return observe_template(key, cache, last_error)

    def plan(self, inputs: TemplateObservation, now: datetime) -> Plan:
        return plan_template(inputs, now)


def _controller(obj: Json, group: str, kind: str) -> str | None:
    ref = controller_of(obj)
    if ref is None or ref.get("kind") != kind:
        return None
    if str(ref.get("apiVersion") or "").split("/")[0] != group:
        return None
    return str(ref.get("name") or "") or None


def wakes(kind: str, obj: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
    key = key_of(obj, kind)
    if kind in ("Sandbox", "SandboxTemplate"):
        yield key
    elif kind in ("Pod", "Service", "PersistentVolumeClaim"):
        owner = _controller(obj, GROUP, "Sandbox")
        if owner is not None:
            yield ObjectKey("Sandbox", key.namespace, owner)
        if kind != "PersistentVolumeClaim":
            namesake = ObjectKey("Sandbox", key.namespace, key.name)
            if namesake.name != owner and namesake in cache:
                yield namesake
    elif kind == "NetworkPolicy":
        owner = _controller(obj, EXTENSIONS_GROUP, "SandboxTemplate")
        if owner is not None:
            yield ObjectKey("SandboxTemplate", key.namespace, owner)
        if key.name.endswith(NETWORK_POLICY_NAME_SUFFIX):
            template = key.name.removesuffix(NETWORK_POLICY_NAME_SUFFIX)
            if template != owner:
                yield ObjectKey("SandboxTemplate", key.namespace, template)


def sandbox_worker(*, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> WorkerDefinition:
    return WorkerDefinition(
        name=WORKER_NAME,
        reconcilers=(SandboxReconciler(cluster_domain), TemplateReconciler()),
        watched_kinds=WATCHED_KINDS,
        wakes=wakes,
        label_indexes=(("Pod", LABEL_SANDBOX_NAME_HASH),),
    )
