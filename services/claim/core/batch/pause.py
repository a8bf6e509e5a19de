"""Pause and resume of a BatchSandbox (docs/opensandbox.md §3.10, and the traps of §9.18-9.20).

``spec.pause: true`` asks for a pause: the sandbox's one Pod is committed to images by its
pause snapshot ``<sandbox>-pause`` (a SandboxSnapshot the sandbox controls, which the snapshot
worker commits), then the Pod goes (a template-mode Pod is deleted; a pooled one goes back to
its Pool, the sandbox keeping the Pod's template as its own) and the phase is Paused.
``spec.pause: false`` on a Paused sandbox resumes it: its template's images become the
snapshot's, and the normal flow creates ``<sandbox>-0`` from it; once that Pod is Ready the
phase is Succeed and the snapshot is deleted. The sandbox keeps its name and uid throughout.

Upstream dispatches on ``generation > pauseObservedGeneration`` and replays the last intent on
*any* spec change (§9.18): a renewal of ``expireTime`` after a resume sends the sandbox through
Resuming again, and on a Paused sandbox deletes the good snapshot and pauses again. Here the
intent is compared with the state instead, so a spec change that does not change the intent
changes nothing:

- ``pause: true`` pauses a sandbox that is running (Succeed, or Failed) and not Paused; one
  still starting (no phase, Pending) is paused once it runs;
- ``pause: false`` resumes a Paused sandbox;
- a failed pause or resume (``PauseFailed``, ``ResumeFailed``) is not retried by itself, nor
  by an unrelated spec change: setting ``pause`` to null (or to the other value) withdraws the
  request and removes the condition, and asking again retries (upstream's retry path,
  null → true);
- ``pauseObservedGeneration`` is written when an intent is acted on (Pausing, Resuming,
  PauseFailed, Paused); otherwise a newer generation rides on the next status write, as
  upstream's does.

The rest is upstream's: only ``replicas: 1`` can pause (else ``PauseFailed``
``UnsupportedReplicas``, the phase kept); a terminal pause snapshot left from before is deleted
first, without acknowledging; a failed snapshot leaves the sandbox running with ``PauseFailed``
``SnapshotFailed`` (or Failed ``PodNotFound`` when its Pod is gone); Paused is acknowledged only
while ``pause`` is still true, so a resume asked during the pause is not lost; a resume whose
snapshot is missing or not Succeed rolls back to Paused with ``ResumeFailed``
(``SnapshotNotFound``, ``SnapshotNotReady``), and a Pod failing during the resume makes it
Failed with ``ResumeFailed``. The pull secret for the snapshot images
(``--resume-pull-secret``) is added to the template once.

Upstream keeps ``alloc-status`` when a pooled pause detaches the sandbox; so does this (readers
of the annotation expect it to only grow). The snapshot worker does not take those Pods for
the sandbox's any more once ``poolRef`` is cleared (services/snapshot/core/source.py, §9.19).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from api.objects import Json, controller_of, metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    FINALIZER_POOL_ALLOCATION,
    GROUP,
    LABEL_BATCH_SANDBOX_NAME,
    LABEL_POD_INDEX,
    LABEL_POOL_NAME,
    LABEL_POOL_REVISION,
    VERSION,
)
from events.envelope import ObjectKey
from services.domain.opensandbox.pods import is_pod_ready
from services.runtime.reconcile.actions import Action, Create, Delete, Patch

__all__ = ["PauseStep", "pause_snapshot_name", "pause_step"]

PAUSE_RECHECK: Final = 1.0
"""Seconds between looks while a pause snapshot goes away (its deletion wakes us sooner)."""
SNAPSHOT_RECHECK: Final = 30.0
"""Seconds between looks while the pause snapshot commits (its changes wake us sooner)."""
_SOLID_LABELS_DROPPED: Final = (
    LABEL_POOL_NAME,
    LABEL_POOL_REVISION,
    LABEL_POD_INDEX,
    LABEL_BATCH_SANDBOX_NAME,
)

Acknowledge = Literal["no", "now", "ride"]


@dataclass(frozen=True)
class PauseStep:
    """What the pause/resume flow decides for one pass of a BatchSandbox."""

    actions: tuple[Action, ...] = ()
    """Writes that come before the rest of the pass."""
    phase: str | None = None
    """The phase the status starts from (None: the one it has)."""
    conditions: Mapping[str, tuple[str, str] | None] = field(default_factory=dict)
    """Pause/resume conditions to set (reason, message) or remove (None)."""
    acknowledge: Acknowledge = "no"
    """``now``: write ``pauseObservedGeneration = generation``; ``ride``: with any other status
    change; ``no``: keep it."""
    stop: bool = False
    """End the pass after the actions (a spec patch: the next pass sees the new spec)."""
    hold_pods: bool = False
    """Create no Pods in this pass."""
    requeue: float | None = None
    note: str = ""


def pause_snapshot_name(sandbox: str) -> str:
    return f"{sandbox}-pause"


def _phase(sandbox: Mapping[str, Any]) -> str:
    return str((sandbox.get("status") or {}).get("phase") or "")


def _conditions(sandbox: Mapping[str, Any]) -> set[str]:
    return {
        str(c.get("type"))
        for c in (sandbox.get("status") or {}).get("conditions") or ()
        if c.get("status") == "True"
    }


def _snapshot_phase(snapshot: Mapping[str, Any] | None) -> str:
    return str(((snapshot or {}).get("status") or {}).get("phase") or "")


def _snapshot_key(sandbox: Mapping[str, Any]) -> ObjectKey:
    meta = metadata_of(sandbox)
    return ObjectKey(
        "SandboxSnapshot", str(meta.get("namespace") or ""), pause_snapshot_name(str(meta["name"]))
    )


def _ready(pod: Mapping[str, Any]) -> bool:
    return not metadata_of(pod).get("deletionTimestamp") and is_pod_ready(pod)


def pause_step(
    sandbox: Mapping[str, Any],
    pods: Sequence[Json],
    snapshot: Mapping[str, Any] | None,
    *,
    pull_secret: str = "",
    tasks_running: bool = False,
) -> PauseStep:
    """The pause/resume part of a pass; ``pods`` are the sandbox's Pods in index order,
    ``snapshot`` its pause snapshot, if any, and ``tasks_running`` whether a task of it still
    runs (a pause stops them before it commits the Pod)."""
    phase = _phase(sandbox)
    want = (sandbox.get("spec") or {}).get("pause")
    conditions = _conditions(sandbox)
    ours = snapshot if snapshot is not None and _controlled_by(snapshot, sandbox) else None
    if snapshot is not None and ours is None:
        return PauseStep(
            hold_pods=phase in ("Pausing", "Paused", "Resuming"),
            note=f"the SandboxSnapshot {pause_snapshot_name(_name(sandbox))} is not this "
            "sandbox's: pause and resume wait for it to go",
            requeue=SNAPSHOT_RECHECK,
        )
    if phase == "Pausing":
        return _sync_pause(sandbox, pods, ours, tasks_running)
    if phase == "Resuming":
        return _continue_resume(sandbox, pods, ours, pull_secret)
    if want is True and phase != "Paused" and "PauseFailed" not in conditions:
        if phase in ("", "Pending"):
            return PauseStep(note="pause asked: it waits until the sandbox runs")
        return _handle_pause(sandbox, ours, tasks_running)
    if want is False and phase == "Paused" and "ResumeFailed" not in conditions:
        return PauseStep(
            phase="Resuming",
            conditions={"ResumeFailed": None},
            acknowledge="now",
            hold_pods=True,
            note="resume asked",
        )
    withdrawn: dict[str, tuple[str, str] | None] = {}
    if want is not True and "PauseFailed" in conditions:
        withdrawn["PauseFailed"] = None
    if want is not False and "ResumeFailed" in conditions:
        withdrawn["ResumeFailed"] = None
    return PauseStep(conditions=withdrawn, acknowledge="ride", hold_pods=phase == "Paused")


def _name(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name") or "")


def _controlled_by(snapshot: Mapping[str, Any], sandbox: Mapping[str, Any]) -> bool:
    owner = controller_of(snapshot)
    return owner is not None and owner.get("uid") == metadata_of(sandbox).get("uid")


def _snapshot(sandbox: Mapping[str, Any]) -> Json:
    meta = metadata_of(sandbox)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SandboxSnapshot",
        "metadata": {
            "name": pause_snapshot_name(_name(sandbox)),
            "namespace": meta.get("namespace"),
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "BatchSandbox",
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"sandboxName": meta.get("name")},
    }


def _handle_pause(
    sandbox: Mapping[str, Any], snapshot: Mapping[str, Any] | None, tasks_running: bool
) -> PauseStep:
    replicas = (sandbox.get("spec") or {}).get("replicas", 1)
    if replicas != 1:
        return PauseStep(
            phase=_phase(sandbox) or "Succeed",
            conditions={
                "PauseFailed": (
                    "UnsupportedReplicas",
                    f"only a BatchSandbox of 1 replica can pause; this one has {replicas}",
                )
            },
            acknowledge="now",
            note="pause refused: replicas is not 1",
        )
    if snapshot is not None:
        meta = metadata_of(snapshot)
        if meta.get("deletionTimestamp"):
            return PauseStep(
                stop=True, requeue=PAUSE_RECHECK, note="waiting for the old pause snapshot to go"
            )
        if _snapshot_phase(snapshot) in ("Succeed", "Failed"):
            delete = Delete(
                _snapshot_key(sandbox),
                uid=str(meta.get("uid") or "") or None,
                why="a pause starts from a new snapshot",
            )
            return PauseStep(
                actions=(delete,),
                stop=True,
                requeue=PAUSE_RECHECK,
                note=f"deleting the {_snapshot_phase(snapshot)} pause snapshot of before",
            )
    actions: tuple[Action, ...] = ()
    if snapshot is None and not tasks_running:
        actions = (Create(_snapshot(sandbox), why="commit the sandbox's Pod"),)
    return PauseStep(
        actions=actions,
        phase="Pausing",
        conditions={"PauseFailed": None},
        acknowledge="now",
        hold_pods=True,
        requeue=SNAPSHOT_RECHECK,
        note="pause asked: stopping its tasks first"
        if tasks_running
        else "pause asked: committing its Pod",
    )


def _snapshot_failure(snapshot: Mapping[str, Any]) -> str:
    for condition in (snapshot.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Failed":
            return str(condition.get("message") or condition.get("reason") or "")
    return "the snapshot failed"


def _sync_pause(
    sandbox: Mapping[str, Any],
    pods: Sequence[Json],
    snapshot: Mapping[str, Any] | None,
    tasks_running: bool,
) -> PauseStep:
    if snapshot is None and tasks_running:
        return PauseStep(hold_pods=True, note="pausing: stopping its tasks first")
    if snapshot is None:
        return PauseStep(
            actions=(Create(_snapshot(sandbox), why="commit the sandbox's Pod"),),
            hold_pods=True,
            requeue=SNAPSHOT_RECHECK,
            note="pausing: creating its snapshot",
        )
    state = _snapshot_phase(snapshot)
    if state == "Succeed":
        return _complete_pause(sandbox, pods)
    if state == "Failed":
        message = _snapshot_failure(snapshot)
        if any((p.get("status") or {}).get("phase") == "Running" for p in pods):
            return PauseStep(
                phase="Succeed",
                conditions={"PauseFailed": ("SnapshotFailed", message)},
                note=f"pause failed, the sandbox runs on: {message}",
            )
        return PauseStep(
            phase="Failed",
            conditions={"PauseFailed": ("PodNotFound", f"{message}; and its Pod is gone")},
            hold_pods=True,
            note=f"pause failed and its Pod is gone: {message}",
        )
    return PauseStep(
        hold_pods=True,
        requeue=SNAPSHOT_RECHECK,
        note=f"pausing: snapshot {_name(snapshot)} is {state or 'new'}",
    )


def _solid_template(pod: Mapping[str, Any]) -> Json:
    """A pooled Pod as a template of the sandbox's own: its labels without the Pool's and the
    BatchSandbox's, its annotations, and its spec without the node it ran on."""
    meta = metadata_of(pod)
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _SOLID_LABELS_DROPPED}
    spec = copy.deepcopy(dict(pod.get("spec") or {}))
    spec.pop("nodeName", None)
    template: Json = {"metadata": {"labels": labels}, "spec": spec}
    if meta.get("annotations"):
        template["metadata"]["annotations"] = dict(meta["annotations"])
    return template


def _complete_pause(sandbox: Mapping[str, Any], pods: Sequence[Json]) -> PauseStep:
    meta = metadata_of(sandbox)
    ack: Acknowledge = "now" if (sandbox.get("spec") or {}).get("pause") is True else "no"
    if (sandbox.get("spec") or {}).get("poolRef"):
        if not pods:
            return PauseStep(
                phase="Failed",
                conditions={
                    "PauseFailed": (
                        "PodNotFound",
                        "the pooled Pod to keep the template of is gone",
                    )
                },
                hold_pods=True,
                note="pause failed: its pooled Pod is gone",
            )
        finalizers = [f for f in meta.get("finalizers") or () if f != FINALIZER_POOL_ALLOCATION]
        patch = {
            "metadata": {
                "finalizers": finalizers,
                "annotations": {ANNOTATION_ALLOC_RELEASE: None},
                "resourceVersion": str(meta.get("resourceVersion") or ""),
            },
            "spec": {"template": _solid_template(pods[0]), "poolRef": ""},
        }
        detach = Patch(
            ObjectKey("BatchSandbox", str(meta.get("namespace") or ""), _name(sandbox)),
            patch,
            why=f"keep the template of {_name(pods[0])} and give the Pod back to its Pool",
            on_conflict="refresh",
        )
        return PauseStep(
            actions=(detach,), stop=True, note="paused: leaving the Pool with its Pod's template"
        )
    deletes = tuple(
        Delete(
            ObjectKey("Pod", str(meta.get("namespace") or ""), _name(pod)),
            uid=str(metadata_of(pod).get("uid") or "") or None,
            why="its disk is in the snapshot",
        )
        for pod in pods
        if not metadata_of(pod).get("deletionTimestamp")
    )
    return PauseStep(
        actions=deletes,
        phase="Paused",
        acknowledge=ack,
        hold_pods=True,
        note="paused",
    )


def _resumed_template(
    template: Mapping[str, Any], images: Mapping[str, str], pull_secret: str
) -> Json:
    resumed = copy.deepcopy(dict(template))
    spec = resumed.setdefault("spec", {})
    for container in spec.get("containers") or ():
        if container.get("name") in images:
            container["image"] = images[container["name"]]
    if pull_secret:
        secrets = list(spec.get("imagePullSecrets") or ())
        if not any(s.get("name") == pull_secret for s in secrets):
            spec["imagePullSecrets"] = [*secrets, {"name": pull_secret}]
    return resumed


def _continue_resume(
    sandbox: Mapping[str, Any],
    pods: Sequence[Json],
    snapshot: Mapping[str, Any] | None,
    pull_secret: str,
) -> PauseStep:
    ready = any(_ready(p) for p in pods)
    if snapshot is None:
        if ready:
            return PauseStep(conditions={"ResumeFailed": None}, note="resumed")
        return PauseStep(
            phase="Paused",
            conditions={"ResumeFailed": ("SnapshotNotFound", "its pause snapshot is gone")},
            hold_pods=True,
            note="resume failed: no snapshot",
        )
    state = _snapshot_phase(snapshot)
    if state != "Succeed":
        return PauseStep(
            phase="Paused",
            conditions={"ResumeFailed": ("SnapshotNotReady", f"snapshot not ready: phase={state}")},
            hold_pods=True,
            note=f"resume failed: the snapshot is {state or 'new'}",
        )
    images = {
        str(c.get("containerName")): str(c.get("imageUri"))
        for c in (snapshot.get("status") or {}).get("containers") or ()
        if c.get("containerName") and c.get("imageUri")
    }
    meta = metadata_of(sandbox)
    spec = sandbox.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, Mapping) or not template:
        return PauseStep(
            phase="Paused",
            conditions={"ResumeFailed": ("TemplateMissing", "spec.template is missing")},
            hold_pods=True,
            note="resume failed: no template",
        )
    resumed = _resumed_template(template, images, pull_secret)
    finalizers = list(meta.get("finalizers") or ())
    if resumed != template or spec.get("poolRef") or FINALIZER_POOL_ALLOCATION in finalizers:
        patch: Json = {
            "metadata": {"resourceVersion": str(meta.get("resourceVersion") or "")},
            "spec": {"template": resumed},
        }
        if spec.get("poolRef"):
            patch["spec"]["poolRef"] = ""
        if FINALIZER_POOL_ALLOCATION in finalizers:
            patch["metadata"]["finalizers"] = [
                f for f in finalizers if f != FINALIZER_POOL_ALLOCATION
            ]
        rewrite = Patch(
            ObjectKey("BatchSandbox", str(meta.get("namespace") or ""), _name(sandbox)),
            patch,
            why=f"run the snapshot's images: {', '.join(sorted(images.values()))}",
            on_conflict="refresh",
        )
        return PauseStep(actions=(rewrite,), stop=True, note="resuming from the snapshot's images")
    if not ready:
        return PauseStep(requeue=None, note="resuming: waiting for its Pod")
    delete = Delete(
        _snapshot_key(sandbox),
        uid=str(metadata_of(snapshot).get("uid") or "") or None,
        why="resumed: the pause snapshot is done with",
    )
    return PauseStep(actions=(delete,), conditions={"ResumeFailed": None}, note="resumed")
