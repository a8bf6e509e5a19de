"""``plan_batch``: one pass of an OpenSandbox BatchSandbox (docs/opensandbox.md §3), in upstream's
order: expiry, auto-assign, deletion, the Pods (created here in template mode; given by the
Pool in pooled mode), then the endpoints annotation and the status.

Template mode: Pod ``i`` is ``<name>-<i>``, made from ``spec.template`` with ``shardPatches[i]``
applied as a strategic merge patch of the Pod (containers merge by name), labelled with its
index and the sandbox's name, and controlled by the sandbox. A Pod's index is its ``pod-index``
label, else the decimal suffix of its name after the last ``-``. A missing index is created
again (a deleted Pod comes back under its name once the old one is gone); there is no
scale-in, as upstream. Where this differs from upstream, on purpose:

- A Pod whose index cannot be read (upstream's parse error fails the whole pass) is listed
  after the others and holds no index.
- The runtime's expectations are read per name: an index whose create has not shown on the bus
  yet is not created again, the other missing ones are (upstream waits for all of them), and a
  create whose answer never came is issued again (it makes the Pod or answers AlreadyExists).
- A name held by a Pod the sandbox does not control (a former incarnation's, still
  terminating, or someone else's) is not created over; upstream's create fails with
  AlreadyExists on every pass. The plan waits for a terminating one and reports any other as
  an error.
- A shard patch that cannot be applied is a plan error with the reason, and the status is
  still written. A sandbox with neither ``spec.template`` nor ``spec.poolRef`` is
  ``InvalidSpec``/``NoTemplate`` (sandbus's, as the Pool's), without a retry: a change of its
  spec wakes it.
- An expired sandbox's pass ends with its Delete (upstream carries on with its in-memory copy);
  the deletion's event brings the next pass.

Pooled mode: the Pool gives the Pods and writes ``alloc-status``; this side reads it (its Pods
in that order, without those ``alloc-release`` asks back). It reports, as conditions, why a
sandbox waits (docs/conditions.md; upstream leaves most of it silent, docs/opensandbox.md §9.7,
§9.14, §9.4, §2.12):

- ``PoolAllocationPending``, upstream's type, while the sandbox is short of Pods and its Pool
  cannot give them: reason ``PoolCapacityExhausted`` (upstream's) when the Pool is at poolMax
  and has fewer free Pods than the sandbox lacks, ``PoolNotFound`` (sandbus's) when
  ``poolRef`` names no Pool of the namespace; cleared when the Pods come or the Pool appears.
  Short counts as sandbus's Pool does: a Pod of ``alloc-status`` counts while it exists or was
  released (a released Pod is not replaced), one that vanished without a release does not.
  The type sandbus wrote for a full Pool before, ``PoolCapacityExhausted``, is dropped by the
  next status write;
- ``PoolAssignFailed`` when ``poolRef: "*"`` finds no Pool (upstream returns an error);
- ``AllocationRefused`` for a malformed allocation annotation or a release of a Pod the
  sandbox does not hold. A malformed ``alloc-status`` leaves the Pods unknown: the endpoints
  annotation and the status's counters, phase and conditions stay as they are (upstream's pass
  fails there and writes nothing), the condition is added.

Each of these conditions, when it appears or its reason changes, also makes a Warning Event
about the sandbox, its reason the condition's, created after the status write that carries
the condition (so a refused status write makes no Event).

A sandbox being deleted whose Pool is gone drops the ``pool-allocation`` finalizer itself,
since no Pool will (§9.28); one whose Pool exists leaves it to the Pool.

Status: counters, phase and conditions by the rules of §3.7 (one Ready Pod makes it
``Succeed``; ``Failed`` is sticky; conditions exist only while True; a condition's
``lastTransitionTime`` moves only when its reason or message does), written as a merge patch
of the whole status, only when it changes, with the sandbox's version as precondition. The
first write waits for a Pod unless there is a condition of ours to report; the endpoints
annotation's first write waits until it is not ``[]``. The task counters are carried over as
they are (tasks are not built here).

Pause and resume (:mod:`.pause`) come before the Pods: the pause/resume flow may write first
(the pause snapshot, the spec of a sandbox that leaves its Pool or resumes from its
snapshot), hold the Pods back (Pausing, Paused, a resume until its images are in the
template), and set the phase and the PauseFailed/ResumeFailed conditions the status starts
from.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import msgspec

from api.objects import Json, labels_of, metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
    ANNOTATION_ENDPOINTS,
    FINALIZER_POOL_ALLOCATION,
    FINALIZER_TASK_CLEANUP,
    GROUP,
    LABEL_BATCH_SANDBOX_NAME,
    LABEL_POD_INDEX,
    VERSION,
)
from api.patching.errors import PatchError
from api.patching.strategic import strategic_merge_patch
from events.envelope import ObjectKey
from services.claim.core.batch.assign import PoolAssigned, choose_pool, wants_auto_assign
from services.claim.core.batch.pause import PauseStep, pause_snapshot_name, pause_step
from services.claim.core.batch.tasks import (
    TaskMemo,
    TaskReport,
    TaskStep,
    plan_tasks,
    tasks_running,
)
from services.domain.opensandbox.allocation import parse_pod_list
from services.domain.opensandbox.pods import is_pod_ready
from services.runtime.cache import ObjectCache
from services.runtime.kube_events import warning_when_raised
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Plan, Together
from services.runtime.reconcile.expectations import Expectations
from services.runtime.times import parse_time, rfc3339_nano

__all__ = ["CONTROLLER_NAME", "BatchObservation", "observe_batch", "plan_batch", "pod_index"]

API_VERSION: Final = f"{GROUP}/{VERSION}"
CONTROLLER_NAME: Final = "batchsandbox-controller"
"""The controller its Events name as their reporter (upstream's BatchSandbox controller)."""
FAILURE_REASONS: Final = frozenset(
    {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError"}
)
ASSIGN_RETRY: Final = 30.0
"""Seconds between looks for a Pool that fits a ``poolRef: "*"`` (a Pool's change comes first)."""
EXPECTATIONS_RECHECK: Final = 30.0
"""Seconds between looks while creates of ours have not shown (the bus wakes us sooner)."""
TAKEN_RECHECK: Final = 5.0
"""Seconds between looks while a terminating Pod of another holds one of our names."""

_PHASE_CONDITIONS: Final[Mapping[str, tuple[str, str, str]]] = {
    "Pending": ("Progressing", "Creating", "Sandbox is being created"),
    "Succeed": ("Ready", "PodsReady", "Sandbox is running"),
    "Pausing": ("Progressing", "PauseInProgress", "Pausing sandbox"),
    "Paused": ("Paused", "Paused", "Sandbox is paused"),
    "Resuming": ("Progressing", "ResumeInProgress", "Resuming sandbox"),
}
_KEPT_CONDITIONS: Final = ("PauseFailed", "ResumeFailed")
"""Conditions of the pause/resume flow, which this pass keeps as they are."""
_OUR_CONDITIONS: Final = frozenset(
    {
        "PoolAllocationPending",
        "PoolAssignFailed",
        "AllocationRefused",
        "PoolCapacityExhausted",
        "InvalidSpec",
    }
)
"""Conditions each pass reports afresh (upstream writes none of them but PoolAllocationPending,
which it also derives each pass). ``PoolCapacityExhausted`` is the type sandbus wrote before it
took upstream's name: never written again, so the next status write drops it."""
_TASK_COUNTERS: Final = ("taskRunning", "taskSucceed", "taskFailed", "taskUnknown", "taskPending")


class BatchObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    sandbox: Json | None
    pods: tuple[Json, ...] = ()
    """Template mode: the Pods it controls. Pooled: the Pods its ``alloc-status`` names."""
    taken: tuple[Json, ...] = ()
    """Template mode: Pods it does not control that bear the name of one of its missing
    indices (a former incarnation's, or someone else's)."""
    pool: Json | None = None
    """The Pool its ``poolRef`` names."""
    pools: tuple[Json, ...] = ()
    """Every Pool of the namespace, when ``poolRef`` is ``"*"``."""
    snapshot: Json | None = None
    """Its pause snapshot ``<name>-pause``, if there is one."""
    expectations: Expectations | None = None
    pull_secret: str = ""
    """Added to the template's ``imagePullSecrets`` when it resumes from its snapshot."""
    task_memo: TaskMemo | None = None
    """Its tasks: which Pod runs each, and its last known state (kept on the bus)."""
    reports: Mapping[str, TaskReport] = msgspec.field(default_factory=dict)
    """What its Pods' task executors said last, by Pod name."""


def _pool_ref(sandbox: Mapping[str, Any]) -> str:
    return str((sandbox.get("spec") or {}).get("poolRef") or "")


def _name(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name") or "")


def _replicas(sandbox: Mapping[str, Any]) -> int:
    value = (sandbox.get("spec") or {}).get("replicas")
    return value if isinstance(value, int) and value >= 0 else 1


def pod_index(pod: Mapping[str, Any]) -> int | None:
    """The replica index of a template-mode Pod (upstream's ``parseIndex``): its ``pod-index``
    label when it has one, else the decimal suffix of its name after the last ``-``; None when
    that is not a number."""
    label = labels_of(pod).get(LABEL_POD_INDEX)
    text = str(label) if label else _name(pod).rsplit("-", 1)[-1]
    return int(text) if text.isascii() and text.isdigit() else None


def observe_batch(
    key: ObjectKey,
    cache: ObjectCache,
    *,
    expectations: Expectations | None = None,
    pull_secret: str = "",
    task_memo: TaskMemo | None = None,
    reports: Mapping[str, TaskReport] | None = None,
) -> BatchObservation:
    sandbox = cache.get(key)
    if sandbox is None:
        return BatchObservation(namespace=key.namespace, name=key.name, sandbox=None)
    ref = _pool_ref(sandbox)
    pods: tuple[Json, ...]
    taken: list[Json] = []
    if ref:
        annotations = metadata_of(sandbox).get("annotations") or {}
        try:
            names = parse_pod_list(annotations, ANNOTATION_ALLOC_STATUS)
        except ValueError:
            names = []
        found = (cache.get(ObjectKey("Pod", key.namespace, name), keep=True) for name in names)
        pods = tuple(pod for pod in found if pod is not None)
    else:
        uid = str(metadata_of(sandbox).get("uid") or "")
        pods = tuple(cache.owned_by("Pod", uid)) if uid else ()
        held = {pod_index(pod) for pod in pods}
        for index in range(_replicas(sandbox)):
            if index not in held:
                other = cache.get(ObjectKey("Pod", key.namespace, f"{key.name}-{index}"))
                if other is not None:
                    taken.append(other)
    pool = cache.get(ObjectKey("Pool", key.namespace, ref)) if ref and ref != "*" else None
    pools = tuple(cache.objects("Pool", key.namespace)) if ref == "*" else ()
    return BatchObservation(
        namespace=key.namespace,
        name=key.name,
        sandbox=sandbox,
        pods=pods,
        taken=tuple(taken),
        pool=pool,
        pools=pools,
        snapshot=cache.get(
            ObjectKey("SandboxSnapshot", key.namespace, pause_snapshot_name(key.name))
        ),
        expectations=expectations,
        pull_secret=pull_secret,
        task_memo=task_memo,
        reports=dict(reports or {}),
    )


@dataclass
class _Pass:
    obs: BatchObservation
    sandbox: Json
    now: datetime
    actions: list[Action] = field(default_factory=list)
    problems: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Our own conditions to report: type → (reason, message)."""
    notes: list[str] = field(default_factory=list)
    requeue: float | None = None
    errors: list[str] = field(default_factory=list)
    blind: bool = False
    """``alloc-status`` is malformed: which Pods the sandbox holds is unknown."""
    given: int = 0
    """Pooled: how many Pods the Pool has given that still count against ``replicas``."""
    tasks: TaskStep | None = None

    @property
    def memo(self) -> TaskMemo | None:
        return self.tasks.memo if self.tasks is not None else self.obs.task_memo

    def plan(self, reason: str) -> Plan:
        if self.tasks is not None and self.tasks.actions:
            self.actions.append(Together(tuple(self.tasks.actions)))
        return Plan(
            actions=tuple(self.actions),
            reason=reason,
            requeue_after=self.requeue,
            error="; ".join(self.errors) or None,
            memo=self.memo,
        )

    @property
    def key(self) -> ObjectKey:
        return ObjectKey("BatchSandbox", self.obs.namespace, self.obs.name)

    @property
    def meta(self) -> Mapping[str, Any]:
        return metadata_of(self.sandbox)

    def later(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)


def plan_batch(obs: BatchObservation, now: datetime) -> Plan:
    sandbox = obs.sandbox
    if sandbox is None:
        return Plan(reason="gone")
    run = _Pass(obs, sandbox, now)
    meta = run.meta
    deleting = bool(meta.get("deletionTimestamp"))
    expire = parse_time((sandbox.get("spec") or {}).get("expireTime"))
    if expire is not None and not deleting:
        if expire < now:
            run.actions.append(
                Delete(run.key, uid=str(meta.get("uid") or "") or None, why="its expireTime passed")
            )
            run.requeue = None
            return run.plan(f"expired at {rfc3339_nano(expire)}")
        run.later((expire - now).total_seconds())
    if wants_auto_assign(sandbox) and not deleting:
        assigned = choose_pool(sandbox, obs.pools)
        if isinstance(assigned, PoolAssigned):
            patch = {
                "metadata": {"resourceVersion": str(meta.get("resourceVersion") or "")},
                "spec": {"poolRef": assigned.pool},
            }
            run.actions.append(
                Patch(run.key, patch, why=f"auto-assign: {assigned.pool}", on_conflict="refresh")
            )
            run.requeue = None
            return run.plan(f"assigned to Pool {assigned.pool}")
        run.problems["PoolAssignFailed"] = (assigned.reason, assigned.message)
        run.later(ASSIGN_RETRY)
    if deleting:
        return _deleting(run)
    pods = _sorted_pods(run)
    step = pause_step(
        sandbox,
        pods,
        obs.snapshot,
        pull_secret=obs.pull_secret,
        tasks_running=tasks_running(obs.task_memo),
    )
    run.actions += step.actions
    if step.note:
        run.notes.append(step.note)
    if step.requeue is not None:
        run.later(step.requeue)
    if step.stop:
        return run.plan(_reason(run, pods))
    if not _pool_ref(sandbox) and not step.hold_pods:
        _create_missing(run, pods)
    phase = step.phase or (sandbox.get("status") or {}).get("phase")
    if phase == "Pausing" and tasks_running(obs.task_memo):
        _tasks(run, pods, stop=True)  # stopped before the snapshot commits the Pod
    elif phase in ("Pausing", "Paused"):
        # A paused sandbox has no Pods to run tasks on; a resumed one starts them afresh.
        run.tasks = TaskStep()
    else:
        _tasks(run, pods)
    _endpoints(run, pods)
    _status(run, pods, step)
    return run.plan(_reason(run, pods))


def _tasks(run: _Pass, pods: Sequence[Json], *, stop: bool = False) -> None:
    """The tasks' part of the pass (:mod:`.tasks`): the task-cleanup finalizer while it has a
    taskTemplate, the executors to talk to, and the Pods its finished tasks give back."""
    tasks = plan_tasks(run.sandbox, pods, run.obs.task_memo, run.obs.reports, run.now, stop=stop)
    run.tasks = tasks
    run.notes += tasks.notes
    if tasks.error:
        run.errors.append(tasks.error)
    if tasks.requeue is not None:
        run.later(tasks.requeue)
    finalizers = list(run.meta.get("finalizers") or ())
    has_tasks = (run.sandbox.get("spec") or {}).get("taskTemplate") is not None
    if has_tasks and FINALIZER_TASK_CLEANUP not in finalizers:
        run.actions.append(
            Patch(
                run.key,
                {
                    "metadata": {
                        "finalizers": [*finalizers, FINALIZER_TASK_CLEANUP],
                        "resourceVersion": str(run.meta.get("resourceVersion") or ""),
                    }
                },
                why="its tasks are stopped before it goes",
                on_conflict="refresh",
            )
        )
    if tasks.release and _pool_ref(run.sandbox):
        annotations = run.meta.get("annotations") or {}
        try:
            asked = parse_pod_list(annotations, ANNOTATION_ALLOC_RELEASE)
        except ValueError:
            asked = []
        wanted = sorted(set(asked) | set(tasks.release))
        if wanted != sorted(asked):
            value = json.dumps({"pods": wanted}, separators=(",", ":"))
            run.actions.append(
                Patch(
                    run.key,
                    {"metadata": {"annotations": {ANNOTATION_ALLOC_RELEASE: value}}},
                    why=f"its tasks are done: give {', '.join(tasks.release)} back to the Pool",
                )
            )


def _reason(run: _Pass, pods: Sequence[Json]) -> str:
    """What ``sandbus explain`` says of the pass: how many Pods, and for a pooled sandbox which
    ones and from where (the Pool's own decisions say why it gave them)."""
    held = "unknown" if run.blind else str(len(pods))
    parts = [f"{held} of {_replicas(run.sandbox)} Pods"]
    ref = _pool_ref(run.sandbox)
    if ref and pods and not run.blind:
        names = [str(metadata_of(p).get("name")) for p in pods]
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        parts[0] += f" from Pool {ref}: {shown}"
    parts += run.notes
    parts += [f"{kind}: {message}" for kind, (_, message) in sorted(run.problems.items())]
    return "; ".join(parts)


def _deleting(run: _Pass) -> Plan:
    """Pooled: the Pool releases the Pods and drops its finalizer; if the Pool is gone, no one
    will, so this side does. Template mode: the garbage collector takes the Pods. With tasks:
    every task is stopped first, then the task-cleanup finalizer goes (the counters are left
    as they are)."""
    finalizers = list(run.meta.get("finalizers") or ())
    ref = _pool_ref(run.sandbox)
    why = []
    if ref and run.obs.pool is None and FINALIZER_POOL_ALLOCATION in finalizers:
        finalizers.remove(FINALIZER_POOL_ALLOCATION)
        why.append(f"its Pool {ref} is gone: nothing else will release it")
    if FINALIZER_TASK_CLEANUP in finalizers or run.obs.task_memo is not None:
        tasks = plan_tasks(
            run.sandbox, _sorted_pods(run), run.obs.task_memo, run.obs.reports, run.now
        )
        run.tasks = tasks
        run.notes += tasks.notes
        if tasks.requeue is not None:
            run.later(tasks.requeue)
        if tasks.cleaned and FINALIZER_TASK_CLEANUP in finalizers:
            finalizers.remove(FINALIZER_TASK_CLEANUP)
            why.append("its tasks are stopped")
        elif not tasks.cleaned:
            run.notes.append("stopping its tasks")
    if why:
        patch = {
            "metadata": {
                "finalizers": finalizers,
                "resourceVersion": str(run.meta.get("resourceVersion") or ""),
            }
        }
        run.actions.append(Patch(run.key, patch, why="; ".join(why), on_conflict="refresh"))
    return run.plan("; ".join(["being deleted", *run.notes]))


# -- the Pods ---------------------------------------------------------------------------------


def _sorted_pods(run: _Pass) -> list[Json]:
    """The sandbox's Pods in index order: pooled, their place in ``alloc-status`` (without
    those asked back by ``alloc-release``); template mode, their index, then name."""
    pods = list(run.obs.pods)
    if not _pool_ref(run.sandbox):

        def order(pod: Json) -> tuple[bool, int, str]:
            index = pod_index(pod)
            return (index is None, index or 0, _name(pod))

        return sorted(pods, key=order)
    annotations = run.meta.get("annotations") or {}
    try:
        listed = parse_pod_list(annotations, ANNOTATION_ALLOC_STATUS)
    except ValueError as error:
        run.problems["AllocationRefused"] = ("MalformedAnnotation", str(error))
        run.blind = True
        return []
    others: dict[str, set[str]] = {}
    for key in (ANNOTATION_ALLOC_RELEASE, ANNOTATION_ALLOC_RELEASED):
        try:
            others[key] = set(parse_pod_list(annotations, key))
        except ValueError as error:
            run.problems.setdefault("AllocationRefused", ("MalformedAnnotation", str(error)))
            others[key] = set()
    asked_back = others[ANNOTATION_ALLOC_RELEASE]
    foreign = sorted(asked_back - set(listed))
    if foreign:
        run.problems.setdefault(
            "AllocationRefused",
            (
                "ReleaseOfForeignPod",
                f"alloc-release names Pods this sandbox does not hold: {', '.join(foreign)}",
            ),
        )
    existing = {_name(p) for p in pods}
    counted = existing | asked_back | others[ANNOTATION_ALLOC_RELEASED]
    run.given = len({name for name in listed if name in counted})
    place = {name: i for i, name in reversed(list(enumerate(listed)))}
    kept = [p for p in pods if _name(p) not in asked_back]
    return sorted(kept, key=lambda p: place.get(_name(p), len(place)))


def _create_missing(run: _Pass, pods: Sequence[Json]) -> None:
    name = run.obs.name
    have = {pod_index(p) for p in pods}
    missing = [i for i in range(_replicas(run.sandbox)) if i not in have]
    expected = run.obs.expectations
    if expected:
        run.later(EXPECTATIONS_RECHECK)  # the bus showing them wakes us sooner
    if not missing:
        return
    if expected is not None and expected.pending("Pod") > len(expected.pending_names("Pod")):
        run.notes.append("waiting to see a create of ours without a name")
        return
    pending = expected.pending_names("Pod") - expected.unanswered("Pod") if expected else set()
    taken = {_name(p): p for p in run.obs.taken}
    spec = run.sandbox.get("spec") or {}
    template = spec.get("template")
    patches = spec.get("shardPatches") or []
    waiting: list[str] = []
    for index in missing:
        pod_name = f"{name}-{index}"
        if pod_name in pending:
            waiting.append(pod_name)
            continue
        other = taken.get(pod_name)
        if other is not None:
            if metadata_of(other).get("deletionTimestamp"):
                run.notes.append(f"waiting for the old Pod {pod_name} to go")
                run.later(TAKEN_RECHECK)
            else:
                run.errors.append(
                    f"Pod {pod_name} exists and is not this BatchSandbox's: "
                    f"replica {index} cannot be made"
                )
            continue
        if not isinstance(template, dict) or not template:
            run.problems["InvalidSpec"] = (
                "NoTemplate",
                "neither spec.template nor spec.poolRef is set: there is nothing to make its "
                f"{_replicas(run.sandbox)} Pod(s) from; set spec.template, or spec.poolRef to "
                "take them from a Pool",
            )
            return
        patch = patches[index] if isinstance(patches, list) and index < len(patches) else None
        try:
            body = _pod(run, template, index, patch)
        except PatchError as error:
            run.errors.append(f"shardPatches[{index}] cannot be applied: {error.message}")
            return
        run.actions.append(Create(body, why=f"replica {index}"))
    if waiting:
        run.notes.append(f"waiting to see our creates of {', '.join(waiting)}")


def _pod(run: _Pass, template: Mapping[str, Any], index: int, patch: Any) -> Json:
    """Pod ``index`` from the template, its shard patch applied; raises PatchError."""
    metadata = template.get("metadata")
    pod: Json = copy.deepcopy(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata if isinstance(metadata, dict) else {},
            "spec": template.get("spec") or {},
        }
    )
    if patch is not None:
        pod = strategic_merge_patch(pod, patch)
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or not isinstance(labels, dict | None):
        raise PatchError(400, "BadRequest", "the patched Pod's metadata or labels is no object")
    name = run.obs.name
    meta = dict(meta)
    meta.update(
        name=f"{name}-{index}",
        namespace=run.obs.namespace,
        labels={**(labels or {}), LABEL_POD_INDEX: str(index), LABEL_BATCH_SANDBOX_NAME: name},
        ownerReferences=[
            {
                "apiVersion": API_VERSION,
                "kind": "BatchSandbox",
                "name": name,
                "uid": str(run.meta.get("uid") or ""),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    )
    meta.pop("generateName", None)
    return {**pod, "metadata": meta}


# -- endpoints and status ---------------------------------------------------------------------


def _ip(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("podIP") or "")


def _endpoints(run: _Pass, pods: Sequence[Json]) -> None:
    if run.blind:
        return
    value = json.dumps([_ip(p) for p in pods], separators=(",", ":"))
    annotations = run.meta.get("annotations") or {}
    current = annotations.get(ANNOTATION_ENDPOINTS)
    if current == value or (current is None and value == "[]"):
        return
    run.actions.append(
        Patch(
            run.key,
            {"metadata": {"annotations": {ANNOTATION_ENDPOINTS: value}}},
            why="report the Pods' IPs in index order",
        )
    )


def _ready(pod: Mapping[str, Any]) -> bool:
    return not metadata_of(pod).get("deletionTimestamp") and is_pod_ready(pod)


def _failure(pod: Mapping[str, Any]) -> str | None:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    for container in (pod.get("status") or {}).get("containerStatuses") or ():
        reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in FAILURE_REASONS:
            return str(reason)
    return None


def _capacity(run: _Pass) -> None:
    """``PoolAllocationPending`` while short of Pods its Pool cannot give (module doc): the Pool
    does not exist, or it is at poolMax with too few free Pods."""
    ref = _pool_ref(run.sandbox)
    short = _replicas(run.sandbox) - run.given
    if not ref or ref == "*" or run.blind or short <= 0:
        return
    pool = run.obs.pool
    if pool is None:
        run.problems["PoolAllocationPending"] = (
            "PoolNotFound",
            f"Pool {ref} does not exist in namespace {run.obs.namespace}: create it, or set "
            f"spec.poolRef to a Pool that exists; waiting for {short} Pods",
        )
        return
    pool_max = ((pool.get("spec") or {}).get("capacitySpec") or {}).get("poolMax")
    status = pool.get("status") or {}
    total, available = int(status.get("total") or 0), int(status.get("available") or 0)
    if isinstance(pool_max, int) and total >= pool_max and available < short:
        run.problems["PoolAllocationPending"] = (
            "PoolCapacityExhausted",
            f"Pool {ref} is at poolMax ({pool_max}) with {available} free Pods; waiting for "
            f"{short} more",
        )


def _warnings(run: _Pass, conditions: Mapping[Any, Json]) -> None:
    """A Warning Event for each condition of ours that appears, or changes its reason, in the
    status just planned (module doc)."""
    for kind, (reason, message) in sorted(run.problems.items()):
        event = warning_when_raised(
            run.sandbox,
            conditions.get(kind),
            condition=kind,
            reason=reason,
            message=message,
            now=run.now,
            controller=CONTROLLER_NAME,
        )
        if event is not None:
            run.actions.append(Create(event, why=f"{kind}: {reason}"))


def _phase(phase: str, pods: Sequence[Json], ready: int) -> tuple[str, dict[str, tuple[str, str]]]:
    """The phase and the conditions it brings, by §3.7, from the phase it had (or the one the
    pause/resume flow moved it to): Pausing and Paused stay; Resuming lasts until a Pod is
    Ready, and a Pod failing meanwhile fails the resume too."""
    wanted: dict[str, tuple[str, str]] = {}
    failures = [(p, reason) for p in pods if (reason := _failure(p)) is not None]
    if phase in ("Pausing", "Paused"):
        pass
    elif failures or phase == "Failed":
        if failures:
            reason = Counter(r for _, r in failures).most_common(1)[0][0]
            message = (
                f"{len(failures)}/{len(pods)} observed pods failed; primary reason={reason}; "
                f"sample pod={_name(failures[0][0])}"
            )
            if phase == "Resuming":
                message += " during resume"
                wanted["ResumeFailed"] = (reason, message)
            wanted["PodFailed"] = (reason, message)
        phase = "Failed"
    elif phase == "Resuming" and ready == 0:
        pass
    else:
        phase = "Succeed" if ready > 0 else "Pending"
    if phase in _PHASE_CONDITIONS:
        kind, reason, message = _PHASE_CONDITIONS[phase]
        wanted[kind] = (reason, message)
    return phase, wanted


def _status(run: _Pass, pods: Sequence[Json], step: PauseStep) -> None:
    sandbox = run.sandbox
    current: Json = dict(sandbox.get("status") or {})
    wanted: dict[str, tuple[str, str]]
    conditions = {c.get("type"): c for c in current.get("conditions") or () if c.get("type")}
    _capacity(run)
    if run.blind and current.get("phase"):
        # Which Pods it holds is unknown: keep what was reported, add the condition.
        phase = str(current["phase"])
        counts = {k: int(current.get(k) or 0) for k in ("replicas", "allocated", "ready")}
        wanted = {
            str(kind): (str(c.get("reason") or ""), str(c.get("message") or ""))
            for kind, c in conditions.items()
            if kind not in _OUR_CONDITIONS
        }
    else:
        ready = sum(1 for p in pods if _ready(p))
        phase, wanted = _phase(step.phase or str(current.get("phase") or ""), pods, ready)
        counts = {
            "replicas": len(pods),
            "allocated": sum(1 for p in pods if (p.get("spec") or {}).get("nodeName") or _ip(p)),
            "ready": ready,
        }
    wanted.update(run.problems)
    for kind, value in step.conditions.items():
        if value is not None:
            wanted[kind] = value
    removed = {kind for kind, value in step.conditions.items() if value is None}
    stamp = rfc3339_nano(run.now)
    written: list[Json] = []
    for kind, (reason, message) in sorted(wanted.items()):
        before = conditions.get(kind)
        same = (
            before is not None
            and before.get("status") == "True"
            and before.get("reason") == reason
            and before.get("message") == message
        )
        written.append(
            before
            if same and before is not None
            else {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": stamp,
            }
        )
    written += [
        conditions[k]
        for k in _KEPT_CONDITIONS
        if k in conditions and k not in wanted and k not in removed
    ]
    desired: Json = {}
    generation = run.meta.get("generation")
    if isinstance(generation, int):
        desired["observedGeneration"] = generation
    desired.update(counts)
    counters = run.tasks.counters if run.tasks is not None and run.tasks.counters else {}
    desired.update({k: int(counters.get(k, current.get(k) or 0)) for k in _TASK_COUNTERS})
    desired.update(phase=phase, conditions=written)
    for name in ("pauseObservedGeneration", "taskLastErrorMessage"):
        if name in current:
            desired[name] = current[name]
    if run.tasks is not None and run.tasks.last_error:
        desired["taskLastErrorMessage"] = run.tasks.last_error
    if step.acknowledge == "now" and isinstance(generation, int):
        desired["pauseObservedGeneration"] = generation
    if not current.get("phase") and not pods and not run.problems and _replicas(sandbox) > 0:
        return  # upstream's first status waits for a Pod
    if _comparable(current) == _comparable(desired):
        return
    observed = current.get("pauseObservedGeneration")
    behind = not isinstance(observed, int) or (
        isinstance(generation, int) and observed < generation
    )
    if step.acknowledge == "ride" and isinstance(generation, int) and behind:
        desired["pauseObservedGeneration"] = generation
    run.actions.append(
        Patch(
            run.key,
            {"status": desired},
            subresource="status",
            why="report its Pods, phase and conditions",
            on_conflict="refresh",
            conditional=True,
        )
    )
    _warnings(run, conditions)


def _comparable(status: Mapping[str, Any]) -> Json:
    conditions = sorted(
        (
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or ()
        ),
        key=str,
    )
    return {**{k: v for k, v in status.items() if k != "conditions"}, "conditions": conditions}
