"""The Kubernetes Events of a Sandbox's lifecycle (upstream v1.0.4, #1532), decided purely.

Each Event announces a transition, never a pass: the planner compares what it observed with
what its pass writes, so a pass that finds the Sandbox already Ready writes no second
``SandboxReady``, and ``sandbus explain --rerun`` of a pass decides the same Events.

- ``SandboxPodCreated`` (Normal): a pass creates the Pod. The Event follows the create, so
  it is written only when the API server created it (an AlreadyExists answer stops the pass).
- ``SandboxPodCreateFailed`` (Warning): the API server refused the previous pass's Pod create;
  the next pass reports it, with the refusal, before it tries again: one per refused create.
- ``SandboxReady`` (Normal): the status write turns Ready to True (again after a suspension).
- ``SandboxSuspended`` (Normal): the status write turns Suspended to True (the Pod is gone; the
  Service and PVCs are kept).
- ``SandboxExpired`` (Normal): the pass that marks the Sandbox expired, under
  ``shutdownPolicy: Retain`` only; with ``Delete`` the Sandbox itself goes, and upstream
  records nothing.
- ``PodSucceeded`` (Normal) / ``PodFailed`` (Warning): the status write turns Ready's reason
  to PodSucceeded/PodFailed (the Pod ended on its own) and Finished did not already say so. A
  Pod that ends because the Sandbox is suspended or expired (the kubelet gives a deleted Pod a
  terminal phase) is no such end: Ready says SandboxSuspended or SandboxExpired then.

The Events that announce a status change come right after that status write in the plan: the
runtime stops at the first write that fails, so an Event never announces a status that was not
written, and the next pass, seeing the old status still, announces it then. The switch
(``SANDBUS_SANDBOX_EVENTS``, upstream's ``--disable-sandbox-events``) turns every Event of the
Sandbox worker off, these and the ``MultiplePods`` warning.

Events are named apart by reason: client-go names an Event ``<object>.<unix nanoseconds in
hex>`` of the moment it is recorded, and a pure planner has one moment per pass, so each reason
is recorded its own number of microseconds after it (:data:`_SLOTS`). Two Events of one pass
never share a name, and the same Event decided twice at the same moment is refused as a
duplicate (AlreadyExists).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from api.meta import Condition
from api.objects import Json
from events.envelope import ObjectKey
from services.runtime.kube_events import event_about
from services.runtime.reconcile.actions import Create
from services.runtime.reconcile.failures import failed_write
from services.sandbox.core.status import CONDITION_FINISHED, CONDITION_READY, CONDITION_SUSPENDED

__all__ = [
    "CONTROLLER_NAME",
    "POD_CREATED",
    "POD_CREATE_FAILED",
    "POD_FAILED",
    "POD_SUCCEEDED",
    "SANDBOX_EXPIRED",
    "SANDBOX_READY",
    "SANDBOX_SUSPENDED",
    "Notice",
    "event_creates",
    "expired",
    "pod_create_failed",
    "pod_created",
    "status_transitions",
]

CONTROLLER_NAME = "sandbox-controller"
"""The recorder's name (upstream's ``mgr.GetEventRecorder("sandbox-controller")``), which is
also the worker's field manager."""

POD_CREATED = "SandboxPodCreated"
POD_CREATE_FAILED = "SandboxPodCreateFailed"
SANDBOX_READY = "SandboxReady"
SANDBOX_SUSPENDED = "SandboxSuspended"
SANDBOX_EXPIRED = "SandboxExpired"
POD_SUCCEEDED = "PodSucceeded"
POD_FAILED = "PodFailed"

EventType = Literal["Normal", "Warning"]

_SLOTS = {
    reason: slot
    for slot, reason in enumerate(
        (
            POD_CREATE_FAILED,
            POD_SUCCEEDED,
            POD_FAILED,
            SANDBOX_SUSPENDED,
            SANDBOX_READY,
            SANDBOX_EXPIRED,
            "MultiplePods",
            POD_CREATED,
        )
    )
}
"""Microseconds after the pass's moment at which each reason is recorded."""


@dataclass(frozen=True)
class Notice:
    """One Event to record about the Sandbox."""

    reason: str
    note: str
    type: EventType = "Normal"
    action: str = "Reconciling"


def pod_created(pod_name: str) -> Notice:
    return Notice(POD_CREATED, f'Created Pod "{pod_name}"', action="PodCreation")


def pod_create_failed(
    last_error: str | None, namespace: str, pod_names: Iterable[str]
) -> Notice | None:
    """The Warning about the previous pass's Pod create, if that is what the API server refused.

    ``last_error`` is the runtime's account of the previous pass's first failed write,
    ``"<verb> <Kind/namespace/name>: <error>"``; only a create of one of ``pod_names`` counts."""
    failed = failed_write(last_error)
    if failed is None or failed.verb != "create":
        return None
    for name in dict.fromkeys(pod_names):
        if name and failed.target == ObjectKey("Pod", namespace, name):
            return Notice(
                POD_CREATE_FAILED,
                f'Failed to create Pod "{name}": {failed.error}',
                type="Warning",
                action="PodCreation",
            )
    return None


def expired(shutdown_time: str | None) -> Notice:
    when = f" at {shutdown_time}" if shutdown_time else ""
    return Notice(
        SANDBOX_EXPIRED,
        f"Sandbox expired{when}: its Pod and Service are deleted, the Sandbox is kept "
        "(shutdownPolicy Retain)",
        action="Expiry",
    )


def _by_type(conditions: Sequence[Condition] | None) -> dict[str, Condition]:
    return {entry.type: entry for entry in conditions or ()}


def _says(entry: Condition | None, reason: str | None) -> bool:
    return entry is not None and entry.status == "True" and entry.reason == reason


def _became(before: Condition | None, after: Condition | None) -> bool:
    """``after`` is True and ``before`` was not True for the same reason."""
    if after is None or after.status != "True":
        return False
    return before is None or before.status != "True" or before.reason != after.reason


def status_transitions(
    before: Sequence[Condition] | None, after: Sequence[Condition] | None, pod_name: str
) -> list[Notice]:
    """The Events that a status write from the conditions ``before`` to ``after`` announces."""
    old, new = _by_type(before), _by_type(after)
    notices: list[Notice] = []
    ready, old_ready = new.get(CONDITION_READY), old.get(CONDITION_READY)
    ended = ready.reason if ready is not None and ready.status == "False" else None
    if (
        ended in (POD_SUCCEEDED, POD_FAILED)
        and (old_ready is None or old_ready.reason != ended)
        and not _says(old.get(CONDITION_FINISHED), ended)
    ):
        if ended == POD_SUCCEEDED:
            notices.append(Notice(POD_SUCCEEDED, f'Pod "{pod_name}" completed successfully'))
        else:
            notices.append(Notice(POD_FAILED, f'Pod "{pod_name}" failed', type="Warning"))
    if _became(old.get(CONDITION_SUSPENDED), new.get(CONDITION_SUSPENDED)):
        notices.append(
            Notice(
                SANDBOX_SUSPENDED,
                "Sandbox is suspended: its Pod is deleted, its Service and PVCs are kept",
                action="Suspend",
            )
        )
    if (
        ready is not None
        and ready.status == "True"
        and (old_ready is None or old_ready.status != "True")
    ):
        notices.append(Notice(SANDBOX_READY, f"Sandbox is ready: {ready.message}"))
    return notices


def event_creates(
    sandbox: Mapping[str, Any], notices: Sequence[Notice], now: datetime
) -> list[Create]:
    """The Event creates of ``notices`` about ``sandbox`` (the object as served)."""
    return [
        Create(
            _event(sandbox, notice, now + timedelta(microseconds=_SLOTS.get(notice.reason, 0))),
            why=f"event {notice.reason}",
        )
        for notice in notices
    ]


def _event(sandbox: Mapping[str, Any], notice: Notice, moment: datetime) -> Json:
    return event_about(
        sandbox,
        reason=notice.reason,
        note=notice.note,
        type=notice.type,
        now=moment,
        controller=CONTROLLER_NAME,
        action=notice.action,
    )
