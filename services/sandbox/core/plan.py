"""``plan_sandbox``: one reconcile of one Sandbox, as a pure function (docs/agent-sandbox.md §2.2).

The order of upstream's ``Reconcile``, and how a pass ends:

1. No Sandbox, or one being deleted: nothing to do. There are no finalizers; the garbage
   collector removes the Pod, Service and PVCs through their owner references.
2. Expired (:mod:`.lifecycle`): the two-pass expiry, and nothing else.
3. A spec that cannot be acted on (:mod:`.validation`): Ready=False/``InvalidConfiguration``
   and nothing else; terminal, no requeue, until the spec changes.
4. The children: PVCs (:mod:`.volumes`), then the Pod (:mod:`.pods`) and the Sandbox's own
   ``agents.x-k8s.io/pod-name`` annotation (upstream writes it in ``reconcilePod``), then the
   Service (:mod:`.headless`, skipped while the Pod mapping is ambiguous).
5. The status (:mod:`.status`).

One difference of shape, not of outcome: upstream writes the children and then the status
computed from the objects those writes returned, in one pass. A pure planner cannot know what
the API server will return, so a pass that writes children returns those writes with
``requeue_after=0``; the worker executes them, caches the answers and runs the next pass at
once, which finds the children converged and writes the status computed from the real
objects. The status is never guessed, and the number of API writes is the same. The exception
is a pass whose only write is the metadata patch of a Pod the Sandbox owns (after every warm
adoption): labels and annotations are not what the status reads, so that pass writes the status
too, after the patch, and a refused patch stops the pass before it.

Tracing (docs/agent-sandbox.md §2.2 step 2, §6). When the worker traces the reconcile and the
Sandbox has no ``opentelemetry.io/trace-context`` yet, the observation holds the running span's
carrier and the pass first merge-patches it onto the Sandbox (not while it is being deleted), so
that later reconciles, and whoever reads the Sandbox, join that trace. The children's part of a pass
names its steps ``reconcilePVCs`` and ``reconcilePod``, upstream's child spans, and the Pod step
carries the ``ExistingPodStatusObserved``/``NewPodStatusObserved`` events (:mod:`.pods`).

Write-behind (docs/agent-sandbox.md §2.5; upstream ``--sandbox-write-behind-window``, default 0 =
off). With a window, the metadata patch of a Pod the Sandbox already owns (after a warm adoption:
the pool's labels and its safe-to-evict marker) is held back until the window, counted from the
first pass that held it and bounded at :data:`WRITE_BEHIND_BOUND`, has passed; meanwhile the pass
asks to come back when it ends, and everything else, the status included, is written as usual, so
readiness never waits for it. Redeliveries inside the window coalesce: they hold the same patch
without restarting the clock, and the pass after the window writes it once. No payload is kept:
the patch is recomputed from the objects, and the start of the clock is an input
(``pod_patch_held_since``): the plan returns it as its memo (:class:`WriteBehindMemo`), which the
runtime keeps per key on the bus and hands to the next pass, so a restarted worker or its
standby goes on with the same window. Losing it would only restart the window; it loses no
write. A pass after a refused write holds nothing back: that would only delay the retry.

The status window (sandbus's, ``SANDBUS_SANDBOX_STATUS_WINDOW``; 0 = every change written, as
upstream does). A starting Pod changes four times on its way to Ready (scheduled, started, an
IP, Ready), and upstream writes the Sandbox's status after each. With a window, a status that
only reports that progress (Ready stays False for ``DependenciesNotReady`` and was not True) is
held back for the window, counted from the pass that created the Pod (or from the first pass
that held one), with the same memo mechanism as write-behind (``status_held_since``); the
pass asks to come back when the window ends, so a Pod that never changes still has its status
written then. A Pod Ready within the window costs one status write. Becoming Ready, losing
readiness, an error, a suspension or an ending is written at once.

The pod-name annotation. Upstream writes ``agents.x-k8s.io/pod-name`` after it creates or
finds the Pod; a Pod named like its Sandbox is the one an absent annotation names already
(:func:`~services.sandbox.core.observation.resolve_pod_name`, the SDK's ``get_pod_name``), so
that write carries nothing new and is left out. A Pod of another name is recorded as upstream
records it, and a stale value is removed.

Events (:mod:`.lifecycle_events`). Each lifecycle step is announced once, by the pass that makes
it: ``SandboxPodCreated`` right after the Pod's create, ``SandboxPodCreateFailed`` by the pass
after a refused one, ``SandboxReady``/``SandboxSuspended``/``PodSucceeded``/``PodFailed`` right
after the status write that makes the transition, ``SandboxExpired`` after the write that marks
the expiry (Retain only). Off with ``SANDBUS_SANDBOX_EVENTS=false``, which silences the
MultiplePods warning too.

The MultiplePods case writes a Warning event (``events.k8s.io``, reason ``MultiplePods``) once,
when the Ready reason becomes MultiplePods, and is not retried: it needs a person. Errors of a
pass (an object the Sandbox may not adopt or use) are reported as Ready=False/
``ReconcilerError`` and retried with backoff, like an error returned to controller-runtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime, timedelta

import msgspec

from api.agents import Sandbox, SandboxStatus
from api.keys import ANNOTATION_POD_NAME, ANNOTATION_TRACE_CONTEXT, name_hash
from api.objects import Json, condition_of
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Action, Create, Patch, Plan, Step
from services.sandbox.core.headless import ServicePlan, plan_service
from services.sandbox.core.lifecycle import (
    check_expiry,
    marked_expired,
    plan_expired,
    plan_mark_expired,
)
from services.sandbox.core.lifecycle_events import (
    CONTROLLER_NAME,
    Notice,
    event_creates,
    expired,
    pod_create_failed,
    pod_created,
    status_transitions,
)
from services.sandbox.core.observation import SandboxObservation, resolve_pod_name
from services.sandbox.core.pods import PodPlan, plan_pod
from services.sandbox.core.status import (
    CONDITION_FINISHED,
    CONDITION_POD_SCHEDULED,
    CONDITION_READY,
    REASON_DEPENDENCIES_NOT_READY,
    ConditionValue,
    PodFinding,
    compute_conditions,
    condition,
    set_conditions,
    status_patch,
    with_pod_fields,
    with_service_fields,
)
from services.sandbox.core.validation import REASON_INVALID_CONFIGURATION, problems
from services.sandbox.core.volumes import plan_claims

__all__ = [
    "CONTROLLER_NAME",
    "STEP_POD",
    "STEP_PVCS",
    "WRITE_BEHIND_BOUND",
    "WriteBehindMemo",
    "plan_sandbox",
    "read_sandbox",
]

STEP_PVCS = "reconcilePVCs"
STEP_POD = "reconcilePod"
WRITE_BEHIND_BOUND = 1.0
"""Seconds the Pod metadata patch may be held back at most, whatever the window (upstream's
``podMetadataFlushBound``): it strips the autoscaler's safe-to-evict marker from an adopted
Pod, and autoscalers scan every 10 s or more."""


class WriteBehindMemo(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"
):
    """The memo of a pass that holds a write back: since when, for each write it holds."""

    pod_patch_held_since: datetime | None = None
    """The owned Pod's metadata patch (write-behind)."""
    status_held_since: datetime | None = None
    """A status write that reports only the Pod's progress (the status window)."""


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
    return _with_trace_context(_plan_live(sandbox, observation, key, now), sandbox, observation)


def _plan_live(
    sandbox: Sandbox, observation: SandboxObservation, key: ObjectKey, now: datetime
) -> Plan:
    has_expired, requeue_after = check_expiry(sandbox, now)
    if has_expired:
        if not marked_expired(sandbox):
            plan = plan_mark_expired(sandbox, key, now)
            if observation.events and plan.actions and sandbox.spec.shutdown_policy == "Retain":
                announce = event_creates(
                    observation.sandbox or {}, [expired(sandbox.spec.shutdown_time)], now
                )
                plan = dataclasses.replace(plan, actions=(*plan.actions, *announce))
            return plan
        return plan_expired(sandbox, observation, key, now)

    invalid = problems(sandbox)
    if invalid:
        return _plan_invalid(sandbox, key, invalid, now)
    return _plan_children(sandbox, observation, key, now, requeue_after)


def _with_trace_context(plan: Plan, sandbox: Sandbox, observation: SandboxObservation) -> Plan:
    """``plan``, first recording the running span's trace context on a Sandbox without one."""
    carrier = observation.trace_context
    if not carrier or (sandbox.metadata.annotations or {}).get(ANNOTATION_TRACE_CONTEXT):
        return plan
    record = Patch(
        ObjectKey("Sandbox", observation.namespace, observation.name),
        {"metadata": {"annotations": {ANNOTATION_TRACE_CONTEXT: carrier}}},
        why="record the trace context",
    )
    return dataclasses.replace(plan, actions=(record, *plan.actions))


def _plan_invalid(sandbox: Sandbox, key: ObjectKey, invalid: list[str], now: datetime) -> Plan:
    message = "; ".join(invalid)
    status = sandbox.status or SandboxStatus()
    desired = msgspec.structs.replace(
        status,
        conditions=set_conditions(
            status.conditions,
            [ConditionValue(CONDITION_READY, "False", REASON_INVALID_CONFIGURATION, message)],
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
    held = _held_pod_patch(pod, observation, now)
    pod_step: list[Action] = [] if held else list(pod.actions)
    creates_pod = any(_is_pod_create(action) for action in pod_step)
    if pod.changes_annotation:
        value = pod.pod_name_annotation
        pod_step.append(
            Patch(
                key,
                {"metadata": {"annotations": {ANNOTATION_POD_NAME: value}}},
                why=f"track Pod {value}" if value else "forget the tracked Pod",
            )
        )
    writes = [
        *_in_step(STEP_PVCS, claims.actions),
        *_in_step(STEP_POD, pod_step),
        *(service.actions if service else ()),
    ]
    steps = (Step(STEP_PVCS), Step(STEP_POD, pod.events))
    first_error = found[0] if found else None
    status_held: tuple[datetime, float] | None = None
    # The metadata patch of a Pod the Sandbox owns changes nothing the status reports (see the
    # module): one pass and one decision less for every adoption from a warm pool.
    status_too = pod.deferrable and not held and len(writes) == len(pod.actions)
    if writes and observation.last_error is None and not status_too:
        current = condition(sandbox, CONDITION_READY)
        if creates_pod and (current is None or current.status != "True"):
            # The status that follows a new Pod can only say that it is on its way: it is
            # held from now, and the Pod's own changes wake the passes that look again.
            status_held = _hold(observation.status_held_since, observation.status_window, now)
        plan = Plan(
            actions=tuple(_announce_pod_created(writes, sandbox, observation, now)),
            requeue_after=None if status_held else 0,
            reason="bringing the children in line; the status follows once they are written",
            error=first_error,
            steps=steps,
        )
    else:
        # A quiet pass; or a retry of writes the API server refused last time, and then the
        # refusal is reported first, as upstream reports a failed create in the status of the
        # same pass. (When the refused write was the status itself, this pass simply writes it
        # again.)
        errors = [*found, observation.last_error] if writes and observation.last_error else found
        report, ready = _report(sandbox, observation, key, now, pod.finding, service, errors)
        status_held = _held_status(report.status, ready, sandbox, observation, now, pod.finding)
        written = report.others if status_held is not None else report.actions
        announced = _announce_pod_created(writes, sandbox, observation, now)
        plan = Plan(
            actions=(*announced, *written) if status_too else (*written, *announced),
            requeue_after=0 if writes and not status_too else requeue_after,
            reason=f"Ready={ready.status} ({ready.reason}: {ready.message})",
            error=first_error,
            steps=steps,
        )
    memo = WriteBehindMemo(
        pod_patch_held_since=held[0] if held else None,
        status_held_since=status_held[0] if status_held else None,
    )
    for hold, what in ((held, "the Pod's metadata patch"), (status_held, "the status")):
        if hold is not None:
            left = hold[1]
            plan = dataclasses.replace(
                plan,
                requeue_after=left if plan.requeue_after is None else min(plan.requeue_after, left),
                reason=f"{plan.reason}; {what} is held back {left:.3f} s more",
                memo=memo,
            )
    return plan


def _in_step(step: str, actions: Iterable[Action]) -> list[Action]:
    return [dataclasses.replace(action, step=step) for action in actions]


def _is_pod_create(action: Action) -> bool:
    return isinstance(action, Create) and action.target.kind == "Pod"


def _announce_pod_created(
    writes: list[Action],
    sandbox: Sandbox,
    observation: SandboxObservation,
    now: datetime,
) -> list[Action]:
    """``writes`` with ``SandboxPodCreated`` right after the Pod's create, in its step: the
    runtime writes it only when the create succeeded (an AlreadyExists answer stops the pass)."""
    if not observation.events:
        return writes
    announced: list[Action] = []
    for action in writes:
        announced.append(action)
        if _is_pod_create(action):
            (event,) = event_creates(
                observation.sandbox or {},
                [pod_created(action.target.name or sandbox.metadata.name or "")],
                now,
            )
            announced.append(dataclasses.replace(event, step=action.step))
    return announced


def _held_pod_patch(
    pod: PodPlan, observation: SandboxObservation, now: datetime
) -> tuple[datetime, float] | None:
    """Whether write-behind holds the owned Pod's metadata patch back in this pass: since
    when, and for how many seconds more (None: write it now, or there is none)."""
    window = min(observation.write_behind, WRITE_BEHIND_BOUND)
    if not pod.deferrable or observation.last_error is not None:
        # After a failed write the retry is not held back again: that would only delay it.
        return None
    return _hold(observation.pod_patch_held_since, window, now)


def _held_status(
    report: list[Action],
    ready: ConditionValue,
    sandbox: Sandbox,
    observation: SandboxObservation,
    now: datetime,
    finding: PodFinding,
) -> tuple[datetime, float] | None:
    """Whether the status window holds this pass's status write back: since when, and for how
    many seconds more (None: write it now, or there is none).

    Only a status that reports the Pod on its way is held: Ready stays False for
    ``DependenciesNotReady`` and was not True before. Becoming Ready, losing readiness, an
    error, a suspension or an ending is written at once; so is a Pod that is not on its way,
    because it cannot be scheduled or waits on its scheduling gates (``PodScheduled=False``): a
    person wants to see that, and a warm pool's hold on its stuck members reads it."""
    if not report or not isinstance(report[0], Patch) or report[0].subresource != "status":
        return None
    current = condition(sandbox, CONDITION_READY)
    scheduled = condition_of(finding.pod, CONDITION_POD_SCHEDULED) if finding.pod else None
    if (
        ready.reason != REASON_DEPENDENCIES_NOT_READY
        or (current is not None and current.status == "True")
        or observation.last_error is not None
        or (scheduled is not None and scheduled.get("status") == "False")
    ):
        return None
    return _hold(observation.status_held_since, observation.status_window, now)


def _hold(since: datetime | None, window: float, now: datetime) -> tuple[datetime, float] | None:
    """A write held back for ``window`` seconds from ``since`` (this pass, when None): since
    when and for how long more, or None once the window has passed."""
    if window <= 0:
        return None
    since = since or now
    left = (since + timedelta(seconds=window) - now).total_seconds()
    if left <= 0:
        return None
    # A clock that started "in the future" (the host's clock went back) still ends in time.
    return since, min(left, window)


@dataclasses.dataclass(frozen=True)
class _Report:
    """What a pass that reports writes: the status write with the Events that announce its
    transitions (held back together), then the other Events."""

    status: list[Action]
    others: list[Action]

    @property
    def actions(self) -> list[Action]:
        return [*self.status, *self.others]


def _report(
    sandbox: Sandbox,
    observation: SandboxObservation,
    key: ObjectKey,
    now: datetime,
    finding: PodFinding,
    service: ServicePlan | None,
    errors: list[str],
) -> tuple[_Report, ConditionValue]:
    """The status write (when worth one), the Events of the pass, and the Ready value."""
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
    body = observation.sandbox or {}
    pod_name = resolve_pod_name(body)
    written: list[Action] = []
    announced: list[Notice] = []
    failed = pod_create_failed(
        observation.last_error, key.namespace, (pod_name, sandbox.metadata.name or "")
    )
    if failed is not None:
        announced.append(failed)
    patch = status_patch(sandbox, status, key)
    if patch is not None:
        written.append(patch)
        before = sandbox.status.conditions if sandbox.status else None
        announced.extend(status_transitions(before, status.conditions, pod_name))
    others: list[Notice] = []
    if multiple is not None:
        current = condition(sandbox, CONDITION_READY)
        if current is None or current.reason != "MultiplePods":
            others.append(Notice("MultiplePods", multiple, type="Warning"))
    if not observation.events:
        announced, others = [], []
    if failed is not None and patch is None:
        # Nothing to hold the failure back with: it is reported with the other Events.
        announced, others = [], [*announced, *others]
    events = event_creates(body, [*announced, *others], now)
    report = _Report(
        status=[*written, *events[: len(announced)]], others=list(events[len(announced) :])
    )
    ready = next(value for value in values if value.type == CONDITION_READY)
    return report, ready
