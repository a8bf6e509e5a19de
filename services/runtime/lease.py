"""Leader election through a ``coordination.k8s.io/v1`` Lease: the decisions, without I/O.

For any service of which one replica must be active at a time (the watcher, and a worker run
with standbys). The replicas agree through one Lease object, the way client-go's
``leaderelection`` does, so ``kubectl get lease`` shows who leads:

- Every replica reads the Lease once per retry period. A replica that does not hold it keeps
  the Lease's ``resourceVersion`` and *its own* monotonic time of when that version was first
  seen (:class:`Observation`); it never compares its clock with the ``renewTime`` another
  machine wrote. When the version has not changed for ``leaseDurationSeconds``, the holder is
  presumed dead and the replica takes the Lease over.
- Every write (create, renew, take over, release) is a PUT carrying the resourceVersion that
  was read, so of two replicas racing for an expired Lease exactly one wins and the other gets
  409 Conflict.
- The holder renews every retry period and counts itself leader only until ``renew_deadline``
  after the *start* of its last successful renewal (:func:`leader_until`). The deadline is
  shorter than the lease duration, and a standby's clock starts no earlier than that renewal
  was sent, so the old leader has stopped acting at least ``duration - renew_deadline``
  before anybody can take over.
- A replica that stops cleanly releases the Lease (empty holder, duration 1 s), so its standby
  takes over within one retry period instead of a whole lease duration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

__all__ = [
    "LeaseTimings",
    "Observation",
    "acquired_lease",
    "holder_of",
    "leader_until",
    "next_action",
    "observe",
    "released_lease",
    "renewed_lease",
]

LeaseAction = Literal["create", "renew", "take_over", "wait"]


@dataclass(frozen=True)
class LeaseTimings:
    """client-go's three durations, scaled down so that a handover takes seconds."""

    duration: float = 5.0
    """``leaseDurationSeconds``: how long a standby waits for a renewal before taking over."""
    renew_deadline: float = 3.5
    """How long after the start of its last successful renewal the holder still leads."""
    retry_period: float = 1.0
    """How often every replica reads (and the holder renews) the Lease."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.duration:
            raise ValueError(
                "lease timings need 0 < retry_period < renew_deadline < duration, got "
                f"{self.retry_period}, {self.renew_deadline}, {self.duration}"
            )

    @classmethod
    def for_duration(cls, duration: float) -> LeaseTimings:
        """client-go's default proportions (15 s / 10 s / 2 s) for another lease duration."""
        return cls(duration=duration, renew_deadline=duration * 0.7, retry_period=duration * 0.2)


class Observation(NamedTuple):
    """A Lease version as one replica saw it, and when (its own monotonic clock)."""

    resource_version: str
    since: float


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _spec(lease: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (lease or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _metadata(lease: Mapping[str, Any] | None) -> Mapping[str, Any]:
    metadata = (lease or {}).get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def holder_of(lease: Mapping[str, Any] | None) -> str:
    holder = _spec(lease).get("holderIdentity")
    return holder if isinstance(holder, str) else ""


def _duration_of(lease: Mapping[str, Any], default: float) -> float:
    duration = _spec(lease).get("leaseDurationSeconds")
    return float(duration) if isinstance(duration, int | float) and duration > 0 else default


def observe(previous: Observation | None, lease: Mapping[str, Any], now: float) -> Observation:
    """What this replica knows after reading ``lease`` at ``now``."""
    version = str(_metadata(lease).get("resourceVersion", ""))
    if previous is not None and previous.resource_version == version:
        return previous
    return Observation(version, now)


def next_action(
    lease: Mapping[str, Any] | None,
    observation: Observation | None,
    identity: str,
    now: float,
    timings: LeaseTimings,
) -> LeaseAction:
    """What to do after reading ``lease`` (None: it does not exist)."""
    if lease is None:
        return "create"
    holder = holder_of(lease)
    if holder == identity:
        return "renew"
    if not holder:
        return "take_over"
    if observation is None:
        return "wait"
    if now - observation.since >= _duration_of(lease, timings.duration):
        return "take_over"
    return "wait"


def leader_until(renewal_started: float, timings: LeaseTimings) -> float:
    """Until when (monotonic) a holder whose renewal started at ``renewal_started`` leads."""
    return renewal_started + timings.renew_deadline


def acquired_lease(
    lease: Mapping[str, Any] | None,
    *,
    namespace: str,
    name: str,
    identity: str,
    now: datetime,
    timings: LeaseTimings,
) -> dict[str, Any]:
    """The body that creates the Lease, or takes ``lease`` over, for ``identity``."""
    stamp = micro_time(now)
    if lease is None:
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        transitions = 0
    else:
        metadata = dict(_metadata(lease))
        previous = _spec(lease).get("leaseTransitions")
        transitions = (previous if isinstance(previous, int) else 0) + 1
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": max(1, round(timings.duration)),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        },
    }


def renewed_lease(lease: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """``lease`` renewed by its holder."""
    body = dict(lease)
    spec = dict(_spec(lease))
    spec["renewTime"] = micro_time(now)
    body["spec"] = spec
    return body


def released_lease(lease: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """``lease`` given up by its holder on a clean stop, so a standby takes it at once."""
    body = renewed_lease(lease, now=now)
    spec = dict(body["spec"])
    spec["holderIdentity"] = ""
    spec["leaseDurationSeconds"] = 1
    body["spec"] = spec
    return body
