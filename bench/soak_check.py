"""The soak's invariant checker: what the cluster and the bus must say, at every moment and once
the system is quiet, and whether the event log holds what the cluster committed.

Three layers, in the order of this file:

- :func:`always` and :func:`when_quiet` judge a :class:`Snapshot` (what the cluster and the bus
  hold at one moment) and return :class:`Violation` values. They are pure, and they are oracles:
  each rule is restated here from the documentation it cites, not taken from the product's
  planners, so that a planner's mistake cannot hide itself. Only the API vocabulary (``api/``),
  the annotation codec and the Pod readiness rule (``services/domain``) are shared.
- :func:`log_violations` judges the event log against the development cluster's own record of
  every commit (:class:`CommitLog`), with the rules a relist allows (docs/architecture.md
  invariant 3).
- :func:`take_snapshot` and :func:`logged_changes` read a snapshot and the log; they do nothing
  else.

A snapshot is not atomic: the API server is listed kind after kind, and the bus is read after.
:func:`take_snapshot` lists claims before Sandboxes on purpose. A claim names its Sandbox only
after the Sandbox became its (docs/agent-sandbox.md §3.5: the Sandbox patch, then the status),
so a claim read first never names a Sandbox read later that is not yet its own. Listed the other
way round, every adoption during the listing would look like a claim naming a pool's Sandbox.
The rules of :func:`always` read one list each otherwise, and a list is consistent in itself.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from api.agents import SandboxClaim, SandboxWarmPool
from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import (
    Json,
    condition_of,
    controller_of,
    is_deleting,
    is_ready,
    labels_of,
    metadata_of,
    name_of,
    uid_of,
)
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
    LABEL_EVICT,
    LABEL_POOL_REVISION,
)
from devtools.cluster.apirules.errors import qualified_resource
from devtools.cluster.storage.store import Change as StoreChange
from devtools.cluster.storage.store import decode
from events.codec import EventDecodeError, decode_event
from events.subjects import (
    OBSERVED_SUBJECTS,
    WARM_SUBJECTS,
    SubjectError,
    memo_subject,
    parse_warm_subject,
)
from events.types import ObjectAdded, ObjectDeleted, ObjectModified
from services.domain.opensandbox.allocation import MalformedAnnotation, parse_pod_list
from services.domain.opensandbox.pods import is_pod_ready
from services.pool.worker import WORKER_NAME as POOL_WORKER
from services.runtime.bus import BusConfig
from services.runtime.kube import KubeApi
from services.runtime.streams import read_to_end
from services.watcher.resources import WATCHED_RESOURCES

__all__ = [
    "Commit",
    "CommitLog",
    "LoggedChange",
    "Snapshot",
    "Violation",
    "always",
    "log_violations",
    "logged_changes",
    "sandboxes_taken_from_claims",
    "take_snapshot",
    "when_quiet",
]


@dataclass(frozen=True)
class Violation:
    invariant: str
    """A short stable name, such as ``sandbox-bound-twice``."""
    objects: tuple[str, ...]
    """``Kind/namespace/name`` of each offending object (for ``sandbus explain``)."""
    detail: str
    """One line a person reads."""


@dataclass(frozen=True)
class Snapshot:
    """What the cluster and the bus hold at one moment."""

    claims: list[Json]
    """SandboxClaims (extensions.agents.x-k8s.io)."""
    sandboxes: list[Json]
    """Sandboxes (agents.x-k8s.io)."""
    warm_pools: list[Json]
    """SandboxWarmPools."""
    templates: list[Json]
    """SandboxTemplates."""
    pods: list[Json]
    pools: list[Json]
    """OpenSandbox Pools (sandbox.opensandbox.io)."""
    batch_sandboxes: list[Json]
    """OpenSandbox BatchSandboxes."""
    warm_entries: dict[tuple[str, str], set[str]]
    """(namespace, warm pool name) → the names of the Sandboxes queued on the SANDBUS_WARM
    stream."""
    pool_ledgers: dict[tuple[str, str], Json | None]
    """(namespace, OpenSandbox Pool name) → the Pool's memo (its allocation ledger) as the pool
    worker last wrote it; None when there is none."""


# --- reading objects -------------------------------------------------------------------------


def _namespace(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("namespace") or "")


def _ref(kind: str, obj: Mapping[str, Any]) -> str:
    return f"{kind}/{_namespace(obj)}/{name_of(obj)}"


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (_namespace(obj), name_of(obj))


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _count(value: Any, default: int = 0) -> int:
    """A counter as the API serves it; absent (an omitted zero) is ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _controller(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The controller ownerReference if it is of ``kind``."""
    owner = controller_of(obj)
    return owner if owner is not None and owner.get("kind") == kind else None


def _controlled_by(obj: Mapping[str, Any], kind: str, uid: str) -> bool:
    owner = _controller(obj, kind)
    return owner is not None and bool(uid) and owner.get("uid") == uid


def _bound_name(claim: Mapping[str, Any]) -> str:
    """The claim's ``status.sandbox.name`` ("" when it names none)."""
    bound = _status(claim).get("sandbox")
    return str(bound.get("name") or "") if isinstance(bound, Mapping) else ""


def _claim_controller(sandbox: Mapping[str, Any]) -> Mapping[str, Any] | None:
    owner = _controller(sandbox, SandboxClaim.KIND.kind)
    if owner is None:
        return None
    group = str(owner.get("apiVersion") or "").rpartition("/")[0]
    return owner if group == SandboxClaim.KIND.group else None


@dataclass(frozen=True)
class _Allocation:
    """The three allocation annotations of a pooled BatchSandbox (docs/opensandbox.md §1.5)."""

    status: tuple[str, ...]
    """``alloc-status``: every Pod ever given, in index order."""
    release: frozenset[str]
    """``alloc-release``: the Pods the sandbox asks to give back."""
    released: frozenset[str]
    """``alloc-released``: the Pods whose release finished."""

    @property
    def held(self) -> list[str]:
        """What the Pool still counts as the sandbox's: given and not released (§2.3)."""
        return [pod for pod in self.status if pod not in self.released]

    @property
    def in_use(self) -> list[str]:
        """What the sandbox itself uses: given, not asked back, not released (§3.2 step 6)."""
        return [pod for pod in self.held if pod not in self.release]


def _allocation(batch: Mapping[str, Any]) -> _Allocation | str:
    """The annotations of ``batch``, or what is wrong with them."""
    annotations = metadata_of(batch).get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    try:
        return _Allocation(
            status=tuple(parse_pod_list(annotations, ANNOTATION_ALLOC_STATUS)),
            release=frozenset(parse_pod_list(annotations, ANNOTATION_ALLOC_RELEASE)),
            released=frozenset(parse_pod_list(annotations, ANNOTATION_ALLOC_RELEASED)),
        )
    except MalformedAnnotation as error:
        return str(error)


def _pool_ref(batch: Mapping[str, Any]) -> str:
    return str(_spec(batch).get("poolRef") or "")


def _pooled(snapshot: Snapshot) -> Iterator[tuple[Json, _Allocation]]:
    """The BatchSandboxes whose controller reads the allocation annotations (a ``poolRef``), with
    their annotations; a sandbox whose annotations do not parse is left out (it is reported by
    :func:`always`)."""
    for batch in snapshot.batch_sandboxes:
        if not _pool_ref(batch):
            continue
        allocation = _allocation(batch)
        if isinstance(allocation, _Allocation):
            yield batch, allocation


# --- what holds at every moment --------------------------------------------------------------


def always(snapshot: Snapshot) -> list[Violation]:
    """What must hold at every moment, faults included (docs/architecture.md invariant 2, and
    docs/opensandbox.md §2.3 for the Pods of a Pool):

    - ``sandbox-bound-twice``: no Sandbox is the ``status.sandbox.name`` of two claims. Warm
      members have generated names and a cold Sandbox takes its claim's name, so two claims can
      name one Sandbox only when one of them took another's: no moment excuses it.
    - ``claim-controls-two``: no claim is the controller of two Sandboxes that are not being
      deleted. One being deleted is excused: its Pod is going and it serves nobody, and a
      claim whose status does not name it (the status write lost to a fault) provisions
      another while it terminates (docs/agent-sandbox.md §3.3a; a claim keeps serving a
      terminating Sandbox only while its status names it).
    - ``claim-binding-not-controlled``: the Sandbox a claim names is controlled by that claim
      (by uid). Excused: a named Sandbox that does not exist. It was deleted (by a user, its
      expiry, a fault) after the claim's last status write, and the claim's next pass binds
      another (§3.3a, §3.7: the binding is kept through errors). A Sandbox being deleted is
      not excused, since it keeps its controller until it is gone.
    - ``pod-allocated-twice``: no Pod is in use by two pooled BatchSandboxes that are not
      being deleted; in use means in ``alloc-status`` and neither in ``alloc-release`` nor in
      ``alloc-released``, which is what a sandbox's controller serves (§3.2 step 6). Pods that a
      sandbox asked back, or that a deleting sandbox still lists, are excused: the Pool frees a
      Pod only then, and writes the new holder's ``alloc-status`` and the old one's
      ``alloc-released`` in two patches, so between them both list it (the ledger, written
      first, never does). A sandbox without a ``poolRef`` is not counted: its controller reads
      no annotation, and the Pool lets such a sandbox's Pods go without writing to it.
    - ``allocation-annotation-malformed``: the three allocation annotations of a pooled
      BatchSandbox parse as ``{"pods": [...]}`` (§9.1); the Pool and the BatchSandbox
      controller are their only writers.
    """
    return [
        *_bound_twice(snapshot),
        *_controls_two(snapshot),
        *_binding_not_controlled(snapshot),
        *_allocated_twice(snapshot),
        *_malformed_allocations(snapshot),
    ]


def _bound_twice(snapshot: Snapshot) -> Iterator[Violation]:
    claims_of: dict[tuple[str, str], list[Json]] = defaultdict(list)
    for claim in snapshot.claims:
        if _bound_name(claim):
            claims_of[(_namespace(claim), _bound_name(claim))].append(claim)
    for (namespace, sandbox), claims in sorted(claims_of.items()):
        if len(claims) > 1:
            names = ", ".join(sorted(name_of(c) for c in claims))
            yield Violation(
                "sandbox-bound-twice",
                (f"Sandbox/{namespace}/{sandbox}", *(_ref("SandboxClaim", c) for c in claims)),
                f"Sandbox {namespace}/{sandbox} is the status.sandbox of claims {names}",
            )


def _controls_two(snapshot: Snapshot) -> Iterator[Violation]:
    controlled: dict[tuple[str, str], list[Json]] = defaultdict(list)
    for sandbox in snapshot.sandboxes:
        owner = _claim_controller(sandbox)
        if owner is not None and not is_deleting(sandbox):
            controlled[(_namespace(sandbox), str(owner.get("uid") or ""))].append(sandbox)
    for (namespace, _), sandboxes in sorted(controlled.items()):
        if len(sandboxes) > 1:
            claim = str((_claim_controller(sandboxes[0]) or {}).get("name") or "")
            names = ", ".join(sorted(name_of(s) for s in sandboxes))
            yield Violation(
                "claim-controls-two",
                (f"SandboxClaim/{namespace}/{claim}", *(_ref("Sandbox", s) for s in sandboxes)),
                f"claim {namespace}/{claim} controls Sandboxes {names}, none of them deleting",
            )


def _binding_not_controlled(snapshot: Snapshot) -> Iterator[Violation]:
    sandboxes = {_key(s): s for s in snapshot.sandboxes}
    for claim in snapshot.claims:
        bound = _bound_name(claim)
        sandbox = sandboxes.get((_namespace(claim), bound)) if bound else None
        if sandbox is None or _controlled_by(sandbox, SandboxClaim.KIND.kind, uid_of(claim)):
            continue
        owner = controller_of(sandbox)
        held_by = f"{owner.get('kind')} {owner.get('name')}" if owner else "nothing"
        yield Violation(
            "claim-binding-not-controlled",
            (_ref("SandboxClaim", claim), _ref("Sandbox", sandbox)),
            f"claim {name_of(claim)} names Sandbox {bound}, which is controlled by {held_by}",
        )


def _allocated_twice(snapshot: Snapshot) -> Iterator[Violation]:
    users: dict[tuple[str, str], list[Json]] = defaultdict(list)
    for batch, allocation in _pooled(snapshot):
        if not is_deleting(batch):
            for pod in allocation.in_use:
                users[(_namespace(batch), pod)].append(batch)
    for (namespace, pod), batches in sorted(users.items()):
        if len(batches) > 1:
            names = ", ".join(sorted(name_of(b) for b in batches))
            yield Violation(
                "pod-allocated-twice",
                (f"Pod/{namespace}/{pod}", *(_ref("BatchSandbox", b) for b in batches)),
                f"Pod {namespace}/{pod} is in use by BatchSandboxes {names} "
                "(in alloc-status, not in alloc-release nor alloc-released)",
            )


def _malformed_allocations(snapshot: Snapshot) -> Iterator[Violation]:
    for batch in snapshot.batch_sandboxes:
        problem = _allocation(batch) if _pool_ref(batch) else None
        if isinstance(problem, str):
            yield Violation(
                "allocation-annotation-malformed",
                (_ref("BatchSandbox", batch),),
                f"BatchSandbox {name_of(batch)}: {problem}",
            )


# --- what holds once the system is quiet -----------------------------------------------------


def when_quiet(snapshot: Snapshot) -> list[Violation]:
    """What must hold once faults and load stopped and the system had time to converge. Each
    rule, and what it is based on:

    - ``stuck-deleting``: nothing of the snapshot is still being deleted: there are no
      finalizers but the OpenSandbox ones, and those are removed once the Pods are back
      (docs/opensandbox.md §1.5, §2.11).
    - ``claim-not-ready``: every claim not being deleted is Ready=True, or Ready=False with a
      reason and a message (docs/agent-sandbox.md §3.7; docs/architecture.md invariant 7).
    - ``claim-ready-unbound``: a Ready claim names its Sandbox in ``status.sandbox.name``.
    - ``claim-bound-to-missing-sandbox``: the Sandbox a claim names exists and is not being
      deleted (whether it is the claim's is :func:`always`'s rule).
    - ``sandbox-not-ready``: every Sandbox not being deleted is Ready=True, unless its spec
      suspends it (``operatingMode: Suspended``, §1.2) or it expired under the Retain policy
      (Ready=False/SandboxExpired with a ``shutdownTime``, §2.7).
    - ``sandbox-not-suspended``: a Sandbox whose spec suspends it says Suspended=True: its Pod
      is gone (§2.6).
    - ``warm-pool-members``: a SandboxWarmPool has exactly ``spec.replicas`` members (default
      1), all Ready; a member carries the label ``warm-pool-sandbox=NameHash(pool)``, is not
      being deleted and is not a claim's (an adopted one loses the label anyway, §3.5; §4.2).
      Not checked while the pool's template does not exist: then it creates nothing (§3.3a).
    - ``warm-member-not-owned``: each such member is controlled by the pool itself (an orphan
      is adopted or deleted by the pool's pass, §4.2 step 4).
    - ``warm-pool-status``: ``status.replicas`` and ``status.readyReplicas`` equal
      ``spec.replicas`` (§4.2 step 7), ``observedGeneration`` the generation.
    - ``warm-entry-missing`` / ``warm-entry-stale``: each pool's entries on the warm stream
      are exactly its adoptable members (docs/architecture.md invariant 4, agent-sandbox.md
      §3.5 and §5): labelled as the pool's (the pool and template-ref-hash labels), controlled
      by that SandboxWarmPool, not being deleted, and Ready (sandbus queues a member once a
      claim can use it at once, §5). Staleness is not part of it: under OnReplenish claims
      adopt stale members, and under Recreate the pool deletes them.
    - ``open-pool-status``: an OpenSandbox Pool's ``total``, ``allocated``, ``available`` and
      ``updated`` are what its Pods and the annotations say (docs/opensandbox.md §2.7-2.8): its
      Pods are those it controls (by uid, §2.2 step 2); ``total`` counts those not terminating;
      ``allocated`` those a pooled BatchSandbox holds (in ``alloc-status``, not in
      ``alloc-released``; upstream's ghosts of gone Pods are excluded, as sandbus replaces
      them, §9.13); ``available`` the others that are Running and Ready and carry no eviction
      label (§2.9: an idle evicting Pod is not schedulable); ``updated`` those whose revision
      label is ``status.revision``. ``observedGeneration`` is the generation.
    - ``open-pool-ledger-missing`` / ``open-pool-ledger-disagrees`` /
      ``open-pool-ledger-malformed``: a Pool with Pods has a ledger (its memo, written with its
      first Pod), and the ledger and the annotations say the same (§2.3): every Pod the ledger
      holds is a live Pod of the Pool, held by an existing BatchSandbox (by uid) whose
      annotations hold it, with no recycle still running; every live Pod of the Pool that a
      BatchSandbox's annotations hold is in the ledger under that sandbox's uid.
    - ``batch-sandbox-short``: a BatchSandbox not being deleted nor paused has its Pods: from a
      template, ``replicas`` Pods it controls (§3.3); from a Pool, ``replicas`` minus the Pods
      it gave back (a released Pod still counts, a Pod lost without a release is replaced,
      §2.4 and the ledger's rules). Excused while it says why: PoolAllocationPending=True when
      its Pool does not exist, or when the Pool is at poolMax (``total ≥ poolMax``) with fewer
      free Ready Pods than the sandbox lacks (§2.10).
    - ``batch-sandbox-over-allocated``: a pooled BatchSandbox whose spec never changed
      (generation 1) holds no more than that (with no scale-in, §9.27, a lowered ``replicas``
      would excuse more).
    - ``batch-sandbox-not-ready``: every Pod it uses is Running and Ready, not terminating.
    - ``batch-sandbox-status``: ``status.replicas``, ``allocated`` and ``ready`` are the counts
      of §1.2 and §3.7 over the Pods its controller lists (pooled: ``alloc-status`` minus
      ``alloc-release``, those that exist; from a template: the Pods it controls).
    """
    return [
        *_stuck_deleting(snapshot),
        *_claims_settled(snapshot),
        *_sandboxes_ready(snapshot),
        *_warm_pools_full(snapshot),
        *_warm_queues_exact(snapshot),
        *_open_pools_reported(snapshot),
        *_ledgers_agree(snapshot),
        *_batch_sandboxes_served(snapshot),
    ]


def _stuck_deleting(snapshot: Snapshot) -> Iterator[Violation]:
    kinds = (
        ("SandboxClaim", snapshot.claims),
        ("Sandbox", snapshot.sandboxes),
        ("SandboxWarmPool", snapshot.warm_pools),
        ("Pool", snapshot.pools),
        ("BatchSandbox", snapshot.batch_sandboxes),
        ("Pod", snapshot.pods),
    )
    for kind, objects in kinds:
        for obj in objects:
            if is_deleting(obj):
                finalizers = metadata_of(obj).get("finalizers") or []
                yield Violation(
                    "stuck-deleting",
                    (_ref(kind, obj),),
                    f"{kind} {name_of(obj)} is still being deleted (finalizers: "
                    f"{', '.join(map(str, finalizers)) or 'none'})",
                )


def _claims_settled(snapshot: Snapshot) -> Iterator[Violation]:
    sandboxes = {_key(s): s for s in snapshot.sandboxes}
    for claim in snapshot.claims:
        if is_deleting(claim):
            continue
        ref, name, bound = _ref("SandboxClaim", claim), name_of(claim), _bound_name(claim)
        ready = condition_of(claim, "Ready")
        status = ready.get("status") if ready is not None else None
        if ready is None:
            yield Violation("claim-not-ready", (ref,), f"claim {name} has no Ready condition")
        elif status != "True" and (
            status != "False" or not ready.get("reason") or not ready.get("message")
        ):
            yield Violation(
                "claim-not-ready",
                (ref,),
                f"claim {name} is Ready={status} without saying why "
                f"(reason {ready.get('reason')!r}, message {ready.get('message')!r})",
            )
        if status == "True" and not bound:
            yield Violation(
                "claim-ready-unbound", (ref,), f"claim {name} is Ready, names no Sandbox"
            )
        sandbox = sandboxes.get((_namespace(claim), bound)) if bound else None
        if bound and (sandbox is None or is_deleting(sandbox)):
            state = "does not exist" if sandbox is None else "is being deleted"
            yield Violation(
                "claim-bound-to-missing-sandbox",
                (ref, f"Sandbox/{_namespace(claim)}/{bound}"),
                f"claim {name} names Sandbox {bound}, which {state}",
            )


def _sandboxes_ready(snapshot: Snapshot) -> Iterator[Violation]:
    for sandbox in snapshot.sandboxes:
        if is_deleting(sandbox):
            continue
        ref, name = _ref("Sandbox", sandbox), name_of(sandbox)
        if _spec(sandbox).get("operatingMode") == "Suspended":
            suspended = condition_of(sandbox, "Suspended")
            if suspended is None or suspended.get("status") != "True":
                said = "none" if suspended is None else suspended.get("reason")
                yield Violation(
                    "sandbox-not-suspended",
                    (ref,),
                    f"Sandbox {name} is Suspended by its spec, its Suspended condition is {said}",
                )
            continue
        ready = condition_of(sandbox, "Ready")
        if ready is not None and ready.get("status") == "True":
            continue
        reason = ready.get("reason") if ready is not None else None
        if reason == "SandboxExpired" and _spec(sandbox).get("shutdownTime"):
            continue
        said = "no Ready condition" if ready is None else f"Ready={ready.get('status')}/{reason}"
        yield Violation("sandbox-not-ready", (ref,), f"Sandbox {name} is not Ready: {said}")


def _members(snapshot: Snapshot, namespace: str, pool: str) -> list[Json]:
    """The pool's members: labelled as its own, not being deleted, not a claim's."""
    label = name_hash(pool)
    return [
        s
        for s in snapshot.sandboxes
        if _namespace(s) == namespace
        and labels_of(s).get(LABEL_WARM_POOL_SANDBOX) == label
        and not is_deleting(s)
        and _claim_controller(s) is None
    ]


def _warm_pools_full(snapshot: Snapshot) -> Iterator[Violation]:
    templates = {_key(t) for t in snapshot.templates}
    for pool in snapshot.warm_pools:
        if is_deleting(pool):
            continue
        ref, name, namespace = _ref("SandboxWarmPool", pool), name_of(pool), _namespace(pool)
        template_ref = _spec(pool).get("sandboxTemplateRef")
        template = str(template_ref.get("name") or "") if isinstance(template_ref, Mapping) else ""
        if (namespace, template) not in templates:
            continue
        replicas = _count(_spec(pool).get("replicas"), 1)
        members = _members(snapshot, namespace, name)
        ready = [m for m in members if is_ready(m)]
        if len(members) != replicas or len(ready) != replicas:
            yield Violation(
                "warm-pool-members",
                (ref, *(_ref("Sandbox", m) for m in members if not is_ready(m))),
                f"pool {name} wants {replicas}, has {len(members)} members, {len(ready)} Ready",
            )
        for member in members:
            if not _controlled_by(member, SandboxWarmPool.KIND.kind, uid_of(pool)):
                owner = controller_of(member)
                held_by = f"{owner.get('kind')} {owner.get('name')}" if owner else "nothing"
                yield Violation(
                    "warm-member-not-owned",
                    (ref, _ref("Sandbox", member)),
                    f"member {name_of(member)} of pool {name} is controlled by {held_by}",
                )
        status = _status(pool)
        said = {
            "replicas": _count(status.get("replicas")),
            "readyReplicas": _count(status.get("readyReplicas")),
        }
        wrong = [f"{field} {value}" for field, value in said.items() if value != replicas]
        generation = metadata_of(pool).get("generation")
        if generation is not None and status.get("observedGeneration") != generation:
            wrong.append(f"observedGeneration {status.get('observedGeneration')} of {generation}")
        if wrong:
            yield Violation(
                "warm-pool-status",
                (ref,),
                f"pool {name} wants {replicas}, its status says {', '.join(wrong)}",
            )


def _adoptable_from(sandbox: Mapping[str, Any], namespace: str, pool: str) -> str | None:
    """None when ``sandbox`` is one of ``pool``'s adoptable members, else why not."""
    labels = labels_of(sandbox)
    owner = _controller(sandbox, SandboxWarmPool.KIND.kind)
    if _namespace(sandbox) != namespace:
        return "in another namespace"
    if is_deleting(sandbox):
        return "being deleted"
    if _claim_controller(sandbox) is not None:
        return "a claim's"
    if owner is None or owner.get("name") != pool:
        return "not controlled by the pool"
    group = str(owner.get("apiVersion") or "").rpartition("/")[0]
    if group != SandboxWarmPool.KIND.group:
        return f"controlled by a SandboxWarmPool of group {group!r}"
    if labels.get(LABEL_WARM_POOL_SANDBOX) != name_hash(pool):
        return "without the pool's label"
    if not labels.get(LABEL_SANDBOX_TEMPLATE_REF_HASH):
        return "without the template-ref-hash label"
    if not is_ready(sandbox):
        return "not Ready"
    return None


def _warm_queues_exact(snapshot: Snapshot) -> Iterator[Violation]:
    sandboxes = {_key(s): s for s in snapshot.sandboxes}
    queues = set(snapshot.warm_entries) | {_key(p) for p in snapshot.warm_pools}
    for namespace, pool in sorted(queues):
        pool_ref = f"SandboxWarmPool/{namespace}/{pool}"
        entries = snapshot.warm_entries.get((namespace, pool), set())
        adoptable = {
            name_of(s)
            for s in snapshot.sandboxes
            if _namespace(s) == namespace and _adoptable_from(s, namespace, pool) is None
        }
        for name in sorted(adoptable - entries):
            yield Violation(
                "warm-entry-missing",
                (pool_ref, f"Sandbox/{namespace}/{name}"),
                f"Sandbox {name} is adoptable from pool {pool} and has no warm entry",
            )
        for name in sorted(entries - adoptable):
            sandbox = sandboxes.get((namespace, name))
            why = "gone" if sandbox is None else _adoptable_from(sandbox, namespace, pool)
            yield Violation(
                "warm-entry-stale",
                (pool_ref, f"Sandbox/{namespace}/{name}"),
                f"pool {pool}'s warm queue holds Sandbox {name}, which is {why}",
            )


@dataclass(frozen=True)
class _OpenPool:
    """An OpenSandbox Pool with its Pods and who holds them, as the annotations say."""

    pool: Json
    live: dict[str, Json]
    """Its Pods not terminating, by name."""
    holders: dict[str, list[Json]]
    """The name of each of its live Pods that the annotations hold → the pooled BatchSandboxes
    that hold it (in ``alloc-status``, not in ``alloc-released``)."""

    @property
    def free_ready(self) -> list[str]:
        return [
            name
            for name, pod in self.live.items()
            if name not in self.holders and LABEL_EVICT not in labels_of(pod) and is_pod_ready(pod)
        ]


def _open_pools(snapshot: Snapshot) -> Iterator[_OpenPool]:
    holders: dict[tuple[str, str], list[Json]] = defaultdict(list)
    for batch, allocation in _pooled(snapshot):
        for pod in allocation.held:
            holders[(_namespace(batch), pod)].append(batch)
    for pool in snapshot.pools:
        if is_deleting(pool):
            continue
        namespace = _namespace(pool)
        live = {
            name_of(p): p
            for p in snapshot.pods
            if _namespace(p) == namespace
            and _controlled_by(p, "Pool", uid_of(pool))
            and not is_deleting(p)
        }
        held = {
            pod: batches
            for (ns, pod), batches in holders.items()
            if ns == namespace and pod in live
        }
        yield _OpenPool(pool, live, held)


def _open_pools_reported(snapshot: Snapshot) -> Iterator[Violation]:
    for open_pool in _open_pools(snapshot):
        pool, live = open_pool.pool, open_pool.live
        status = _status(pool)
        revision = status.get("revision")
        expected = {
            "total": len(live),
            "allocated": len(open_pool.holders),
            "available": len(open_pool.free_ready),
            "updated": sum(
                1 for p in live.values() if labels_of(p).get(LABEL_POOL_REVISION) == revision
            ),
        }
        wrong = [
            f"{field} {status.get(field)} (expected {value})"
            for field, value in expected.items()
            if _count(status.get(field), -1) != value
        ]
        generation = metadata_of(pool).get("generation")
        if generation is not None and status.get("observedGeneration") != generation:
            wrong.append(f"observedGeneration {status.get('observedGeneration')} of {generation}")
        if wrong:
            yield Violation(
                "open-pool-status",
                (_ref("Pool", pool),),
                f"Pool {name_of(pool)}: {', '.join(wrong)}",
            )


def _ledger_holdings(ledger: Mapping[str, Any]) -> dict[str, Mapping[str, Any]] | None:
    """The ledger's ``pods`` (Pod name → ``{sandbox, uid, recycling?}``), None if malformed."""
    pods = ledger.get("pods", {})
    if not isinstance(pods, Mapping) or not all(isinstance(h, Mapping) for h in pods.values()):
        return None
    return {str(pod): holding for pod, holding in pods.items()}


def _ledgers_agree(snapshot: Snapshot) -> Iterator[Violation]:
    by_uid = {uid_of(b): b for b, _ in _pooled(snapshot)}
    for open_pool in _open_pools(snapshot):
        pool = open_pool.pool
        namespace, name, ref = _namespace(pool), name_of(pool), _ref("Pool", pool)
        ledger = snapshot.pool_ledgers.get((namespace, name))
        if ledger is None:
            if open_pool.live:
                yield Violation(
                    "open-pool-ledger-missing",
                    (ref,),
                    f"Pool {name} has {len(open_pool.live)} Pods and no ledger on the bus",
                )
            continue
        holdings = _ledger_holdings(ledger)
        if holdings is None:
            yield Violation("open-pool-ledger-malformed", (ref,), f"Pool {name}: {ledger!r}")
            continue
        for pod, holding in sorted(holdings.items()):
            uid, sandbox = str(holding.get("uid") or ""), str(holding.get("sandbox") or "")
            objects = (ref, f"Pod/{namespace}/{pod}", f"BatchSandbox/{namespace}/{sandbox}")
            holder = by_uid.get(uid)
            problem = None
            if pod not in open_pool.live:
                problem = "which is not a live Pod of the Pool"
            elif holding.get("recycling"):
                problem = "whose recycle has not finished"
            elif holder is None:
                problem = "for a BatchSandbox (that uid) that does not exist"
            elif uid not in {uid_of(b) for b in open_pool.holders.get(pod, ())}:
                problem = "which that BatchSandbox's annotations do not hold"
            if problem is not None:
                yield Violation(
                    "open-pool-ledger-disagrees",
                    objects,
                    f"Pool {name}'s ledger gives Pod {pod} to {sandbox} ({uid}), {problem}",
                )
        for pod, batches in sorted(open_pool.holders.items()):
            for batch in batches:
                if str((holdings.get(pod) or {}).get("uid") or "") != uid_of(batch):
                    yield Violation(
                        "open-pool-ledger-disagrees",
                        (ref, f"Pod/{namespace}/{pod}", _ref("BatchSandbox", batch)),
                        f"BatchSandbox {name_of(batch)}'s annotations hold Pod {pod} of Pool "
                        f"{name}, its ledger does not give it to that sandbox",
                    )


def _batch_sandboxes_served(snapshot: Snapshot) -> Iterator[Violation]:
    pods = {_key(p): p for p in snapshot.pods}
    open_pools = {_key(p.pool): p for p in _open_pools(snapshot)}
    for batch in snapshot.batch_sandboxes:
        if is_deleting(batch):
            continue
        namespace, name, ref = _namespace(batch), name_of(batch), _ref("BatchSandbox", batch)
        # A pause ends Paused, or refused with PauseFailed saying why (docs/opensandbox.md
        # §3.7; a sandbox of more than one replica cannot pause): one still Pausing once quiet
        # is stuck halfway. A resume's end, Succeed, is checked below with the others'.
        phase = _status(batch).get("phase")
        if _spec(batch).get("pause") is True:
            refused = condition_of(batch, "PauseFailed") or {}
            if phase != "Paused" and not (
                refused.get("status") == "True" and refused.get("message")
            ):
                yield Violation(
                    "batch-sandbox-phase", (ref,), f"BatchSandbox {name} asks to pause, is {phase}"
                )
            continue
        replicas = _count(_spec(batch).get("replicas"), 1)
        pool_name = _pool_ref(batch)
        if pool_name:
            allocation = _allocation(batch)
            if not isinstance(allocation, _Allocation):
                continue  # always() reports it
            found = {p: pods[(namespace, p)] for p in allocation.status if (namespace, p) in pods}
            listed = [
                found[p] for p in allocation.status if p in found and p not in allocation.release
            ]
            returned = {
                p for p in allocation.status if p in allocation.release | allocation.released
            }
            want = max(replicas - len(returned), 0)
            done = allocation.released  # not the sandbox's any more, whatever it lists
        else:
            listed = [
                p
                for p in snapshot.pods
                if _namespace(p) == namespace and _controlled_by(p, "BatchSandbox", uid_of(batch))
            ]
            want = replicas
            done = frozenset()
        used = [p for p in listed if not is_deleting(p) and name_of(p) not in done]
        if len(used) < want and not _waits_for_pool(
            batch, open_pools.get((namespace, pool_name)), want - len(used)
        ):
            yield Violation(
                "batch-sandbox-short",
                (ref,),
                f"BatchSandbox {name} wants {want} Pods, uses {len(used)}",
            )
        if pool_name and len(used) > want and metadata_of(batch).get("generation") == 1:
            yield Violation(
                "batch-sandbox-over-allocated",
                (ref, *(_ref("Pod", p) for p in used)),
                f"BatchSandbox {name} wants {want} Pods, uses {len(used)}",
            )
        if phase != "Succeed" and any(is_pod_ready(p) for p in used):
            # One Ready Pod makes it Succeed (§3.7), after a resume too.
            yield Violation(
                "batch-sandbox-phase", (ref,), f"BatchSandbox {name} has a Ready Pod, is {phase}"
            )
        unready = [p for p in used if not is_pod_ready(p)]
        if unready:
            yield Violation(
                "batch-sandbox-not-ready",
                (ref, *(_ref("Pod", p) for p in unready)),
                f"BatchSandbox {name} uses Pods that are not Ready: "
                f"{', '.join(name_of(p) for p in unready)}",
            )
        status = _status(batch)
        expected = {
            "replicas": len(listed),
            "allocated": sum(
                1 for p in listed if _spec(p).get("nodeName") or _status(p).get("podIP")
            ),
            "ready": sum(1 for p in listed if not is_deleting(p) and is_pod_ready(p)),
        }
        wrong = [
            f"{field} {status.get(field)} (expected {value})"
            for field, value in expected.items()
            if _count(status.get(field), -1) != value
        ]
        if wrong:
            yield Violation(
                "batch-sandbox-status", (ref,), f"BatchSandbox {name}: {', '.join(wrong)}"
            )


def _waits_for_pool(batch: Mapping[str, Any], pool: _OpenPool | None, lacking: int) -> bool:
    """Does a short pooled sandbox rightly wait, and say so (docs/opensandbox.md §2.10)?"""
    if not _pool_ref(batch):
        return False
    pending = condition_of(batch, "PoolAllocationPending")
    if pending is None or pending.get("status") != "True":
        return False
    if pool is None:
        return True  # its Pool does not exist (reason PoolNotFound)
    capacity = _spec(pool.pool).get("capacitySpec")
    pool_max = _count(capacity.get("poolMax"), -1) if isinstance(capacity, Mapping) else -1
    return 0 <= pool_max <= len(pool.live) and len(pool.free_ready) < lacking


# --- the event log against the cluster's commits ---------------------------------------------


@dataclass(frozen=True)
class Commit:
    """One write the development cluster committed."""

    kind: str
    namespace: str
    name: str
    uid: str
    rv: str
    type: str
    """``ADDED``, ``MODIFIED`` or ``DELETED``."""
    selected: bool
    """Whether the watcher selects the object at that version
    (:meth:`services.watcher.resources.WatchedResource.selects`)."""
    at: float
    """``time.monotonic()`` at the commit."""
    controller: str = ""
    """``Kind/name`` of the object's controller at that version ("" for none)."""
    deleting: bool = False
    """Whether the object is marked for deletion at that version (or deleted)."""


@dataclass(frozen=True)
class LoggedChange:
    """One observed-change event on the event log."""

    seq: int
    id: str
    kind: str
    namespace: str
    name: str
    uid: str
    rv: str
    change: str
    """``added``, ``modified`` or ``deleted``."""
    synthetic: bool


_ObjectId = tuple[str, str, str]


def _object_ref(object_id: _ObjectId) -> str:
    return "/".join(object_id)


def log_violations(
    commits: Sequence[Commit], logged: Sequence[LoggedChange]
) -> tuple[list[Violation], int]:
    """The event log against the cluster's commits (docs/architecture.md invariant 3): the
    violations, and how many commits a relist collapsed. ``commits`` are in commit order;
    ``logged`` in any order (the stream sequence orders them). Give both for the same kinds.

    The watcher may relist (after a restart, a dropped watch, a 410), and a relist reports only
    each object's state at the list: the commits in between are *collapsed* into the later one,
    an object it never saw comes as ``added`` in whatever state it is, and an object that went
    while nobody watched gets a synthetic deletion carrying the last state published. So:

    - ``log-event-twice``: no event id twice.
    - ``log-event-of-unknown-object``: an object with events has commits.
    - ``log-event-of-unselected-object``: an object the watcher never selected has no events.
    - ``log-event-not-a-commit``: each event that is not synthetic is a commit of its object
      (same uid and resourceVersion).
    - ``log-event-out-of-order``: those events follow the commit order of their object.
    - ``log-change-mismatch``: an event says what its commit did, given what was published of
      the object before it: ``added`` an incarnation not published (a create, or a relist's
      first sighting), selected; ``modified`` a later selected version of the incarnation
      published; ``deleted`` a deletion, or the object leaving the selection (what a label
      selector watch reports), never of another incarnation than the one published.
    - ``log-synthetic-not-deletion`` / ``log-synthetic-deletion-not-of-last-state``: a
      synthetic event is a deletion, of the state last published.
    - ``log-missing-final-state``: the last event is the object's final state; or, for an
      object that ends deleted or unselected, nothing is left published (the last event is a
      deletion). An object that ends gone may have no event at all: it may have lived within a
      relist's gap, and its commits count as collapsed.

    Collapsed: the selected commits no event reports (the harness of the watcher's tests,
    tests/component/watcher/harness.py ``assert_consistent``, counts the same).
    """
    found: list[Violation] = []
    truth: dict[_ObjectId, list[Commit]] = defaultdict(list)
    for commit in commits:
        truth[(commit.kind, commit.namespace, commit.name)].append(commit)
    events: dict[_ObjectId, list[LoggedChange]] = defaultdict(list)
    first_seq: dict[str, int] = {}
    for event in sorted(logged, key=lambda e: e.seq):
        object_id = (event.kind, event.namespace, event.name)
        if event.id in first_seq:
            found.append(
                Violation(
                    "log-event-twice",
                    (_object_ref(object_id),),
                    f"event {event.id} is on the log at {first_seq[event.id]} and {event.seq}",
                )
            )
            continue
        first_seq[event.id] = event.seq
        events[object_id].append(event)
    collapsed = 0
    for object_id in sorted(truth.keys() | events.keys()):
        object_found, object_collapsed = _object_log(
            object_id, truth.get(object_id, []), events.get(object_id, [])
        )
        found += object_found
        collapsed += object_collapsed
    return found, collapsed


def _object_log(
    object_id: _ObjectId, truth: Sequence[Commit], events: Sequence[LoggedChange]
) -> tuple[list[Violation], int]:
    """One object's events against its commits: the violations, and the commits collapsed."""
    ref = _object_ref(object_id)
    if not truth:
        ids = ", ".join(e.id for e in events[:3])
        return [
            Violation("log-event-of-unknown-object", (ref,), f"{ref} never committed: {ids}")
        ], 0
    if not any(c.selected for c in truth):
        if not events:
            return [], 0
        detail = f"{ref} was never selected, yet has {len(events)} events"
        return [Violation("log-event-of-unselected-object", (ref,), detail)], 0
    found: list[Violation] = []
    position = {(c.uid, c.rv): i for i, c in enumerate(truth)}
    published: tuple[str, str] | None = None
    reported: set[int] = set()
    last = -1
    for event in events:
        problem: tuple[str, str] | None = None
        if event.synthetic:
            if event.change != "deleted":
                problem = ("log-synthetic-not-deletion", f"synthetic {event.change}")
            elif published != (event.uid, event.rv):
                problem = (
                    "log-synthetic-deletion-not-of-last-state",
                    f"a synthetic deletion while {published} was published",
                )
        else:
            index = position.get((event.uid, event.rv))
            if index is None:
                problem = ("log-event-not-a-commit", "no commit has its uid and resourceVersion")
            elif index <= last:
                problem = ("log-event-out-of-order", f"after the event of commit {truth[last].rv}")
            else:
                mismatch = _mismatch(event, truth[index], published)
                if mismatch is not None:
                    problem = ("log-change-mismatch", mismatch)
                reported.add(index)
                last = index
        if problem is not None:
            invariant, why = problem
            found.append(Violation(invariant, (ref,), f"{ref}: event {event.id}: {why}"))
        published = None if event.change == "deleted" else (event.uid, event.rv)
    final = truth[-1]
    if final.type == "DELETED" or not final.selected:
        if published is not None:
            found.append(
                Violation(
                    "log-missing-final-state",
                    (ref,),
                    f"{ref} ends {'deleted' if final.type == 'DELETED' else 'unselected'} at "
                    f"{final.rv}; the log's last word is {published}",
                )
            )
    elif published != (final.uid, final.rv):
        found.append(
            Violation(
                "log-missing-final-state",
                (ref,),
                f"{ref} ends at {final.rv}; the log's last word is {published}",
            )
        )
    collapsed = sum(1 for i, c in enumerate(truth) if c.selected and i not in reported)
    return found, collapsed


def _mismatch(event: LoggedChange, commit: Commit, published: tuple[str, str] | None) -> str | None:
    """Why ``event`` cannot report ``commit`` after ``published`` (None: it can)."""
    what = f"reports commit {commit.type} {commit.rv} ({'' if commit.selected else 'un'}selected)"
    if event.change == "added":
        if commit.type == "DELETED" or not commit.selected:
            return f"added {what}"
        if published is not None:
            return f"added while {published} is published"
    elif event.change == "modified":
        if commit.type != "MODIFIED" or not commit.selected:
            return f"modified {what}"
        if published is None or published[0] != event.uid:
            return f"modified while {published} is published"
    elif event.change == "deleted":
        if commit.type != "DELETED" and commit.selected:
            return f"deleted {what}"
        if published is not None and published[0] != event.uid:
            return f"deleted while {published} is published"
    else:
        return f"an unknown change {event.change!r}"
    return None


class CommitLog:
    """Every commit of the watched kinds (:data:`services.watcher.resources.WATCHED_RESOURCES`),
    recorded as the development cluster makes it::

        log = CommitLog()
        cluster.store.subscribe(None, log.sink)

    The store calls :meth:`sink` synchronously inside each write, so ``selected`` is computed on
    the object as committed and ``at`` is the moment of the commit. Commits of other resources
    (Leases, Events, ...) are skipped by their storage key, without decoding them.
    """

    def __init__(self) -> None:
        self.commits: list[Commit] = []
        self._watched = {qualified_resource(r.group, r.plural): r for r in WATCHED_RESOURCES}

    def sink(self, change: StoreChange) -> None:
        resource = self._watched.get(change.resource)
        raw = change.new if change.new is not None else change.old
        if resource is None or raw is None:
            return
        obj = decode(raw)  # for DELETED, the last state stamped with the deletion's RV
        self.commits.append(
            Commit(
                kind=resource.kind,
                namespace=change.namespace,
                name=change.name,
                uid=uid_of(obj),
                rv=str(change.rv),
                type=change.type,
                selected=resource.selects(obj),
                at=time.monotonic(),
                controller=_controller_name(obj),
                deleting=change.type == "DELETED"
                or bool(metadata_of(obj).get("deletionTimestamp")),
            )
        )


def _controller_name(obj: Mapping[str, Any]) -> str:
    for ref in metadata_of(obj).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return ""


def sandboxes_taken_from_claims(
    commits: Sequence[Commit], spared: Iterable[tuple[str, str]] = ()
) -> list[Violation]:
    """A claim's Sandbox goes only once its claim goes: one marked for deletion while the claim
    that controls it is not is a sandbox taken from under its user (a warm pool deleting a member
    a claim adopted a moment before, say). ``spared``: (namespace, claim) whose own expiry may
    delete the Sandbox first."""
    spared = set(spared)
    claim_gone: dict[tuple[str, str], float] = {}
    for commit in commits:
        if commit.kind == "SandboxClaim" and commit.deleting:
            claim_gone.setdefault((commit.namespace, commit.name), commit.at)
    found: list[Violation] = []
    reported: set[str] = set()
    for commit in commits:
        if commit.kind != "Sandbox" or not commit.deleting or commit.uid in reported:
            continue
        kind, _, claim = commit.controller.partition("/")
        key = (commit.namespace, claim)
        if kind != "SandboxClaim" or key in spared:
            continue
        if claim_gone.get(key, float("inf")) > commit.at:
            reported.add(commit.uid)
            found.append(
                Violation(
                    "claimed-sandbox-deleted",
                    (
                        f"Sandbox/{commit.namespace}/{commit.name}",
                        f"SandboxClaim/{commit.namespace}/{claim}",
                    ),
                    f"Sandbox {commit.name} was deleted (rv {commit.rv}) while its claim "
                    f"{claim} was not",
                )
            )
    return found


# --- reading the cluster and the bus ---------------------------------------------------------

_SNAPSHOT_KINDS = (
    # Claims before Sandboxes: see the module docstring.
    ("claims", "SandboxClaim"),
    ("sandboxes", "Sandbox"),
    ("warm_pools", "SandboxWarmPool"),
    ("templates", "SandboxTemplate"),
    ("pools", "Pool"),
    ("batch_sandboxes", "BatchSandbox"),
    ("pods", "Pod"),
)


async def take_snapshot(
    kube: KubeApi,
    js: JetStreamContext,
    namespaces: Iterable[str],
    *,
    bus: BusConfig | None = None,
) -> Snapshot:
    """The objects of ``namespaces``, their warm entries and their Pools' ledgers, read in that
    order (the API server one kind at a time, see the module docstring)."""
    bus = bus or BusConfig()
    wanted = list(dict.fromkeys(namespaces))
    listed: dict[str, list[Json]] = {}
    for field, kind in _SNAPSHOT_KINDS:
        listed[field] = [obj for ns in wanted for obj in await kube.list(kind, ns)]
    return Snapshot(
        **listed,
        warm_entries=await _warm_entries(js, bus, set(wanted)),
        pool_ledgers={
            _key(pool): await _pool_ledger(js, bus, *_key(pool)) for pool in listed["pools"]
        },
    )


async def _warm_entries(
    js: JetStreamContext, bus: BusConfig, namespaces: set[str]
) -> dict[tuple[str, str], set[str]]:
    """The warm stream's subjects (one message each, docs/architecture.md "The bus"), by pool.
    One request; a server answers up to 100 000 subjects in it, far more than a soak queues."""
    info = await js.stream_info(bus.warm_stream, subjects_filter=WARM_SUBJECTS[0])
    entries: dict[tuple[str, str], set[str]] = defaultdict(set)
    for subject in info.state.subjects or {}:
        try:
            entry = parse_warm_subject(subject)
        except SubjectError:
            continue
        if entry.namespace in namespaces:
            entries[(entry.namespace, entry.pool)].add(entry.sandbox)
    return dict(entries)


async def _pool_ledger(
    js: JetStreamContext, bus: BusConfig, namespace: str, name: str
) -> Json | None:
    """The Pool's memo as the pool worker last wrote it (services/runtime/reconcile/memory.py:
    a ``KeyRecord`` whose ``memo`` is the ledger, or ``null`` once forgotten)."""
    subject = memo_subject(POOL_WORKER, "Pool", namespace, name)
    try:
        message = await js.get_last_msg(bus.memo_stream, subject)
    except NotFoundError:
        return None
    record = msgspec.json.decode(message.data or b"null")
    memo = record.get("memo") if isinstance(record, dict) else None
    return memo if isinstance(memo, dict) else None


async def logged_changes(
    js: JetStreamContext,
    *,
    bus: BusConfig | None = None,
    undecodable: list[tuple[int, str]] | None = None,
) -> list[LoggedChange]:
    """Every observed-change event on the event log, read to its end, in log order.

    A message that is not a valid observed change raises :class:`EventDecodeError`, unless
    ``undecodable`` is given: then its sequence and the error are added to it, and it is
    stepped over (the soak reports it instead of losing the run's other findings)."""
    bus = bus or BusConfig()
    changes: list[LoggedChange] = []
    async for msg in read_to_end(js, bus.event_log_stream, OBSERVED_SUBJECTS, name_prefix="soak"):
        seq = msg.metadata.sequence.stream
        try:
            event = decode_event(msg.data)
            if not isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted):
                raise EventDecodeError("type", f"{event.type} is not an observed change")
        except EventDecodeError as error:
            if undecodable is None:
                raise
            undecodable.append((seq, str(error)))
            continue
        obj = event.data.object
        changes.append(
            LoggedChange(
                seq=seq,
                id=event.id,
                kind=event.kind,
                namespace=str(event.namespace or ""),
                name=event.name,
                uid=uid_of(obj),
                rv=str(metadata_of(obj).get("resourceVersion") or ""),
                change=_change_of(event),
                synthetic=event.data.synthetic,
            )
        )
    return changes


def _change_of(event: ObjectAdded | ObjectModified | ObjectDeleted) -> str:
    if isinstance(event, ObjectAdded):
        return "added"
    return "modified" if isinstance(event, ObjectModified) else "deleted"
