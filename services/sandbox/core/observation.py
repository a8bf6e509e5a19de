"""What the sandbox planners see: one value per reconcile, read from the cache.

An observation holds everything a planner may look at and nothing else, as the objects the API
server served. It is a msgspec Struct so that the worker can digest it into the decision record
and a replay can rebuild it from the event log and get the same digest.

Which objects belong to a Sandbox's observation (docs/agent-sandbox.md §2.5):

- the Sandbox itself;
- candidate Pods: every Pod in its namespace labelled ``sandbox-name-hash=<hash>`` (the
  upstream pod index), plus the Pod named by ``resolvePodName`` (the ``agents.x-k8s.io/pod-name``
  annotation, else the Sandbox's name), which may carry no label at all, plus the Pod named
  like the Sandbox, which a create would collide with (upstream reads it on AlreadyExists);
- the Service named like the Sandbox;
- the PVC of each volume claim template, ``<template name>-<sandbox name>``.

Beside the objects, a Sandbox's observation holds what the worker's shell supplies: its
settings (cluster domain, write-behind window, whether to record Events), the failure of the
previous pass, the time the write-behind clock started for this key, and, when tracing is on
and the Sandbox carries no trace context yet, the carrier of the running reconcile span. They
are inputs like the objects, so that the planner stays a function of its arguments and the
decision's digest covers everything it looked at.

A SandboxTemplate's observation is the template and the NetworkPolicy
``<template>-network-policy`` (docs/agent-sandbox.md §3.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from api.keys import (
    ANNOTATION_POD_NAME,
    LABEL_SANDBOX_NAME_HASH,
    NETWORK_POLICY_NAME_SUFFIX,
    name_hash,
)
from api.objects import Json, metadata_of
from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache

__all__ = [
    "DEFAULT_CLUSTER_DOMAIN",
    "SandboxObservation",
    "TemplateObservation",
    "observe_sandbox",
    "observe_template",
    "resolve_pod_name",
]

DEFAULT_CLUSTER_DOMAIN = "cluster.local"


class SandboxObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    sandbox: Json | None = None
    pods: tuple[Json, ...] = ()
    """Candidate Pods, by name."""
    service: Json | None = None
    pvcs: dict[str, Json] = msgspec.field(default_factory=dict)
    """Existing PVCs of the volume claim templates, by PVC name."""
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    last_error: str | None = None
    """The write of the previous pass that the API server refused, if it failed."""
    write_behind: float = 0.0
    """Seconds the metadata patch of an owned Pod may be held back (0: written at once)."""
    pod_patch_held_since: datetime | None = None
    """When the worker first held this Sandbox's Pod metadata patch back (its write-behind
    clock, kept in memory; None after a restart, which restarts the window)."""
    status_window: float = 0.0
    """Seconds a status write that reports only the Pod's progress may be held back (0: every
    change is written at once)."""
    status_held_since: datetime | None = None
    """When such a status write was first held back (its clock, like ``pod_patch_held_since``)."""
    trace_context: str | None = None
    """The running reconcile span's W3C carrier as JSON, when tracing is on and the Sandbox
    has no ``opentelemetry.io/trace-context`` yet."""
    events: bool = True
    """Record Kubernetes Events about the Sandbox (``SANDBUS_SANDBOX_EVENTS``; upstream's
    ``--disable-sandbox-events`` turns them off)."""


class TemplateObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    template: Json | None = None
    network_policy: Json | None = None
    last_error: str | None = None
    failure_persists: bool = False
    """The passes have failed in a row for a while (``Observed.failure_persists``)."""


def resolve_pod_name(sandbox: Mapping[str, Any]) -> str:
    """The Pod a Sandbox tracks: the ``agents.x-k8s.io/pod-name`` annotation when it is not
    empty (a Pod adopted under another name), else the Sandbox's own name."""
    metadata = metadata_of(sandbox)
    annotations = metadata.get("annotations") or {}
    annotated = annotations.get(ANNOTATION_POD_NAME) if isinstance(annotations, Mapping) else None
    return str(annotated) if annotated else str(metadata.get("name") or "")


def _claim_names(sandbox: Mapping[str, Any]) -> list[str]:
    spec = sandbox.get("spec")
    templates = spec.get("volumeClaimTemplates") if isinstance(spec, Mapping) else None
    name = str(metadata_of(sandbox).get("name") or "")
    names = []
    for template in templates if isinstance(templates, list) else ():
        vct_name = metadata_of(template).get("name") if isinstance(template, Mapping) else None
        if vct_name:
            names.append(f"{vct_name}-{name}")
    return names


def observe_sandbox(
    key: ObjectKey,
    cache: ObjectCache,
    last_error: str | None = None,
    *,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    write_behind: float = 0.0,
    pod_patch_held_since: datetime | None = None,
    status_window: float = 0.0,
    status_held_since: datetime | None = None,
    events: bool = True,
) -> SandboxObservation:
    namespace, name = key.namespace, key.name
    sandbox = cache.get(key)
    if sandbox is None:
        return SandboxObservation(
            namespace=namespace, name=name, cluster_domain=cluster_domain, events=events
        )
    pods = {
        str(metadata_of(pod).get("name")): pod
        for pod in cache.by_label("Pod", namespace, LABEL_SANDBOX_NAME_HASH, name_hash(name))
    }
    for pod_name in (resolve_pod_name(sandbox), name):
        named = cache.get(ObjectKey("Pod", namespace, pod_name))
        if named is not None:
            pods[pod_name] = named
    pvcs = {}
    for claim in _claim_names(sandbox):
        pvc = cache.get(ObjectKey("PersistentVolumeClaim", namespace, claim))
        if pvc is not None:
            pvcs[claim] = pvc
    return SandboxObservation(
        namespace=namespace,
        name=name,
        sandbox=sandbox,
        pods=tuple(pods[pod_name] for pod_name in sorted(pods)),
        service=cache.get(ObjectKey("Service", namespace, name)),
        pvcs=pvcs,
        cluster_domain=cluster_domain,
        last_error=last_error,
        write_behind=write_behind,
        pod_patch_held_since=pod_patch_held_since,
        status_window=status_window,
        status_held_since=status_held_since,
        events=events,
    )


def network_policy_name(template_name: str) -> str:
    return f"{template_name}{NETWORK_POLICY_NAME_SUFFIX}"


def observe_template(
    key: ObjectKey,
    cache: ObjectCache,
    last_error: str | None = None,
    *,
    failure_persists: bool = False,
) -> TemplateObservation:
    return TemplateObservation(
        namespace=key.namespace,
        name=key.name,
        template=cache.get(key),
        network_policy=cache.get(
            ObjectKey("NetworkPolicy", key.namespace, network_policy_name(key.name))
        ),
        last_error=last_error,
        failure_persists=failure_persists,
    )
