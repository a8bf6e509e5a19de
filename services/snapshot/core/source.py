"""Which Pod a SandboxSnapshot commits (docs/opensandbox.md §4.1 step 3, and the trap of §9.19).

Upstream takes the first Running Pod among the sandbox's ``alloc-status`` Pods, then among the
Pods labelled with its name, then the Pod ``<sandbox>-0``. ``alloc-status`` only grows, and a
pooled pause keeps it after the sandbox leaves the Pool: once the sandbox has been resumed
(now a template-mode sandbox of its own), the Pods it lists may have gone back to the Pool
and serve another sandbox, and a later snapshot would commit that other tenant's disk.

Here a Pod is the sandbox's only while the sandbox holds it:

- a Pool's Pod, while the sandbox is pooled (``poolRef`` set), names that Pool in its
  ``pool-name`` label, is listed in the sandbox's ``alloc-status`` and not given back
  (``alloc-release``, ``alloc-released``), and no other sandbox of the namespace holds it in
  the same sense (a Pod is moved to another sandbox only after it was released here, so two
  holders mean the allocation is being rewritten: commit neither's);
- otherwise, a Pod the sandbox controls (its ownerReference, not merely its name label or
  the name ``<sandbox>-0``, which anyone may create).

Among those, the first Running one not being deleted, in ``alloc-status`` order for a pooled
sandbox and by name for the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from api.objects import Json, controller_of, labels_of, metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
    LABEL_POOL_NAME,
)
from events.envelope import ObjectKey
from services.domain.opensandbox.allocation import MalformedAnnotation, parse_pod_list
from services.runtime.cache import ObjectCache

__all__ = ["candidate_pods", "held_pods", "source_pod"]


def _pool_ref(sandbox: Mapping[str, Any]) -> str:
    return str((sandbox.get("spec") or {}).get("poolRef") or "")


def held_pods(sandbox: Mapping[str, Any]) -> list[str]:
    """The Pool Pods a pooled sandbox holds now, in ``alloc-status`` order (none when it is
    not pooled, or its annotations do not parse)."""
    if not _pool_ref(sandbox):
        return []
    annotations = metadata_of(sandbox).get("annotations") or {}
    try:
        listed = parse_pod_list(annotations, ANNOTATION_ALLOC_STATUS)
        returned = set(parse_pod_list(annotations, ANNOTATION_ALLOC_RELEASE))
        returned |= set(parse_pod_list(annotations, ANNOTATION_ALLOC_RELEASED))
    except MalformedAnnotation:
        return []
    return [name for name in listed if name not in returned]


def _running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not metadata_of(pod).get(
        "deletionTimestamp"
    )


def candidate_pods(sandbox: Mapping[str, Any], cache: ObjectCache) -> list[Json]:
    """The Pods :func:`source_pod` chooses from, read from the worker's cache: a pooled
    sandbox's ``alloc-status`` Pods that exist, else the Pods it controls."""
    meta = metadata_of(sandbox)
    namespace = str(meta.get("namespace") or "")
    if _pool_ref(sandbox):
        found = (cache.get(ObjectKey("Pod", namespace, name)) for name in held_pods(sandbox))
        return [pod for pod in found if pod is not None]
    uid = str(meta.get("uid") or "")
    return cache.owned_by("Pod", uid) if uid else []


def source_pod(
    sandbox: Mapping[str, Any],
    candidates: Sequence[Json],
    others: Sequence[Mapping[str, Any]],
) -> Json | None:
    """The Pod to commit for ``sandbox`` among ``candidates`` (:func:`candidate_pods`), given
    the namespace's other BatchSandboxes (``others``)."""
    ref = _pool_ref(sandbox)
    if ref:
        elsewhere = {name for other in others for name in held_pods(other)}
        by_name = {str(metadata_of(pod).get("name") or ""): pod for pod in candidates}
        for name in held_pods(sandbox):
            pod = by_name.get(name)
            if (
                pod is not None
                and name not in elsewhere
                and labels_of(pod).get(LABEL_POOL_NAME) == ref
                and _running(pod)
            ):
                return pod
        return None
    uid = str(metadata_of(sandbox).get("uid") or "")
    owned = sorted(
        (
            pod
            for pod in candidates
            if (owner := controller_of(pod)) is not None
            and owner.get("kind") == "BatchSandbox"
            and owner.get("uid") == uid
        ),
        key=lambda pod: str(metadata_of(pod).get("name") or ""),
    )
    return next((pod for pod in owned if _running(pod)), None)
