"""What the watcher watches: the seven kinds of sandbus, and built-in objects that are ours.

The seven custom kinds (:data:`api.kinds.ALL_KINDS`) are watched whole, cluster-wide: every
object of them is ours. Pods, Services, PersistentVolumeClaims, Jobs and NetworkPolicies are
shared with the rest of the cluster, so only ours are selected: those that carry one of the
label keys our controllers put on them, or, for NetworkPolicies, that are controlled by one of
our kinds. By resource, and who writes the mark (spec/agent-sandbox.md §3.1, §3.3, §10,
spec/opensandbox.md §1.5):

==========================  ===================================================================
Pod                         label ``agents.x-k8s.io/sandbox-name-hash`` (a Sandbox's Pod, warm
                            or not), ``agents.x-k8s.io/adoptable`` (a pre-provisioned Pod we
                            may adopt), ``sandbox.opensandbox.io/pool-name`` (a Pool's Pod),
                            ``batch-sandbox.sandbox.opensandbox.io/name`` (a non-pooled
                            BatchSandbox Pod)
Service                     label ``agents.x-k8s.io/sandbox-name-hash``,
                            ``agents.x-k8s.io/adoptable``
PersistentVolumeClaim       label ``agents.x-k8s.io/sandbox-name-hash``,
                            ``agents.x-k8s.io/adoptable``
Job                         label ``sandbox.opensandbox.io/sandbox-snapshot-name`` (commit and
                            unpause Jobs of a SandboxSnapshot)
NetworkPolicy               controller ownerReference to a SandboxTemplate (the template's
                            shared ``<template>-network-policy``, which the sandbox worker
                            creates, updates and deletes) or to a SandboxClaim (the legacy
                            per-claim ``<claim>-network-policy`` the claim worker removes)
==========================  ===================================================================

Why NetworkPolicies are selected by owner and not by label: the template's policy carries no
label of ours (services/sandbox/core/template.py sets none), while its controller reference is
always there, since it is how the garbage collector deletes the policy with its template. It
is also how upstream's template controller watches them (``Owns(NetworkPolicy)``,
spec/agent-sandbox.md §3.1). The group and kind of the reference are compared, not its
version: a reference written through another served version names the same owner. A policy
named ``<template>-network-policy`` that someone else made is not ours and is not published;
the sandbox worker learns of it from the answer to its create.

An object is selected when it carries *any* of its resource's marks. Kubernetes label
selectors can only AND requirements, and cannot select by owner at all, so "any of several
keys" cannot be asked of the API server in one watch. Two shapes were possible: one watch per
key, merged, or one unfiltered watch filtered here. Merging watches breaks the one property the
watcher is built on, a single resourceVersion order per object (two streams deliver the same
Pod at different moments, and an older state could overwrite a newer one), so a resource with
several keys, or selected by owner, is watched unfiltered and filtered by
:meth:`WatchedResource.selects`; a resource with one label key and nothing else (Jobs) is
filtered by the API server with an existence selector. The cost of the unfiltered watch is
reading every Pod, Service, PVC and NetworkPolicy of the cluster; the watcher keeps nothing of
the objects it does not select. An object that loses its mark (its labels, or its controller
reference when it is orphaned) leaves the selection: that is published as a deletion, which is
what a label-selector watch of the API server would report too.

Where each kind lives (group, version, plural, paths) is not repeated here: it comes from the
one kind→resource table of sandbus, :data:`services.runtime.kube.RESOURCES`. This module adds
only the selection.

The watcher's ClusterRole (deploy/base/rbac/watcher.yaml) must allow get, list and watch on
every resource here; a unit test holds the two together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api.agents import SandboxClaim, SandboxTemplate
from api.keys import LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH
from api.kinds import ALL_KINDS
from api.opensandbox import (
    LABEL_BATCH_SANDBOX_NAME,
    LABEL_POOL_NAME,
    LABEL_SANDBOX_SNAPSHOT_NAME,
)
from services.runtime.kube import RESOURCES, Resource

__all__ = ["BUILTIN_RESOURCES", "CUSTOM_RESOURCES", "WATCHED_RESOURCES", "WatchedResource"]


@dataclass(frozen=True)
class WatchedResource:
    """One resource the watcher lists and watches cluster-wide."""

    kind: str
    """A kind of :data:`services.runtime.kube.RESOURCES`."""
    label_keys: tuple[str, ...] = ()
    """Selected objects carry at least one of these label keys..."""
    controllers: tuple[tuple[str, str], ...] = ()
    """...or a controller ownerReference to one of these ``(API group, kind)``. Neither label
    keys nor controllers: every object is selected."""

    def __post_init__(self) -> None:
        if self.kind not in RESOURCES:
            raise ValueError(f"{self.kind} is not in the kind→resource table (RESOURCES)")

    @property
    def resource(self) -> Resource:
        return RESOURCES[self.kind]

    @property
    def group(self) -> str:
        """``""`` for the core API group."""
        return self.resource.group

    @property
    def version(self) -> str:
        return self.resource.version

    @property
    def plural(self) -> str:
        return self.resource.plural

    @property
    def api_version(self) -> str:
        return self.resource.api_version

    @property
    def path(self) -> str:
        """The cluster-wide collection path (``/api/v1/pods``, ``/apis/G/V/plural``)."""
        return self.resource.path()

    @property
    def label_selector(self) -> str | None:
        """What the API server can filter for us: an existence requirement on a single key.

        None when the resource is watched whole, or when it needs "any of several keys" or an
        owner, which a label selector cannot express (see the module docstring).
        """
        if len(self.label_keys) == 1 and not self.controllers:
            return self.label_keys[0]
        return None

    def selects(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is one of ours."""
        if not self.label_keys and not self.controllers:
            return True
        metadata = obj.get("metadata")
        if not isinstance(metadata, Mapping):
            return False
        labels = metadata.get("labels")
        if isinstance(labels, Mapping) and any(key in labels for key in self.label_keys):
            return True
        return self.controllers != () and _controller_of(metadata) in self.controllers

    def complete(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with ``apiVersion`` and ``kind`` filled in, as list items of built-in kinds
        arrive without them; the object is changed in place and returned."""
        obj.setdefault("apiVersion", self.api_version)
        obj.setdefault("kind", self.kind)
        return obj


def _controller_of(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(API group, kind)`` of the controller ownerReference, if there is one."""
    references = metadata.get("ownerReferences")
    if not isinstance(references, list):
        return None
    for reference in references:
        if isinstance(reference, Mapping) and reference.get("controller") is True:
            api_version, kind = reference.get("apiVersion"), reference.get("kind")
            if not isinstance(api_version, str) or not isinstance(kind, str):
                return None
            group = api_version.rpartition("/")[0]  # "" for the core group ("v1")
            return (group, kind)
    return None


CUSTOM_RESOURCES: tuple[WatchedResource, ...] = tuple(
    WatchedResource(kind=kind.KIND.kind) for kind in ALL_KINDS
)

_AGENT_SANDBOX_OWNED = (LABEL_SANDBOX_NAME_HASH, LABEL_ADOPTABLE)

BUILTIN_RESOURCES: tuple[WatchedResource, ...] = (
    WatchedResource(
        kind="Pod",
        label_keys=(*_AGENT_SANDBOX_OWNED, LABEL_POOL_NAME, LABEL_BATCH_SANDBOX_NAME),
    ),
    WatchedResource(kind="Service", label_keys=_AGENT_SANDBOX_OWNED),
    WatchedResource(kind="PersistentVolumeClaim", label_keys=_AGENT_SANDBOX_OWNED),
    WatchedResource(kind="Job", label_keys=(LABEL_SANDBOX_SNAPSHOT_NAME,)),
    WatchedResource(
        kind="NetworkPolicy",
        controllers=(
            (SandboxTemplate.KIND.group, SandboxTemplate.KIND.kind),
            (SandboxClaim.KIND.group, SandboxClaim.KIND.kind),
        ),
    ),
)

WATCHED_RESOURCES: tuple[WatchedResource, ...] = CUSTOM_RESOURCES + BUILTIN_RESOURCES
