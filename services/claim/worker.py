"""The claim worker as the reconciler runtime sees it: what it follows, what wakes what, and
its reconcilers.

``SandboxClaim`` keys are reconciled by :func:`~services.claim.core.plan.plan_claim`: adopt a
warm sandbox from the claim's pool queue, or start cold; keep the status. ``SandboxWarmPool``
keys by :func:`~services.claim.core.queues.plan_queue`: a pool's queue goes with the pool.
OpenSandbox ``BatchSandbox`` keys by :func:`~services.claim.core.batch.plan.plan_batch`: its
Pods in template mode, pause and resume, its endpoints and status (the Pool, in the pool
worker, allocates; the snapshot worker commits the pause snapshot).

Following upstream's watches, declared as rules (:class:`ClaimWakes`): a claim's change wakes it; a
Sandbox's change wakes the claim that controls it; a pool's change of spec (its generation,
not its status) wakes its own key and the claims that name it and have no Sandbox yet; a
template seen for the first time wakes the claims of the pools that use it (a claim waiting
with TemplateNotFound); so does, sandbus's, any change of a template that says or said why its
NetworkPolicy is not written (their ``NetworkPolicyFailure``).

Tracing: a claim's reconcile is the ``ReconcileSandboxClaim`` span
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

import msgspec

from api.keys import ANNOTATION_TRACE_CONTEXT, LABEL_CREATED_BY, normalize_created_by
from api.objects import Json, controller_of, labels_of, metadata_of
from api.opensandbox import ANNOTATION_ALLOC_STATUS, LABEL_BATCH_SANDBOX_NAME, LABEL_POOL_NAME
from events.envelope import ObjectKey, key_of
from services.claim.core.batch.plan import BatchObservation, observe_batch, plan_batch
from services.claim.core.batch.tasks import SyncTasks, TaskMemo
from services.claim.core.metrics import CLAIM_METRICS, ClaimMemo
from services.claim.core.observation import ClaimObservation, ClaimSettings, observe_claim
from services.claim.core.plan import plan_claim
from services.claim.core.queues import QueueMemo, QueueObservation, plan_queue
from services.claim.core.spread import queued_nodes
from services.claim.tasks import TaskReports
from services.domain.agentsandbox.policy_failure import network_policy_failure
from services.domain.agentsandbox.warmpool import template_ref_name
from services.runtime.worker_api import (
    ObjectCache,
    Observed,
    Reconciler,
    ReconcileSpan,
    Wake,
    Wakes,
    WarmTaker,
    WorkerDefinition,
    wake_owner,
    wake_referrers,
    wake_self,
)

__all__ = [
    "SPAN_NAME",
    "WATCHED_KINDS",
    "WORKER_NAME",
    "ClaimWakes",
    "batch_reconciler",
    "claim_reconciler",
    "claim_worker",
    "queue_reconciler",
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


def claim_reconciler(
    settings: ClaimSettings | None = None, reports: TaskReports | None = None
) -> Reconciler[ClaimObservation]:
    settings = settings or ClaimSettings()
    reports = reports or TaskReports()

    def observe(key: ObjectKey, observed: Observed) -> ClaimObservation:
        if observed.cache.get(key) is None:
            reports.forget(key)
        return observe_claim(
            key,
            observed.cache,
            settings=settings,
            messages=observed.messages,
            last_error=observed.last_error,
            failure_persists=observed.failure_persists,
            memo=observed.memo,
            reports=reports.of(key),
        )

    return Reconciler(
        "SandboxClaim",
        observe,
        plan_claim,
        memo_type=ClaimMemo,
        span=_claim_span,
        with_trace_context=_claim_with_trace_context,
    )


def _claim_span(inputs: ClaimObservation) -> ReconcileSpan | None:
    if inputs.claim is None:
        return None
    attributes = {"sandboxclaim.name": inputs.name, "sandboxclaim.namespace": inputs.namespace}
    created_by = labels_of(inputs.claim).get(LABEL_CREATED_BY)
    if created_by is not None:
        attributes[LABEL_CREATED_BY] = normalize_created_by(str(created_by))
    parent = (metadata_of(inputs.claim).get("annotations") or {}).get(ANNOTATION_TRACE_CONTEXT)
    return ReconcileSpan(SPAN_NAME, attributes, str(parent) if parent else None)


def _claim_with_trace_context(inputs: ClaimObservation, carrier: str) -> ClaimObservation:
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


def queue_reconciler() -> Reconciler[QueueObservation]:
    def observe(key: ObjectKey, observed: Observed) -> QueueObservation:
        return QueueObservation(
            namespace=key.namespace,
            name=key.name,
            pool=observed.cache.get(key),
            memo=observed.memo,
        )

    return Reconciler("SandboxWarmPool", observe, plan_queue, memo_type=QueueMemo)


def batch_reconciler(
    resume_pull_secret: str = "", reports: TaskReports | None = None
) -> Reconciler[BatchObservation]:
    """OpenSandbox's BatchSandbox: its Pods (template mode), pause and resume, its endpoints and
    status."""
    reports = reports or TaskReports()

    def observe(key: ObjectKey, observed: Observed) -> BatchObservation:
        if observed.cache.get(key) is None:
            reports.forget(key)
        return observe_batch(
            key,
            observed.cache,
            expectations=observed.expectations,
            pull_secret=resume_pull_secret,
            task_memo=observed.memo,
            reports=reports.of(key),
        )

    return Reconciler("BatchSandbox", observe, plan_batch, memo_type=TaskMemo, expects=True)


def _waits_on(sandbox: Json, pool: Json) -> bool:
    """A BatchSandbox that names the Pool, or waits for any (``"*"``)."""
    return (sandbox.get("spec") or {}).get("poolRef") in (metadata_of(pool).get("name"), "*")


def _pool_pod(pod: Json) -> bool:
    owner = controller_of(pod)
    return owner is not None and owner.get("kind") == "Pool"


def _allocated(sandbox: Json, pod: Json) -> bool:
    """A BatchSandbox whose ``alloc-status`` names the Pod, by its whole name."""
    quoted = json.dumps(metadata_of(pod).get("name"))
    annotations = metadata_of(sandbox).get("annotations") or {}
    return quoted in str(annotations.get(ANNOTATION_ALLOC_STATUS) or "")


def _opensandbox_pod(pod: Json) -> bool:
    """The Pods a BatchSandbox reads: a Pool's, or its own. The Pods of Sandboxes, most of the
    bus's Pod events, are the sandbox worker's; the claim worker does not keep them. Pods are
    followed on demand: not at all until a BatchSandbox is in the cache."""
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
class _PoolSpecs:
    """A pool's change of spec (its generation, not its status) wakes its own key and the
    claims that name it and have no Sandbox yet; its deletion wakes its key. It remembers each
    pool's generation, because a change arrives without the object it replaced."""

    generations: dict[ObjectKey, int] = field(default_factory=dict)

    def __call__(self, key: ObjectKey, pool: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
        generation = metadata_of(pool).get("generation")
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


@dataclass
class _NewTemplates:
    """A template seen for the first time wakes the claims of the pools that use it (a claim
    waiting with TemplateNotFound)."""

    templates: set[str] = field(default_factory=set)

    def __call__(self, key: ObjectKey, template: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
        uid = str(metadata_of(template).get("uid") or "")
        if uid in self.templates or cache.get(key) is None:
            return
        self.templates.add(uid)
        yield from _claims_of_template(key, cache)


def _policy_failures(key: ObjectKey, template: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
    """A template that says, or said, why its NetworkPolicy is not written (it is asked with
    the template before and after the change) wakes the claims of the pools that use it: each
    reports it (``NetworkPolicyFailure``), and stops when it is gone."""
    if network_policy_failure(template) is not None:
        yield from _claims_of_template(key, cache)


def _claims_of_template(template: ObjectKey, cache: ObjectCache) -> Iterator[ObjectKey]:
    """The live claims of the pools that use ``template``."""
    pools = {
        str(metadata_of(pool).get("name"))
        for pool in cache.objects("SandboxWarmPool", template.namespace)
        if template_ref_name(pool) == template.name
    }
    for claim in cache.objects("SandboxClaim", template.namespace):
        if _pool_of(claim) in pools and not metadata_of(claim).get("deletionTimestamp"):
            yield key_of(claim, "SandboxClaim")


class ClaimWakes(Wakes):
    """Which keys a change wakes (see the module doc); each has its own memory of the pools'
    generations and the templates seen."""

    def __init__(self) -> None:
        super().__init__(
            wake_self(("SandboxClaim", "BatchSandbox")),
            # Its Sandbox, or a legacy per-claim policy.
            wake_owner(("Sandbox", "NetworkPolicy"), "SandboxClaim"),
            Wake(("SandboxWarmPool",), _PoolSpecs()),
            Wake(("SandboxTemplate",), _NewTemplates()),
            Wake(("SandboxTemplate",), _policy_failures),
            # A BatchSandbox is woken by the Pods it controls or the Pool gave it (their IPs and
            # readiness are its status), by its Pool (capacity, or a Pool for "*"), and by the
            # snapshots it controls (its pause snapshot's phase).
            wake_owner(("Pod", "SandboxSnapshot"), "BatchSandbox"),
            wake_referrers("Pod", "BatchSandbox", _allocated, when=_pool_pod),
            wake_referrers("Pool", "BatchSandbox", _waits_on),
        )


def _generation_acknowledged(before: Json, after: Json) -> bool:
    """A Sandbox change that only gave its conditions a new ``observedGeneration``: the sandbox
    worker acknowledging the generation a claim's adoption made. Nothing a claim reads moved
    (its Ready is the Sandbox's without that field), so it wakes no claim."""
    return _without_acknowledgement(before) == _without_acknowledgement(after)


def _without_acknowledgement(sandbox: Json) -> Json:
    """The Sandbox without its resourceVersion and its conditions' ``observedGeneration``."""
    found = sandbox.get("status")
    status: Json = dict(found) if isinstance(found, dict) else {}
    status["conditions"] = [
        {k: v for k, v in condition.items() if k != "observedGeneration"}
        if isinstance(condition, dict)
        else condition
        for condition in status.get("conditions") or ()
    ]
    metadata = {k: v for k, v in metadata_of(sandbox).items() if k != "resourceVersion"}
    return {**sandbox, "metadata": metadata, "status": status}


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
            claim_reconciler(settings, reports),
            queue_reconciler(),
            batch_reconciler(resume_pull_secret, reports),
        ),
        watched_kinds=WATCHED_KINDS,
        wakes=ClaimWakes(),
        unmoved_by={"Sandbox": _generation_acknowledged},
        executors={**taker.executors(), SyncTasks: reports.execute},
        metrics=CLAIM_METRICS,
        follows={"Pod": _opensandbox_pod, "NetworkPolicy": _claims_policy},
        on_demand={"Pod": ("BatchSandbox",)},
    )
