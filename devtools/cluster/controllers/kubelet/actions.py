"""What the planners of the simulated components return, and the time they decide at.

A plan is a tuple of these actions, in the order the shell carries them out. Each is one HTTP
write a real component would make, with the precondition it would send: a binding through the
``pods/binding`` subresource, a merge patch of ``status`` carrying the observed resourceVersion
(a 409 just means a newer version is on its way), a delete with a uid precondition, and the
Job controller's create of a Job's Pod followed by that Pod's status. When the API server
refuses one (404 or 409), the shell drops the rest of the plan and waits for the watch to bring
the next version to plan from: the planners never assume a write succeeded.

:class:`Instant` carries both clocks a decision needs: monotonic seconds to measure the delays
between stages, and the wall time in RFC 3339 for the timestamps written into the objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from api.objects import Json

__all__ = ["Action", "BindPod", "CreatePod", "DeletePod", "Instant", "LaunchJob", "PatchStatus"]


@dataclass(frozen=True)
class Instant:
    """The time a decision is made at: monotonic seconds for delays, RFC 3339 for the API."""

    monotonic: float
    wall: str


@dataclass(frozen=True)
class BindPod:
    """POST pods/binding."""

    node: str


@dataclass(frozen=True)
class PatchStatus:
    """Merge-patch ``status`` (pods/status or jobs/status) under a resourceVersion precondition."""

    status: Json
    resource_version: str
    pod_ip: str | None = None  # the shell reserves it before the write goes out


@dataclass(frozen=True)
class DeletePod:
    """DELETE with gracePeriodSeconds=0 and a uid precondition."""

    uid: str


@dataclass(frozen=True)
class LaunchJob:
    """Start the Job action (once per Job uid)."""


@dataclass(frozen=True)
class CreatePod:
    """POST a Job's Pod, then merge-patch its ``status`` through pods/status.

    409 AlreadyExists is no refusal here: the Pod's name comes from the Job's uid, so it is the
    Pod an earlier pass created, and the status is written all the same."""

    pod: Json
    status: Json


Action = BindPod | PatchStatus | DeletePod | LaunchJob | CreatePod
