"""An OpenSandbox Pool's world for the planner's tests: a Pool, its Pods, the BatchSandboxes that
name it, and a small API server that carries out plans as the worker shell and the real server
would.

The builders make objects as the API serves them: Pods as the Pool's own planner makes them
(its labels, its controller reference, its revision), BatchSandboxes with the allocation
annotations as upstream writes them (``{"pods":[...]}``). :func:`observe` goes through the real
:func:`~services.pool.core.opensandbox.observation.observe_open_pool` on a real
:class:`~services.runtime.cache.ObjectCache`, so the planner sees what the worker would give it.

:class:`Cluster` is the fake the multi-pass tests run plans against:

- a Create with ``generateName`` gets a fresh name, a uid, a resourceVersion and the cluster's
  time as its creationTimestamp; a created Pod is Pending until :meth:`Cluster.kubelet` (or
  ``ready_on_create``) makes it Running and Ready;
- a Delete with a stale uid gets 409 and stops the plan; of a missing object it counts as done;
  a Pod it deletes is terminating (``deletionTimestamp``) until :meth:`Cluster.kubelet` reaps
  it, and an object with finalizers stays terminating until a patch removes the last one;
- a Patch is a JSON merge patch of the object (``status`` left out) or of its status
  subresource; one whose ``metadata.resourceVersion`` is not the stored one, or a
  ``conditional`` one made on a version that is not the stored one, gets 409 Conflict and
  stops the plan (the shell would plan again at once); a change bumps the resourceVersion;
- :class:`~services.runtime.reconcile.actions.Together` runs its members and stops the plan
  after them if one was refused.

Each pass's memo (the ledger) goes back into the next pass the way the worker keeps it: as
JSON builtins on the bus, converted back to :class:`PoolLedger`. Expectations are not kept
(None): the fake answers every write at once, so the planner's view never lags its writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from api.objects import Json, controller_of, is_ready, metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
    GROUP,
    LABEL_POOL_NAME,
    LABEL_POOL_REVISION,
    VERSION,
)
from events.envelope import ObjectKey
from services.domain.opensandbox.allocation import parse_pod_list, pod_list_annotation
from services.pool.core.opensandbox.ledger import Holding, PoolLedger
from services.pool.core.opensandbox.observation import OpenPoolObservation, observe_open_pool
from services.pool.core.opensandbox.plan import plan_open_pool, template_revision
from services.runtime.cache import ObjectCache
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Plan, Together
from services.runtime.reconcile.expectations import Expectations
from tests.support.fakeapi import FakeApiServer, apply_merge_patch
from tests.support.plans import actions_of
from tests.support.samples import stamp

NS = "default"
NOW = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
POOL = "pool"
POOL_UID = "pool-uid"
API_VERSION = f"{GROUP}/{VERSION}"
IMAGE = "example.com"


# -- builders -------------------------------------------------------------------------------


def pool(
    name: str = POOL,
    *,
    uid: str = POOL_UID,
    buffer_min: int = 1,
    buffer_max: int = 1,
    pool_min: int = 0,
    pool_max: int = 10,
    recycle: str | None = None,
    scale_max: int | str | None = None,
    update_max: int | str | None = None,
    template_labels: Mapping[str, str] | None = None,
    template: Json | None = None,
    generation: int = 1,
    rv: str = "1",
    status: Json | None = None,
    deleting: bool = False,
) -> Json:
    """A Pool of one container; ``template`` replaces the whole template (``{}``: none)."""
    pod_template: Json = {"spec": {"containers": [{"name": "main", "image": IMAGE}]}}
    if template_labels is not None:
        pod_template["metadata"] = {"labels": dict(template_labels)}
    spec: Json = {
        "template": pod_template if template is None else template,
        "capacitySpec": {
            "bufferMin": buffer_min,
            "bufferMax": buffer_max,
            "poolMin": pool_min,
            "poolMax": pool_max,
        },
    }
    if not spec["template"]:
        del spec["template"]
    if recycle is not None:
        spec["recycleStrategy"] = {"type": recycle}
    if scale_max is not None:
        spec["scaleStrategy"] = {"maxUnavailable": scale_max}
    if update_max is not None:
        spec["updateStrategy"] = {"maxUnavailable": update_max}
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid,
        "resourceVersion": rv,
        "generation": generation,
        "creationTimestamp": stamp(NOW - timedelta(days=1)),
    }
    if deleting:
        metadata["deletionTimestamp"] = stamp(NOW)
    obj: Json = {"apiVersion": API_VERSION, "kind": "Pool", "metadata": metadata, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def ready_condition(at: datetime | None, *, ready: bool = True) -> Json:
    cond: Json = {"type": "Ready", "status": "True" if ready else "False"}
    if at is not None:
        cond["lastTransitionTime"] = stamp(at)
    return cond


def pod(
    name: str,
    *,
    of_pool: Json | None = None,
    revision: str | None = None,
    phase: str = "Running",
    ready: bool = True,
    ready_at: datetime | None = NOW - timedelta(hours=1),
    created: datetime | None = NOW - timedelta(hours=2),
    node: str = "node-1",
    restarts: Sequence[int] = (),
    labels: Mapping[str, str] | None = None,
    deleting: bool = False,
    uid: str | None = None,
    rv: str = "10",
) -> Json:
    """A Pod of ``of_pool`` (the default Pool) as its planner made it, Running and Ready by
    default, at the Pool's revision unless ``revision`` says otherwise."""
    owner = of_pool or pool()
    meta = metadata_of(owner)
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"uid-{name}",
        "resourceVersion": rv,
        "labels": {
            LABEL_POOL_NAME: meta["name"],
            LABEL_POOL_REVISION: revision if revision is not None else template_revision(owner),
            **(labels or {}),
        },
        "ownerReferences": [
            {
                "apiVersion": API_VERSION,
                "kind": "Pool",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if created is not None:
        metadata["creationTimestamp"] = stamp(created)
    if deleting:
        metadata["deletionTimestamp"] = stamp(NOW)
    status: Json = {"phase": phase}
    if ready:
        status["conditions"] = [ready_condition(ready_at)]
    if restarts:
        status["containerStatuses"] = [
            {"name": f"c{i}", "restartCount": count} for i, count in enumerate(restarts)
        ]
    spec: Json = {"containers": [{"name": "main", "image": IMAGE}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def sandbox(
    name: str,
    *,
    uid: str | None = None,
    pool_name: str = POOL,
    replicas: int | None = 1,
    created: datetime = NOW - timedelta(minutes=1),
    alloc_status: Iterable[str] | None = None,
    alloc_release: Iterable[str] | None = None,
    alloc_released: Iterable[str] | None = None,
    annotations: Mapping[str, str] | None = None,
    finalizers: Iterable[str] = (),
    deleting: bool = False,
    rv: str = "5",
    template: Json | None = None,
) -> Json:
    """A BatchSandbox that names ``pool_name``, with the allocation annotations given."""
    notes: dict[str, str] = dict(annotations or {})
    for key, pods in (
        (ANNOTATION_ALLOC_STATUS, alloc_status),
        (ANNOTATION_ALLOC_RELEASE, alloc_release),
        (ANNOTATION_ALLOC_RELEASED, alloc_released),
    ):
        if pods is not None:
            notes[key] = pod_list_annotation(list(pods))
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"uid-{name}",
        "resourceVersion": rv,
        "generation": 1,
        "creationTimestamp": stamp(created),
    }
    if notes:
        metadata["annotations"] = notes
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    if deleting:
        metadata["deletionTimestamp"] = stamp(NOW)
    spec: Json = {"poolRef": pool_name}
    if replicas is not None:
        spec["replicas"] = replicas
    if template is not None:
        spec["template"] = template
    return {"apiVersion": API_VERSION, "kind": "BatchSandbox", "metadata": metadata, "spec": spec}


def observe(
    *objects: Json,
    ledger: PoolLedger | None = None,
    expectations: Expectations | None = None,
    name: str = POOL,
    last_error: str | None = None,
    failure_persists: bool = False,
) -> OpenPoolObservation:
    """What the pool worker would hand ``plan_open_pool`` for Pool ``name``, given the objects
    its cache holds, the Pool's memo and the error of its previous pass (and whether its
    passes have failed for a while)."""
    cache = ObjectCache()
    for obj in objects:
        cache.observe("added", copy.deepcopy(obj))
    return observe_open_pool(
        ObjectKey("Pool", NS, name),
        cache,
        ledger=ledger,
        expectations=expectations,
        last_error=last_error,
        failure_persists=failure_persists,
    )


def plan(*objects: Json, ledger: PoolLedger | None = None, **options: Any) -> Plan:
    return plan_open_pool(observe(*objects, ledger=ledger, **options), NOW)


def ledger_of(
    holders: Mapping[str, str],
    *,
    recycling: Iterable[str] = (),
    released: Mapping[str, Sequence[str]] | None = None,
    lost: Mapping[str, Sequence[str]] | None = None,
) -> PoolLedger:
    """A ledger in which each Pod of ``holders`` is held by the sandbox named (of uid
    ``uid-<name>``, as :func:`sandbox` makes it); ``released`` and ``lost`` by sandbox name."""
    dirty = set(recycling)
    return PoolLedger(
        pods={
            name: Holding(sandbox=holder, uid=f"uid-{holder}", recycling=name in dirty)
            for name, holder in holders.items()
        },
        released={f"uid-{s}": list(p) for s, p in (released or {}).items()},
        lost={f"uid-{s}": list(p) for s, p in (lost or {}).items()},
    )


def kept(memo: Any) -> PoolLedger | None:
    """``memo`` as the worker keeps it and gives it back: JSON builtins, converted again."""
    if memo is None:
        return None
    return msgspec.convert(msgspec.to_builtins(memo), PoolLedger)


def restarted(memo: Any) -> PoolLedger | None:
    """``memo`` as a restarted worker reads it from the bus: encoded, then decoded."""
    if memo is None:
        return None
    return msgspec.json.decode(msgspec.json.encode(memo), type=PoolLedger)


# -- reading plans and objects ----------------------------------------------------------------


def pod_creates(plan: Plan) -> list[Json]:
    return [
        a.body for a in actions_of(plan) if isinstance(a, Create) and a.body.get("kind") == "Pod"
    ]


def pod_deletes(plan: Plan) -> list[str]:
    return [
        a.target.name for a in actions_of(plan) if isinstance(a, Delete) and a.target.kind == "Pod"
    ]


def sandbox_patches(plan: Plan, name: str | None = None) -> list[Patch]:
    return [
        a
        for a in actions_of(plan)
        if isinstance(a, Patch)
        and a.target.kind == "BatchSandbox"
        and (name is None or a.target.name == name)
    ]


def status_written(plan: Plan) -> Json | None:
    for action in actions_of(plan):
        if isinstance(action, Patch) and action.subresource == "status":
            status: Json = action.patch["status"]
            return status
    return None


def pods_in(obj: Mapping[str, Any] | None, key: str) -> list[str]:
    """The Pod names of allocation annotation ``key`` on ``obj``."""
    return parse_pod_list(metadata_of(obj or {}).get("annotations") or {}, key)


def held(ledger: PoolLedger | None, sandbox_name: str) -> list[str]:
    """The Pods ``ledger`` says ``sandbox_name`` holds (recycling ones included)."""
    if ledger is None:
        return []
    return sorted(p for p, h in ledger.pods.items() if h.sandbox == sandbox_name)


# -- the fake cluster -----------------------------------------------------------------------


class Refused(Exception):
    """A write the fake API server refused: the plan stops there."""


@dataclass
class Cluster(FakeApiServer):
    """The fake API server (:class:`~tests.support.fakeapi.FakeApiServer`) as these tests need
    it (see the module's text), and the pool worker's passes over it."""

    carries_out = (Create, Patch, Delete)
    now: datetime = NOW
    ledger: PoolLedger | None = None
    ready_on_create: bool = False
    plans: list[Plan] = field(default_factory=list)
    writes: list[Action] = field(default_factory=list)
    refused: list[tuple[Action, str]] = field(default_factory=list)

    # -- objects ----------------------------------------------------------------------------

    def pods(self, *, terminating: bool = False) -> list[Json]:
        """The Pods (those being deleted too, with ``terminating``), by name."""
        return [
            obj
            for key, obj in sorted(self.objects.items())
            if key.kind == "Pod" and (terminating or not metadata_of(obj).get("deletionTimestamp"))
        ]

    def pod_names(self, *, terminating: bool = False) -> list[str]:
        return [str(metadata_of(p)["name"]) for p in self.pods(terminating=terminating)]

    def ready_pods(self) -> list[str]:
        return [str(metadata_of(p)["name"]) for p in self.pods() if is_ready(p)]

    def edit(self, kind: str, name: str, patch: Json) -> Json:
        """Someone else's merge patch (a user, the BatchSandbox controller)."""
        key = ObjectKey(kind, NS, name)
        written = apply_merge_patch(copy.deepcopy(self.objects[key]), patch)
        self.objects[key] = self.bump(written)
        self._finish(key)
        return self.objects[key]

    def release(self, sandbox_name: str, *pods: str) -> None:
        """The BatchSandbox controller (or anyone) asks to give ``pods`` back."""
        self.edit(
            "BatchSandbox",
            sandbox_name,
            {"metadata": {"annotations": {ANNOTATION_ALLOC_RELEASE: pod_list_annotation(pods)}}},
        )

    def remove(self, kind: str, name: str, *, force: bool = False) -> None:
        """Someone else deletes an object: terminating while it has finalizers (or, for a Pod,
        until the kubelet reaps it) unless ``force``; a Pool takes its Pods with it."""
        key = ObjectKey(kind, NS, name)
        current = self.objects.get(key)
        if current is None:
            return
        self._delete(key, force=force)

    def kubelet(self) -> None:
        """The kubelet's round: terminating Pods go, Pending Pods are Running and Ready."""
        for key, obj in list(self.objects.items()):
            if key.kind != "Pod":
                continue
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                if not meta.get("finalizers"):
                    del self.objects[key]
                continue
            if (obj.get("status") or {}).get("phase") != "Running":
                self._run(obj)

    def _run(self, obj: Json) -> None:
        obj["spec"].setdefault("nodeName", "node-1")
        obj["status"] = {"phase": "Running", "conditions": [ready_condition(self.now)]}
        self.bump(obj)

    def _delete(self, key: ObjectKey, *, force: bool = False) -> None:
        current = self.objects[key]
        meta = current["metadata"]
        if key.kind == "Pool":
            uid = meta.get("uid")
            for other, obj in list(self.objects.items()):
                owner = controller_of(obj)
                if owner is not None and owner.get("uid") == uid:
                    self._delete(other, force=True)
        graceful = bool(meta.get("finalizers")) or (key.kind == "Pod" and not force)
        if not graceful:
            del self.objects[key]
            return
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = stamp(self.now)
            self.bump(current)

    def _finish(self, key: ObjectKey) -> None:
        # An object being deleted goes once its last finalizer is removed.
        obj = self.objects.get(key)
        if obj is None or key.kind == "Pod":
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.objects[key]

    # -- the pool worker --------------------------------------------------------------------

    def observe(self, name: str = POOL) -> OpenPoolObservation:
        return observe(*self.objects.values(), ledger=self.ledger, name=name)

    def step(
        self,
        name: str = POOL,
        *,
        meanwhile: Callable[[], object] | None = None,
        dies: bool = False,
    ) -> Plan:
        """One pass of Pool ``name``: plan, keep the memo, carry the actions out until one is
        refused. ``meanwhile`` runs between the plan and its actions (someone else's write);
        with ``dies`` the worker dies right after keeping the memo, before any action."""
        planned = plan_open_pool(self.observe(name), self.now)
        self.plans.append(planned)
        self.ledger = kept(planned.memo)
        if dies:
            return planned
        known = {
            key: str(obj["metadata"].get("resourceVersion")) for key, obj in self.objects.items()
        }
        if meanwhile is not None:
            meanwhile()
        for action in planned.actions:
            group = action.actions if isinstance(action, Together) else (action,)
            failed = False
            for member in group:
                try:
                    self._execute(member, known)
                except Refused as refusal:
                    self.refused.append((member, str(refusal)))
                    failed = True
            if failed:
                break
        return planned

    def restart(self) -> None:
        """The pool worker restarts: it reads the memo back from the bus."""
        self.ledger = restarted(self.ledger)

    def settle(self, name: str = POOL, *, passes: int = 30, kubelet: bool = True) -> list[Plan]:
        """Passes of Pool ``name``, with a kubelet round after each, until one writes nothing
        and the kubelet has nothing to do; returns the plans."""
        done: list[Plan] = []
        for _ in range(passes):
            before = copy.deepcopy(self.objects)
            planned = self.step(name)
            done.append(planned)
            if kubelet:
                self.kubelet()
            if not planned.actions and self.objects == before:
                return done
            self.now += timedelta(seconds=1)
        raise AssertionError(f"Pool {name} did not settle in {passes} passes: {done[-3:]}")

    # -- the API server's part -------------------------------------------------------------

    def admitted(self, body: Json) -> None:
        self.now += timedelta(seconds=1)
        if body.get("kind") == "Pod":
            body["status"] = {"phase": "Pending"}
            if self.ready_on_create:
                self._run(body)

    def deleting(self, key: ObjectKey) -> None:
        self._delete(key)

    def changed(self, key: ObjectKey) -> None:
        self._finish(key)

    def _execute(self, action: Action, known: dict[ObjectKey, str]) -> None:
        self.writes.append(action)
        try:
            self.write(action, known)
        except KubeError as error:
            raise Refused(f"{error.status} {error.reason}: {error.message}") from None


def world(*objs: Json, of_pool: Json | None = None, **options: Any) -> Cluster:
    """A cluster with ``of_pool`` (the default Pool) and ``objs``."""
    return Cluster(**options).add(of_pool if of_pool is not None else pool(), *objs)
