"""``plan_claim``: the SandboxClaim controller's decisions (docs/agent-sandbox.md §3.3-3.7).

One pass, in upstream's order:

1. A claim that is gone or being deleted gives back what it holds.
2. Expiry (:mod:`.lifecycle`): first persist Ready=False/ClaimExpired, then act on the
   shutdown policy.
3. ``additionalPodMetadata`` is validated (InvalidMetadata).
4. Find the claim's Sandbox, in this order: the one its status names and it controls; the one
   its ``sandbox-name`` annotation names (controlled: use it; still the pool's and adoptable:
   finish the interrupted adoption on that same Sandbox, never another; someone else's or
   gone: drop the reference); one named like the claim (controlled: a cold start's; not
   controlled: an error a person must resolve); any other it controls.
5. Without one: a claim with ``env`` or ``volumeClaimTemplates`` starts cold. Otherwise it
   adopts from the warm queue of its pool: an entry held for it is checked against the
   Sandbox (a ghost, a different incarnation, or a member no longer adoptable is acked away;
   a cache that lags the entry is read again), and the first good one is adopted: the claim's
   annotation written with the claim's resourceVersion, then the Sandbox patch with the
   Sandbox's (:mod:`.adoption`), then the status, then the entry's ack. With no entry held,
   the plan takes one, and the actions after the take are the cold start, which run only if
   the queue is empty: a dry pool costs no extra pass. Under a Recreate pool whose template
   is missing no member is adopted (its staleness cannot be checked): the entries go back and
   the claim reports TemplateNotFound. Entries a pass does not use go back to the queue,
   except those no claim could adopt, which are acked away.
6. The status (:mod:`.status`), written only when it changes, with the claim's version as
   precondition.

The warm queue holds only members the pool saw Ready, so a claim adopts Ready sandboxes, never
a half-started one. An offered Sandbox without a pod IP (it lost it after it was queued) is
held for up to ``pod_ip_grace`` after the claim's creation, then given back, and the claim
starts cold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from api.keys import (
    ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT,
    ANNOTATION_SANDBOX_NAME,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LAUNCH_TYPE_COLD,
    LAUNCH_TYPE_WARM,
    LEGACY_LABEL_SANDBOX_NAME,
    name_hash,
)
from api.objects import Json, compare_resource_versions, condition_of, labels_of, metadata_of
from api.patching.merge import apply_merge_patch, merge_patch
from events.envelope import ObjectKey
from services.claim.core.adoption import adoptable_by, adoption_patch, controlled_by, networked
from services.claim.core.batch.tasks import SyncTasks
from services.claim.core.cold import cold_sandbox
from services.claim.core.envtask import env_task, env_task_command, lists_task, sandbox_ip
from services.claim.core.injection import ClaimInputError, go_quote
from services.claim.core.lifecycle import EXPIRED_MESSAGE, expires_at, shutdown_policy
from services.claim.core.metadata import claim_pod_metadata, validate_additional_metadata
from services.claim.core.metrics import (
    ClaimMemo,
    controller_first_observed,
    creation_record,
    first_ready_records,
    ready_before,
    template_name,
)
from services.claim.core.observation import ClaimObservation, Offer, assigned_name
from services.claim.core.status import (
    ClaimProblem,
    claim_status,
    ready_reason,
    status_patch,
)
from services.domain.agentsandbox.policy_failure import (
    CONDITION_NETWORK_POLICY_FAILURE,
    REASON_NETWORK_POLICY_NOT_APPLIED,
    network_policy_failure,
)
from services.domain.agentsandbox.staleness import is_stale
from services.domain.agentsandbox.warmpool import template_ref_name
from services.domain.agentsandbox.warmqueue import WARM_SOURCE, Take, WarmQueue
from services.runtime.kube_events import event_about, warning_when_raised
from services.runtime.reconcile.actions import (
    Ack,
    Action,
    Create,
    Delete,
    Patch,
    Plan,
    Refresh,
    Release,
)
from services.runtime.reconcile.failures import FailedWrite, reportable
from services.runtime.times import parse_time, rfc3339_nano

__all__ = ["CONTROLLER_NAME", "plan_claim"]

CONTROLLER_NAME: Final = "sandboxclaim-controller"
EXPIRED_REQUEUE: Final = 0.001
ENV_TASK_RETRY: Final = 0.5
"""Seconds between tries to hand a claim's env to its sandbox's task executor."""


@dataclass
class _Pass:
    """The plan being built for one claim."""

    obs: ClaimObservation
    now: datetime
    claim: Json
    key: ObjectKey
    actions: list[Action] = field(default_factory=list)
    after: list[Action] = field(default_factory=list)
    """Actions that follow the status write (events, acks of entries not used)."""
    stamped: bool = False
    delivered: bool = False
    """The claim's env reached its sandbox's task executor in this pass."""

    @property
    def uid(self) -> str:
        return str(metadata_of(self.claim).get("uid") or "")

    @property
    def pool_name(self) -> str:
        return str(((self.claim.get("spec") or {}).get("warmPoolRef") or {}).get("name") or "")

    def event(self, reason: str, note: str, action: str = "Reconciling") -> None:
        if not self.obs.settings.events:
            return
        body = event_about(
            self.claim,
            reason=reason,
            note=note,
            type="Normal",
            now=self.now,
            controller=CONTROLLER_NAME,
            action=action,
        )
        self.after.append(Create(body, why=f"event {reason}"))

    def first_observed(self) -> Json:
        """The annotations to stamp on the claim, if it has not been stamped yet."""
        if self.stamped or not self.obs.settings.observability_annotations:
            return {}
        annotations = metadata_of(self.claim).get("annotations") or {}
        if annotations.get(ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT):
            return {}
        self.stamped = True
        return {ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: rfc3339_nano(self.now)}

    def missing(self) -> ClaimProblem | None:
        """WarmPoolNotFound or TemplateNotFound, when the claim's pool or its template is gone."""
        if self.obs.pool is None:
            message = f'SandboxWarmPool "{self.pool_name}" not found'
            return ClaimProblem("WarmPoolNotFound", message)
        if self.obs.template is None:
            message = f'SandboxTemplate "{template_ref_name(self.obs.pool)}" not found'
            return ClaimProblem("TemplateNotFound", message)
        return None

    def waiting_for(self, problem: ClaimProblem) -> Plan:
        """Report a missing pool or template and look again later (its event comes first)."""
        return self.finish(
            None, problem, reason=problem.message, requeue_after=self.obs.settings.missing_retry
        )

    def let_go(self, offers: Sequence[Offer], why: str) -> None:
        """Give back the entries this pass does not use; one that no claim could adopt (its
        Sandbox gone, replaced, or adopted, this claim's own included) is acked away instead
        of going back to the head of the queue for another claim to trip over."""
        for offer in offers:
            if _verdict(self, offer) == "drop":
                self.after.append(
                    Ack(WARM_SOURCE, offer.token, self.key, why="not adoptable any more")
                )
            else:
                self.after.append(Release(WARM_SOURCE, offer.token, self.key, why=why))

    def drop(self, offer: Offer, why: str) -> None:
        self.actions.append(Ack(WARM_SOURCE, offer.token, self.key, why=why))

    def refused_write(self) -> FailedWrite | None:
        """The previous pass's write of the claim's own Sandbox or of the claim that the API
        server refused for a reason retrying cannot fix (a cold Sandbox it will not create), or
        that keeps failing for one that passes (a 5xx, once the passes have failed in a row for
        a while): the claim says so, as upstream's ReconcilerError, until a pass writes without
        it."""
        failed = reportable(self.obs.last_error, persists=self.obs.failure_persists)
        if failed is None:
            return None
        if failed.target == self.key:
            return failed
        cold = ObjectKey("Sandbox", self.key.namespace, self.obs.name)
        return failed if failed.target == cold and self.obs.same_name is None else None

    def policy_failure(self) -> str | None:
        """Why the template's NetworkPolicy is not written, as the template says (module
        :mod:`services.domain.agentsandbox.policy_failure`), for the claim's condition."""
        said = network_policy_failure(self.obs.template)
        if said is None:
            return None
        template = template_ref_name(self.obs.pool) if self.obs.pool is not None else ""
        return (
            f'SandboxTemplate "{template}" cannot have its NetworkPolicy: {said}. Its sandboxes '
            "run without the policy meanwhile; fix the template's spec.networkPolicy (or what "
            "refuses it)"
        )

    def policy_warning(self, policy: str | None) -> None:
        """A Warning Event when ``NetworkPolicyFailure`` appears (after the status write)."""
        if policy is None or not self.obs.settings.events:
            return
        body = warning_when_raised(
            self.claim,
            condition_of(self.claim, CONDITION_NETWORK_POLICY_FAILURE),
            condition=CONDITION_NETWORK_POLICY_FAILURE,
            reason=REASON_NETWORK_POLICY_NOT_APPLIED,
            message=policy,
            now=self.now,
            controller=CONTROLLER_NAME,
        )
        if body is not None:
            self.after.append(Create(body, why=f"event {REASON_NETWORK_POLICY_NOT_APPLIED}"))

    def finish(
        self,
        sandbox: Mapping[str, Any] | None,
        problem: ClaimProblem | None,
        *,
        reason: str,
        requeue_after: float | None = None,
        error: str | None = None,
    ) -> Plan:
        refused = self.refused_write() if problem is None else None
        if refused is not None:
            again = "" if refused.refused else " (it keeps failing; retried with backoff)"
            problem = ClaimProblem("ReconcilerError", f"Error seen: {refused.error}{again}")
        policy = self.policy_failure()
        desired = claim_status(self.claim, sandbox, problem, self.now, policy_failure=policy)
        write = status_patch(self.key, self.claim, desired, why="report the claim's state")
        actions = list(self.actions)
        if write is not None:
            # A refusal is reported before the write that may be refused again stops the pass.
            actions.insert(0 if refused is not None else len(actions), write)
            self.policy_warning(policy)
        stamp = self.first_observed()
        observed_at = controller_first_observed(self.claim) or (self.now if self.stamped else None)
        # Recorded once the status write above is accepted; the memo of the next pass that sees
        # the claim Ready keeps them from being recorded again.
        actions.extend(
            first_ready_records(
                self.key,
                self.claim,
                desired,
                sandbox,
                first_observed=observed_at,
                memo=self.obs.memo,
            )
        )
        if stamp:
            actions.append(
                Patch(
                    self.key,
                    {"metadata": {"annotations": stamp}},
                    why="stamp when the controller first saw the claim",
                )
            )
        actions.extend(self.after)
        already = expires_at(self.claim)
        if already is None or already > self.now:
            # Not expired yet: come back when it does, counting from the status this pass
            # writes (a Finished condition mirrored now starts the ttl; the echo of our own
            # write does not wake the claim). Once expired, :func:`_expired` says when.
            expiry = expires_at({**self.claim, "status": desired})
            if expiry is not None:
                left = max((expiry - self.now).total_seconds(), EXPIRED_REQUEUE)
                requeue_after = left if requeue_after is None else min(requeue_after, left)
        return Plan(
            actions=tuple(actions),
            reason=reason,
            requeue_after=requeue_after,
            error=error,
            memo=ClaimMemo(env_delivered=True) if self.delivered else None,
        )


def plan_claim(obs: ClaimObservation, now: datetime) -> Plan:
    plan = _plan_claim(obs, now)
    policy = obs.legacy_policy
    if policy is not None and not metadata_of(policy).get("deletionTimestamp"):
        # Upstream's cleanupLegacyNetworkPolicy (§3.3 step 2), on every pass whatever else it
        # decides: the per-claim policy of older controllers goes; the template's stays.
        delete = Delete(
            ObjectKey("NetworkPolicy", obs.namespace, str(metadata_of(policy).get("name"))),
            uid=str(metadata_of(policy).get("uid") or "") or None,
            why="the legacy per-claim NetworkPolicy is replaced by the template's",
        )
        plan = dataclasses.replace(plan, actions=(*plan.actions, delete))
    if obs.claim is None:
        return plan
    before = obs.memo or ClaimMemo()
    memo = ClaimMemo(
        was_ready=ready_before(obs.claim, obs.memo),
        env_delivered=before.env_delivered or (plan.memo is not None and plan.memo.env_delivered),
    )
    return dataclasses.replace(plan, memo=memo if memo != ClaimMemo() else None)


def _plan_claim(obs: ClaimObservation, now: datetime) -> Plan:
    key = ObjectKey("SandboxClaim", obs.namespace, obs.name)
    claim = obs.claim
    unreadable = tuple(
        Ack(message.source, message.token, key, why="not a queue entry")
        for message in obs.unreadable
    )
    if claim is None or metadata_of(claim).get("deletionTimestamp"):
        releases = tuple(
            Release(WARM_SOURCE, offer.token, key, why="the claim is gone") for offer in obs.offers
        )
        return Plan(actions=unreadable + releases, reason="the claim is gone or being deleted")
    run = _Pass(obs, now, claim, key, actions=list(unreadable))
    expiry = expires_at(claim)
    if expiry is not None and now >= expiry:
        return _expired(run)
    invalid = validate_additional_metadata(
        (claim.get("spec") or {}).get("additionalPodMetadata"),
        obs.settings.allowed_label_domains,
    )
    if invalid is not None:
        run.let_go(obs.offers, "the claim is invalid")
        return run.finish(obs.bound, ClaimProblem("InvalidMetadata", invalid), reason=invalid)
    return _active(run)


# -- expiry ---------------------------------------------------------------------------------


def _expired(run: _Pass) -> Plan:
    obs, claim = run.obs, run.claim
    run.let_go(obs.offers, "the claim expired")
    sandbox = obs.bound or obs.same_name
    if ready_reason(claim) != "ClaimExpired":
        run.event("ClaimExpired", EXPIRED_MESSAGE, action="Claim Expired")
        return run.finish(
            sandbox if controlled_by(sandbox, claim) else None,
            ClaimProblem("ClaimExpired", EXPIRED_MESSAGE),
            reason="expired: the reason is recorded before anything is deleted",
            requeue_after=EXPIRED_REQUEUE,
        )
    policy = shutdown_policy(claim)
    if policy in ("Delete", "DeleteForeground"):
        run.event("ClaimExpired", f"Deleting Claim (ShutdownPolicy={policy})", action="Deleting")
        run.actions.append(
            Delete(
                run.key,
                uid=run.uid,
                propagation="Foreground" if policy == "DeleteForeground" else None,
                why=f"expired, shutdownPolicy {policy}",
            )
        )
        return Plan(actions=(*run.actions, *run.after), reason="expired: deleting the claim")
    if sandbox is None:
        # Nothing left and nothing wrong: the binding goes, as upstream clears it (§3.7).
        return run.finish(
            None,
            ClaimProblem("ClaimExpired", EXPIRED_MESSAGE, keeps_binding=False),
            reason="expired; no Sandbox left",
        )
    sandbox_name = str(metadata_of(sandbox).get("name") or "")
    if not controlled_by(sandbox, claim):
        message = (
            "Claim expired. sandbox not owned by this claim: sandbox "
            f"{go_quote(sandbox_name)} is not owned by claim {go_quote(obs.name)}; "
            "deletion skipped."
        )
        return run.finish(
            None,
            ClaimProblem("ClaimExpired", message, keeps_binding=False),
            reason="expired; the Sandbox is not the claim's",
        )
    if not metadata_of(sandbox).get("deletionTimestamp"):
        run.actions.append(
            Delete(
                ObjectKey("Sandbox", obs.namespace, sandbox_name),
                uid=str(metadata_of(sandbox).get("uid") or "") or None,
                why="expired, shutdownPolicy Retain: the Sandbox goes, the claim stays",
            )
        )
    return run.finish(
        sandbox,
        ClaimProblem("ClaimExpired", EXPIRED_MESSAGE),
        reason="expired: deleting its Sandbox, keeping the claim",
    )


# -- finding or making the Sandbox ------------------------------------------------------------


def _active(run: _Pass) -> Plan:
    obs, claim = run.obs, run.claim
    bound = obs.bound
    if bound is not None and controlled_by(bound, claim):
        run.let_go(obs.offers, "the claim has its Sandbox")
        return _serve(run, bound, "bound")
    assigned, legacy = assigned_name(claim)
    if assigned == obs.name and obs.same_name is None and obs.pool is not None:
        # A cold start this claim decided on: its Sandbox is created under the claim's name.
        run.let_go(obs.offers, "the claim starts cold")
        return _cold(run, "the claim named its cold Sandbox", reference_written=True)
    if assigned and assigned != obs.name:
        plan = _assigned(run, assigned, legacy)
        if plan is not None:
            return plan
    same = obs.same_name
    if same is not None:
        if controlled_by(same, claim):
            run.let_go(obs.offers, "the claim has its Sandbox")
            return _serve(run, same, "bound")
        message = (
            f"sandbox {go_quote(obs.name)} is not controlled by claim {go_quote(obs.name)}. "
            "Please use a different claim name or delete the sandbox manually"
        )
        run.let_go(obs.offers, "the claim cannot have a Sandbox")
        return run.finish(
            None,
            ClaimProblem("ReconcilerError", f"Error seen: {message}"),
            reason=message,
            error=message,
        )
    for sandbox in obs.controlled:
        if not metadata_of(sandbox).get("deletionTimestamp"):
            run.let_go(obs.offers, "the claim has its Sandbox")
            return _serve(run, sandbox, "controlled")
    spec = claim.get("spec") or {}
    by_task = bool(spec.get("env")) and env_task_command(obs.template) is not None
    if (spec.get("env") and not by_task) or spec.get("volumeClaimTemplates"):
        run.let_go(obs.offers, "env or volumes force a cold start")
        return _cold(run, "env or volumeClaimTemplates force a cold start")
    missing = run.missing() if obs.pool is None else None  # a template is needed cold only
    if missing is not None:
        run.let_go(obs.offers, "no pool")
        return run.waiting_for(missing)
    return _warm(run)


def _assigned(run: _Pass, assigned: str, legacy: bool) -> Plan | None:
    """The claim's annotation names ``assigned``: use it, finish adopting it, or drop it.
    None: the reference was stale and is dropped in this pass; go on finding another."""
    obs, claim = run.obs, run.claim
    sandbox = obs.assigned
    if sandbox is None and not obs.assigned_gone:
        run.actions.append(
            Refresh(ObjectKey("Sandbox", obs.namespace, assigned), why="the claim names it")
        )
        return Plan(actions=tuple(run.actions), reason=f"reading {assigned}, which the claim names")
    if sandbox is not None and controlled_by(sandbox, claim):
        if legacy:
            run.actions.append(_reference_patch(run, assigned, "move the legacy label"))
        run.let_go(obs.offers, "the claim has its Sandbox")
        return _serve(run, sandbox, "assigned")
    if sandbox is not None and adoptable_by(sandbox, run.pool_name):
        # An adoption that was interrupted after the claim's write: finish it on this same
        # Sandbox (never switch candidates once the claim names one).
        offer = next((o for o in obs.offers if o.name == assigned), None)
        run.let_go([o for o in obs.offers if o is not offer], "the claim named another")
        return _adopt(run, sandbox, offer, reference_written=True)
    why = "its Sandbox is gone" if sandbox is None else "its Sandbox is not the claim's to take"
    run.actions.append(_reference_patch(run, None, why))
    return None


def _reference_patch(run: _Pass, name: str | None, why: str) -> Patch:
    annotations: Json = {ANNOTATION_SANDBOX_NAME: name}
    metadata: Json = {
        "annotations": annotations,
        "resourceVersion": str(metadata_of(run.claim).get("resourceVersion") or ""),
    }
    if labels_of(run.claim).get(LEGACY_LABEL_SANDBOX_NAME):
        metadata["labels"] = {LEGACY_LABEL_SANDBOX_NAME: None}
    return Patch(run.key, {"metadata": metadata}, why=why, on_conflict="refresh")


# -- the warm path --------------------------------------------------------------------------


def _queue(run: _Pass) -> WarmQueue:
    ref = template_ref_name(run.obs.pool or {})
    return WarmQueue(run.obs.namespace, name_hash(ref), run.pool_name)


def _verdict(run: _Pass, offer: Offer) -> str:
    """``adopt``, ``wait`` (no pod IP), ``read`` (the cache lags the entry), ``keep``
    (under Recreate without the template it cannot be checked: given back) or ``drop``."""
    sandbox = offer.sandbox
    if sandbox is None:
        return "drop" if offer.known_gone else "read"
    meta = metadata_of(sandbox)
    if str(meta.get("uid") or "") != offer.uid:
        return "drop"  # the queued incarnation is gone; its successor has its own entry
    if not adoptable_by(sandbox, run.pool_name):
        order = compare_resource_versions(
            str(meta.get("resourceVersion") or ""), offer.resource_version
        )
        return "read" if order is not None and order < 0 else "drop"
    pool_spec = (run.obs.pool or {}).get("spec") or {}
    strategy = (pool_spec.get("updateStrategy") or {}).get("type")
    template = run.obs.template
    if strategy == "Recreate":
        if template is None:
            return "keep"  # cannot tell whether it is stale: not adopted, not dropped
        if is_stale(sandbox, template, orphan=False):
            return "drop"
    if not networked(sandbox):
        # The pool queued it Ready at the entry's version: a cache older than that lags the
        # bus (the member's pod IP is on its way here), and no change of that member wakes
        # this claim, so it is read. At the entry's version or later, it lost its pod IP.
        order = compare_resource_versions(
            str(meta.get("resourceVersion") or ""), offer.resource_version
        )
        return "read" if order is not None and order < 0 else "wait"
    return "adopt"


def _claim_age(run: _Pass) -> float:
    created = parse_time(metadata_of(run.claim).get("creationTimestamp"))
    return (run.now - created).total_seconds() if created is not None else 0.0


def _warm(run: _Pass) -> Plan:
    obs = run.obs
    waiting: list[Offer] = []
    kept: list[Offer] = []
    for index, offer in enumerate(obs.offers):
        verdict = _verdict(run, offer)
        if verdict == "adopt" and offer.sandbox is not None:
            run.let_go([*kept, *waiting, *obs.offers[index + 1 :]], "one is enough")
            return _adopt(run, offer.sandbox, offer, reference_written=False)
        if verdict == "read":
            run.actions.append(
                Refresh(
                    ObjectKey("Sandbox", obs.namespace, offer.name),
                    why="the bus has not shown this queued Sandbox yet",
                )
            )
            return Plan(
                actions=tuple(run.actions), reason=f"reading {offer.name}, offered by the queue"
            )
        if verdict == "wait":
            waiting.append(offer)
        elif verdict == "keep":
            kept.append(offer)
        else:
            run.drop(offer, "not adoptable any more (gone, adopted, or replaced)")
    if kept:
        # Every member of this queue is as uncheckable; take none, report the template.
        for offer in kept:
            run.actions.append(
                Release(WARM_SOURCE, offer.token, run.key, why="its template is missing")
            )
        run.let_go(waiting, "its template is missing")
        return _cold(run, "the pool's template is missing; its members cannot be checked")
    if waiting:
        left = obs.settings.pod_ip_grace - _claim_age(run)
        if left > 0:
            return Plan(
                actions=tuple(run.actions),
                reason=f"waiting for a pod IP of {waiting[0].name}",
                requeue_after=min(obs.settings.pending_retry, left),
            )
        run.let_go(waiting, "no pod IP within the grace; starting cold")
        return _cold(run, "the offered sandbox has no pod IP; starting cold")
    queue = _queue(run)
    run.actions.append(
        Take(queue, run.key, why=f"adopt from pool {queue.pool}; cold start if it is empty")
    )
    return _cold(run, f"take from the queue of pool {queue.pool}; if it is empty, start cold")


def _adopt(
    run: _Pass, sandbox: Mapping[str, Any], offer: Offer | None, *, reference_written: bool
) -> Plan:
    obs, claim = run.obs, run.claim
    name = str(metadata_of(sandbox).get("name") or "")
    template = obs.template
    ref = (
        template_ref_name(obs.pool)
        if obs.pool is not None
        else str(
            (metadata_of(sandbox).get("annotations") or {}).get(
                "agents.x-k8s.io/sandbox-template-ref"
            )
            or ""
        )
    )
    try:
        patch = adoption_patch(sandbox, claim, template, ref)
    except ClaimInputError as error:
        if offer is not None:
            run.let_go([offer], "the claim's metadata conflicts with the template")
        return run.finish(
            None,
            ClaimProblem(error.reason, f"Error seen: {error.message}"),
            reason=error.message,
            error=error.message,
        )
    if not reference_written:
        run.actions.append(_name_sandbox(run, name, f"name {name} as the claim's before taking it"))
    sandbox_key = ObjectKey("Sandbox", obs.namespace, name)
    run.actions.append(
        Patch(
            sandbox_key, patch, why="adopt: the claim becomes its controller", on_conflict="refresh"
        )
    )
    adopted = _applied(sandbox, patch)
    run.actions.append(
        creation_record(
            run.key, claim, adopted, warm_pool=run.pool_name, template=template_name(adopted)
        )
    )
    run.event("SandboxAdopted", f'Adopted warm pool Sandbox "{name}"')
    if offer is not None:
        run.after.append(Ack(WARM_SOURCE, offer.token, run.key, why="adopted: the entry is done"))
    problem = _env_delivery(run, adopted)
    age_ms = _claim_age(run) * 1000
    return run.finish(
        adopted,
        problem,
        reason=f"adopted {name} from pool {run.pool_name}, {age_ms:.0f} ms after the claim "
        "was created",
        requeue_after=ENV_TASK_RETRY if problem is not None else None,
    )


def _env_delivery(run: _Pass, sandbox: Mapping[str, Any]) -> ClaimProblem | None:
    """Hand the claim's env to the sandbox's task executor, when its template opts in
    (:mod:`.envtask`); the problem to report until the executor holds the task."""
    obs, claim = run.obs, run.claim
    spec = claim.get("spec") or {}
    command = env_task_command(obs.template)
    if command is None or not spec.get("env") or spec.get("volumeClaimTemplates"):
        return None
    if obs.memo is not None and obs.memo.env_delivered:
        return None
    task = env_task(claim, command)
    name = str(metadata_of(sandbox).get("name") or "")
    report = obs.reports.get(name)
    if lists_task(report, task["name"]):
        run.delivered = True
        return None
    ip = sandbox_ip(sandbox)
    fresh = report is not None and (run.now - report.at).total_seconds() < ENV_TASK_RETRY
    if ip and not fresh:
        run.actions.append(
            SyncTasks(run.key, name, ip, (task,), why="start its workload with the claim's env")
        )
    message = "delivering the claim's env to its sandbox's task executor"
    if report is not None and report.error:
        message += f": {report.error}"
    return ClaimProblem("DeliveringEnv", message)


def _name_sandbox(run: _Pass, name: str, why: str) -> Patch:
    """The claim's write that names its Sandbox, conditional on the claim's resourceVersion."""
    annotations: Json = {ANNOTATION_SANDBOX_NAME: name, **run.first_observed()}
    metadata: Json = {
        "annotations": annotations,
        "resourceVersion": str(metadata_of(run.claim).get("resourceVersion") or ""),
    }
    return Patch(run.key, {"metadata": metadata}, why=why, on_conflict="refresh")


def _applied(sandbox: Mapping[str, Any], patch: Json) -> Json:
    """``sandbox`` as it is after ``patch`` (for the status of the same pass)."""
    applied: Json = apply_merge_patch(sandbox, patch)
    return applied


# -- the cold path --------------------------------------------------------------------------


def _cold(run: _Pass, why: str, *, reference_written: bool = False) -> Plan:
    obs = run.obs
    missing = run.missing()
    if missing is not None:
        return run.waiting_for(missing)
    assert obs.pool is not None and obs.template is not None  # what missing() checked
    try:
        body = cold_sandbox(run.claim, obs.pool, obs.template)
    except ClaimInputError as error:
        message = f"Error seen: {error.message}" if error.backoff else error.message
        return run.finish(
            None,
            ClaimProblem(error.reason, message),
            reason=error.message,
            error=error.message if error.backoff else None,
        )
    if not reference_written:
        # Named first, under the claim's resourceVersion, like a warm candidate: a replica
        # that adopts for the same claim at the same moment fails its precondition (or this
        # one does), so a claim never ends up with a warm and a cold Sandbox.
        run.actions.append(_name_sandbox(run, obs.name, "start cold, under the claim's name"))
    run.actions.append(Create(body, why=why))
    run.actions.append(
        creation_record(
            run.key,
            run.claim,
            body,
            warm_pool=run.pool_name,
            template=template_ref_name(obs.pool),
        )
    )
    run.event("SandboxProvisioned", f'Created Sandbox "{obs.name}"')
    return run.finish(body, None, reason=why)


# -- a claim with its Sandbox ---------------------------------------------------------------


def _serve(run: _Pass, sandbox: Mapping[str, Any], how: str) -> Plan:
    """The claim has ``sandbox``: keep its labels and pod metadata in step, report it."""
    obs, claim = run.obs, run.claim
    name = str(metadata_of(sandbox).get("name") or "")
    sandbox_key = ObjectKey("Sandbox", obs.namespace, name)
    labels = labels_of(sandbox)
    problem: ClaimProblem | None = None
    changes: Json = {}
    if not labels.get(LABEL_LAUNCH_TYPE):
        warm = assigned_name(claim)[0] == name or name != obs.name
        changes.setdefault("metadata", {}).setdefault("labels", {})[LABEL_LAUNCH_TYPE] = (
            LAUNCH_TYPE_WARM if warm else LAUNCH_TYPE_COLD
        )
    has_extra = bool((claim.get("spec") or {}).get("additionalPodMetadata"))
    if (
        obs.template is not None
        and obs.pool is not None
        and not metadata_of(sandbox).get("deletionTimestamp")
    ):
        sandbox_labels: Json = {}
        ref_hash = name_hash(template_ref_name(obs.pool))
        if labels.get(LABEL_SANDBOX_TEMPLATE_REF_HASH) != ref_hash:
            sandbox_labels[LABEL_SANDBOX_TEMPLATE_REF_HASH] = ref_hash
        created_by = labels_of(claim).get(LABEL_CREATED_BY)
        if created_by and labels.get(LABEL_CREATED_BY) != created_by:
            sandbox_labels[LABEL_CREATED_BY] = str(created_by)
        elif not created_by and LABEL_CREATED_BY in labels:
            sandbox_labels[LABEL_CREATED_BY] = None
        if sandbox_labels:
            changes.setdefault("metadata", {}).setdefault("labels", {}).update(sandbox_labels)
        try:
            desired = claim_pod_metadata(obs.template, claim, template_ref_name(obs.pool))
        except ClaimInputError as error:
            problem = ClaimProblem(error.reason, f"Error seen: {error.message}")
        else:
            current = ((sandbox.get("spec") or {}).get("podTemplate") or {}).get("metadata") or {}
            diff = merge_patch(current, desired)
            if diff:
                changes.setdefault("spec", {})["podTemplate"] = {"metadata": diff}
    elif has_extra:
        problem = run.missing()
    if changes:
        run.actions.append(
            Patch(sandbox_key, changes, why="keep the claim's metadata on its Sandbox")
        )
    retry = obs.settings.missing_retry if problem is not None else None
    if problem is None and not metadata_of(sandbox).get("deletionTimestamp"):
        problem = _env_delivery(run, sandbox)
        retry = ENV_TASK_RETRY if problem is not None else None
    return run.finish(
        sandbox, problem, reason=f"has its Sandbox {name} ({how})", requeue_after=retry
    )
