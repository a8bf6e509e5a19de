"""The allocation ledger of an OpenSandbox Pool: which of its Pods each BatchSandbox holds, kept on
the bus as the Pool's memo (docs/opensandbox.md §2.3-2.5, and the traps of §9.1-9.4, 9.13-9.14).

Upstream keeps this in the controller's memory and rebuilds it on start from the BatchSandboxes'
``alloc-status``/``alloc-released`` annotations, in list order, so a Pod moved from one sandbox
to another comes back free when the names sort the wrong way (§9.3), and one malformed
annotation stops the process (§9.4). Here the ledger is the Pool's memo, which the worker
writes *before* the actions a pass decides: a decision to give a Pod to a sandbox is on the
bus before the annotation that announces it, so a restart finds every allocation, in any
order, and a failed or conflicting annotation write is simply written again from the ledger.
The annotations stay, written for the BatchSandbox controller, the lifecycle server and
upstream's tools: ``alloc-status`` lists every Pod ever given (it only grows), and
``alloc-released`` those whose release finished.

Rules, where upstream's differ:

- Sandboxes are served first come, first served (creation time, then name), each filled
  before the next (:func:`pack`, upstream's packed algorithm); a short pool gives a partial
  allocation. Pods go at the current revision first, then the longest Ready. A sandbox is
  never given a Pod its annotations list already (a Pod it held once, under ``Noop``), since
  they could not say it holds that Pod a second time.
- A Pod a sandbox held that is gone without a release (deleted, evicted by the node) is
  *lost*: it no longer counts against the sandbox's replicas, so the pool gives it another
  (upstream #954; this repository's upstream commit never replaces it, §9.13). A released Pod
  counts, as upstream: a task that returns its Pod does not get a new one.
- A release request (``alloc-release``) is honoured only for a Pod the sandbox holds; any
  other is ignored here, said in the decision, and reported on the sandbox by its own
  controller (§9.14).
- Entries of a sandbox that is gone, or was recreated under its name (another uid), are
  orphans and go back through the recycle strategy, as upstream.
- A sandbox whose allocation annotations do not parse is left alone (it keeps what it holds,
  gets nothing more, and is not written to) and the decision names the annotation; the other
  sandboxes are served (upstream exits the process, §9.4).

With no memo yet (a new Pool, or one taken over from upstream's controller), the ledger is
built from the annotations without regard to order: a Pod counts as held by the sandbox that
lists it in ``alloc-status`` and not in ``alloc-released``; if two do, the one created later
holds it (the earlier one's release must have been lost). A sandbox whose annotations do not
parse is left out of that recovery: what it holds cannot be known until they are fixed.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from api.objects import Json, metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
)
from services.domain.opensandbox.allocation import (
    MalformedAnnotation,
    parse_pod_list,
)
from services.runtime.times import parse_time

__all__ = [
    "Holding",
    "PoolLedger",
    "SandboxView",
    "pack",
    "recover_ledger",
    "sandbox_view",
]


class Holding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """One Pod's holder."""

    sandbox: str
    uid: str
    """The holder's uid: a sandbox recreated under the same name is another holder."""
    recycling: bool = False
    """Released, and its recycle (a delete, a restart) has not finished: not free yet."""


class PoolLedger(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """The Pool's memo."""

    pods: dict[str, Holding] = {}
    """Pod name → who holds it."""
    released: dict[str, list[str]] = {}
    """Sandbox uid → the Pods whose release finished (what ``alloc-released`` must list)."""
    lost: dict[str, list[str]] = {}
    """Sandbox uid → the Pods it held that vanished without a release."""
    next_pod: int = 0
    """How many Pod names the Pool has handed out: the next one's number (see the plan)."""

    def held_by(self, uid: str) -> list[str]:
        return sorted(pod for pod, holding in self.pods.items() if holding.uid == uid)


@dataclass(frozen=True)
class SandboxView:
    """A BatchSandbox as the Pool's allocation reads it."""

    name: str
    uid: str
    replicas: int
    deleting: bool
    created: float
    alloc_status: tuple[str, ...]
    alloc_release: tuple[str, ...]
    alloc_released: tuple[str, ...]
    finalizers: tuple[str, ...]
    resource_version: str
    problem: str | None = None
    """A malformed annotation: the sandbox is left alone until it is fixed."""
    pool_ref: str = ""


def sandbox_view(sandbox: Json) -> SandboxView:
    meta = metadata_of(sandbox)
    annotations = meta.get("annotations") or {}
    created = parse_time(meta.get("creationTimestamp"))
    lists: dict[str, tuple[str, ...]] = {}
    problem = None
    for key in (ANNOTATION_ALLOC_STATUS, ANNOTATION_ALLOC_RELEASE, ANNOTATION_ALLOC_RELEASED):
        try:
            lists[key] = tuple(parse_pod_list(annotations, key))
        except MalformedAnnotation as error:
            lists[key] = ()
            problem = problem or str(error)
    replicas = (sandbox.get("spec") or {}).get("replicas")
    return SandboxView(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        replicas=int(replicas) if isinstance(replicas, int) else 1,
        deleting=bool(meta.get("deletionTimestamp")),
        created=created.timestamp() if created is not None else 0.0,
        alloc_status=lists[ANNOTATION_ALLOC_STATUS],
        alloc_release=lists[ANNOTATION_ALLOC_RELEASE],
        alloc_released=lists[ANNOTATION_ALLOC_RELEASED],
        finalizers=tuple(meta.get("finalizers") or ()),
        resource_version=str(meta.get("resourceVersion") or ""),
        problem=problem,
        pool_ref=str((sandbox.get("spec") or {}).get("poolRef") or ""),
    )


def recover_ledger(sandboxes: Iterable[SandboxView]) -> PoolLedger:
    """The ledger the annotations describe (see the module doc), whatever their order."""
    pods: dict[str, Holding] = {}
    created: dict[str, float] = {}
    released: dict[str, list[str]] = {}
    for view in sorted(sandboxes, key=lambda v: (v.created, v.name)):
        if view.problem is not None:
            continue
        done = set(view.alloc_released)
        if done:
            released[view.uid] = sorted(done & set(view.alloc_status))
        for pod in view.alloc_status:
            if pod in done:
                continue
            if pod not in pods or created[pod] <= view.created:
                pods[pod] = Holding(sandbox=view.name, uid=view.uid)
                created[pod] = view.created
    return PoolLedger(pods=pods, released={k: v for k, v in released.items() if v})


def pack(
    free: Sequence[str],
    requests: Iterable[tuple[str, int]],
    *,
    refused: Mapping[str, Container[str]] | None = None,
) -> tuple[dict[str, list[str]], int]:
    """Upstream's ``PackedSchedule``: the requests (sandbox, Pods wanted), in order, each take
    their whole need from the head of ``free`` before the next is served; one that finds too
    few takes what is left (a partial allocation, no gang semantics). Returns what each
    sandbox is given (only those given something) and the Pods still wanted in all.

    ``refused`` names, per sandbox, Pods it must not be given (here: those its annotations
    list already, which could not say it holds them a second time)."""
    left = list(free)
    given: dict[str, list[str]] = {}
    short = 0
    for sandbox, need in requests:
        if need <= 0:
            continue
        barred = (refused or {}).get(sandbox, ())
        taken = [pod for pod in left if pod not in barred][:need]
        if taken:
            given[sandbox] = taken
            chosen = set(taken)
            left = [pod for pod in left if pod not in chosen]
        short += need - len(taken)
    return given, short
