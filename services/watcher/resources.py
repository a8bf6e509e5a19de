"""What the watcher watches: the seven kinds of sandbus, and built-in objects that are ours.

The seven custom kinds (:data:`api.kinds.ALL_KINDS`) are watched whole, cluster-wide: every
object of them is ours. Pods, Services, PersistentVolumeClaims, Jobs and NetworkPolicies are
shared with the rest of the cluster, so only ours are selected: those that carry one of the
label keys our controllers put on them, or, for NetworkPolicies, that are controlled by one of
our kinds. By resource, and who writes the mark (docs/agent-sandbox.md §3.1, §3.3, §10,
docs/opensandbox.md §1.5):

==========================  ===================================================================
Pod                         label ``agents.x-k8s.io/sandbox-name-hash`` (a Sandbox's Pod, warm
                            or not), ``agents.x-k8s.io/adoptable`` (a pre-provisioned Pod we
                            may adopt), ``sandbox.opensandbox.io/pool-name`` (a Pool's Pod),
                            ``batch-sandbox.sandbox.opensandbox.io/name`` (a non-pooled
                            BatchSandbox Pod), ``sandbox.opensandbox.io/sandbox-snapshot-name``
                            (a commit Job's Pod, which reports the committed images)
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
docs/agent-sandbox.md §3.1). The group and kind of the reference are compared, not its
version: a reference written through another served version names the same owner. A policy
named ``<template>-network-policy`` that someone else made is not ours and is not published;
the sandbox worker learns of it from the answer to its create.

An object is selected when it carries *any* of its resource's marks. Kubernetes label
selectors can only AND requirements, and cannot select by owner at all, so "any of several
keys" cannot be asked of the API server in one request. The watcher therefore watches a
resource through one or more selections (:class:`Selection`), each a list and watch of its
own:

- a resource whose marks are label keys (Pods, Services, PVCs, Jobs) is watched once per key,
  with an existence selector (``labelSelector=agents.x-k8s.io/adoptable``): the API server
  filters, and the watcher reads and keeps only our objects. On a cluster with tens of
  thousands of unrelated Pods, that is the difference between reading all of them (at every
  relist, and every change of every one of them) and reading none;
- a resource selected by owner (NetworkPolicies) is watched once, unfiltered, and filtered here
  by :meth:`WatchedResource.selects`. An owner cannot be a selector, and the policies of a
  cluster are few, so reading all of them is cheap; the watcher keeps nothing of the policies
  it does not select;
- our own kinds are watched once, whole.

Several watches of one resource break what one watch gives for free: a single resourceVersion
order per object. An object that carries two of the keys, or moves from one selection to
another (a Pod adopted from ``adoptable`` to a Sandbox's ``sandbox-name-hash``), is reported
by two streams at different moments, and the DELETED that one of them sends when the object
leaves it is not a deletion while another still selects it. The streams are merged per object
by :mod:`services.watcher.core.merging`, which publishes a state only if it is newer than the
last one published and a deletion only on proof that no selection holds the object. An object
that loses all its marks leaves the selection: that is published as a deletion, once, which is
what a single label-selector watch of the API server would report too.

Where each kind lives (group, version, plural, paths) is not repeated here: it comes from the
one kind→resource table of sandbus, :data:`services.runtime.kube.RESOURCES`. This module adds
only the selection.

The watcher's ClusterRole (deploy/base/rbac/watcher.yaml) must allow list and watch on
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

__all__ = [
    "BUILTIN_RESOURCES",
    "CUSTOM_RESOURCES",
    "WATCHED_RESOURCES",
    "Selection",
    "WatchedResource",
]


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
    spec_kept: tuple[str, ...] | None = None
    """The fields of ``spec`` its events carry (None: the whole spec), unless the object has
    one of :attr:`whole_spec_with` (see :meth:`projected`)."""
    whole_spec_with: tuple[str, ...] = ()
    """Label keys of the objects whose events carry the whole spec all the same."""

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
    def selections(self) -> tuple[Selection, ...]:
        """How the resource is listed and watched: once per label key, each with an existence
        selector; or once, whole, when it is selected by owner or not at all (see the module
        docstring)."""
        if self.label_keys and not self.controllers:
            return tuple(Selection(self, key) for key in self.label_keys)
        return (Selection(self),)

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

    def projected(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` as its event carries it: without the fields of ``spec`` that no worker reads
        (``obj`` itself is left as it is). A Sandbox's Pod travels with its metadata, its status
        and ``spec.nodeName``, what the sandbox worker plans from (upstream's Pod cache
        transform keeps the same); an OpenSandbox Pod whole, since a pause copies its spec."""
        spec = obj.get("spec")
        if self.spec_kept is None or not isinstance(spec, Mapping):
            return obj
        labels = (obj.get("metadata") or {}).get("labels")
        if isinstance(labels, Mapping) and any(key in labels for key in self.whole_spec_with):
            return obj
        return {**obj, "spec": {k: spec[k] for k in self.spec_kept if k in spec}}

    def complete(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with ``apiVersion`` and ``kind`` filled in, as list items of built-in kinds
        arrive without them; the object is changed in place and returned."""
        obj.setdefault("apiVersion", self.api_version)
        obj.setdefault("kind", self.kind)
        return obj


@dataclass(frozen=True)
class Selection:
    """One list and watch of a resource: an existence selector on one label key, or the whole
    resource, filtered by :meth:`WatchedResource.selects`."""

    resource: WatchedResource
    label_key: str | None = None

    @property
    def name(self) -> str:
        """Unique within its resource: the label key, or ``*``."""
        return self.label_key or "*"

    @property
    def label_selector(self) -> str | None:
        """What the API server filters by: the existence of the key (None: nothing)."""
        return self.label_key

    def holds(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj``, in the state it carries, is in this selection."""
        if self.label_key is None:
            return self.resource.selects(obj)
        metadata = obj.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        return isinstance(labels, Mapping) and self.label_key in labels

    def __str__(self) -> str:
        """For the log: the kind, and the key when the kind is watched more than once."""
        if len(self.resource.selections) == 1:
            return self.resource.kind
        return f"{self.resource.kind} ({self.label_key})"


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
_OPENSANDBOX_OWNED = (LABEL_POOL_NAME, LABEL_BATCH_SANDBOX_NAME, LABEL_SANDBOX_SNAPSHOT_NAME)

BUILTIN_RESOURCES: tuple[WatchedResource, ...] = (
    WatchedResource(
        kind="Pod",
        label_keys=(*_AGENT_SANDBOX_OWNED, *_OPENSANDBOX_OWNED),
        spec_kept=("nodeName",),
        whole_spec_with=_OPENSANDBOX_OWNED,
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
