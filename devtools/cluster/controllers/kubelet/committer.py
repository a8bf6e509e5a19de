"""OpenSandbox's image-committer, simulated: how a commit (or unpause) Job's process ends.

OpenSandbox snapshots a sandbox with a Job pinned to the source Pod's node whose container runs
``/usr/local/bin/image-committer``. Its arguments are argv entries, never a shell line:

- ``<pod> <namespace> <container>:<image URI>...`` — pause the named containers of the Pod,
  commit and push each as its URI, and write ``{"containers": [{"name", "image", "digest"}]}``
  to the termination log, where the controller reads the digests from (the commit Pod's
  ``state.terminated.message``). Each target is split on its *first* ``:``, since a container
  name has none and the URI has one before its tag.
- ``unpause <pod> <namespace> <container>...`` — resume what a failed commit left paused.

:func:`committer_call` recognises such a Job by the template container whose ``command[0]`` ends
in ``image-committer`` and reads its arguments into a :class:`CommitterCall` (a ``ValueError``
carries the usage message when they are not a committer's). :func:`run_committer` decides the
:class:`CommitterExit` from the call and the source Pod as the caller's cache shows it (None:
not there). A commit fails, with exit code 1 and a message as the committer prints it, when
the Pod is missing, when a named container is not in its ``spec.containers``, or when the Pod
carries ``devcluster.sandbus.io/fail-commit`` (the injected failure: its value, or a default,
is the message). Otherwise each image gets the digest ``sha256(<pod uid>/<container>/<URI>)``,
so a run is reproducible and two pods (or two images) never share one. An unpause always
succeeds: it is best effort upstream too.

Nothing here waits or writes: the Job controller (:mod:`.jobs`) runs this after ``job_delay``
and turns the exit into the Job's outcome and its finished Pod.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from api.objects import Json
from devtools.cluster.controllers.kubelet.config import FAIL_COMMIT_ANNOTATION

__all__ = [
    "COMMITTER_BINARY",
    "CommitterCall",
    "CommitterExit",
    "committer_call",
    "committer_container",
    "image_digest",
    "parse_committer_args",
    "run_committer",
]


COMMITTER_BINARY = "image-committer"
USAGE = (
    "usage: image-committer <pod> <namespace> <container>:<image>... | "
    "image-committer unpause <pod> <namespace> <container>..."
)
DEFAULT_COMMIT_FAILURE = f"commit failed (injected by {FAIL_COMMIT_ANNOTATION})"


@dataclass(frozen=True)
class CommitterCall:
    """What one image-committer run is asked to do."""

    unpause: bool
    pod: str
    namespace: str
    containers: tuple[str, ...]
    images: tuple[str, ...] = ()  # commit: the URI of each container, in the same order


@dataclass(frozen=True)
class CommitterExit:
    """How the process ended: its exit code and what it wrote to its termination log."""

    code: int
    message: str

    @property
    def succeeded(self) -> bool:
        return self.code == 0


def committer_container(job: Json) -> Json | None:
    """The Job's template container that runs the image-committer, if any."""
    spec = (((job.get("spec") or {}).get("template") or {}).get("spec")) or {}
    for container in spec.get("containers") or ():
        if not isinstance(container, dict):
            continue
        command = container.get("command") or ()
        if command and str(command[0]).endswith(COMMITTER_BINARY):
            return container
    return None


def parse_committer_args(args: Sequence[Any]) -> CommitterCall:
    """The committer's argv after its name; ``ValueError(USAGE)`` when it is not one."""
    words = [str(arg) for arg in args]
    if words[:1] == ["unpause"]:
        if len(words) < 3:
            raise ValueError(USAGE)
        return CommitterCall(True, words[1], words[2], tuple(words[3:]))
    if len(words) < 3:
        raise ValueError(USAGE)
    containers: list[str] = []
    images: list[str] = []
    for target in words[2:]:
        container, sep, uri = target.partition(":")  # the first ':': the URI has its own
        if not sep or not container or not uri:
            raise ValueError(f"{USAGE}: bad target {target!r}")
        containers.append(container)
        images.append(uri)
    return CommitterCall(False, words[0], words[1], tuple(containers), tuple(images))


def committer_call(job: Json) -> CommitterCall | None:
    """The committer run a Job asks for; None when it is not an image-committer Job.

    Raises ``ValueError`` (the usage message) when its arguments are not a committer's."""
    container = committer_container(job)
    if container is None:
        return None
    return parse_committer_args(container.get("args") or ())


def image_digest(pod_uid: str, container: str, uri: str) -> str:
    """The digest a pushed image gets: stable per pod, container and URI."""
    return "sha256:" + hashlib.sha256(f"{pod_uid}/{container}/{uri}".encode()).hexdigest()


def run_committer(call: CommitterCall, source: Json | None) -> CommitterExit:
    """How the committer ends for ``call`` against ``source`` (the Pod it names, or None)."""
    if call.unpause:
        return CommitterExit(0, "")
    where = f"{call.namespace}/{call.pod}"
    if source is None:
        return CommitterExit(1, f"pod {where} not found")
    spec = source.get("spec") or {}
    declared = {c.get("name") for c in spec.get("containers") or () if isinstance(c, dict)}
    for container in call.containers:
        if container not in declared:
            return CommitterExit(1, f'container "{container}" not found in pod {where}')
    metadata = source.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if FAIL_COMMIT_ANNOTATION in annotations:
        return CommitterExit(1, str(annotations[FAIL_COMMIT_ANNOTATION] or DEFAULT_COMMIT_FAILURE))
    uid = str(metadata.get("uid") or "")
    report = {
        "containers": [
            {"name": container, "image": uri, "digest": image_digest(uid, container, uri)}
            for container, uri in zip(call.containers, call.images, strict=True)
        ]
    }
    # Compact, as Go's json.Marshal writes it: the termination log holds 4 KiB at most.
    return CommitterExit(0, json.dumps(report, separators=(",", ":")))
