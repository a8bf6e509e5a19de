"""A Sandbox's end: expiry at ``spec.shutdownTime`` (docs/agent-sandbox.md §2.2 step 3, §2.7;
upstream ``checkSandboxExpiry`` and ``handleSandboxExpiry``).

Expiry takes two passes, so that the fact is persisted before anything is torn down:

1. The first pass at or after ``shutdownTime`` only writes the status: Ready=False with reason
   ``SandboxExpired`` and the PodScheduled condition removed (it would go stale with the Pod).
   It asks to be reconciled again in 1 ms.
2. Every later pass deletes the Pod (the tracked one, only if the Sandbox owns it) and the
   Service named like the Sandbox (only if owned); PVCs are kept. With ``shutdownPolicy:
   Delete`` the Sandbox itself is deleted too (the garbage collector takes the rest). With
   ``Retain`` the status is reduced to its conditions, Ready=False/``SandboxExpired``; the
   ``Finished`` condition of a terminal Pod survives.

Before expiry, a Sandbox with a ``shutdownTime`` is reconciled again when it arrives, but not
sooner than 2 s from now.
"""

from __future__ import annotations

from datetime import datetime

from api.agents import Sandbox, SandboxStatus
from api.meta import Condition
from api.objects import Json, is_deleting, name_of, uid_of
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Action, Delete, Plan
from services.sandbox.core.objects import Ownership, ownership
from services.sandbox.core.observation import SandboxObservation, resolve_pod_name
from services.sandbox.core.status import (
    CONDITION_POD_SCHEDULED,
    CONDITION_READY,
    condition,
    expired_ready,
    set_conditions,
    status_patch,
)
from services.sandbox.core.validation import parse_time

__all__ = [
    "EXPIRED_REQUEUE",
    "MIN_REQUEUE",
    "check_expiry",
    "marked_expired",
    "plan_expired",
    "plan_mark_expired",
]

EXPIRED_REQUEUE = 0.001
"""Seconds between marking a Sandbox expired and acting on it (upstream: 1 ms)."""
MIN_REQUEUE = 2.0
"""The earliest recheck of a Sandbox that expires in the future."""


def check_expiry(sandbox: Sandbox, now: datetime) -> tuple[bool, float | None]:
    """Whether the Sandbox has expired, and if not, when to look again (None: never)."""
    if sandbox.spec.shutdown_time is None:
        return False, None
    shutdown = parse_time(sandbox.spec.shutdown_time)
    if shutdown is None:
        return False, None  # reported by validation
    if now >= shutdown:
        return True, None
    return False, max((shutdown - now).total_seconds(), MIN_REQUEUE)


def marked_expired(sandbox: Sandbox) -> bool:
    ready = condition(sandbox, CONDITION_READY)
    return ready is not None and ready.reason == "SandboxExpired"


def _expired_conditions(sandbox: Sandbox, now: datetime) -> list[Condition]:
    return set_conditions(
        sandbox.status.conditions if sandbox.status else None,
        [expired_ready()],
        generation=sandbox.metadata.generation,
        now=now,
        remove=(CONDITION_POD_SCHEDULED,),
    )


def plan_mark_expired(sandbox: Sandbox, key: ObjectKey, now: datetime) -> Plan:
    """The first pass: persist the expiry, then come back at once."""
    status = sandbox.status or SandboxStatus()
    desired = SandboxStatus(
        service_fqdn=status.service_fqdn,
        service=status.service,
        conditions=_expired_conditions(sandbox, now),
        selector=status.selector,
        pod_ips=status.pod_ips,
        node_name=status.node_name,
    )
    patch = status_patch(sandbox, desired, key)
    return Plan(
        actions=(patch,) if patch else (),
        requeue_after=EXPIRED_REQUEUE,
        reason="shutdownTime has passed: marking the Sandbox expired before cleaning up",
    )


def _owned_and_live(obj: Json | None, uid: str) -> bool:
    return obj is not None and ownership(obj, uid) is Ownership.OWNED and not is_deleting(obj)


def plan_expired(
    sandbox: Sandbox, observation: SandboxObservation, key: ObjectKey, now: datetime
) -> Plan:
    """Every later pass: remove the Pod and Service, then delete or retain the Sandbox."""
    uid = sandbox.metadata.uid or ""
    namespace = key.namespace
    actions: list[Action] = []
    pod_name = resolve_pod_name(observation.sandbox or {})
    pod = next((p for p in observation.pods if name_of(p) == pod_name), None)
    if pod is not None and _owned_and_live(pod, uid):
        actions.append(
            Delete(
                ObjectKey("Pod", namespace, pod_name), uid=uid_of(pod), why="the Sandbox expired"
            )
        )
    service = observation.service
    if service is not None and _owned_and_live(service, uid):
        actions.append(
            Delete(
                ObjectKey("Service", namespace, name_of(service)),
                uid=uid_of(service),
                why="the Sandbox expired",
            )
        )
    if sandbox.spec.shutdown_policy == "Delete":
        actions.append(
            Delete(key, uid=uid, why="the Sandbox expired and its shutdownPolicy is Delete")
        )
        return Plan(
            actions=tuple(actions),
            reason="expired with shutdownPolicy Delete: deleting the Sandbox",
        )
    if actions:
        return Plan(
            actions=tuple(actions),
            requeue_after=0,
            reason="expired with shutdownPolicy Retain: removing the Pod and the Service first",
        )
    # Retain: keep only the conditions, so no client mistakes the Sandbox for a live one.
    desired = SandboxStatus(conditions=_expired_conditions(sandbox, now))
    patch = status_patch(sandbox, desired, key)
    return Plan(
        actions=(patch,) if patch else (),
        reason="expired with shutdownPolicy Retain: kept, with Ready=False/SandboxExpired",
    )
