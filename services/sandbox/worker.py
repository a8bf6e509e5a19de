"""The sandbox worker as the reconciler runtime sees it: what it follows, what wakes what, and
its two reconcilers (Sandbox, SandboxTemplate).

Following upstream's watches, declared as rules (:data:`wakes`): a change of a Sandbox wakes
it; a change of a Pod, Service or PVC wakes the Sandbox that controls it, and a Pod or Service
also wakes the Sandbox it is named after (the Pod a new Sandbox is about to adopt has no owner
yet). A change of a SandboxTemplate wakes it, and a NetworkPolicy wakes the template that
controls it or whose name it carries (``<template>-network-policy``).

Two inputs of the Sandbox planner do not come from objects:

- the write-behind and status-window clocks: when each Sandbox's Pod metadata patch, or its
  status write, was first held back. A holding pass returns them as its memo
  (:class:`~services.sandbox.core.plan.WriteBehindMemo`); the runtime keeps that per key on the
  bus and hands it back, and ``observe`` passes them on as ``pod_patch_held_since`` and
  ``status_held_since``;
- tracing: the ``ReconcileSandbox`` span (attributes ``sandbox.name``, ``sandbox.namespace`` and
  the normalised ``agents.x-k8s.io/created-by``; parent: the Sandbox's trace-context
  annotation), and the running span's carrier as ``trace_context`` while the Sandbox has none.
  A template's reconcile is the ``ReconcileSandboxTemplate`` span, without attributes, as
  upstream's; nothing is written for it.

Pods are indexed by their ``agents.x-k8s.io/sandbox-name-hash`` label: that is how a Sandbox
finds the Pods it controls without reading every Pod of its namespace.

The watcher publishes the NetworkPolicies whose controller is a SandboxTemplate (or a legacy
SandboxClaim), so the template reconciler sees its own policy, and edits of it, on the bus. A
foreign policy that happens to carry the managed name is not published: the reconciler learns
of it from the answer to its create, and leaves it alone.
"""

from __future__ import annotations

import functools
from typing import Final

import msgspec
from nats.js import JetStreamContext

from api.agents import EXTENSIONS_GROUP, GROUP
from api.keys import (
    ANNOTATION_TRACE_CONTEXT,
    LABEL_CREATED_BY,
    LABEL_SANDBOX_NAME_HASH,
    NETWORK_POLICY_NAME_SUFFIX,
    normalize_created_by,
)
from api.objects import Json, annotations_of, labels_of, metadata_of
from events.envelope import ObjectKey
from services.runtime.worker_api import (
    BusConfig,
    Gauge,
    ObjectCache,
    Observed,
    Reconciler,
    ReconcileSpan,
    Wakes,
    WorkerDefinition,
    wake_named,
    wake_owner,
    wake_self,
)
from services.sandbox.core.census import SANDBOX_LABELS, count_sandboxes
from services.sandbox.core.observation import (
    DEFAULT_CLUSTER_DOMAIN,
    SandboxObservation,
    TemplateObservation,
    observe_sandbox,
    observe_template,
)
from services.sandbox.core.plan import WriteBehindMemo, plan_sandbox
from services.sandbox.core.status import only_progress
from services.sandbox.core.template import plan_template

__all__ = [
    "SPAN_NAME",
    "TEMPLATE_SPAN_NAME",
    "WATCHED_KINDS",
    "WORKER_NAME",
    "sandbox_reconciler",
    "sandbox_worker",
    "template_reconciler",
    "wakes",
]

WORKER_NAME = "sandbox"
WATCHED_KINDS = (
    "Sandbox",
    "Pod",
    "Service",
    "PersistentVolumeClaim",
    "SandboxTemplate",
    "NetworkPolicy",
)

SPAN_NAME = "ReconcileSandbox"
TEMPLATE_SPAN_NAME = "ReconcileSandboxTemplate"


def _own_name(obj: Json) -> str | None:
    return str(metadata_of(obj).get("name") or "") or None


def _policy_template(policy: Json) -> str | None:
    name = _own_name(policy) or ""
    return (
        name.removesuffix(NETWORK_POLICY_NAME_SUFFIX)
        if name.endswith(NETWORK_POLICY_NAME_SUFFIX)
        else None
    )


wakes = Wakes(
    wake_self(("Sandbox", "SandboxTemplate")),
    wake_owner(("Pod", "Service", "PersistentVolumeClaim"), "Sandbox", group=GROUP),
    # The Pod a new Sandbox is about to adopt has no owner yet.
    wake_named(("Pod", "Service"), "Sandbox", _own_name, known=True),
    wake_owner("NetworkPolicy", "SandboxTemplate", group=EXTENSIONS_GROUP),
    wake_named("NetworkPolicy", "SandboxTemplate", _policy_template),
)


def sandbox_reconciler(
    *,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    write_behind: float = 0.0,
    status_window: float = 0.0,
    events: bool = True,
) -> Reconciler[SandboxObservation]:
    """The Sandbox's reconciler. ``write_behind``: seconds the owned Pod's metadata patch may be
    held back (0: off; the planner bounds it); ``status_window``: seconds a status that reports
    only the Pod's progress may be held back (0: off); ``events``: record Kubernetes Events
    about the Sandbox's lifecycle."""

    def observe(key: ObjectKey, observed: Observed) -> SandboxObservation:
        memo = observed.memo
        return observe_sandbox(
            key,
            observed.cache,
            observed.last_error,
            cluster_domain=cluster_domain,
            write_behind=write_behind,
            pod_patch_held_since=memo.pod_patch_held_since if memo is not None else None,
            status_window=status_window,
            status_held_since=memo.status_held_since if memo is not None else None,
            events=events,
        )

    return Reconciler(
        "Sandbox",
        observe,
        plan_sandbox,
        memo_type=WriteBehindMemo,
        span=_sandbox_span,
        with_trace_context=_sandbox_with_trace_context,
    )


def _sandbox_span(inputs: SandboxObservation) -> ReconcileSpan | None:
    if inputs.sandbox is None:
        return None
    attributes = {"sandbox.name": inputs.name, "sandbox.namespace": inputs.namespace}
    labels = labels_of(inputs.sandbox)
    if LABEL_CREATED_BY in labels:
        attributes[LABEL_CREATED_BY] = normalize_created_by(str(labels[LABEL_CREATED_BY]))
    parent = annotations_of(inputs.sandbox).get(ANNOTATION_TRACE_CONTEXT)
    return ReconcileSpan(SPAN_NAME, attributes, str(parent) if parent else None)


def _sandbox_with_trace_context(inputs: SandboxObservation, carrier: str) -> SandboxObservation:
    # Only a Sandbox without a trace context needs the carrier (the planner writes it);
    # leaving it out otherwise keeps the inputs, and so the decision's digest, stable.
    if inputs.sandbox is None or annotations_of(inputs.sandbox).get(ANNOTATION_TRACE_CONTEXT):
        return inputs
    return msgspec.structs.replace(inputs, trace_context=carrier)


def template_reconciler() -> Reconciler[TemplateObservation]:
    def observe(key: ObjectKey, observed: Observed) -> TemplateObservation:
        return observe_template(
            key, observed.cache, observed.last_error, failure_persists=observed.failure_persists
        )

    return Reconciler("SandboxTemplate", observe, plan_template, span=_template_span)


def _template_span(inputs: TemplateObservation) -> ReconcileSpan | None:
    if inputs.template is None:
        return None
    parent = annotations_of(inputs.template).get(ANNOTATION_TRACE_CONTEXT)
    return ReconcileSpan(TEMPLATE_SPAN_NAME, {}, str(parent) if parent else None)


async def _count_sandboxes(
    js: JetStreamContext, bus: BusConfig, cache: ObjectCache
) -> dict[tuple[str, ...], float]:
    return count_sandboxes(cache.objects("Sandbox"))


SANDBOXES_GAUGE: Final = Gauge(
    "agent_sandboxes",
    "Sandboxes by namespace, readiness, expiry, launch type, template, owner and creator "
    "(agent-sandbox's names), counted from the worker's view at each scrape.",
    SANDBOX_LABELS,
    _count_sandboxes,
)


def sandbox_worker(
    *,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    write_behind: float = 0.0,
    status_window: float = 0.0,
    events: bool = True,
) -> WorkerDefinition:
    return WorkerDefinition(
        name=WORKER_NAME,
        reconcilers=(
            sandbox_reconciler(
                cluster_domain=cluster_domain,
                write_behind=write_behind,
                status_window=status_window,
                events=events,
            ),
            template_reconciler(),
        ),
        watched_kinds=WATCHED_KINDS,
        wakes=wakes,
        label_indexes=(("Pod", LABEL_SANDBOX_NAME_HASH),),
        gauges=(SANDBOXES_GAUGE,),
        # A starting Pod's progress waits for the pass that ends the status window (its
        # Sandbox's status is held until then) instead of a pass of its own that writes nothing.
        patience={"Pod": functools.partial(_progress_patience, status_window)},
    )


def _progress_patience(window: float, before: Json, after: Json) -> float:
    return window if window > 0 and only_progress(before, after) else 0.0
