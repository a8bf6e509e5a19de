"""What the watcher watches: the seven kinds of sandbus, and built-in objects with our labels.

The seven custom kinds (:data:`api.kinds.ALL_KINDS`) are watched whole, cluster-wide: every
object of them is ours. Pods, Services, PersistentVolumeClaims and Jobs are shared with the rest
of the cluster, so only those that carry one of the label keys our controllers put on them are
selected. The keys, by resource, and who writes them (spec/agent-sandbox.md §10,
spec/opensandbox.md §1.5):

==========================  ===================================================================
Pod                         ``agents.x-k8s.io/sandbox-name-hash`` (a Sandbox's Pod, warm or not),
                            ``agents.x-k8s.io/adoptable`` (a pre-provisioned Pod we may adopt),
                            ``sandbox.opensandbox.io/pool-name`` (a Pool's Pod),
                            ``batch-sandbox.sandbox.opensandbox.io/name`` (a non-pooled
                            BatchSandbox Pod)
Service                     ``agents.x-k8s.io/sandbox-name-hash``, ``agents.x-k8s.io/adoptable``
PersistentVolumeClaim       ``agents.x-k8s.io/sandbox-name-hash``, ``agents.x-k8s.io/adoptable``
Job                         ``sandbox.opensandbox.io/sandbox-snapshot-name`` (commit and unpause
                            Jobs of a SandboxSnapshot)
==========================  ===================================================================

An object is selected when it carries *any* of its resource's keys, with any value. Kubernetes
label selectors can only AND requirements, so "any of several keys" cannot be asked of the API
server in one watch. Two shapes were possible: one watch per key, merged, or one unfiltered watch
filtered here. Merging watches breaks the one property the watcher is built on, a single
resourceVersion order per object (two streams deliver the same Pod at different moments, and an
older state could overwrite a newer one), so a resource with several keys is watched unfiltered
and filtered by :meth:`WatchedResource.selects`; a resource with one key (Jobs) is filtered by
the API server with an existence selector. The cost of the unfiltered watch is reading every
Pod, Service and PVC of the cluster; the watcher keeps nothing of the objects it does not select.
An object that stops carrying the keys leaves the selection: that is published as a deletion,
which is what a label-selector watch of the API server would report too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api.keys import LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH
from api.kinds import ALL_KINDS
from api.opensandbox import (
    LABEL_BATCH_SANDBOX_NAME,
    LABEL_POOL_NAME,
    LABEL_SANDBOX_SNAPSHOT_NAME,
)

__all__ = ["BUILTIN_RESOURCES", "CUSTOM_RESOURCES", "WATCHED_RESOURCES", "WatchedResource"]


@dataclass(frozen=True)
class WatchedResource:
    """One resource the watcher lists and watches cluster-wide."""

    kind: str
    group: str
    """``""`` for the core API group."""
    version: str
    plural: str
    label_keys: tuple[str, ...] = ()
    """Selected objects carry at least one of these; empty means every object is selected."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The cluster-wide collection path (``/api/v1/pods``, ``/apis/G/V/plural``)."""
        if self.group:
            return f"/apis/{self.group}/{self.version}/{self.plural}"
        return f"/api/{self.version}/{self.plural}"

    @property
    def label_selector(self) -> str | None:
        """What the API server can filter for us: an existence requirement on a single key.

        None when the resource is watched whole, or when it needs "any of several keys", which
        a label selector cannot express (see the module docstring).
        """
        return self.label_keys[0] if len(self.label_keys) == 1 else None

    def selects(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is one of ours."""
        if not self.label_keys:
            return True
        metadata = obj.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        if not isinstance(labels, Mapping):
            return False
        return any(key in labels for key in self.label_keys)

    def complete(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with ``apiVersion`` and ``kind`` filled in, as list items of built-in kinds
        arrive without them; the object is changed in place and returned."""
        obj.setdefault("apiVersion", self.api_version)
        obj.setdefault("kind", self.kind)
        return obj


CUSTOM_RESOURCES: tuple[WatchedResource, ...] = tuple(
    WatchedResource(
        kind=kind.KIND.kind,
        group=kind.KIND.group,
        version=kind.KIND.version,
        plural=kind.KIND.plural,
    )
    for kind in ALL_KINDS
)

_AGENT_SANDBOX_OWNED = (LABEL_SANDBOX_NAME_HASH, LABEL_ADOPTABLE)

BUILTIN_RESOURCES: tuple[WatchedResource, ...] = (
    WatchedResource(
        kind="Pod",
        group="",
        version="v1",
        plural="pods",
        label_keys=(*_AGENT_SANDBOX_OWNED, LABEL_POOL_NAME, LABEL_BATCH_SANDBOX_NAME),
    ),
    WatchedResource(
        kind="Service", group="", version="v1", plural="services", label_keys=_AGENT_SANDBOX_OWNED
    ),
    WatchedResource(
        kind="PersistentVolumeClaim",
        group="",
        version="v1",
        plural="persistentvolumeclaims",
        label_keys=_AGENT_SANDBOX_OWNED,
    ),
    WatchedResource(
        kind="Job",
        group="batch",
        version="v1",
        plural="jobs",
        label_keys=(LABEL_SANDBOX_SNAPSHOT_NAME,),
    ),
)

WATCHED_RESOURCES: tuple[WatchedResource, ...] = CUSTOM_RESOURCES + BUILTIN_RESOURCES
