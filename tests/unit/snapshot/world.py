"""A SandboxSnapshot's world for the snapshot planner's tests: builders of the objects as the API
serves them (the snapshot, its BatchSandbox in template or pooled mode, Pods, the commit Job in
each of its states and the commit Pod with the committer's termination message),
:func:`observe` through the real :func:`~services.snapshot.core.plan.observe_snapshot` on a
real :class:`~services.runtime.cache.ObjectCache`, :func:`plan`, and readers of the plan.

The Job builders are written out by hand, not made with the planner's own ``commit_job``: a
Job found in the cluster is whatever the API server holds, and the planner must read it back
from its fields.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from api.objects import Json, metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
    FINALIZER_SNAPSHOT_CLEANUP,
    LABEL_BATCH_SANDBOX_NAME,
    LABEL_POD_INDEX,
    LABEL_POOL_NAME,
    LABEL_PRIVILEGED_NODE_ACCESS,
    LABEL_SANDBOX_SNAPSHOT_NAME,
)
from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan
from services.snapshot.core.plan import (
    SnapshotObservation,
    SnapshotSettings,
    observe_snapshot,
    plan_snapshot,
)
from tests.support.plans import actions_of
from tests.support.samples import stamp

NS = "default"
NOW = datetime(2026, 6, 12, 9, 30, 0, tzinfo=UTC)
API_VERSION = "sandbox.opensandbox.io/v1alpha1"
SNAP = "snap-1"
SNAP_UID = "uid-snap-1"
NAME = "bs"
UID = "uid-bs"
POOL = "pool-a"
NODE = "node-7"
REGISTRY = "registry.example.com/sandboxes"
SETTINGS = SnapshotSettings(registry=REGISTRY)
JOB_UID = "uid-snap-1-commit"
COMMITTER = "/usr/local/bin/image-committer"
JOB_FAILED_MESSAGE = "Job has reached the specified backoff limit"


def owner_reference(obj: Mapping[str, Any], *, controller: bool = True) -> Json:
    meta = metadata_of(obj)
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


# -- the snapshot ---------------------------------------------------------------------------


def snapshot(
    name: str = SNAP,
    *,
    sandbox: str = NAME,
    status: Json | None = None,
    owner: Json | None = None,
    finalizers: Sequence[str] | None = (FINALIZER_SNAPSHOT_CLEANUP,),
    deleting: bool = False,
    generation: int = 1,
    rv: str = "30",
    uid: str | None = None,
    snapshot_format: str | None = None,
) -> Json:
    """A SandboxSnapshot of BatchSandbox ``sandbox``, with the cleanup finalizer already on
    (``finalizers=()`` for a new one); ``owner`` makes it that BatchSandbox's pause snapshot
    (a controller reference); ``snapshot_format`` is its ``spec.format``."""
    meta: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or (SNAP_UID if name == SNAP else f"uid-{name}"),
        "resourceVersion": rv,
        "generation": generation,
        "creationTimestamp": stamp(NOW - timedelta(minutes=1)),
    }
    if finalizers:
        meta["finalizers"] = list(finalizers)
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW - timedelta(seconds=5))
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    body: Json = {
        "apiVersion": API_VERSION,
        "kind": "SandboxSnapshot",
        "metadata": meta,
        "spec": {"sandboxName": sandbox},
    }
    if snapshot_format is not None:
        body["spec"]["format"] = snapshot_format
    if status is not None:
        body["status"] = status
    return body


def image_of(container: str, tag: str = "snap-x", *, sandbox: str = NAME) -> str:
    return f"{REGISTRY}/{sandbox}-{container}:{tag}"


def committing(
    pod: str = f"{NAME}-0",
    node: str = NODE,
    containers: Sequence[str] = ("main", "sidecar"),
    *,
    phase: str = "Committing",
    tag: str = "snap-x",
) -> Json:
    """The status of a snapshot whose commit Job is running (or was, for ``phase``)."""
    return {
        "observedGeneration": 1,
        "phase": phase,
        "sourcePodName": pod,
        "sourceNodeName": node,
        "containers": [{"containerName": c, "imageUri": image_of(c, tag)} for c in containers],
    }


# -- BatchSandboxes and Pods ----------------------------------------------------------------


def template(*containers: str, init: Sequence[str] = ()) -> Json:
    spec: Json = {"containers": [{"name": c, "image": f"{c}:1"} for c in containers]}
    if init:
        spec["initContainers"] = [{"name": c, "image": f"{c}:1"} for c in init]
    return {"metadata": {"labels": {"app": "demo"}}, "spec": spec}


def batch_sandbox(
    name: str = NAME,
    *,
    pool_ref: str | None = None,
    template_spec: Json | None = None,
    alloc: Sequence[str] | None = None,
    release: Sequence[str] | None = None,
    released: Sequence[str] | None = None,
    annotations: Mapping[str, str] | None = None,
    generation: int = 1,
    uid: str | None = None,
) -> Json:
    """A BatchSandbox of one replica: template mode (containers ``main`` and ``sidecar``)
    unless ``pool_ref`` is given, pooled then and without a template unless ``template_spec``
    is given; ``alloc``/``release``/``released`` write the allocation annotations as the
    Pool and a releaser write them."""
    notes = dict(annotations or {})
    for key, names in (
        (ANNOTATION_ALLOC_STATUS, alloc),
        (ANNOTATION_ALLOC_RELEASE, release),
        (ANNOTATION_ALLOC_RELEASED, released),
    ):
        if names is not None:
            notes[key] = json.dumps({"pods": list(names)}, separators=(",", ":"))
    meta: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or (UID if name == NAME else f"uid-{name}"),
        "resourceVersion": "12",
        "generation": generation,
        "creationTimestamp": stamp(NOW - timedelta(minutes=10)),
    }
    if notes:
        meta["annotations"] = notes
    spec: Json = {"replicas": 1}
    if pool_ref is not None:
        spec["poolRef"] = pool_ref
    if template_spec is not None:
        spec["template"] = template_spec
    elif pool_ref is None:
        spec["template"] = template("main", "sidecar")
    return {"apiVersion": API_VERSION, "kind": "BatchSandbox", "metadata": meta, "spec": spec}


def pooled(
    name: str = NAME,
    *,
    alloc: Sequence[str] = ("pool-a-x1",),
    release: Sequence[str] | None = None,
    released: Sequence[str] | None = None,
) -> Json:
    """A BatchSandbox the Pool ``pool-a`` serves, holding ``alloc`` (without a template)."""
    return batch_sandbox(name, pool_ref=POOL, alloc=alloc, release=release, released=released)


def pool(name: str = POOL) -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": "Pool",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "8"},
        "spec": {"template": template("main", "agent")},
    }


def pod(
    name: str,
    *,
    owner: Json | None = None,
    labels: Mapping[str, str] | None = None,
    phase: str = "Running",
    node: str = NODE,
    containers: Sequence[str] = ("main", "sidecar"),
    init: Sequence[str] = (),
    deleting: bool = False,
) -> Json:
    """A Pod as the kubelet reports it, on ``node``. ``owner`` makes it that BatchSandbox's
    template-mode Pod (controlled by it, with its name and index labels) or that Pool's (with
    its pool-name label)."""
    meta: Json = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "resourceVersion": "20",
        "creationTimestamp": stamp(NOW - timedelta(minutes=9)),
        "labels": dict(labels or {}),
    }
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
        if owner["kind"] == "BatchSandbox":
            meta["labels"][LABEL_BATCH_SANDBOX_NAME] = owner["metadata"]["name"]
            meta["labels"][LABEL_POD_INDEX] = name.rsplit("-", 1)[-1]
        else:
            meta["labels"][LABEL_POOL_NAME] = owner["metadata"]["name"]
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
    spec: Json = {
        "nodeName": node,
        "containers": [{"name": c, "image": f"{c}:1"} for c in containers],
    }
    if init:
        spec["initContainers"] = [{"name": c, "image": f"{c}:1"} for c in init]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase, "podIP": "10.0.0.5"},
    }


def pool_pod(name: str, **kwargs: Any) -> Json:
    """A Pod of the Pool ``pool-a`` (containers ``main`` and ``agent``)."""
    kwargs.setdefault("containers", ("main", "agent"))
    return pod(name, owner=pool(), **kwargs)


# -- the commit Job and its Pod -------------------------------------------------------------


def job_args(
    pod_name: str = f"{NAME}-0",
    containers: Sequence[str] = ("main", "sidecar"),
    tag: str = "snap-x",
) -> list[str]:
    return [pod_name, NS, *(f"{c}:{image_of(c, tag)}" for c in containers)]


def job(
    name: str = f"{SNAP}-commit",
    *,
    state: str = "active",
    args: Sequence[str] | None = None,
    node: str = NODE,
    owner: Json | None = None,
    uid: str | None = None,
    completed: datetime | None = NOW - timedelta(seconds=2),
    message: str = JOB_FAILED_MESSAGE,
    deleting: bool = False,
) -> Json:
    """A Job of the snapshot ``owner`` (:func:`snapshot` by default) as the API server serves
    it, in ``state``: ``active`` (its Pod runs), ``retrying`` (Pods failed, the backoff limit
    not reached), ``succeeded`` (completed at ``completed``; None: no completionTime yet) or
    ``failed`` (the ``Failed`` condition, with ``message``)."""
    owner = owner if owner is not None else snapshot()
    snap_name = owner["metadata"]["name"]
    meta: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or (JOB_UID if name == f"{SNAP}-commit" else f"uid-{name}"),
        "resourceVersion": "40",
        "creationTimestamp": stamp(NOW - timedelta(minutes=1)),
        "labels": {
            LABEL_SANDBOX_SNAPSHOT_NAME: snap_name,
            LABEL_PRIVILEGED_NODE_ACCESS: "true",
        },
        "ownerReferences": [owner_reference(owner)],
    }
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
    status: Json
    if state == "active":
        status = {"active": 1, "startTime": stamp(NOW - timedelta(minutes=1))}
    elif state == "retrying":
        status = {"active": 1, "failed": 2, "startTime": stamp(NOW - timedelta(minutes=1))}
    elif state == "succeeded":
        status = {"succeeded": 1, "startTime": stamp(NOW - timedelta(minutes=1))}
        if completed is not None:
            status["completionTime"] = stamp(completed)
            status["conditions"] = [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"},
            ]
        else:
            status["conditions"] = [{"type": "SuccessCriteriaMet", "status": "True"}]
    elif state == "failed":
        status = {
            "failed": 4,
            "startTime": stamp(NOW - timedelta(minutes=1)),
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": message,
                },
            ],
        }
    else:  # pragma: no cover - a typo in a test
        raise ValueError(state)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": {LABEL_SANDBOX_SNAPSHOT_NAME: snap_name}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "commit",
                            "image": "image-committer:dev",
                            "command": [COMMITTER],
                            "args": list(args if args is not None else job_args()),
                        }
                    ],
                },
            },
        },
        "status": status,
    }


def unpause(owner: Json | None = None, *, uid: str | None = None) -> Json:
    """The unpause Job of the snapshot ``owner``, running."""
    owner = owner if owner is not None else snapshot()
    name = f"{owner['metadata']['name']}-unpause"
    return job(
        name,
        owner=owner,
        uid=uid or f"uid-{name}",
        args=["unpause", f"{NAME}-0", NS, "main", "sidecar"],
    )


def digests_message(*entries: tuple[str, str, str]) -> str:
    """What the committer writes to its termination log: (name, image, digest) each."""
    return json.dumps({"containers": [{"name": n, "image": i, "digest": d} for n, i, d in entries]})


def commit_pod(
    of: Json | None = None,
    *,
    suffix: str = "abcde",
    message: str | None = None,
    phase: str = "Succeeded",
    exit_code: int = 0,
) -> Json:
    """A Pod of the commit Job ``of`` (:func:`job` by default) as the kubelet left it: its
    ``commit`` container ended with ``exit_code`` and the termination ``message`` (None: the
    container has not reported yet)."""
    of = of if of is not None else job(state="succeeded")
    job_meta = of["metadata"]
    name = f"{job_meta['name']}-{suffix}"
    state: Json
    if message is None and phase == "Running":
        state = {"running": {"startedAt": stamp(NOW - timedelta(seconds=30))}}
    else:
        terminated: Json = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "finishedAt": stamp(NOW - timedelta(seconds=3)),
        }
        if message is not None:
            terminated["message"] = message
        state = {"terminated": terminated}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "45",
            "labels": {
                "job-name": job_meta["name"],
                "batch.kubernetes.io/job-name": job_meta["name"],
                "controller-uid": job_meta["uid"],
                LABEL_SANDBOX_SNAPSHOT_NAME: job_meta["labels"][LABEL_SANDBOX_SNAPSHOT_NAME],
            },
            "ownerReferences": [owner_reference(of)],
        },
        "spec": copy.deepcopy(of["spec"]["template"]["spec"]),
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "commit", "ready": False, "state": state}],
        },
    }


# -- observing and planning -----------------------------------------------------------------


def cache_of(*objects: Json) -> ObjectCache:
    cache = ObjectCache()
    for obj in objects:
        cache.observe("added", copy.deepcopy(obj))
    return cache


def observe(
    *objects: Json,
    settings: SnapshotSettings = SETTINGS,
    name: str = SNAP,
    last_error: str | None = None,
    failure_persists: bool = False,
) -> SnapshotObservation:
    """What the snapshot worker would hand ``plan_snapshot`` for SandboxSnapshot ``name``,
    given the objects its cache holds (and the previous pass's failure)."""
    return observe_snapshot(
        ObjectKey("SandboxSnapshot", NS, name),
        cache_of(*objects),
        settings,
        last_error=last_error,
        failure_persists=failure_persists,
    )


def plan(
    *objects: Json,
    settings: SnapshotSettings = SETTINGS,
    name: str = SNAP,
    now: datetime = NOW,
    last_error: str | None = None,
    failure_persists: bool = False,
) -> Plan:
    observed = observe(
        *objects,
        settings=settings,
        name=name,
        last_error=last_error,
        failure_persists=failure_persists,
    )
    return plan_snapshot(observed, now)


# -- reading plans --------------------------------------------------------------------------


def creates(result: Plan, kind: str | None = None) -> list[Json]:
    return [
        a.body
        for a in actions_of(result)
        if isinstance(a, Create) and (kind is None or a.body.get("kind") == kind)
    ]


def created_job(result: Plan, name: str = f"{SNAP}-commit") -> Json:
    (found,) = [b for b in creates(result, "Job") if b["metadata"]["name"] == name]
    return found


def status_patch(result: Plan) -> Json | None:
    patches = [a for a in actions_of(result) if isinstance(a, Patch) and a.subresource == "status"]
    assert len(patches) <= 1
    if not patches:
        return None
    assert patches[0].target.kind == "SandboxSnapshot" and patches[0].target.namespace == NS
    assert patches[0].conditional, "a status write is made on the version the pass read"
    status: Json = patches[0].patch["status"]
    return status


def metadata_patches(result: Plan) -> list[Patch]:
    return [a for a in actions_of(result) if isinstance(a, Patch) and a.subresource is None]


def deletes(result: Plan) -> list[Delete]:
    return [a for a in actions_of(result) if isinstance(a, Delete)]


def conditions_of(status: Json | None) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c["reason"], c["message"])
        for c in (status or {}).get("conditions") or ()
    }


def commit_container(body: Json) -> Json:
    (container,) = body["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container
