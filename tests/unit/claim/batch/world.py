"""A BatchSandbox's world for the planner's tests: builders of the objects as the API serves them,
:func:`observe` through the real :func:`~services.claim.core.batch.plan.observe_batch` on a real
:class:`~services.runtime.cache.ObjectCache`, and :class:`Cluster`, a small API server that
carries out plans as the worker shell and the real server would, for the multi-pass tests.

:class:`Cluster`:

- a Create of an existing name answers AlreadyExists and stops the plan; a created object gets
  a uid, a resourceVersion and a creationTimestamp;
- a Patch is a JSON merge patch (of ``status`` only, for the status subresource; a change of
  ``spec`` bumps the generation); one whose
  body carries ``metadata.resourceVersion``, or that is ``conditional``, is refused with 409
  unless that is the stored version (a conditional patch is made on the version the plan
  knows: the one it planned on, or its own last write's answer), and the plan stops there;
  a change bumps the resourceVersion, a no-op keeps it;
- a Delete with a stale uid is refused; an object with finalizers gets a deletionTimestamp,
  one without goes, and the garbage collector takes the Pods it controls (their kubelet
  marks them terminating first, :meth:`Cluster.terminate` ends them);
- :meth:`Cluster.kubelet` moves every live Pod to Running and Ready with an IP, in one step.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from api.objects import Json, controller_of, metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
    ANNOTATION_ENDPOINTS,
    FINALIZER_POOL_ALLOCATION,
    LABEL_BATCH_SANDBOX_NAME,
    LABEL_POD_INDEX,
    LABEL_POOL_NAME,
)
from events.envelope import ObjectKey, key_of
from services.claim.core.batch.plan import BatchObservation, observe_batch, plan_batch
from services.runtime.cache import ObjectCache
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Plan
from services.runtime.reconcile.expectations import Expectations
from tests.support.fakeapi import FakeApiServer
from tests.support.plans import actions_of
from tests.support.samples import stamp

NS = "default"
NOW = datetime(2026, 6, 12, 9, 30, 0, tzinfo=UTC)
NAME = "bs"
UID = "uid-bs"
POOL = "pool-a"
API_VERSION = "sandbox.opensandbox.io/v1alpha1"


# -- builders -------------------------------------------------------------------------------


def pod_template(image: str = "nginx:1.27", *, command: Sequence[str] = ("sleep", "3600")) -> Json:
    """A PodTemplateSpec with one container ``main`` and a sidecar."""
    return {
        "metadata": {"labels": {"app": "demo"}},
        "spec": {
            "containers": [
                {"name": "main", "image": image, "command": list(command)},
                {"name": "sidecar", "image": "busybox:1.36", "command": ["sleep", "infinity"]},
            ]
        },
    }


def batch_sandbox(
    name: str = NAME,
    *,
    replicas: int | None = 3,
    template: Json | None = None,
    pool_ref: str | None = None,
    shard_patches: Sequence[Any] | None = None,
    annotations: Mapping[str, str] | None = None,
    alloc: Sequence[str] | None = None,
    release: Sequence[str] | None = None,
    released: Sequence[str] | None = None,
    status: Json | None = None,
    expire: datetime | None = None,
    finalizers: Sequence[str] | None = None,
    deleting: bool = False,
    generation: int = 1,
    rv: str = "5",
    uid: str | None = None,
) -> Json:
    """A BatchSandbox as the API server serves it: template mode (with :func:`pod_template`)
    unless ``pool_ref`` is given; ``alloc``/``release``/``released`` write the allocation
    annotations as the Pool and a releaser write them."""
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or (UID if name == NAME else f"uid-{name}"),
        "resourceVersion": rv,
        "generation": generation,
        "creationTimestamp": stamp(NOW - timedelta(minutes=5)),
    }
    notes = dict(annotations or {})
    for key, names in (
        (ANNOTATION_ALLOC_STATUS, alloc),
        (ANNOTATION_ALLOC_RELEASE, release),
        (ANNOTATION_ALLOC_RELEASED, released),
    ):
        if names is not None:
            notes[key] = json.dumps({"pods": list(names)}, separators=(",", ":"))
    if notes:
        metadata["annotations"] = notes
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    if deleting:
        metadata["deletionTimestamp"] = stamp(NOW - timedelta(seconds=10))
    spec: Json = {"taskResourcePolicyWhenCompleted": "Retain"}
    if replicas is not None:
        spec["replicas"] = replicas
    if pool_ref is not None:
        spec["poolRef"] = pool_ref
    if template is not None or pool_ref is None:
        spec["template"] = template if template is not None else pod_template()
    if shard_patches is not None:
        spec["shardPatches"] = list(shard_patches)
    if expire is not None:
        spec["expireTime"] = stamp(expire)
    body: Json = {
        "apiVersion": API_VERSION,
        "kind": "BatchSandbox",
        "metadata": metadata,
        "spec": spec,
    }
    if status is not None:
        body["status"] = status
    return body


def batch_status(
    *,
    phase: str,
    replicas: int = 0,
    ready: int = 0,
    allocated: int | None = None,
    conditions: Iterable[Json] = (),
    generation: int = 1,
) -> Json:
    return {
        "observedGeneration": generation,
        "replicas": replicas,
        "allocated": replicas if allocated is None else allocated,
        "ready": ready,
        "taskRunning": 0,
        "taskSucceed": 0,
        "taskFailed": 0,
        "taskUnknown": 0,
        "taskPending": 0,
        "phase": phase,
        "conditions": list(conditions),
    }


def condition(kind: str, reason: str, message: str, *, at: datetime = NOW) -> Json:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp(at),
    }


READY = ("Ready", "PodsReady", "Sandbox is running")
CREATING = ("Progressing", "Creating", "Sandbox is being created")


def owner_reference(kind: str, name: str, uid: str) -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod(
    name: str,
    *,
    index: int | str | None = None,
    owner: Json | None = None,
    labels: Mapping[str, str] | None = None,
    phase: str = "Running",
    ready: bool = True,
    ip: str | None = "",
    node: str | None = None,
    waiting: str | None = None,
    deleting: bool = False,
    uid: str | None = None,
    rv: str = "20",
) -> Json:
    """A Pod as the kubelet reports it: Running and Ready, on a node, with an IP (``10.0.0.<n>``
    from the name's last digits, or ``ip``; ``ip=None`` for none yet). ``owner`` makes it that
    BatchSandbox's template-mode Pod (with the two labels; ``index`` for the pod-index label,
    derived from the name when not given), or that Pool's."""
    tail = name.rsplit("-", 1)[-1]
    meta: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"uid-{name}",
        "resourceVersion": rv,
        "creationTimestamp": stamp(NOW - timedelta(minutes=4)),
        "labels": dict(labels or {}),
    }
    if owner is not None:
        owner_meta = metadata_of(owner)
        meta["ownerReferences"] = [
            owner_reference(owner["kind"], owner_meta["name"], owner_meta["uid"])
        ]
        if owner["kind"] == "BatchSandbox":
            label = index if index is not None else tail
            meta["labels"][LABEL_POD_INDEX] = str(label)
            meta["labels"][LABEL_BATCH_SANDBOX_NAME] = owner_meta["name"]
        else:
            meta["labels"][LABEL_POOL_NAME] = owner_meta["name"]
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
    status: Json = {"phase": phase}
    if ip is not None:
        status["podIP"] = ip or f"10.0.0.{int(tail) + 1 if tail.isdigit() else 99}"
        status["podIPs"] = [{"ip": status["podIP"]}]
    if phase == "Running":
        status["conditions"] = [
            {"type": "Ready", "status": "True" if ready else "False"},
            {"type": "ContainersReady", "status": "True" if ready else "False"},
        ]
    if waiting is not None:
        status["containerStatuses"] = [
            {"name": "main", "ready": False, "state": {"waiting": {"reason": waiting}}}
        ]
    spec: Json = {"containers": [{"name": "main", "image": "nginx:1.27"}]}
    if node is not None or ip is not None:
        spec["nodeName"] = node or "node-1"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def pending_pod(name: str, owner: Json, **kwargs: Any) -> Json:
    """Created, not scheduled yet: no node, no IP."""
    return pod(name, owner=owner, phase="Pending", ip=None, **kwargs)


def pool(
    name: str = POOL,
    *,
    pool_max: int = 3,
    total: int = 0,
    allocated: int = 0,
    available: int = 0,
    image: str = "nginx:1.27",
) -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": "Pool",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "main", "image": image}]}},
            "capacitySpec": {"poolMin": 0, "poolMax": pool_max, "bufferMin": 0, "bufferMax": 1},
        },
        "status": {
            "observedGeneration": 1,
            "revision": "0123456789abcdef",
            "total": total,
            "allocated": allocated,
            "available": available,
        },
    }


def observe(
    sandbox: Json | None,
    *objects: Json,
    expectations: Expectations | None = None,
    name: str = NAME,
    pull_secret: str = "",
) -> BatchObservation:
    """What the claim worker would hand ``plan_batch`` for BatchSandbox ``name``, given the
    objects its cache holds."""
    cache = ObjectCache()
    for obj in (sandbox, *objects) if sandbox is not None else objects:
        cache.observe("added", copy.deepcopy(obj))
    return observe_batch(
        ObjectKey("BatchSandbox", NS, name),
        cache,
        expectations=expectations,
        pull_secret=pull_secret,
    )


def plan(sandbox: Json | None, *objects: Json, now: datetime = NOW, **kwargs: Any) -> Plan:
    return plan_batch(observe(sandbox, *objects, **kwargs), now)


# -- reading plans --------------------------------------------------------------------------


def creates(result: Plan) -> list[Json]:
    """The objects the plan creates, its Events left out (:func:`warnings`)."""
    return [
        a.body for a in actions_of(result) if isinstance(a, Create) and a.body["kind"] != "Event"
    ]


def warnings(result: Plan) -> list[tuple[str, str]]:
    """The Warning Events the plan creates: (reason, note)."""
    return [
        (a.body["reason"], a.body["note"])
        for a in actions_of(result)
        if isinstance(a, Create) and a.body["kind"] == "Event" and a.body["type"] == "Warning"
    ]


def created_names(result: Plan) -> list[str]:
    return [b["metadata"]["name"] for b in creates(result)]


def status_patch(result: Plan) -> Json | None:
    patches = [a for a in actions_of(result) if isinstance(a, Patch) and a.subresource == "status"]
    assert len(patches) <= 1
    return patches[0].patch["status"] if patches else None


def endpoints_patch(result: Plan) -> str | None:
    for action in actions_of(result, Patch):
        if action.subresource is None:
            annotations = (action.patch.get("metadata") or {}).get("annotations") or {}
            if ANNOTATION_ENDPOINTS in annotations:
                return str(annotations[ANNOTATION_ENDPOINTS])
    return None


def conditions_of(status: Json | None) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["reason"], c["message"]) for c in (status or {}).get("conditions") or ()}


# -- the fake API server --------------------------------------------------------------------


class Refused(Exception):
    pass


@dataclass
class Cluster(FakeApiServer):
    """The fake API server (:class:`~tests.support.fakeapi.FakeApiServer`) as these tests need
    it (see the module's text): a change of ``spec`` bumps the generation, a deleted Pod or an
    object with finalizers is terminating, an object goes once its last finalizer does, and
    the Pods it controls go with it; a refused write is a :class:`Refused`."""

    carries_out = (Create, Patch, Delete)
    bumps_generation = True
    now: datetime = NOW
    log: list[str] = field(default_factory=list)

    def new_uid(self, key: ObjectKey) -> str:
        return f"uid-{key.name}-{next(self._versions)}"

    def pods(self) -> list[Json]:
        return sorted(
            (o for k, o in self.objects.items() if k.kind == "Pod"),
            key=lambda p: p["metadata"]["name"],
        )

    def observe(self, name: str = NAME, expectations: Expectations | None = None) -> Any:
        cache = ObjectCache()
        for obj in self.objects.values():
            cache.observe("added", copy.deepcopy(obj))
        return observe_batch(ObjectKey("BatchSandbox", NS, name), cache, expectations=expectations)

    def reconcile(self, name: str = NAME) -> Plan:
        """One pass: observe, plan, carry out until the first refused write."""
        result = plan_batch(self.observe(name), self.now)
        known: dict[ObjectKey, str] = {
            key: str(obj["metadata"].get("resourceVersion")) for key, obj in self.objects.items()
        }
        for action in result.actions:
            try:
                self.apply(action, known)
            except Refused as refusal:
                self.log.append(f"refused: {refusal}")
                break
        return result

    def converge(self, name: str = NAME, *, passes: int = 10, kubelet: bool = True) -> list[Plan]:
        """Passes (each followed by a kubelet step) until one plans no action."""
        plans: list[Plan] = []
        for _ in range(passes):
            result = self.reconcile(name)
            plans.append(result)
            if kubelet:
                self.kubelet()
            if not result.actions:
                return plans
        raise AssertionError(f"no convergence in {passes} passes: {[p.reason for p in plans]}")

    def apply(self, action: Action, known: dict[ObjectKey, str]) -> None:
        try:
            self.write(action, known)
        except KubeError as error:
            raise Refused(str(error)) from None
        if isinstance(action, Create):
            key = key_of(action.body)
            self.log.append(f"create {key.kind}/{key.name}")
        elif isinstance(action, Patch):
            self.log.append(f"{action.verb} {action.target.kind}/{action.target.name}")

    def deleting(self, key: ObjectKey) -> None:
        self.delete(key.kind, key.name)

    def changed(self, key: ObjectKey) -> None:
        meta = self.objects[key]["metadata"]
        if not meta.get("finalizers") and meta.get("deletionTimestamp"):
            self._remove(key)

    def delete(self, kind: str, name: str) -> None:
        key = ObjectKey(kind, NS, name)
        stored = self.objects[key]
        self.log.append(f"delete {kind}/{name}")
        if kind == "Pod" or stored["metadata"].get("finalizers"):
            # A Pod's kubelet ends it (terminate); any other object waits for its finalizers.
            stored["metadata"]["deletionTimestamp"] = stamp(self.now)
            self.bump(stored)
        else:
            self._remove(key)

    def _remove(self, key: ObjectKey) -> None:
        gone = self.objects.pop(key)
        uid = gone["metadata"]["uid"]
        for other in [o for o in self.objects.values() if o.get("kind") == "Pod"]:
            owner = controller_of(other)
            if owner is not None and owner.get("uid") == uid:
                self.delete("Pod", other["metadata"]["name"])

    def terminate(self) -> None:
        """The kubelet ends every terminating Pod: it is gone."""
        for key in [k for k, o in self.objects.items() if o["metadata"].get("deletionTimestamp")]:
            if key.kind == "Pod":
                del self.objects[key]

    def kubelet(self) -> None:
        for obj in self.pods():
            if obj["metadata"].get("deletionTimestamp"):
                continue
            status = obj.setdefault("status", {})
            if status.get("phase") == "Running":
                continue
            name = obj["metadata"]["name"]
            index = int(name.rsplit("-", 1)[-1])
            obj["spec"]["nodeName"] = "node-1"
            status.update(
                phase="Running",
                podIP=f"10.0.0.{index + 1}",
                conditions=[{"type": "Ready", "status": "True"}],
            )
            self.bump(obj)


def pool_allocation_finalized(sandbox: Json) -> bool:
    return FINALIZER_POOL_ALLOCATION in (metadata_of(sandbox).get("finalizers") or ())
