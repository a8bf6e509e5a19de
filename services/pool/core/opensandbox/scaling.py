"""How an OpenSandbox Pool sizes itself (docs/opensandbox.md §2.6, §2.7, §2.9): the buffer band,
poolMin/poolMax, the maxUnavailable pacing of scale-up and of template updates, the order in
which Pods go, and eviction.

All of it is arithmetic on Pods as the API shows them, so each rule is a small function the
planner composes; the rules are upstream's, including its two different bases for pacing
(scale-up against the schedulable count it aims at, update against the schedulable count it
has), its rounding (up, never below 1), and its answer to a maxUnavailable it cannot read (a
string that is not a percentage, ``"3"`` included, as ``intstr.GetScaledValueFromIntOrPercent``
refuses it): 1. Upstream says nothing about such a value; here
:func:`max_unavailable_problem` names it, for the planner to say in its decision.
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from api.objects import Json, condition_of, labels_of, metadata_of
from api.opensandbox import LABEL_EVICT, LABEL_POOL_REVISION
from services.domain.opensandbox.pods import is_pod_ready
from services.runtime.times import parse_time

__all__ = [
    "DEFAULT_MAX_UNAVAILABLE",
    "Capacity",
    "Eviction",
    "Recreate",
    "deletion_order",
    "desired_schedulable",
    "evict",
    "max_unavailable_problem",
    "needs_eviction",
    "oldest_first",
    "plan_recreate",
    "ready_since",
    "resolve_max_unavailable",
    "scale_up",
]

DEFAULT_MAX_UNAVAILABLE = "25%"
_PERCENT = re.compile(r"[+-]?[0-9]+")
"""What Go's ``strconv.Atoi`` reads in front of the ``%``."""


def _amount(value: int | str | None, base: int) -> int | None:
    """The scaled value, or None when ``value`` is neither an integer nor ``"N%"``."""
    if value is None:
        value = DEFAULT_MAX_UNAVAILABLE
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    if isinstance(value, int):
        return value
    number = value.removesuffix("%")
    if number == value or _PERCENT.fullmatch(number) is None:
        return None
    return math.ceil(int(number) * base / 100)


def resolve_max_unavailable(value: int | str | None, base: int) -> int:
    """``value`` (an integer or ``"N%"``, 25 % when absent) against ``base``, rounded up, and
    never below 1: a pool always makes progress. A value that cannot be read counts as 1, as
    upstream's ``resolveMaxUnavailable`` (see :func:`max_unavailable_problem`)."""
    amount = _amount(value, base)
    return 1 if amount is None else max(amount, 1)


def max_unavailable_problem(value: Any) -> str | None:
    """Why ``value`` cannot be read as a maxUnavailable (None: it can)."""
    if _amount(value, 0) is not None:
        return None
    return f"maxUnavailable {value!r} is neither an integer nor a percentage: 1 is used"


def needs_eviction(pod: Mapping[str, Any]) -> bool:
    """Carries the eviction label (its value does not matter) and is not going already."""
    return LABEL_EVICT in labels_of(pod) and not metadata_of(pod).get("deletionTimestamp")


@dataclass(frozen=True)
class Eviction:
    kept: tuple[Json, ...]
    """The Pods the pass schedules with (upstream's ``schedulePods``)."""
    evicted: tuple[Json, ...]
    """Idle Pods that carry the eviction label: deleted, and left out of this pass."""


def evict(pods: Iterable[Json], allocated: Container[str]) -> Eviction:
    """Upstream's ``handleEviction``: an idle Pod that needs eviction goes (ready or not); an
    allocated one stays, and stays schedulable, until its sandbox gives it back."""
    kept: list[Json] = []
    evicted: list[Json] = []
    for pod in pods:
        name = str(metadata_of(pod).get("name") or "")
        (evicted if needs_eviction(pod) and name not in allocated else kept).append(pod)
    return Eviction(kept=tuple(kept), evicted=tuple(evicted))


@dataclass(frozen=True)
class Capacity:
    buffer_min: int
    buffer_max: int
    pool_min: int
    pool_max: int

    @classmethod
    def of(cls, pool: Mapping[str, Any]) -> Capacity:
        spec = (pool.get("spec") or {}).get("capacitySpec") or {}
        return cls(
            buffer_min=int(spec.get("bufferMin") or 0),
            buffer_max=int(spec.get("bufferMax") or 0),
            pool_min=int(spec.get("poolMin") or 0),
            pool_max=int(spec.get("poolMax") or 0),
        )


def desired_schedulable(
    capacity: Capacity, *, schedulable: int, allocated: int, supply: int
) -> int:
    """How many schedulable Pods the pool wants: what is allocated, what sandboxes and the
    update still need, and a buffer that stays where it is inside the band and is reset to
    the band's midpoint (integer division) outside it; never below poolMin."""
    buffer = schedulable - allocated
    if not capacity.buffer_min <= buffer <= capacity.buffer_max:
        buffer = (capacity.buffer_min + capacity.buffer_max) // 2
    return max(allocated + supply + buffer, capacity.pool_min)


def scale_up(
    capacity: Capacity,
    *,
    desired: int,
    schedulable: int,
    total: int,
    not_ready: int,
    max_unavailable: int | str | None,
) -> int:
    """Pods to create now: toward ``desired``, within poolMax (counted on every Pod that is
    not terminating, evicting ones included), and paced so that no more than maxUnavailable
    (against ``desired``) are not Ready at once."""
    room = max(capacity.pool_max - total, 0)
    if desired <= schedulable or room == 0:
        return 0
    pace = resolve_max_unavailable(max_unavailable, desired) - not_ready
    return max(0, min(desired - schedulable, room, pace))


_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}
"""Upstream's map; any other phase (Succeeded, Failed, none) is 0, as a Go map's zero value."""


def ready_since(pod: Mapping[str, Any]) -> datetime | None:
    """When a Pod's Ready condition last became True (None: it is not True, or has no time)."""
    ready = condition_of(pod, "Ready")
    if ready is None or ready.get("status") != "True":
        return None
    return parse_time(ready.get("lastTransitionTime"))


def _restarts(pod: Mapping[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return max((int(s.get("restartCount") or 0) for s in statuses), default=0)


def _created(pod: Mapping[str, Any]) -> float:
    moment = parse_time(metadata_of(pod).get("creationTimestamp"))
    return moment.timestamp() if moment is not None else 0.0


def deletion_order(pods: Iterable[Json]) -> list[Json]:
    """Pods in the order an update deletes them (upstream's ``ComparePodsForDeletion``): not
    on a node first; Pending (and any phase but Unknown and Running), then Unknown, then
    Running; not Ready first; among Ready ones the *earlier* Ready transition first; the most
    restarts of one container first; newer first; then by name."""

    def key(pod: Json) -> tuple[Any, ...]:
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        ready = is_pod_ready(pod)
        since = ready_since(pod) if ready else None
        return (
            bool(spec.get("nodeName")),
            _PHASE_ORDER.get(str(phase), 0),
            ready,
            since.timestamp() if since is not None else 0.0,
            -_restarts(pod),
            -_created(pod),
            str(metadata_of(pod).get("name") or ""),
        )

    return sorted(pods, key=key)


def oldest_first(pods: Iterable[Json]) -> list[Json]:
    """The order of a scale-in: the oldest Pods go first (upstream's, the reverse of a
    ReplicaSet's)."""
    return sorted(pods, key=lambda pod: (_created(pod), str(metadata_of(pod).get("name") or "")))


@dataclass(frozen=True)
class Recreate:
    """What a template update does to the idle Pods in one pass."""

    delete: tuple[Json, ...] = ()
    supply: int = 0
    """Pods to create in their place."""
    kept: tuple[Json, ...] = ()
    """The idle Pods that stay (up to date, or waiting for budget)."""


def plan_recreate(
    idle: Sequence[Json],
    *,
    revision: str,
    schedulable: Sequence[Json],
    max_unavailable: int | str | None,
) -> Recreate:
    """Replace outdated idle Pods within the update budget: maxUnavailable against the
    schedulable Pods, less those not Ready already. An outdated Pod that is not Ready goes
    without spending budget; allocated Pods are never touched (they are not in ``idle``)."""
    budget = resolve_max_unavailable(max_unavailable, len(schedulable))
    budget = max(budget - sum(1 for pod in schedulable if not is_pod_ready(pod)), 0)
    delete: list[Json] = []
    kept: list[Json] = []
    for pod in deletion_order(idle):
        if labels_of(pod).get(LABEL_POOL_REVISION) == revision:
            kept.append(pod)
        elif not is_pod_ready(pod):
            delete.append(pod)
        elif budget > 0:
            delete.append(pod)
            budget -= 1
        else:
            kept.append(pod)
    return Recreate(delete=tuple(delete), supply=len(delete), kept=tuple(kept))
