"""``plan_open_pool``: one pass of an OpenSandbox Pool (docs/opensandbox.md §2.2), in upstream's
order: eviction, allocation and release (the ledger, :mod:`.ledger`), the template update, the
scale, the status.

What a pass writes, and why it is safe to write it again: the ledger (the memo, written before
any action), each BatchSandbox's ``alloc-status``/``alloc-released`` annotations and its
``pool-allocation`` finalizer as projections of the ledger (conditional on the sandbox's
resourceVersion, so a concurrent write of its own controller is never overwritten, and
planned again on a conflict), Pod creates and deletes (the runtime's expectations keep a
lagging cache from over-creating: upstream #1215; while its own creates are not on the bus
yet the Pool neither creates nor deletes, and looks again by itself after
:data:`EXPECTATIONS_RECHECK` at the latest), and the status (written only when it changed, so
a steady Pool writes nothing: upstream #1423).

Recycling a released Pod (:func:`recycle_strategy`, :func:`recycle`): ``Delete`` deletes it and
keeps it held until it is gone; ``Noop`` hands it back at once; ``Restart`` restarts its
containers in place through the exec subresource (:mod:`.restart`), and deletes it if that
gives up. A Pod is never free while its recycle runs,
the ledger survives a restart, and a recycle whose delete never happened (the worker died
after writing the ledger) is carried out again, so a dirty Pod is never handed out again
(upstream OpenSandbox #723). A Pod that carries the eviction label is never handed out, even
once its sandbox gives it back.

Where a pass differs from upstream's on purpose, besides the ledger's rules:

- A Pool with no template makes no Pod and says so (upstream dereferences it and crashes);
  a maxUnavailable it cannot read counts as 1, as upstream's, and is named in the decision.
- A Pool that cannot make progress says why in its status, with conditions upstream's Pool
  does not have (docs/conditions.md), each set while the cause lasts, removed once it ends, and
  announced by a Warning Event (its reason the condition's) when it appears or changes reason:
  ``ReplicaFailure``/``FailedCreate`` (Kubernetes's ReplicaSet names) while the API server
  refuses its Pods, with the API's own message (the runtime hands the planner its previous
  pass's error; Pod names left out, so the message stays the same from one retry to the
  next); ``InvalidSpec``/``InvertedCapacity`` for a bufferMin above bufferMax or a poolMin
  above poolMax, which upstream quietly runs at poolMax and sandbus refuses: no Pod is created
  or removed for the scale or a template update until the bounds are fixed (the CRD now
  rejects them; this is for a Pool stored before); ``InvalidSpec``/``NoTemplate`` while Pods
  are wanted and there is no template. While a condition is set the status is written before
  the pass's creates, so that a create refused again does not keep it from being said.
- Nothing the planner meets stops the pass: allocation, the update, the scale and the status
  are planned every time, the status also while the scale waits for its own creates
  (upstream's pass stops at its first error, and its scale gate skips the status, §9.12).
- When the Pool is gone, its ledger is forgotten with it (a Pool recreated under the name
  starts from the annotations); a BatchSandbox being deleted that still carries
  ``pool-allocation`` is let go by its own controller (upstream leaves it stuck, §9.28).
- Creates of one pass go out together, not one call after another.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from api.objects import Json, labels_of, metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
    FINALIZER_POOL_ALLOCATION,
    GROUP,
    LABEL_POOL_NAME,
    LABEL_POOL_REVISION,
    VERSION,
)
from events.envelope import ObjectKey
from services.domain.agentsandbox.hashes import open_pool_revision
from services.domain.opensandbox.allocation import appended, pod_list_annotation
from services.domain.opensandbox.pods import is_pod_ready
from services.pool.core.opensandbox.ledger import (
    Holding,
    PoolLedger,
    SandboxView,
    pack,
    recover_ledger,
    sandbox_view,
)
from services.pool.core.opensandbox.observation import OpenPoolObservation
from services.pool.core.opensandbox.restart import RestartState, decide_restart
from services.pool.core.opensandbox.scaling import (
    Capacity,
    desired_schedulable,
    evict,
    max_unavailable_problem,
    needs_eviction,
    oldest_first,
    plan_recreate,
    ready_since,
    scale_up,
)
from services.runtime.kube_events import warning_when_raised
from services.runtime.reconcile.actions import (
    Action,
    Create,
    Delete,
    Exec,
    Patch,
    Plan,
    Together,
)
from services.runtime.reconcile.failures import reportable
from services.runtime.times import parse_time, rfc3339_nano

__all__ = [
    "CONTROLLER_NAME",
    "EXPECTATIONS_RECHECK",
    "plan_open_pool",
    "recycle",
    "recycle_strategy",
    "template_revision",
]

CONTROLLER_NAME: Final = "pool-controller"
POOL_API_VERSION: Final = f"{GROUP}/{VERSION}"
RESTART_RECHECK: Final = 5.0
"""Seconds before a restarting Pod is looked at again without an event of its own (its next
retry, or a restart that does not show)."""
EXPECTATIONS_RECHECK: Final = 30.0
"""Seconds before a pass that waits for its own creates looks again by itself: the bus wakes
it sooner, and this bounds the wait for a create whose answer was lost (it lapses)."""


def template_revision(pool: Mapping[str, Any]) -> str:
    """The Pool template's revision, as upstream's Go controller computes it (16 hex characters
    of the SHA-256 of ``json.Marshal(pool.Spec.Template)``,
    :func:`~services.domain.agentsandbox.hashes.open_pool_revision`): a Pool taken over from
    upstream's controller keeps its idle Pods."""
    template = (pool.get("spec") or {}).get("template")
    return open_pool_revision(template if isinstance(template, Mapping) else None)


def _name(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name") or "")


@dataclass
class _Pass:
    obs: OpenPoolObservation
    pool: Json
    now: datetime
    revision: str
    ledger: PoolLedger
    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    requeue: float | None = None
    problems: dict[str, tuple[str, str]] = field(default_factory=dict)
    """The conditions to report: type → (reason, message)."""

    @property
    def key(self) -> ObjectKey:
        return ObjectKey("Pool", self.obs.namespace, self.obs.name)

    def later(self, seconds: float) -> None:
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)


def plan_open_pool(obs: OpenPoolObservation, now: datetime) -> Plan:
    pool = obs.pool
    views = sorted((sandbox_view(s) for s in obs.sandboxes), key=lambda v: (v.created, v.name))
    if pool is None:
        return _pool_gone(obs, views)
    if metadata_of(pool).get("deletionTimestamp"):
        return Plan(reason="the Pool is being deleted: its Pods go with it")
    ledger = (
        obs.ledger
        if obs.ledger is not None
        else recover_ledger(v for v in views if v.pool_ref == obs.name)
    )
    run = _Pass(obs, pool, now, template_revision(pool), ledger)
    if obs.ledger is None and ledger.pods:
        run.notes.append(f"the ledger was rebuilt from the annotations ({len(ledger.pods)} held)")
    live = [p for p in obs.pods if not metadata_of(p).get("deletionTimestamp")]
    live_names = {_name(p) for p in live}

    eviction = evict(live, ledger.pods)
    for pod in eviction.evicted:
        run.actions.append(_delete(pod, "evicted: it carries the eviction label"))
    schedulable = list(eviction.kept)

    supply = _allocate(run, views, schedulable, live_names)
    _project(run, views)

    spec = pool.get("spec") or {}
    update_max = (spec.get("updateStrategy") or {}).get("maxUnavailable")
    scale_max = (spec.get("scaleStrategy") or {}).get("maxUnavailable")
    for field_name, value in (("updateStrategy", update_max), ("scaleStrategy", scale_max)):
        problem = max_unavailable_problem(value)
        if problem is not None:
            run.notes.append(f"{field_name}: {problem}")
    scale_at = len(run.actions)
    inverted = _inverted_capacity(pool)
    if inverted is not None:
        # Refused: neither the update nor the scale touches a Pod (releases and evictions,
        # asked for by others, still happen).
        run.problems["InvalidSpec"] = ("InvertedCapacity", inverted)
    else:
        idle = [p for p in schedulable if _name(p) not in run.ledger.pods]
        recreate = plan_recreate(
            idle, revision=run.revision, schedulable=schedulable, max_unavailable=update_max
        )
        for pod in recreate.delete:
            run.actions.append(
                _delete(pod, f"outdated: the template is at revision {run.revision}")
            )
        if recreate.delete:
            run.notes.append(f"recreating {len(recreate.delete)} outdated")
        requeue = _scale(run, schedulable, supply + recreate.supply, list(recreate.kept), len(live))
        if requeue is not None:
            run.later(requeue)
    refused = _refused_create(obs.last_error, persists=obs.failure_persists)
    if refused is not None and any(_creates_pod(a) for a in run.actions[scale_at:]):
        run.problems["ReplicaFailure"] = ("FailedCreate", refused)
    report = _status(run, live, schedulable)
    # The status goes before the creates while a condition is set: a create refused again
    # ends the pass, and the condition would never be written.
    at = scale_at if run.problems else len(run.actions)
    run.actions[at:at] = report
    return Plan(
        actions=tuple(run.actions),
        requeue_after=run.requeue,
        reason="; ".join(run.notes) or "in shape",
        memo=run.ledger,
    )


def _pool_gone(obs: OpenPoolObservation, views: Sequence[SandboxView]) -> Plan:
    """The Pool is gone: its Pods went with it (owner references) and its ledger is forgotten.
    A BatchSandbox being deleted that still carries ``pool-allocation`` is its own controller's
    to let go (services/claim/core/batch/plan.py: no Pool will, §9.28)."""
    waiting = [v.name for v in views if v.deleting and FINALIZER_POOL_ALLOCATION in v.finalizers]
    reason = "the Pool is gone: its Pods went with it"
    if waiting:
        reason += f"; {', '.join(waiting)} will let go of the pool-allocation finalizer"
    return Plan(reason=reason)


# -- allocation and release ------------------------------------------------------------------

RecycleStrategy = Literal["Delete", "Noop", "Restart"]
Recycled = Literal["succeeded", "delete", "restart", "restarting"]


def recycle_strategy(pool: Mapping[str, Any]) -> RecycleStrategy:
    """The Pool's ``recycleStrategy.type``; absent or unknown: ``Delete`` (upstream's
    ``recycle_factory.go``)."""
    strategy = (pool.get("spec") or {}).get("recycleStrategy") or {}
    kind = strategy.get("type") if isinstance(strategy, Mapping) else None
    if kind == "Noop":
        return "Noop"
    if kind == "Restart":
        return "Restart"
    return "Delete"


def recycle(strategy: RecycleStrategy, pod: Mapping[str, Any] | None) -> Recycled:
    """One released Pod under ``strategy`` (upstream's ``TryRecycle``): a Pod that is gone
    (None) or terminating is recycled (``succeeded``); under ``Noop`` it goes back to the pool
    as it is (``succeeded``); under ``Delete`` it is deleted and stays held until it is gone
    (upstream's ``Recycling`` + ``NeedDelete``); under ``Restart`` its containers are restarted
    in place (``restart``: the restart state machine of :mod:`.restart` says how far)."""
    if pod is None or metadata_of(pod).get("deletionTimestamp"):
        return "succeeded"
    if strategy == "Noop":
        return "succeeded"
    return "restart" if strategy == "Restart" else "delete"


def _restart(run: _Pass, pod: Mapping[str, Any], sandbox: str, why: str) -> Recycled:
    """One step of a Restart recycle: persist the record, exec the restart command, and once
    every recorded container runs again the Pod goes back to the pool (it is handed out when
    it is Ready again). Restarting that gives up deletes the Pod instead."""
    step = decide_restart(pod, run.pool, sandbox, run.now)
    name = _name(pod)
    if step.state is RestartState.SUCCEEDED:
        return "succeeded"
    if step.state is RestartState.FAILED:
        return "delete"
    patch = step.record_patch()
    key = ObjectKey("Pod", run.obs.namespace, name)
    if patch is not None:
        run.actions.append(Patch(key, patch, why="record the restart before it is sent"))
    for container, command in step.execs:
        run.actions.append(Exec(key, container, command, why=f"restart in place: {why}"))
    run.notes.append(f"restarting {name}: {step.message}")
    run.later(RESTART_RECHECK)
    return "restarting"


def _give_back_why(holding: Holding, holder: SandboxView | None, pod: str) -> str | None:
    """Why a held Pod goes back through the recycle strategy (None: it stays held)."""
    if holding.recycling:
        return "its recycle has not finished"
    if holder is None:
        return "its sandbox is gone"
    if holder.deleting:
        return "its sandbox is being deleted"
    if pod in holder.alloc_release:
        return "its sandbox released it"
    return None


def _allocate(
    run: _Pass, views: Sequence[SandboxView], schedulable: Sequence[Json], live: set[str]
) -> int:
    """Settle releases and losses, then give free Ready Pods to the sandboxes short of Pods,
    first come first served; ``run.ledger`` becomes the new ledger. Returns the Pods still
    wanted."""
    ledger = run.ledger
    pods = dict(ledger.pods)
    released = {uid: list(names) for uid, names in ledger.released.items()}
    lost = {uid: list(names) for uid, names in ledger.lost.items()}
    by_uid = {v.uid: v for v in views}
    by_name = {_name(p): p for p in run.obs.pods}
    strategy = recycle_strategy(run.pool)

    for pod_name, holding in list(pods.items()):
        holder = by_uid.get(holding.uid)
        if pod_name not in live:
            del pods[pod_name]
            if holding.recycling:
                released.setdefault(holding.uid, []).append(pod_name)
                run.notes.append(f"{pod_name} recycled")
            elif holder is not None:
                lost.setdefault(holding.uid, []).append(pod_name)
                replaced = "" if holder.deleting else ": it is replaced"
                run.notes.append(f"{pod_name} of {holding.sandbox} is gone{replaced}")
            continue
        if holder is not None and holder.problem is not None and not holding.recycling:
            continue  # left alone until its annotations can be read
        why = _give_back_why(holding, holder, pod_name)
        if why is None:
            continue
        pod = by_name.get(pod_name)
        outcome = recycle(strategy, pod)
        if outcome == "restart" and pod is not None:
            outcome = _restart(run, pod, holding.sandbox, why)
        if outcome == "succeeded":
            del pods[pod_name]
            released.setdefault(holding.uid, []).append(pod_name)
            run.notes.append(f"{pod_name} back in the pool ({why}; {strategy})")
            continue
        pods[pod_name] = Holding(sandbox=holding.sandbox, uid=holding.uid, recycling=True)
        if outcome == "delete":
            assert pod is not None  # live
            how = "its restart failed" if strategy == "Restart" else strategy
            run.actions.append(_delete(pod, f"recycle ({how}): {why}"))
            run.notes.append(f"recycling {pod_name} ({why}; {how})")

    free = [
        _name(p)
        for p in sorted(
            (
                p
                for p in schedulable
                if _name(p) not in pods and is_pod_ready(p) and not needs_eviction(p)
            ),
            key=lambda p: _hand_out_order(p, run.revision),
        )
    ]
    wanting = [
        v for v in views if not v.deleting and v.problem is None and v.pool_ref == run.obs.name
    ]
    holdings = Counter(h.uid for h in pods.values())
    requests = [
        (
            v.uid,
            v.replicas
            - holdings[v.uid]
            - len(released.get(v.uid, ()))
            - len(_held_elsewhere(v, pods, released, lost)),
        )
        for v in wanting
    ]
    refused = {v.uid: {*v.alloc_status, *released.get(v.uid, ())} for v in wanting}
    given, short = pack(free, requests, refused=refused)
    for view in wanting:
        for pod_name in given.get(view.uid, ()):
            pods[pod_name] = Holding(sandbox=view.name, uid=view.uid)
    for view, (_, need) in zip(wanting, requests, strict=True):
        got = len(given.get(view.uid, ()))
        if got:
            run.notes.append(f"gave {got} to {view.name}")
        if need > got:
            run.notes.append(f"{view.name} waits for {need - got}")

    known = set(by_uid)
    run.ledger = PoolLedger(
        pods=pods,
        released={uid: sorted(set(v)) for uid, v in released.items() if uid in known and v},
        lost={uid: sorted(set(v)) for uid, v in lost.items() if uid in known and v},
        next_pod=ledger.next_pod,
    )
    return short


def _hand_out_order(pod: Json, revision: str) -> tuple[Any, ...]:
    """Pods at the current revision first, then the longest Ready, then the oldest."""
    since = ready_since(pod)
    created = parse_time(metadata_of(pod).get("creationTimestamp"))
    return (
        labels_of(pod).get(LABEL_POOL_REVISION) != revision,
        since.timestamp() if since is not None else 0.0,
        created.timestamp() if created is not None else 0.0,
        _name(pod),
    )


def _held_elsewhere(
    view: SandboxView,
    pods: Mapping[str, Holding],
    released: Mapping[str, Sequence[str]],
    lost: Mapping[str, Sequence[str]],
) -> set[str]:
    """The Pods the sandbox lists as held that this Pool did not give it: another Pool's,
    from before its ``poolRef`` was edited. They count against its replicas here too."""
    ours = {p for p, h in pods.items() if h.uid == view.uid}
    ours |= set(released.get(view.uid, ())) | set(lost.get(view.uid, ()))
    return set(view.alloc_status) - set(view.alloc_released) - ours


def _project(run: _Pass, views: Sequence[SandboxView]) -> None:
    """Write each sandbox's annotations and finalizer to say what the ledger says."""
    ledger = run.ledger
    holdings: dict[str, list[str]] = {}
    for pod_name, holder in ledger.pods.items():
        holdings.setdefault(holder.uid, []).append(pod_name)
    for view in views:
        if view.problem is not None:
            run.notes.append(f"{view.name} is left alone: {view.problem}")
            continue
        held = holdings.get(view.uid, [])
        done = ledger.released.get(view.uid, [])
        lost = ledger.lost.get(view.uid, [])
        ignored = [p for p in view.alloc_release if p not in {*held, *done, *lost}]
        if ignored:
            run.notes.append(
                f"{view.name} asks to release {', '.join(ignored)}, which it does not hold: ignored"
            )
        status = appended(view.alloc_status, [*held, *done, *lost])
        finished = appended(view.alloc_released, done)
        annotations: Json = {}
        if status != list(view.alloc_status):
            annotations[ANNOTATION_ALLOC_STATUS] = pod_list_annotation(status)
        if finished != list(view.alloc_released):
            annotations[ANNOTATION_ALLOC_RELEASED] = pod_list_annotation(finished)
        finalizers = list(view.finalizers)
        has_finalizer = FINALIZER_POOL_ALLOCATION in finalizers
        if view.deleting and has_finalizer and not held:
            finalizers.remove(FINALIZER_POOL_ALLOCATION)
        elif (
            not view.deleting
            and not has_finalizer
            and (held or ANNOTATION_ALLOC_STATUS in annotations)
        ):
            finalizers.append(FINALIZER_POOL_ALLOCATION)
        if not annotations and finalizers == list(view.finalizers):
            continue
        metadata: Json = {"resourceVersion": view.resource_version}
        if annotations:
            metadata["annotations"] = annotations
        if finalizers != list(view.finalizers):
            metadata["finalizers"] = finalizers
        run.actions.append(
            Patch(
                ObjectKey("BatchSandbox", run.obs.namespace, view.name),
                {"metadata": metadata},
                why="record its allocation as the ledger has it",
                on_conflict="refresh",
            )
        )


# -- scale ---------------------------------------------------------------------------------


def _scale(
    run: _Pass, schedulable: Sequence[Json], supply: int, kept_idle: list[Json], total: int
) -> float | None:
    """Create toward the desired count, or delete idle Pods above it; returns when to look
    again (None: on the next event)."""
    pool = run.pool
    spec = pool.get("spec") or {}
    capacity = Capacity.of(pool)
    allocated = sum(1 for p in schedulable if _name(p) in run.ledger.pods)
    desired = desired_schedulable(
        capacity, schedulable=len(schedulable), allocated=allocated, supply=supply
    )
    expected = run.obs.expectations
    if expected is not None and expected.pending("Pod"):
        # Creates of ours that got no answer (a worker killed mid-create, a request timed
        # out): the same name again makes the Pod or answers AlreadyExists, never a second.
        known = {_name(p) for p in run.obs.pods}
        lost = sorted(expected.unanswered("Pod") - known)
        if lost and _template_spec(pool) is not None:
            again = [
                Create(_pod_body(run, name), why="a create without an answer, again")
                for name in lost
            ]
            run.actions.append(Together(tuple(again)) if len(again) > 1 else again[0])
            run.notes.append(f"{len(lost)} create(s) without an answer issued again")
        run.notes.append("waiting for its own creates to show")
        return EXPECTATIONS_RECHECK
    not_ready = sum(1 for p in schedulable if not is_pod_ready(p))
    create = scale_up(
        capacity,
        desired=desired,
        schedulable=len(schedulable),
        total=total,
        not_ready=not_ready,
        max_unavailable=(spec.get("scaleStrategy") or {}).get("maxUnavailable"),
    )
    if create:
        if _template_spec(pool) is None:
            run.notes.append(f"{create} Pod(s) wanted, but the Pool has no template to make them")
            run.problems["InvalidSpec"] = (
                "NoTemplate",
                "Pods are wanted, but spec.template is missing or has no spec: set "
                "spec.template to the Pods' template",
            )
            return None
        first = run.ledger.next_pod
        run.ledger = msgspec.structs.replace(run.ledger, next_pod=first + create)
        creates = [
            Create(_pod_body(run, _pod_name(run, first + n)), why="fill the buffer")
            for n in range(create)
        ]
        run.actions.append(Together(tuple(creates)) if len(creates) > 1 else creates[0])
        run.notes.append(f"creating {create} toward {desired}")
        return None
    if desired > len(schedulable) and total >= capacity.pool_max:
        run.notes.append(f"at poolMax ({capacity.pool_max}): {desired - len(schedulable)} short")
    scale_in = min(max(len(schedulable) - desired, 0), len(kept_idle))
    for pod in oldest_first(kept_idle)[:scale_in]:
        run.actions.append(_delete(pod, f"above the buffer: {desired} are enough"))
    if scale_in:
        run.notes.append(f"removing {scale_in} idle")
    return None


def _template_spec(pool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    template = (pool.get("spec") or {}).get("template")
    if not isinstance(template, Mapping) or not template.get("spec"):
        return None
    spec: Mapping[str, Any] = template["spec"]
    return spec


_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
"""The API server's generateName alphabet (no vowels, no look-alikes)."""


def _pod_name(run: _Pass, number: int) -> str:
    """A new Pod's name: ``<pool>-`` and five characters, as ``generateName`` would give, but
    decided here, so that a create whose answer was lost (the worker killed mid-create) is
    issued again under the same name (the expectations keep it) instead of leaving a create
    the runtime waits for until it lapses. The annotations name Pods, so a name is never
    handed out twice: it comes from the pass's time and the memo's count, and a memo lost
    (the count starting over) comes back at a later time."""
    seed = f"{metadata_of(run.pool).get('uid')}/{run.now.isoformat()}/{number}"
    digest = hashlib.sha256(seed.encode()).digest()
    suffix = "".join(_NAME_ALPHABET[byte % len(_NAME_ALPHABET)] for byte in digest[:5])
    return f"{run.obs.name}-{suffix}"


def _pod_body(run: _Pass, name: str) -> Json:
    template = (run.pool.get("spec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    pool_meta = metadata_of(run.pool)
    metadata: Json = {
        "name": name,
        "namespace": run.obs.namespace,
        "labels": {
            **(meta.get("labels") or {}),
            LABEL_POOL_NAME: run.obs.name,
            LABEL_POOL_REVISION: run.revision,
        },
        "ownerReferences": [
            {
                "apiVersion": POOL_API_VERSION,
                "kind": "Pool",
                "name": run.obs.name,
                "uid": str(pool_meta.get("uid") or ""),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    if meta.get("finalizers"):
        metadata["finalizers"] = list(meta["finalizers"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec") or {},
    }


def _delete(pod: Mapping[str, Any], why: str) -> Delete:
    meta = metadata_of(pod)
    return Delete(
        ObjectKey("Pod", str(meta.get("namespace") or ""), str(meta.get("name") or "")),
        uid=str(meta.get("uid") or "") or None,
        why=why,
    )


# -- status --------------------------------------------------------------------------------


def _inverted_capacity(pool: Mapping[str, Any]) -> str | None:
    """What is inverted in the Pool's capacity bounds, for a person (None: nothing)."""
    capacity = Capacity.of(pool)
    wrong = [
        f"capacitySpec.{low} ({low_value}) is greater than {high} ({high_value})"
        for low, low_value, high, high_value in (
            ("bufferMin", capacity.buffer_min, "bufferMax", capacity.buffer_max),
            ("poolMin", capacity.pool_min, "poolMax", capacity.pool_max),
        )
        if low_value > high_value
    ]
    if not wrong:
        return None
    return "; ".join(wrong) + ": the Pool neither scales nor updates its Pods until this is fixed"


def _refused_create(last_error: str | None, *, persists: bool) -> str | None:
    """The API server's words when the previous pass's error was a Pod create it refused (a
    4xx answer), or one that keeps failing (a 5xx, a timeout… for ``persists``: the passes have
    failed in a row for a while), with the Pod's name left out (None: neither)."""
    failed = reportable(last_error, persists=persists)
    if failed is None or failed.verb != "create" or failed.target.kind != "Pod":
        return None
    answer = f" ({failed.reason}, {failed.code})" if failed.code is not None else ""
    if failed.refused:
        return f"the API server refuses the Pool's Pods{answer}: {failed.anonymous()}"
    return (
        f"the Pool's Pod creates keep failing{answer}: {failed.anonymous()}; "
        "they are retried with backoff"
    )


def _creates_pod(action: Action) -> bool:
    group = action.actions if isinstance(action, Together) else (action,)
    return any(isinstance(a, Create) and a.target.kind == "Pod" for a in group)


def _conditions(run: _Pass) -> tuple[list[Json] | None, list[Action]]:
    """The status's conditions (None: none), and a Warning Event for each that appears or
    changes its reason."""
    current = {
        c.get("type"): c for c in (run.pool.get("status") or {}).get("conditions") or () if c
    }
    stamp = rfc3339_nano(run.now)
    written: list[Json] = []
    events: list[Action] = []
    for kind, (reason, message) in sorted(run.problems.items()):
        before = current.get(kind)
        if (
            before is not None
            and before.get("status") == "True"
            and before.get("reason") == reason
            and before.get("message") == message
        ):
            written.append(before)
            continue
        written.append(
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": stamp,
            }
        )
        event = warning_when_raised(
            run.pool,
            before,
            condition=kind,
            reason=reason,
            message=message,
            now=run.now,
            controller=CONTROLLER_NAME,
        )
        if event is not None:
            events.append(Create(event, why=f"{kind}: {reason}"))
    return written or None, events


def _status(run: _Pass, live: Sequence[Json], schedulable: Sequence[Json]) -> list[Action]:
    """The status write (when it changed) and the Events of new conditions, in that order, so
    that a refused status write makes no Event."""
    pool = run.pool
    live_names = {_name(p) for p in live}
    desired: Json = {
        "observedGeneration": metadata_of(pool).get("generation"),
        "revision": run.revision,
        "total": len(live),
        "allocated": sum(1 for name in run.ledger.pods if name in live_names),
        "available": sum(
            1 for p in schedulable if _name(p) not in run.ledger.pods and is_pod_ready(p)
        ),
        "updated": sum(1 for p in live if labels_of(p).get(LABEL_POOL_REVISION) == run.revision),
    }
    current = pool.get("status") or {}
    conditions, events = _conditions(run)
    if conditions is not None or current.get("conditions") is not None:
        desired["conditions"] = conditions  # None: a merge patch's null removes them
    for kind, (_, message) in sorted(run.problems.items()):
        run.notes.append(f"{kind}: {message}")
    if all(current.get(k) == v for k, v in desired.items()):
        return []
    why = "report total, allocated, available, updated and the revision"
    if run.problems or current.get("conditions"):
        why += ", and why it cannot make progress" if run.problems else ", and that it can again"
    return [
        Patch(
            run.key,
            {"status": desired},
            subresource="status",
            why=why,
            on_conflict="refresh",
            conditional=True,
        ),
        *events,
    ]
