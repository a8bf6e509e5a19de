"""``plan_sandbox``: one reconcile of one Sandbox, as a pure function (spec/agent-sandbox.md §2.2).

The order of upstream's ``Reconcile``, and how a pass ends:

1. No Sandbox, or one being deleted: nothing to do. There are no finalizers; the garbage
   collector removes the Pod, Service and PVCs through their owner references.
2. Expired (:mod:`.lifecycle`): the two-pass expiry, and nothing else.
3. A spec that cannot be acted on (:mod:`.validation`): Ready=False/``InvalidSpec`` and nothing
   else.
4. The children: PVCs (:mod:`.volumes`), then the Pod (:mod:`.pods`), then the Service
   (:mod:`.headless`, skipped while the Pod mapping is ambiguous), then the Sandbox's own
   ``agents.x-k8s.io/pod-name`` annotation.
5. The status (:mod:`.status`).

One difference of shape, not of outcome: upstream writes the children and then the status
computed from the objects those writes returned, in one pass. A pure planner cannot know what
the API server will return, so a pass that writes children returns those writes with
``requeue_after=0``; the worker executes them, caches the answers and runs the next pass at
once, which finds the children converged and writes the status computed from the real
objects. The status is never guessed, and the number of API writes is the same.

The MultiplePods case writes a Warning event (``events.k8s.io``, reason ``MultiplePods``) once,
when the Ready reason becomes MultiplePods, and is not retried: it needs a person. Errors of a
pass (an object the Sandbox may not adopt or use) are reported as Ready=False/
``ReconcilerError`` and retried with backoff, like an error returned to controller-runtime.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from api.agents import GROUP, VERSION, Sandbox, SandboxStatus
from api.keys import ANNOTATION_POD_NAME, name_hash
from services.runtime.cache import Json, ObjectKey
from services.runtime.reconcile import Action, Create, Patch, Plan
from services.sandbox.headless import ServicePlan, plan_service
from services.sandbox.lifecycle import check_expiry, marked_expired, plan_expired, plan_mark_expired
from services.sandbox.observation import SandboxObservation
from services.sandbox.pods import plan_pod
from services.sandbox.status import (
    CONDITION_FINISHED,
    CONDITION_POD_SCHEDULED,
    CONDITION_READY,
    ConditionValue,
    PodFinding,
    compute_conditions,
    condition,
    set_conditions,
    status_patch,
    with_pod_fields,
    with_service_fields,
)
from services.sandbox.validation import REASON_INVALID_SPEC, problems
from services.sandbox.volumes import plan_claims

__all__ = ["CONTROLLER_NAME", "multiple_pods_event", "plan_sandbox", "read_sandbox"]

CONTROLLER_NAME = "sandbox-controller"


def read_sandbox(obj: Json) -> Sandbox:
    """The typed Sandbox; raises ``msgspec.ValidationError`` when the object is not one."""
    return msgspec.convert(obj, Sandbox)


def plan_sandbox(observation: SandboxObservation, now: datetime) -> Plan:
    key = ObjectKey("Sandbox", observation.namespace, observation.name)
    if observation.sandbox is None:
        return Plan(reason="the Sandbox is gone; the garbage collector removes what it owned")
    try:
        sandbox = read_sandbox(observation.sandbox)
    except msgspec.ValidationError as error:
        return Plan(
            reason="the object does not read as a Sandbox",
            error=f"cannot read the Sandbox: {error}",
        )
    if sandbox.metadata.deletion_timestamp:
        return Plan(reason="the Sandbox is being deleted; the garbage collector removes the rest")

    expired, requeue_after = check_expiry(sandbox, now)
    if expired:
        if not marked_expired(sandbox):
            return plan_mark_expired(sandbox, key, now)
        return plan_expired(sandbox, observation, key, now)

    invalid = problems(sandbox)
    if invalid:
        return _plan_invalid(sandbox, key, invalid, now)
    return _plan_children(sandbox, observation, key, now, requeue_after)


def _plan_invalid(sandbox: Sandbox, key: ObjectKey, invalid: list[str], now: datetime) -> Plan:
    message = "; ".join(invalid)
    status = sandbox.status or SandboxStatus()
    desired = msgspec.structs.replace(
        status,
        conditions=set_conditions(
            status.conditions,
            [ConditionValue(CONDITION_READY, "False", REASON_INVALID_SPEC, message)],
            generation=sandbox.metadata.generation,
            now=now,
        ),
    )
    patch = status_patch(sandbox, desired, key)
    return Plan(actions=(patch,) if patch else (), reason=f"the spec cannot be acted on: {message}")


def _plan_children(
    sandbox: Sandbox,
    observation: SandboxObservation,
    key: ObjectKey,
    now: datetime,
    requeue_after: float | None,
) -> Plan:
    hashed = name_hash(sandbox.metadata.name or "")
    claims = plan_claims(sandbox, observation.pvcs, hashed)
    pod = plan_pod(sandbox, observation.pods, hashed)
    multiple = pod.finding.multiple
    service = None if multiple else plan_service(sandbox, observation.service, hashed)

    found = [
        error
        for error in (
            claims.error,
            None if multiple else pod.finding.error,
            service.error if service else None,
        )
        if error
    ]
    writes: list[Action] = [*claims.actions, *pod.actions, *(service.actions if service else ())]
    if pod.changes_annotation:
        value = pod.pod_name_annotation
        writes.append(
            Patch(
                key,
                {"metadata": {"annotations": {ANNOTATION_POD_NAME: value}}},
                why=f"track Pod {value}" if value else "forget the tracked Pod",
            )
        )
    first_error = found[0] if found else None
    if writes and observation.last_error is None:
        return Plan(
            actions=tuple(writes),
            requeue_after=0,
            reason="bringing the children in line; the status follows once they are written",
            error=first_error,
        )
    # A quiet pass; or a retry of writes the API server refused last time, and then the refusal
    # is reported first, as upstream reports a failed create in the status of the same pass.
    # (When the refused write was the status itself, this pass simply writes it again.)
    errors = [*found, observation.last_error] if writes and observation.last_error else found
    report, ready = _report(sandbox, observation, key, now, pod.finding, service, errors)
    return Plan(
        actions=(*report, *writes),
        requeue_after=0 if writes else requeue_after,
        reason=f"Ready={ready.status} ({ready.reason}: {ready.message})",
        error=first_error,
    )


def _report(
    sandbox: Sandbox,
    observation: SandboxObservation,
    key: ObjectKey,
    now: datetime,
    finding: PodFinding,
    service: ServicePlan | None,
    errors: list[str],
) -> tuple[list[Action], ConditionValue]:
    """The status write (when worth one) and the MultiplePods warning, and the Ready value."""
    hashed = name_hash(sandbox.metadata.name or "")
    status = with_pod_fields(sandbox.status or SandboxStatus(), finding, hashed)
    if service is not None:
        status = with_service_fields(status, service.service, observation.cluster_domain)
    multiple = finding.error if finding.multiple else None
    values = compute_conditions(
        sandbox,
        finding,
        errors=errors,
        multiple_pods=multiple,
        service=service.service if service else None,
    )
    computed = {value.type for value in values}
    status = msgspec.structs.replace(
        status,
        conditions=set_conditions(
            status.conditions,
            values,
            generation=sandbox.metadata.generation,
            now=now,
            remove=[
                kind
                for kind in (CONDITION_FINISHED, CONDITION_POD_SCHEDULED)
                if kind not in computed
            ],
        ),
    )
    actions: list[Action] = []
    patch = status_patch(sandbox, status, key)
    if patch is not None:
        actions.append(patch)
    if multiple is not None:
        current = condition(sandbox, CONDITION_READY)
        if current is None or current.reason != "MultiplePods":
            actions.append(
                Create(multiple_pods_event(sandbox, multiple, now), why="warn about MultiplePods")
            )
    ready = next(value for value in values if value.type == CONDITION_READY)
    return actions, ready


def multiple_pods_event(sandbox: Sandbox, message: str, now: datetime) -> Json:
    """The Warning an events.k8s.io recorder would write; named like client-go names events
    (``<object>.<unix nanoseconds in hex>``), from the planner's clock."""
    nanos = int(now.astimezone(UTC).timestamp() * 1_000_000_000)
    name = sandbox.metadata.name or ""
    suffix = f".{nanos:x}"
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": name[: 253 - len(suffix)] + suffix,
            "namespace": sandbox.metadata.namespace,
        },
        "eventTime": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": CONTROLLER_NAME,
        "reportingInstance": CONTROLLER_NAME,
        "action": "Reconciling",
        "reason": "MultiplePods",
        "note": message,
        "type": "Warning",
        "regarding": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Sandbox",
            "name": name,
            "namespace": sandbox.metadata.namespace,
            "uid": sandbox.metadata.uid,
            "resourceVersion": sandbox.metadata.resource_version,
        },
    }
