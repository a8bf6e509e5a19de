"""The image-committer Jobs of a SandboxSnapshot, and what they report back
(docs/opensandbox.md §4.3, §9.22).

The commit Job ``<snapshot>-commit`` runs OpenSandbox's image-committer on the source Pod's
node (``nodeName`` is set, so the scheduler is bypassed: the committer must reach that node's
containerd). Its arguments are the image-committer's own: the Pod, its namespace, then one
``<container>:<image URI>`` per container, each its own argv entry, so nothing in a name is
ever read by a shell. It pauses the containers, commits and pushes each, and writes
``{"containers": [{"name", "image", "digest"}]}`` to its termination log, which is where the
digests are read from: the ``commit`` container's ``state.terminated.message`` of a Pod the Job
controls.

When a commit fails the containers may stay paused; the best-effort unpause Job
``<snapshot>-unpause`` (no retries) resumes them. Both Jobs are controlled by the snapshot, so
they go with it, and carry the snapshot's name as a label, on the Job (upstream's) and on its
Pods (ours: it is how the watcher selects the commit Pod among the cluster's Pods).

The Job's settings are upstream's: three retries, kept 300 s after it finishes, a deadline of
``commit_timeout``; root in the container (containerd's socket needs it) without privilege
escalation and with every capability dropped. A push secret, when configured, is mounted where
the committer looks for ``config.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from api.objects import Json, metadata_of
from api.opensandbox import (
    GROUP,
    LABEL_PRIVILEGED_NODE_ACCESS,
    LABEL_SANDBOX_SNAPSHOT_NAME,
    VERSION,
)

__all__ = [
    "COMMITTER_COMMAND",
    "Committed",
    "CommitterSettings",
    "commit_job",
    "commit_job_name",
    "commit_target",
    "committed_images",
    "job_failure",
    "job_succeeded",
    "unpause_job",
    "unpause_job_name",
]

COMMITTER_COMMAND: Final = "/usr/local/bin/image-committer"
CONTAINERD_SOCKET_IN_POD: Final = "/var/run/containerd/containerd.sock"
REGISTRY_AUTH_DIR: Final = "/var/run/opensandbox/registry"


@dataclass(frozen=True)
class CommitterSettings:
    """How commit Jobs run (upstream's controller flags, in parentheses)."""

    image: str = "image-committer:dev"
    """The committer's image (``--image-committer-image``)."""
    push_secret: str = ""
    """A ``kubernetes.io/dockerconfigjson`` Secret for the push (``--snapshot-push-secret``)."""
    registry_insecure: bool = False
    """Push over plain HTTP (``--snapshot-registry-insecure``)."""
    containerd_socket: str = "/var/run/containerd/containerd.sock"
    """containerd's socket on the node (``--containerd-socket-path``)."""
    commit_timeout: float = 600.0
    """Seconds a commit Job may run (``--commit-job-timeout``)."""


def commit_job_name(snapshot: str) -> str:
    return f"{snapshot}-commit"


def unpause_job_name(snapshot: str) -> str:
    return f"{snapshot}-unpause"


def _job(
    snapshot: Mapping[str, Any],
    name: str,
    node: str,
    args: Sequence[str],
    settings: CommitterSettings,
    *,
    backoff_limit: int,
    with_secret: bool,
) -> Json:
    meta = metadata_of(snapshot)
    snapshot_name = str(meta.get("name") or "")
    env = [{"name": "CONTAINERD_SOCKET", "value": CONTAINERD_SOCKET_IN_POD}]
    if settings.registry_insecure:
        env.append({"name": "SNAPSHOT_REGISTRY_INSECURE", "value": "true"})
    mounts: list[Json] = [{"name": "containerd-socket", "mountPath": CONTAINERD_SOCKET_IN_POD}]
    volumes: list[Json] = [
        {"name": "containerd-socket", "hostPath": {"path": settings.containerd_socket}}
    ]
    if with_secret and settings.push_secret:
        mounts.append({"name": "registry-auth", "mountPath": REGISTRY_AUTH_DIR, "readOnly": True})
        volumes.append(
            {
                "name": "registry-auth",
                "secret": {
                    "secretName": settings.push_secret,
                    "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
                },
            }
        )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace"),
            "labels": {
                LABEL_SANDBOX_SNAPSHOT_NAME: snapshot_name,
                LABEL_PRIVILEGED_NODE_ACCESS: "true",
            },
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "SandboxSnapshot",
                    "name": snapshot_name,
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "backoffLimit": backoff_limit,
            "ttlSecondsAfterFinished": 300,
            "activeDeadlineSeconds": max(int(settings.commit_timeout), 1),
            "template": {
                "metadata": {"labels": {LABEL_SANDBOX_SNAPSHOT_NAME: snapshot_name}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "commit",
                            "image": settings.image,
                            "command": [COMMITTER_COMMAND],
                            "args": list(args),
                            "env": env,
                            "securityContext": {
                                "runAsUser": 0,
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": volumes,
                },
            },
        },
    }


def commit_job(
    snapshot: Mapping[str, Any],
    pod: str,
    node: str,
    images: Sequence[tuple[str, str]],
    settings: CommitterSettings,
) -> Json:
    """The Job that commits ``images`` (container, URI) of ``pod`` on ``node``."""
    namespace = str(metadata_of(snapshot).get("namespace") or "")
    args = [pod, namespace, *(f"{container}:{uri}" for container, uri in images)]
    name = commit_job_name(str(metadata_of(snapshot).get("name") or ""))
    return _job(snapshot, name, node, args, settings, backoff_limit=3, with_secret=True)


def unpause_job(
    snapshot: Mapping[str, Any],
    pod: str,
    node: str,
    containers: Sequence[str],
    settings: CommitterSettings,
) -> Json:
    """The best-effort Job that resumes containers a failed commit may have left paused."""
    namespace = str(metadata_of(snapshot).get("namespace") or "")
    args = ["unpause", pod, namespace, *containers]
    name = unpause_job_name(str(metadata_of(snapshot).get("name") or ""))
    return _job(snapshot, name, node, args, settings, backoff_limit=0, with_secret=False)


def commit_target(job: Mapping[str, Any]) -> tuple[str, str, list[tuple[str, str]]] | None:
    """The source Pod, node and (container, URI) pairs an existing commit Job works on; None
    when its arguments are not a commit's."""
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = spec.get("containers") or ()
    args = containers[0].get("args") if containers and isinstance(containers[0], Mapping) else None
    if not isinstance(args, list) or len(args) < 3 or not all(isinstance(a, str) for a in args):
        return None
    images = []
    for arg in args[2:]:
        container, sep, uri = arg.partition(":")
        if not sep or not container or not uri:
            return None
        images.append((container, uri))
    return args[0], str(spec.get("nodeName") or ""), images


def job_succeeded(job: Mapping[str, Any]) -> bool:
    return int((job.get("status") or {}).get("succeeded") or 0) > 0


def job_failure(job: Mapping[str, Any]) -> str | None:
    """The message of the Job's ``Failed=True`` condition (``""`` if it has none); None while
    it has not failed for good. Failed Pods alone are retries, not a failure."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "")
    return None


@dataclass(frozen=True)
class Committed:
    """One container as the committer reports it."""

    image: str
    digest: str


def committed_images(pods: Sequence[Mapping[str, Any]]) -> dict[str, Committed] | None:
    """The images the commit Job's Pods report, by container; None while no finished Pod says
    (none yet, or a message that is not the committer's JSON)."""
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            if status.get("name") != "commit":
                continue
            message = ((status.get("state") or {}).get("terminated") or {}).get("message")
            try:
                data = json.loads(str(message)) if message else None
            except json.JSONDecodeError:
                data = None
            entries = data.get("containers") if isinstance(data, dict) else None
            if not isinstance(entries, list):
                continue
            return {
                str(entry["name"]): Committed(
                    str(entry.get("image") or ""), str(entry.get("digest") or "")
                )
                for entry in entries
                if isinstance(entry, dict) and entry.get("name")
            }
    return None
