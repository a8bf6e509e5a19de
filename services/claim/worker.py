"""The claim worker as the reconciler runtime sees it: what it follows, what wakes what, and
its reconcilers.

``SandboxClaim`` keys are reconciled by :func:`~services.claim.core.plan.plan_claim`: adopt a
warm sandbox from the claim's pool queue, or start cold; keep the status. ``SandboxWarmPool``
keys by :func:`~services.claim.core.queues.plan_queue`: a pool's queue goes with the pool.
OpenSandbox ``BatchSandbox`` keys by :func:`~services.claim.core.batch.plan.plan_batch`: its
Pods in template mode, pause and resume, its endpoints and status (the Pool, in the pool
worker, allocates; the snapshot worker commits the pause snapshot).

Following upstream's watches (spec/agent-sandbox.md §3.2): a claim's change wakes it; a
Sandbox's change wakes the claim that controls it; a pool's change of spec (its generation,
not its status) wakes its own key and the claims that name it and have no Sandbox yet; a
template seen for the first time wakes the claims of the pools that use it (a claim waiting
with TemplateNotFound).

Tracing (spec/agent-sandbox.md §6): a claim's reconcile is the ``ReconcileSandboxClaim`` span
(attributes ``sandboxclaim.name``, ``sandboxclaim.namespace`` and the normalised
``agents.x-k8s.io/created-by``), joined to the claim's trace-context annotation when a client
wrote one, and hung under the watcher's span of the change that woke it. The planner copies the
claim's carrier onto the Sandbox it adopts (in the adoption patch) or creates (in the create
body), as upstream does. A claim without a carrier of its own is shown to the planner with the
running span's while it has no Sandbox: the Sandbox then carries this reconcile's carrier, in a
write that happens anyway, and the sandbox worker's spans join the claim's trace. The claim
itself is never written for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

import msgspec

from api.keys import ANNOTATION_TRACE_CONTEXT, LABEL_CREATED_BY
from api.opensandbox import ANNOTATION_ALLOC_STATUS, LABEL_BATCH_SANDBOX_NAME, LABEL_POOL_NAME
from services.claim.core.batch.plan import BatchObservation, observe_batch, plan_batch
from services.claim.core.batch.tasks import SyncTasks, TaskMemo
from services.claim.core.metrics import CLAIM_METRICS, ClaimMemo
from services.claim.core.observation import ClaimObservation, ClaimSettings, observe_claim
from services.claim.core.plan import plan_claim
from services.claim.core.queues import QueueMemo, QueueObservation, plan_queue
from services.claim.core.spread import queued_nodes
from services.claim.tasks import TaskReports
from services.pool.core.blueprint import template_ref_name
from services.runtime.cache import (
    Json,
    ObjectCache,
    ObjectKey,
    controller_of,
    key_of,
    labels_of,
    metadata_of,
)
from services.runtime.reconcile import Plan
from services.runtime.reconcile.tracing import ReconcileSpan
from services.runtime.reconcile.warm import WarmTaker
from services.runtime.reconcile.worker import Observed, WorkerDefinition
from services.sandbox.core.pods import normalize_created_by

__all__ = [
    "SPAN_NAME",
    "WATCHED_KINDS",
    "WORKER_NAME",
    "ClaimReconciler",
    "ClaimWakes",
    "claim_worker",
]

WORKER_NAME = "claim"
SPAN_NAME = "ReconcileSandboxClaim"
WATCHED_KINDS = (
    "SandboxClaim",
    "Sandbox",
    "SandboxWarmPool",
    "SandboxTemplate",
    "BatchSandbox",
    "Pod",
    "Pool",
    "SandboxSnapshot",
    "NetworkPolicy",
)


@dataclass(frozen=True)
class ClaimReconciler:
    settings: ClaimSettings = field(default_factory=ClaimSettings)
    reports: TaskReports = field(default_factory=TaskReports)
    kind: str = field(default="SandboxClaim", init=False)
    memo_type: ClassVar[type] = ClaimMemo

    def observe(self, key: ObjectKey, observed: Observed) -> ClaimObservation:
        if observed.cache.get(key) is None:
            self.reports.forget(key)
        return observe_claim(
            key,
            observed.cache,
            settings=self.settings,
            messages=observed.messages,
            last_error=observed.last_error,
            memo=observed.memo,
            reports=self.reports.of(key),
        )

    def plan(self, inputs: ClaimObservation, now: datetime) -> Plan:
        return plan_claim(inputs, now)

    def span(self, inputs: ClaimObservation) -> ReconcileSpan | None:
        if inputs.claim is None:
            return None
        attributes = {"sandboxclaim.name": inputs.name, "sandboxclaim.namespace": inputs.namespace}
        created_by = labels_of(inputs.claim).get(LABEL_CREATED_BY)
        if created_by is not None:
            attributes[LABEL_CREATED_BY] = normalize_created_by(str(created_by))
        parent = (metadata_of(inputs.claim).get("annotations") or {}).get(ANNOTATION_TRACE_CONTEXT)
        return ReconcileSpan(SPAN_NAME, attributes, str(parent) if parent else None)

    def with_trace_context(self, inputs: ClaimObservation, carrier: str) -> ClaimObservation:
        # Only a claim that may adopt or create (no Sandbox of its own yet) needs the carrier,
        # and only one without a carrier of its own; leaving it out otherwise keeps the
        # inputs, and so the decision's digest, stable.
        claim = inputs.claim
        if claim is None or inputs.controlled:
            return inputs
        metadata = metadata_of(claim)
        annotations = dict(metadata.get("annotations") or {})
        if annotations.get(ANNOTATION_TRACE_CONTEXT):
            return inputs
        annotations[ANNOTATION_TRACE_CONTEXT] = carrier
        traced = {**claim, "metadata": {**metadata, "annotations": annotations}}
        return msgspec.structs.replace(inputs, claim=traced)


@dataclass(frozen=True)
class QueueReconciler:
    kind: str = field(default="SandboxWarmPool", init=False)
    memo_type: ClassVar[type] = QueueMemo

    def observe(self, key: ObjectKey, observed: Observed) -> QueueObservation:
        return QueueObservation(
            namespace=key.namespace,
            name=key.name,
            pool=observed.cache.get(key),
            memo=observed.memo,
        )

    def plan(self, inputs: QueueObservation, now: datetime) -> Plan:
        return plan_queue(inputs, now)


@dataclass(frozen=True)
class BatchReconciler:
    """OpenSandbox's BatchSandbox: its Pods (template mode), pause and resume, its endpoints and
    status."""

    resume_pull_secret: str = ""
    reports: TaskReports = field(default_factory=TaskReports)
    kind: str = field(default="BatchSandbox", init=False)
    expects: ClassVar[bool] = True
    memo_type: ClassVar[type] = TaskMemo

    def observe(self, key: ObjectKey, observed: Observed) -> BatchObservation:
        if observed.cache.get(key) is None:
            self.reports.forget(key)
        return observe_batch(
            key,
            observed.cache,
            expectations=observed.expectations,
            pull_secret=self.resume_pull_secret,
            task_memo=observed.memo,
            reports=self.reports.of(key),
        )

    def plan(self, inputs: BatchObservation, now: datetime) -> Plan:
        return plan_batch(inputs, now)


def _batch_wakes(kind: str, obj: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
    """A BatchSandbox is woken by itself, by the Pods it controls or the Pool gave it (their
    IPs and readiness are its status), by its Pool (capacity, or a Pool for ``"*"``), and by
    the snapshots it controls (its pause snapshot's phase)."""
    key = key_of(obj, kind)
    if kind == "BatchSandbox":
        yield key
        return
    if kind == "SandboxSnapshot":
        owner = controller_of(obj)
        if owner is not None and owner.get("kind") == "BatchSandbox":
            yield ObjectKey("BatchSandbox", key.namespace, str(owner.get("name") or ""))
        return
    if kind == "Pool":
        for sandbox in cache.objects("BatchSandbox", key.namespace):
            if (sandbox.get("spec") or {}).get("poolRef") in (key.name, "*"):
                yield key_of(sandbox, "BatchSandbox")
        return
    owner = controller_of(obj)  # a Pod
    if owner is None:
        return
    if owner.get("kind") == "BatchSandbox":
        yield ObjectKey("BatchSandbox", key.namespace, str(owner.get("name") or ""))
    elif owner.get("kind") == "Pool":
        quoted = json.dumps(key.name)
        for sandbox in cache.objects("BatchSandbox", key.namespace):
            annotations = metadata_of(sandbox).get("annotations") or {}
            if quoted in str(annotations.get(ANNOTATION_ALLOC_STATUS) or ""):
                yield key_of(sandbox, "BatchSandbox")


def _opensandbox_pod(pod: Json) -> bool:
    """The Pods a BatchSandbox reads: a Pool's, or its own. The Pods of Sandboxes, most of the
    bus's Pod events, are the sandbox worker's; the claim worker does not keep them."""
    labels = labels_of(pod)
    return LABEL_POOL_NAME in labels or LABEL_BATCH_SANDBOX_NAME in labels


def _claims_policy(policy: Json) -> bool:
    """The NetworkPolicies the claim worker keeps: those a SandboxClaim controls (the legacy
    per-claim ``<claim>-network-policy``, which it deletes). The templates' are the sandbox
    worker's."""
    owner = controller_of(policy)
    return owner is not None and owner.get("kind") == "SandboxClaim"


def _unbound(claim: Json) -> bool:
    return not ((claim.get("status") or {}).get("sandbox") or {}).get("name") and not (
        metadata_of(claim).get("deletionTimestamp")
    )


def _pool_of(claim: Json) -> str:
    return str(((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name") or "")


@dataclass
class ClaimWakes:
    """Which keys a change wakes (see the module doc). It remembers each pool's generation and
    the templates seen, because a change arrives without the object it replaced."""

    generations: dict[ObjectKey, int] = field(default_factory=dict)
    templates: set[str] = field(default_factory=set)

    def __call__(self, kind: str, obj: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
        if kind in ("BatchSandbox", "Pod", "Pool", "SandboxSnapshot"):
            yield from _batch_wakes(kind, obj, cache)
            return
        key = key_of(obj, kind)
        if kind == "SandboxClaim":
            yield key
        elif kind in ("Sandbox", "NetworkPolicy"):  # its Sandbox, or a legacy per-claim policy
            owner = controller_of(obj)
            if owner is not None and owner.get("kind") == "SandboxClaim":
                yield ObjectKey("SandboxClaim", key.namespace, str(owner.get("name") or ""))
        elif kind == "SandboxWarmPool":
            generation = metadata_of(obj).get("generation")
            if cache.get(key) is None:  # deleted
                self.generations.pop(key, None)
                yield key
                return
            seen = self.generations.get(key)
            if not isinstance(generation, int) or (isinstance(seen, int) and generation <= seen):
                return  # a status change, or the state a change replaced
            self.generations[key] = generation
            yield key
            for claim in cache.objects("SandboxClaim", key.namespace):
                if _pool_of(claim) == key.name and _unbound(claim):
                    yield key_of(claim, "SandboxClaim")
        elif kind == "SandboxTemplate":
            uid = str(metadata_of(obj).get("uid") or "")
            if uid in self.templates or cache.get(key) is None:
                return
            self.templates.add(uid)
            pools = {
                str(metadata_of(pool).get("name"))
                for pool in cache.objects("SandboxWarmPool", key.namespace)
                if template_ref_name(pool) == key.name
            }
            for claim in cache.objects("SandboxClaim", key.namespace):
                if _pool_of(claim) in pools and not metadata_of(claim).get("deletionTimestamp"):
                    yield key_of(claim, "SandboxClaim")


def claim_worker(
    settings: ClaimSettings | None = None,
    taker: WarmTaker | None = None,
    *,
    resume_pull_secret: str = "",
) -> WorkerDefinition:
    taker = taker or WarmTaker(spread=queued_nodes)
    reports = TaskReports()
    return WorkerDefinition(
        name=WORKER_NAME,
        reconcilers=(
            ClaimReconciler(settings or ClaimSettings(), reports),
            QueueReconciler(),
            BatchReconciler(resume_pull_secret, reports),
        ),
        watched_kinds=WATCHED_KINDS,
        wakes=ClaimWakes(),
        executors={**taker.executors(), SyncTasks: reports.execute},
        metrics=CLAIM_METRICS,
        follows={"Pod": _opensandbox_pod, "NetworkPolicy": _claims_policy},
    )
