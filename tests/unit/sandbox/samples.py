"""Objects for the sandbox planner tests, shaped as the API server serves them, and the fake API
server (:mod:`tests.support.fakeapi`) that applies plans so a test can run a Sandbox to
convergence (or, through :class:`ClusterApi`, serves the calls of the real worker shell).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from api.keys import LABEL_SANDBOX_NAME_HASH, name_hash
from api.objects import Json
from events.envelope import ObjectKey, key_of
from services.runtime.cache import ObjectCache
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan, Replace
from services.sandbox.core.observation import SandboxObservation, observe_sandbox
from services.sandbox.core.plan import plan_sandbox
from tests.support.fakeapi import FakeApiServer, not_found
from tests.support.plans import actions_of
from tests.support.samples import NS, stamp

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SANDBOX_UID = "sandbox-uid-1"


def sandbox(
    name: str = "sb",
    *,
    uid: str = SANDBOX_UID,
    containers: list[Json] | None = None,
    status: Json | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: Json | None = None,
    generation: int = 1,
    pod_labels: dict[str, str] | None = None,
    pod_annotations: dict[str, str] | None = None,
    **spec: Any,
) -> Json:
    pod_template: Json = {
        "spec": {
            "containers": containers
            if containers is not None
            else [{"name": "app", "image": "python:3.12"}]
        }
    }
    if pod_labels is not None or pod_annotations is not None:
        pod_template["metadata"] = {}
        if pod_labels is not None:
            pod_template["metadata"]["labels"] = pod_labels
        if pod_annotations is not None:
            pod_template["metadata"]["annotations"] = pod_annotations
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid,
        "resourceVersion": "10",
        "generation": generation,
        "creationTimestamp": stamp(NOW - timedelta(minutes=5)),
    }
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    if owner:
        metadata["ownerReferences"] = [owner]
    obj: Json = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": metadata,
        "spec": {"podTemplate": pod_template, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def owner_ref(uid: str = SANDBOX_UID, name: str = "sb", kind: str = "Sandbox") -> Json:
    api_version = "agents.x-k8s.io/v1beta1" if kind == "Sandbox" else "apps/v1"
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod(
    name: str = "sb",
    *,
    owner: Json | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    ready: bool | None = True,
    ips: tuple[str, ...] = ("10.244.0.5",),
    node: str | None = "node-1",
    scheduled: Json | None = None,
    deleting: bool = False,
    uid: str | None = None,
    hashed_for: str | None = "sb",
) -> Json:
    """A Pod; by default owned by Sandbox ``sb``, labelled with its name hash, Running and
    Ready with one IP."""
    all_labels = dict(labels or {})
    if hashed_for is not None:
        all_labels.setdefault(LABEL_SANDBOX_NAME_HASH, name_hash(hashed_for))
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"pod-uid-{name}",
        "resourceVersion": "20",
        "labels": all_labels,
    }
    if annotations:
        metadata["annotations"] = annotations
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    if deleting:
        metadata["deletionTimestamp"] = stamp(NOW)
    conditions: list[Json] = []
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", **scheduled})
    elif phase in ("Running", "Succeeded", "Failed"):
        conditions.append({"type": "PodScheduled", "status": "True"})
    if ready is not None:
        conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    status: Json = {"phase": phase, "conditions": conditions}
    if ips:
        status["podIPs"] = [{"ip": ip} for ip in ips]
        status["podIP"] = ips[0]
    spec: Json = {"containers": [{"name": "app", "image": "python:3.12"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def owned_pod(name: str = "sb", **kwargs: Any) -> Json:
    return pod(name, owner=owner_ref(), **kwargs)


def service(
    name: str = "sb",
    *,
    owner: Json | None = None,
    labels: dict[str, str] | None = None,
    cluster_ip: str = "None",
    selector: dict[str, str] | None = None,
    ports: list[Json] | None = None,
) -> Json:
    spec: Json = {
        "clusterIP": cluster_ip,
        "selector": selector
        if selector is not None
        else {LABEL_SANDBOX_NAME_HASH: name_hash("sb")},
    }
    if ports is not None:
        spec["ports"] = ports
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": f"svc-uid-{name}",
        "resourceVersion": "30",
        "labels": labels if labels is not None else {LABEL_SANDBOX_NAME_HASH: name_hash("sb")},
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def pvc(name: str, *, owner: Json | None = None, labels: dict[str, str] | None = None) -> Json:
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": f"pvc-uid-{name}",
        "resourceVersion": "40",
        "labels": labels or {},
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def observation(
    sb: Json | None,
    *,
    pods: tuple[Json, ...] = (),
    svc: Json | None = None,
    pvcs: dict[str, Json] | None = None,
    cluster_domain: str = "cluster.local",
    last_error: str | None = None,
) -> SandboxObservation:
    name = (sb or {}).get("metadata", {}).get("name", "sb")
    return SandboxObservation(
        namespace=NS,
        name=name,
        sandbox=sb,
        pods=tuple(sorted(pods, key=lambda p: p["metadata"]["name"])),
        service=svc,
        pvcs=pvcs or {},
        cluster_domain=cluster_domain,
        last_error=last_error,
    )


def status_written(plan: Plan) -> Json | None:
    """The status patch of ``plan`` (the ``status`` part), if it writes one."""
    for action in actions_of(plan, Patch):
        if action.subresource == "status":
            return action.patch["status"]
    return None


# --- a tiny API server, for running a Sandbox to convergence ---------------------------------


@dataclass
class FakeCluster(FakeApiServer):
    """The fake API server (:class:`~tests.support.fakeapi.FakeApiServer`: preconditions and
    their 409s, 404s, AlreadyExists, no-op writes that keep the resourceVersion), in the ways
    these tests need it: a created object's uid is ``uid-<kind>-<name>``, a created Pod is in
    phase Pending, and with ``graceful_pods`` a deleted Pod is terminating (its
    ``deletionTimestamp`` set) rather than gone.

    :meth:`apply` stops at the first refused write (the shell does the same), records it in
    ``refused`` and raises the :class:`KubeError`; :meth:`execute` and :meth:`converge`
    answer a refusal as the shell does (a Conflict of a write marked ``on_conflict="refresh"``:
    plan again at once on the current objects)."""

    graceful_pods: bool = False
    writes: list[Any] = field(default_factory=list)
    """Every write sent, refused ones included."""
    refused: list[tuple[Any, KubeError]] = field(default_factory=list)
    """The writes the fake refused, with the error it answered."""

    def new_uid(self, key: ObjectKey) -> str:
        return f"uid-{key.kind}-{key.name}"

    def admitted(self, body: Json) -> None:
        if body["kind"] == "Pod":
            body["status"] = {"phase": "Pending"}

    def deleting(self, key: ObjectKey) -> None:
        existing = self.objects[key]
        if key.kind == "Pod" and self.graceful_pods:
            if not existing["metadata"].get("deletionTimestamp"):
                existing["metadata"]["deletionTimestamp"] = stamp(NOW)
                self.bump(existing)
        else:
            del self.objects[key]

    def apply(self, plan: Plan) -> None:
        for action in plan.actions:
            self.writes.append(action)
            try:
                self.write(action)
            except KubeError as error:
                self.refused.append((action, error))
                raise

    def cache(self) -> ObjectCache:
        cache = ObjectCache(label_indexes=[("Pod", LABEL_SANDBOX_NAME_HASH)])
        for obj in self.objects.values():
            cache.observe("added", obj)
        return cache

    def observe(self, name: str = "sb", **kwargs: Any) -> SandboxObservation:
        return observe_sandbox(ObjectKey("Sandbox", NS, name), self.cache(), **kwargs)

    def converge(self, name: str = "sb", now: datetime = NOW, passes: int = 8) -> list[Plan]:
        """Plan and apply until a pass wants nothing more at once; returns the plans. A plan
        that the shell would make again at once (see :meth:`execute`) is followed by a new
        pass on the current objects; any other refusal is raised."""
        plans = []
        for _ in range(passes):
            plan = plan_sandbox(self.observe(name), now)
            plans.append(plan)
            if not self.execute(plan):
                continue
            if plan.requeue_after is None or plan.requeue_after > 0:
                return plans
        raise AssertionError(f"no convergence in {passes} passes: {plans}")

    def execute(self, plan: Plan) -> bool:
        """:meth:`apply`, answered as the worker shell answers it: False when the plan was
        made on stale state and is to be made again at once (a Create that finds the object
        already there, a Patch or Replace of an object that is gone, a Conflict of a write
        marked ``on_conflict="refresh"``); any other refusal is raised."""
        try:
            self.apply(plan)
        except KubeError as error:
            refused = self.refused[-1][0]
            if isinstance(refused, Create) and error.already_exists:
                return False
            if isinstance(refused, Patch | Replace) and error.not_found:
                return False
            if error.conflict and getattr(refused, "on_conflict", "fail") == "refresh":
                return False
            raise
        return True


@dataclass
class ClusterApi:
    """The calls the worker shell makes (:class:`~services.runtime.kube.KubeApi`),
    served from a :class:`FakeCluster`, preconditions and their 409s included; ``failures``
    makes a (verb, kind) fail."""

    cluster: FakeCluster
    failures: dict[tuple[str, str], KubeError] = field(default_factory=dict)

    def _check(self, verb: str, key: ObjectKey) -> None:
        failure = self.failures.get((verb, key.kind))
        if failure is not None:
            raise failure

    def _read(self, key: ObjectKey) -> Json:
        found = self.cluster.objects.get(key)
        if found is None:
            raise not_found(key)
        return copy.deepcopy(found)

    async def create(self, body: Json) -> Json:
        key = key_of(body)
        self._check("create", key)
        if key in self.cluster.objects:
            raise KubeError(409, "AlreadyExists", f"{key} already exists")
        self.cluster.apply(Plan(actions=(Create(body),)))
        return self._read(key)

    async def get(self, key: ObjectKey) -> Json:
        return self._read(key)

    async def patch(self, key: ObjectKey, patch: Json, *, subresource: str | None = None) -> Json:
        self._check("patch", key)
        status: Any = subresource
        self.cluster.apply(Plan(actions=(Patch(key, patch, subresource=status),)))
        return self._read(key)

    async def replace(self, body: Json) -> Json:
        self._check("replace", key_of(body))
        self.cluster.apply(Plan(actions=(Replace(body),)))
        return self._read(key_of(body))

    async def delete(
        self,
        key: ObjectKey,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
    ) -> Json:
        del propagation  # nothing here is garbage-collected
        self._check("delete", key)
        self._read(key)
        delete = Delete(key, uid=uid, resource_version=resource_version)
        self.cluster.apply(Plan(actions=(delete,)))
        return {"kind": "Status", "status": "Success"}
