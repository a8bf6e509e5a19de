"""The SandboxClaim controller's decisions (docs/agent-sandbox.md §3.3-3.7), through
``plan_claim``, mirroring upstream's claim tests (§7.2: sandboxclaim_controller_test.go,
sandboxclaim_conditions_test.go, sandboxclaim_pod_exclusivity_test.go).

Upstream reconciles against a fake client and looks at the objects afterwards; here a test
builds the observation the claim worker would hand the planner (:func:`world.observe`, the
real ``observe_claim`` on a real cache) and looks at what the plan would do, or carries plans
out against :class:`world.Cluster` when the behaviour spans passes. Where our design differs
on purpose the test asserts our behaviour and its docstring says how and why. The main ones:

- The warm queue is a JetStream work queue that the pool fills with members it saw Ready; a
  claim takes one entry at a time (``Take``), is planned again with the entry held for it,
  adopts it, and acks it after the writes. So "the oldest Ready candidate" is "the entry the
  queue hands out first", and a candidate that lost its pod IP after it was queued is held up
  to the 2 s grace, then given back while the claim starts cold.
- Conflicts (409), a gone object (404) and AlreadyExists end the pass, and the claim is planned
  again at once on the fresh object (the runtime's ``on_conflict="refresh"``), instead of
  upstream's in-pass ``RetryOnConflict``; so the reasons ``AdoptionConflict`` and
  ``SandboxCreatePending`` are never written.
- Events are ``Create`` actions of events.k8s.io/v1 Events, after the status write.

Mirrored elsewhere: the metrics and the first-ready annotation in test_metrics.py
(TestRecordCreationLatencyMetric, TestRecordCreationLatencyMetric_ClaimFirstReadyAnnotation,
TestClientClaimLatencyMetric, TestSandboxClaimCreationMetric, TestGetLaunchType,
TestReconcilePropagatesAnnotationPatchError, TestDisableFlagsWarmAdoptionClaimWrites and the
histogram half of TestSandboxClaimStaleStatusPatchConflictDroppedWithoutMetrics).

Not applicable here (nothing of it is built, or it is not the planner's):

- tracing: TestReconcile_TracingNormalization;
- the in-memory observed-time map (we stamp ``controller-first-observed-at`` on the claim
  instead): TestSandboxClaimTimingPredicates, TestObservedTimeMapCompareAndDeletePreservesNewerUID,
  TestGetOrRecordObservedTime, TestSandboxClaimReconcileCleanup;
- the legacy per-claim NetworkPolicy cleanup (the claim worker neither watches nor reads
  NetworkPolicies): the three NetworkPolicy sub-cases of TestSandboxClaimReconcile ("Existing
  NetworkPolicy is safely deleted ...", "Deprecated per-claim NetworkPolicy ...", "User-created
  NetworkPolicy with reserved name ..."); the TemplateNotFound half of the first is mirrored;
- NodeSpread candidate selection is the taker's, not the planner's (which entry a Take gets):
  TestSandboxClaimAdoptionStrategy ("picks sandbox on the node with most remaining ...") is
  mirrored in test_spread.py;
- Go context cancellation (the planner is pure; the runtime lets a cancellation through):
  TestSandboxClaimAdoptionCleanupCancellationPropagates,
  TestSandboxClaimAdoptionResolveCancellationPropagates,
  TestSandboxClaimAdoptionResolveConflictThenCancellationPropagates;
- the watches' mapping and predicates, which are the worker's ``ClaimWakes``
  (services/claim/worker.py), not the planner: TestMapWarmPoolToClaims,
  TestWarmPoolMapWatchPredicate, TestMapSandboxTemplateToClaims, TestSandboxTemplateCreatePredicate,
  TestSandboxStatusRelevantChange;
- the queue feeder that drops a deleted Sandbox's key is the pool worker's member planner
  (services/pool), not the claim's: TestSandboxEventHandler_Delete_RemovesGhostPods (its claim
  half, a ghost entry is dropped and never adopted, is mirrored).
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from api.keys import (
    ANNOTATION_CLAIM_FIRST_READY_AT,
    ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT,
    ANNOTATION_POD_NAME,
    ANNOTATION_SAFE_TO_EVICT,
    ANNOTATION_SANDBOX_NAME,
    ANNOTATION_TRACE_CONTEXT,
    LABEL_CLAIM_UID,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LABEL_SANDBOX_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LABEL_WARM_POOL_SANDBOX,
    LEGACY_LABEL_SANDBOX_NAME,
    name_hash,
)
from api.objects import Json
from events.envelope import ObjectKey
from services.claim.core.observation import ClaimSettings
from services.claim.core.plan import plan_claim
from services.claim.core.queues import QueueMemo, QueueObservation, plan_queue
from services.domain.agentsandbox.hashes import blueprint_hash
from services.domain.agentsandbox.policy_failure import ANNOTATION_NETWORK_POLICY_FAILURE
from services.domain.agentsandbox.secure_defaults import apply_secure_defaults
from services.domain.agentsandbox.warmqueue import DropQueue, Take, WarmQueue
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import Ack, Create, Delete, Patch, Plan, Refresh, Release
from services.runtime.reconcile.failures import describe_failure
from tests.support.fakeapi import apply_merge_patch
from tests.unit.claim.world import (
    CLAIM,
    CLAIM_UID,
    IP,
    NOW,
    NS,
    POOL,
    TEMPLATE,
    Cluster,
    actions_of,
    assigned,
    bound_name,
    claim,
    claim_controller,
    claim_patches,
    cold,
    condition,
    condition_in,
    entry,
    event_reasons,
    finished_of,
    member,
    observe,
    owned_by,
    pool,
    ready_of,
    reason_in,
    sandbox_creates,
    sandbox_patches,
    stamp,
    status_written,
    template,
    world,
)

REF_HASH = name_hash(TEMPLATE)
NOT_READY = {"status": "False", "reason": "SandboxNotReady", "message": "Sandbox is not ready"}
SANDBOX_READY = condition(reason="SandboxReady", message="Sandbox is ready")
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def plan_of(*objects: Json, **kwargs: Any) -> Plan:
    return plan_claim(observe(*objects, **kwargs), NOW)


def after(obj: Json, patch: Json) -> Json:
    """``obj`` as the API server stores it after the merge ``patch``."""
    body = copy.deepcopy(patch)
    (body.get("metadata") or {}).pop("resourceVersion", None)
    result: Json = apply_merge_patch(copy.deepcopy(obj), body)
    return result


def adopted(plan: Plan, sandbox: Json) -> Json:
    """``sandbox`` after the plan's one patch of it."""
    (patch,) = sandbox_patches(plan, sandbox["metadata"]["name"])
    return after(sandbox, patch.patch)


def must_status(plan: Plan) -> Json:
    """The claim status the plan writes, which it must write."""
    status = status_written(plan)
    assert status is not None, plan
    return status


def reason_of(plan: Plan) -> str | None:
    ready = ready_of(status_written(plan))
    return None if ready is None else str(ready["reason"])


def pick(cond: Json | None, *fields: str) -> dict[str, Any]:
    assert cond is not None
    return {name: cond.get(name) for name in fields}


def pod_spec(body: Json) -> Json:
    spec: Json = body["spec"]["podTemplate"]["spec"]
    return spec


def pod_metadata(body: Json) -> Json:
    meta: Json = body["spec"]["podTemplate"].get("metadata") or {}
    return meta


def takes(plan: Plan) -> bool:
    return bool(actions_of(plan, Take))


def released(plan: Plan) -> list[str]:
    return [a.token for a in actions_of(plan, Release)]


def acked(plan: Plan) -> list[str]:
    return [a.token for a in actions_of(plan, Ack)]


def index_of(plan: Plan, action: Any) -> int:
    return next(i for i, a in enumerate(plan.actions) if a is action)


# -- TestSandboxClaimReconcile ----------------------------------------------------------------


def test_cold_start_when_a_claim_is_made() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox is created when a claim is made): the Sandbox
    is named after the claim, carries the template's pod spec with the secure defaults
    (automount off, DNS None + public resolvers) and the template-ref hash, and the claim reads
    Ready=False/SandboxNotReady. Ours first takes from the pool's queue; the cold start runs
    only when the take finds it empty (the actions after the Take)."""
    plan = plan_of(claim(), pool(), template())
    (body,) = sandbox_creates(plan)
    take = actions_of(plan, Take)[0]
    assert index_of(plan, take) < index_of(plan, actions_of(plan, Create)[0])
    assert body["metadata"]["name"] == CLAIM
    assert body["metadata"]["ownerReferences"][0]["uid"] == CLAIM_UID
    assert pod_spec(body) == {
        "containers": [{"name": "test-container", "image": "test-image"}],
        "automountServiceAccountToken": False,
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": ["8.8.8.8", "1.1.1.1"]},
    }
    assert body["metadata"]["annotations"]["agents.x-k8s.io/sandbox-template-ref"] == TEMPLATE
    assert pod_metadata(body)["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] == REF_HASH
    status = must_status(plan)
    assert [c["type"] for c in status["conditions"]] == ["Ready"]
    assert pick(ready_of(status), "status", "reason", "message") == NOT_READY
    assert bound_name(status) == CLAIM
    assert plan.error is None
    assert plan.requeue_after is None


def test_a_cold_sandbox_the_api_refuses_is_reported_on_the_claim_until_it_is_created() -> None:
    """The API server refused the claim's cold Sandbox (a quota, a policy): the next pass says
    so on the claim (upstream's ReconcilerError, with the server's words) before it tries
    again, so that a refusal again cannot keep the claim silent. A passing failure (a
    Conflict) says nothing; once the Sandbox exists, nothing is reported either."""
    forbidden = KubeError(403, "Forbidden", 'sandboxes "test-claim" is forbidden: exceeded quota')
    refused = describe_failure("create", ObjectKey("Sandbox", NS, CLAIM), str(forbidden))
    plan = plan_of(claim(), pool(), template(), last_error=refused)
    assert isinstance(plan.actions[0], Patch) and plan.actions[0].subresource == "status"
    assert pick(ready_of(must_status(plan)), "status", "reason", "message") == {
        "status": "False",
        "reason": "ReconcilerError",
        "message": f"Error seen: {forbidden}",
    }
    assert sandbox_creates(plan), "and it tries again"
    conflict = describe_failure("create", ObjectKey("Sandbox", NS, CLAIM), "Conflict (409): x")
    passing = plan_of(claim(), pool(), template(), last_error=conflict)
    assert pick(ready_of(must_status(passing)), "status", "reason", "message") == NOT_READY
    other = describe_failure("create", ObjectKey("Sandbox", NS, "other"), str(forbidden))
    unrelated = plan_of(claim(), pool(), template(), last_error=other)
    assert pick(ready_of(must_status(unrelated)), "status", "reason", "message") == NOT_READY


def test_a_cold_sandbox_create_that_keeps_failing_is_reported_once_it_persists() -> None:
    """A 500 (or a Conflict) says nothing at first; once the runtime says the claim's passes
    have failed in a row for a while, the claim says ReconcilerError with the server's words,
    and that it keeps failing."""
    broken = KubeError(500, "InternalError", "Internal error occurred: etcd is unhappy")
    failing = describe_failure("create", ObjectKey("Sandbox", NS, CLAIM), str(broken))
    quiet = plan_of(claim(), pool(), template(), last_error=failing)
    assert pick(ready_of(must_status(quiet)), "status", "reason", "message") == NOT_READY
    plan = plan_of(claim(), pool(), template(), last_error=failing, failure_persists=True)
    assert isinstance(plan.actions[0], Patch) and plan.actions[0].subresource == "status"
    assert pick(ready_of(must_status(plan)), "status", "reason", "message") == {
        "status": "False",
        "reason": "ReconcilerError",
        "message": f"Error seen: {broken} (it keeps failing; retried with backoff)",
    }
    assert sandbox_creates(plan), "and it tries again"


def test_cold_start_keeps_an_explicit_automount_token() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox is created with automount token enabled)."""
    tpl = template(
        podTemplate={
            "spec": {
                "automountServiceAccountToken": True,
                "containers": [{"name": "test-container", "image": "test-image"}],
            }
        }
    )
    (body,) = sandbox_creates(plan_of(claim(), pool(), tpl))
    assert pod_spec(body)["automountServiceAccountToken"] is True


def test_template_not_found() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox is not created when template is not found;
    and the TemplateNotFound half of "Existing NetworkPolicy is safely deleted ... if
    SandboxTemplate is suddenly deleted"): no Sandbox, Ready=False/TemplateNotFound, no error
    (no backoff), a look again within a minute."""
    plan = plan_of(claim(), pool())
    assert sandbox_creates(plan) == []
    ready = ready_of(status_written(plan))
    assert pick(ready, "status", "reason", "message") == {
        "status": "False",
        "reason": "TemplateNotFound",
        "message": 'SandboxTemplate "test-template" not found',
    }
    assert plan.error is None
    assert plan.requeue_after == 60.0


def test_warm_pool_not_found() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox is not created when warmpool is not found):
    Ready=False/WarmPoolNotFound, no error, a look again within a minute; nothing is taken."""
    plan = plan_of(claim())
    assert sandbox_creates(plan) == []
    assert not takes(plan)
    assert pick(ready_of(status_written(plan)), "status", "reason", "message") == {
        "status": "False",
        "reason": "WarmPoolNotFound",
        "message": 'SandboxWarmPool "test-pool" not found',
    }
    assert plan.error is None
    assert plan.requeue_after == 60.0


def test_existing_sandbox_not_controlled_by_the_claim_is_an_error() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox exists but is not controlled by claim):
    ReconcilerError with upstream's message, an error (backoff), and the stranger untouched."""
    stranger = cold(claim())
    stranger["metadata"].pop("ownerReferences")
    plan = plan_of(claim(), pool(), template(), stranger)
    assert sandbox_creates(plan) == []
    assert sandbox_patches(plan) == []
    assert not takes(plan)
    assert pick(ready_of(status_written(plan)), "status", "reason", "message") == {
        "status": "False",
        "reason": "ReconcilerError",
        "message": 'Error seen: sandbox "test-claim" is not controlled by claim "test-claim". '
        "Please use a different claim name or delete the sandbox manually",
    }
    assert plan.error is not None


def test_existing_controlled_sandbox_is_used_and_labelled() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox exists and is controlled by claim): no new
    Sandbox, Ready=False/SandboxNotReady, and the Sandbox gets the template-ref hash label (and
    its launch-type, cold: it is named like the claim)."""
    mine = cold(claim())
    mine["metadata"]["labels"] = {}
    plan = plan_of(claim(), pool(), template(), mine)
    assert sandbox_creates(plan) == []
    assert not takes(plan)
    labels = adopted(plan, mine)["metadata"]["labels"]
    assert labels[LABEL_SANDBOX_TEMPLATE_REF_HASH] == REF_HASH
    assert labels[LABEL_LAUNCH_TYPE] == "cold"
    assert pick(ready_of(status_written(plan)), "status", "reason", "message") == NOT_READY


@pytest.mark.parametrize("with_template", [True, False], ids=["template", "template missing"])
def test_ready_sandbox_is_forwarded(with_template: bool) -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox is ready; sandbox exists but template is not
    found): the Sandbox's Ready is the claim's, with its pod IPs; a missing template does not
    matter on the fast path."""
    mine = cold(claim(), conditions=[SANDBOX_READY], ips=["10.244.0.6"])
    objects = [claim(), pool(), mine] + ([template()] if with_template else [])
    plan = plan_of(*objects)
    status = must_status(plan)
    assert pick(ready_of(status), "status", "reason", "message") == {
        "status": "True",
        "reason": "SandboxReady",
        "message": "Sandbox is ready",
    }
    assert status["sandbox"] == {"name": CLAIM, "podIPs": ["10.244.0.6"]}
    assert plan.error is None
    assert plan.requeue_after is None


POLICY_REFUSED = (
    "the API server refuses NetworkPolicy test-template-network-policy (Invalid, 422): "
    "NetworkPolicy.networking.k8s.io is invalid: spec.egress[0].to[0].ipBlock.cidr: Invalid"
)


def test_a_template_whose_network_policy_is_refused_is_said_on_its_claims() -> None:
    """sandbus (issue #32): the template's reconciler says on the template why its
    NetworkPolicy is not written; the claim reports it, NetworkPolicyFailure /
    NetworkPolicyNotApplied beside its Ready (which stays the Sandbox's), with a Warning Event
    when it appears, and drops it once the template no longer says so."""
    tpl = template()
    tpl["metadata"]["annotations"] = {ANNOTATION_NETWORK_POLICY_FAILURE: POLICY_REFUSED}
    mine = cold(claim(), conditions=[SANDBOX_READY], ips=["10.244.0.6"])
    plan = plan_of(claim(), pool(), tpl, mine)
    status = must_status(plan)
    assert pick(ready_of(status), "status", "reason") == {
        "status": "True",
        "reason": "SandboxReady",
    }
    message = (
        f'SandboxTemplate "{TEMPLATE}" cannot have its NetworkPolicy: {POLICY_REFUSED}. Its '
        "sandboxes run without the policy meanwhile; fix the template's spec.networkPolicy (or "
        "what refuses it)"
    )
    found = condition_in(status, "NetworkPolicyFailure")
    assert pick(found, "status", "reason", "message") == {
        "status": "True",
        "reason": "NetworkPolicyNotApplied",
        "message": message,
    }
    (warning,) = [a.body for a in actions_of(plan, Create) if a.body.get("kind") == "Event"]
    assert (warning["type"], warning["reason"]) == ("Warning", "NetworkPolicyNotApplied")
    assert warning["note"] == f"NetworkPolicyFailure: {message}"

    reported = claim(status=status)
    again = plan_of(reported, pool(), tpl, mine)
    assert status_written(again) is None and event_reasons(again) == [], "said once"
    cleared = must_status(plan_of(reported, pool(), template(), mine))
    assert condition_in(cleared, "NetworkPolicyFailure") is None
    assert ready_of(cleared) == ready_of(status)


def test_custom_network_policy_leaves_dns_alone() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox is created with network policy enabled)."""
    tpl = template(networkPolicy={"egress": [{"to": [{"podSelector": {}}]}]})
    (body,) = sandbox_creates(plan_of(claim(), pool(), tpl))
    assert "dnsPolicy" not in pod_spec(body)
    assert "dnsConfig" not in pod_spec(body)


def test_default_secure_policy_isolates_dns() -> None:
    """Mirrors TestSandboxClaimReconcile (Scenario A: Creates Default Secure Policy (Strict
    Isolation) when template has none)."""
    (body,) = sandbox_creates(plan_of(claim(), pool(), template()))
    assert body["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] == REF_HASH
    assert pod_spec(body)["dnsPolicy"] == "None"
    assert pod_spec(body)["dnsConfig"]["nameservers"] == ["8.8.8.8", "1.1.1.1"]


def test_trace_context_travels_to_the_sandbox() -> None:
    """Mirrors TestSandboxClaimReconcile (trace context is propagated from claim to sandbox)."""
    traced = claim(annotations={ANNOTATION_TRACE_CONTEXT: TRACE})
    (body,) = sandbox_creates(plan_of(traced, pool(), template()))
    assert body["metadata"]["annotations"][ANNOTATION_TRACE_CONTEXT] == TRACE


def test_additional_pod_metadata_reaches_the_sandbox() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox is created with additional metadata from
    claim)."""
    extra = {
        "labels": {"sandbox.users.io/user-label": "user-value"},
        "annotations": {"user-annotation": "user-value"},
    }
    (body,) = sandbox_creates(plan_of(claim(additionalPodMetadata=extra), pool(), template()))
    assert pod_metadata(body)["labels"]["sandbox.users.io/user-label"] == "user-value"
    assert pod_metadata(body)["annotations"]["user-annotation"] == "user-value"


@pytest.mark.parametrize(
    ("labels", "with_pool"),
    [
        pytest.param({"label-without-domain": "value"}, True, id="label without domain"),
        pytest.param({"sandbox.users.io/user-label": "a" * 64}, True, id="too long label value"),
        pytest.param({"sandbox.users.io/user-label": "invalid@value"}, False, id="bad pattern"),
        pytest.param({"sandbox.users.io/invalid@key": "value"}, True, id="invalid label key"),
        pytest.param({"kubernetes.io/restricted": "value"}, True, id="restricted domain"),
    ],
)
def test_invalid_additional_metadata_is_refused(labels: dict[str, str], with_pool: bool) -> None:
    """Mirrors TestSandboxClaimReconcile (claim with label without domain / too long label value
    / invalid label pattern (no pool even exists) / invalid label key / restricted domain label
    is rejected): Ready=False/InvalidMetadata, nothing created or taken, no backoff."""
    objects = [claim(additionalPodMetadata={"labels": labels}), template()]
    plan = plan_of(*objects, *([pool()] if with_pool else []))
    assert reason_of(plan) == "InvalidMetadata"
    assert sandbox_creates(plan) == []
    assert not takes(plan)
    assert plan.error is None


def test_spoofed_router_label_is_refused() -> None:
    """Mirrors TestSandboxClaimReconcile (claim with spoofed router app label is rejected)."""
    spoofed = claim(additionalPodMetadata={"labels": {"app": "sandbox-router"}})
    ready = ready_of(status_written(plan_of(spoofed, pool(), template())))
    assert pick(ready, "reason", "message") == {
        "reason": "InvalidMetadata",
        "message": 'invalid additionalPodMetadata: failed to validate label "app": restricted '
        'system label value: "app"="sandbox-router" is not allowed in AdditionalPodMetadata',
    }


def test_safe_to_evict_annotation_is_accepted() -> None:
    """Mirrors TestSandboxClaimReconcile (claim with safe-to-evict annotation is accepted)."""
    asking = claim(additionalPodMetadata={"annotations": {ANNOTATION_SAFE_TO_EVICT: "false"}})
    (body,) = sandbox_creates(plan_of(asking, pool(), template()))
    assert pod_metadata(body)["annotations"][ANNOTATION_SAFE_TO_EVICT] == "false"


def test_custom_allowed_label_domain_is_accepted() -> None:
    """Mirrors TestSandboxClaimReconcile (claim with custom allowed domain is accepted)."""
    settings = ClaimSettings(allowed_label_domains=("sandbox.users.io", "custom.company.com"))
    asking = claim(additionalPodMetadata={"labels": {"custom.company.com/my-label": "my-value"}})
    (body,) = sandbox_creates(plan_of(asking, pool(), template(), settings=settings))
    assert pod_metadata(body)["labels"]["custom.company.com/my-label"] == "my-value"


def _container(name: str, *env: tuple[str, str], env_from: bool = False) -> Json:
    body: Json = {"name": name, "image": f"{name}-image"}
    if env:
        body["env"] = [{"name": n, "value": v} for n, v in env]
    if env_from:
        body["envFrom"] = [{"configMapRef": {"name": "some-configmap"}}]
    return body


def _env_template(
    policy: str, containers: list[Json], init: list[Json] | None = None, **spec: Any
) -> Json:
    pod_spec: Json = {"containers": containers}
    if init:
        pod_spec["initContainers"] = init
    if policy:
        spec["envVarsInjectionPolicy"] = policy
    return template(podTemplate={"spec": pod_spec}, **spec)


def _var(name: str, value: str = "claim-value", target: str | None = None) -> Json:
    var: Json = {"name": name, "value": value}
    if target:
        var["containerName"] = target
    return var


EXISTING = _container("test-container", ("EXISTING_VAR", "template-value"))
NOT_ALLOWED = (
    "environment variable injection rejected: environment variable injection is not allowed by "
    "the template policy"
)


def _envfrom_message(container: str) -> str:
    return (
        f'environment variable injection rejected: container "{container}" uses EnvFrom '
        "sources; Allowed policy cannot safely prevent overriding EnvFrom-provided variables"
    )


@pytest.mark.parametrize(
    ("tpl", "env", "expected"),
    [
        pytest.param(
            _env_template("Overrides", [EXISTING]),
            [_var("NEW_VAR")],
            {"containers": [[("EXISTING_VAR", "template-value"), ("NEW_VAR", "claim-value")]]},
            id="injected (Overrides)",
        ),
        pytest.param(
            _env_template("Allowed", [EXISTING]),
            [_var("NEW_VAR_ALLOWED")],
            {
                "containers": [
                    [("EXISTING_VAR", "template-value"), ("NEW_VAR_ALLOWED", "claim-value")]
                ]
            },
            id="new variable (Allowed)",
        ),
        pytest.param(
            _env_template(
                "Allowed",
                [_container("app-container")],
                init=[_container("init-setup", env_from=True)],
            ),
            [_var("NEW_VAR_ALLOWED", target="app-container")],
            {"containers": [[("NEW_VAR_ALLOWED", "claim-value")]]},
            id="container without EnvFrom next to one with it",
        ),
        pytest.param(
            _env_template("Allowed", [_container("test-container", env_from=True)]),
            [],
            {"containers": [[]]},
            id="EnvFrom without injection",
        ),
        pytest.param(
            _env_template("Overrides", [EXISTING]),
            [_var("EXISTING_VAR", "claim-override-value")],
            {"containers": [[("EXISTING_VAR", "claim-override-value")]]},
            id="override (Overrides)",
        ),
        pytest.param(
            _env_template(
                "Overrides", [_container("app-container"), _container("sidecar-container")]
            ),
            [_var("APP_ENV", "injected", target="app-container")],
            {"containers": [[("APP_ENV", "injected")], []]},
            id="specific container",
        ),
        pytest.param(
            _env_template(
                "Overrides", [_container("app-container")], init=[_container("init-setup")]
            ),
            [_var("INIT_ENV", "injected-init", target="init-setup")],
            {"initContainers": [[("INIT_ENV", "injected-init")]], "containers": [[]]},
            id="init container",
        ),
    ],
)
def test_env_is_injected_on_the_cold_path(
    tpl: Json, env: list[Json], expected: dict[str, list[list[tuple[str, str]]]]
) -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox is created with injected environment variables
    from claim; ... new environment variable when policy is Allowed; ... to a container without
    EnvFrom even if another container has EnvFrom; ... template has EnvFrom but claim does not
    inject any; ... overridden environment variable when template allows override; ... into
    specific container; ... into init container)."""
    plan = plan_of(claim(env=env) if env else claim(), pool(), tpl)
    (body,) = sandbox_creates(plan)
    for field, per_container in expected.items():
        got = [[(v["name"], v["value"]) for v in c.get("env") or ()] for c in pod_spec(body)[field]]
        assert got == per_container
    assert pick(ready_of(status_written(plan)), "status", "reason", "message") == NOT_READY


@pytest.mark.parametrize(
    ("tpl", "env", "reason", "message", "backoff"),
    [
        pytest.param(
            _env_template("Allowed", [EXISTING]),
            [_var("EXISTING_VAR", "claim-override-value")],
            "ReconcilerError",
            "Error seen: environment variable override is not allowed by the template policy "
            'for variable "EXISTING_VAR"',
            True,
            id="override under Allowed",
        ),
        pytest.param(
            _env_template("", [EXISTING]),
            [_var("EXISTING_VAR", "claim-override-value")],
            "EnvVarsInjectionRejected",
            NOT_ALLOWED,
            False,
            id="conflict without override",
        ),
        pytest.param(
            _env_template("", [_container("test-container")]),
            [_var("NEW_VAR")],
            "EnvVarsInjectionRejected",
            NOT_ALLOWED,
            False,
            id="new variable disallowed",
        ),
        pytest.param(
            _env_template("Allowed", [_container("test-container", env_from=True)]),
            [_var("NEW_VAR_ALLOWED")],
            "EnvVarsInjectionRejected",
            _envfrom_message("test-container"),
            False,
            id="EnvFrom under Allowed",
        ),
        pytest.param(
            _env_template(
                "Allowed",
                [_container("app-container")],
                init=[_container("init-setup", env_from=True)],
            ),
            [_var("NEW_VAR_ALLOWED", target="init-setup")],
            "EnvVarsInjectionRejected",
            _envfrom_message("init-setup"),
            False,
            id="EnvFrom in init container under Allowed",
        ),
        pytest.param(
            _env_template(
                "Overrides", [_container("app-container"), _container("sidecar-container")]
            ),
            [_var("INVALID_ENV", "injected", target="does-not-exist")],
            "ReconcilerError",
            'Error seen: target container "does-not-exist" not found in template for '
            'environment variable "INVALID_ENV"',
            True,
            id="unknown container",
        ),
    ],
)
def test_env_refused(tpl: Json, env: list[Json], reason: str, message: str, backoff: bool) -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox creation fails when claim overrides
    environment variable and policy is Allowed (not Overrides); ... conflicts with template and
    override is not allowed; ... injects new environment variable and policy is disallowed;
    ... template has EnvFrom and policy is Allowed; ... EnvFrom in init container ...; ...
    targets non-existent container): no Sandbox; the reason and message upstream reports; the
    plain errors back off, the user errors do not."""
    plan = plan_of(claim(env=env), pool(), tpl)
    assert sandbox_creates(plan) == []
    assert pick(ready_of(status_written(plan)), "reason", "message") == {
        "reason": reason,
        "message": message,
    }
    assert (plan.error is not None) is backoff


def test_env_bypasses_an_available_warm_sandbox() -> None:
    """Mirrors TestSandboxClaimReconcile (sandbox claim with Env bypasses available warm pool
    candidate): the claim starts cold under its own name and does not even take from the
    queue (a warm sandbox's pod is already running, env could not reach it)."""
    tpl = _env_template("Overrides", [EXISTING])
    warm = member("adoptable-warm-sandbox", of_template=tpl)
    plan = plan_of(claim(env=[_var("NEW_VAR")]), pool(), tpl, warm)
    assert not takes(plan)
    assert sandbox_patches(plan) == []
    (body,) = sandbox_creates(plan)
    assert body["metadata"]["name"] == CLAIM


# -- cleanup and expiry -----------------------------------------------------------------------


def _expired_claim(name: str, policy: str, **kwargs: Any) -> Json:
    lifecycle = {"shutdownPolicy": policy, "shutdownTime": stamp(NOW - timedelta(hours=2))}
    return claim(name, lifecycle=lifecycle, **kwargs)


def _two_passes(cluster: Cluster, name: str) -> tuple[Plan, Plan]:
    first = cluster.run(cluster.start(name)).plan
    second = cluster.run(cluster.start(name)).plan
    return first, second


@pytest.mark.parametrize("warm", [False, True], ids=["cold sandbox", "sandbox from warm pool"])
def test_expired_retain_deletes_the_sandbox_and_keeps_the_claim(warm: bool) -> None:
    """Mirrors TestSandboxClaimCleanupPolicy (Policy=Retain -> Should Retain Claim but DELETE
    Sandbox; Policy=Retain (Sandbox from Warm Pool) ...) and
    TestSandboxClaimTTLCleanupRequiresPersistedExpiredStatus: the first pass only records
    Ready=False/ClaimExpired and comes back at once; the second deletes the claim's Sandbox
    (with its uid as precondition), keeps the claim, and does not come back (the Sandbox's
    deletion wakes it)."""
    name = "retain-claim-warm-pool" if warm else "retain-claim"
    status: Json | None = None
    if warm:
        status = {"sandbox": {"name": "warm-pool-sandbox-adopted"}}
    expired = _expired_claim(name, "Retain", status=status)
    sandbox = owned_by(member("warm-pool-sandbox-adopted"), expired) if warm else cold(expired)
    cluster = world(expired, sandbox)
    first, second = _two_passes(cluster, name)
    assert actions_of(first, Delete) == []
    assert reason_in(status_written(first)) == "ClaimExpired"
    assert first.requeue_after is not None and 0 < first.requeue_after <= 0.001
    assert "ClaimExpired" in event_reasons(first)
    (delete,) = actions_of(second, Delete)
    assert delete.target == ObjectKey("Sandbox", NS, sandbox["metadata"]["name"])
    assert delete.uid == sandbox["metadata"]["uid"]
    assert cluster.get("SandboxClaim", name) is not None
    assert cluster.get("Sandbox", sandbox["metadata"]["name"]) is None
    ready = ready_of(cluster.must("SandboxClaim", name)["status"])
    assert pick(ready, "status", "reason", "message") == {
        "status": "False",
        "reason": "ClaimExpired",
        "message": "Claim expired. Sandbox cleanup initiated.",
    }
    assert second.requeue_after is None


def test_expired_retain_with_its_sandbox_gone_clears_the_binding_and_rests() -> None:
    """Mirrors TestSandboxClaimCleanupPolicy (Policy=Retain, the pass after the Sandbox is
    gone): upstream's reconcileExpired finds no Sandbox and no error, so the claim's
    ``status.sandbox`` is cleared (docs/agent-sandbox.md §3.7) while Ready stays ClaimExpired; and
    an expired claim is not looked at again on a timer."""
    expired = _expired_claim(
        "retain-claim",
        "Retain",
        status={
            "conditions": [
                condition(
                    status="False",
                    reason="ClaimExpired",
                    message="Claim expired. Sandbox cleanup initiated.",
                    generation=1,
                )
            ],
            "sandbox": {"name": "retain-claim"},
        },
    )
    plan = plan_of(expired, pool(), template(), name="retain-claim")
    status = must_status(plan)
    assert status is not None
    assert bound_name(status) is None
    assert reason_in(status) == "ClaimExpired"
    assert actions_of(plan, Delete) == []
    assert plan.requeue_after is None


def test_expired_retain_skips_a_foreign_sandbox_and_clears_the_binding() -> None:
    """Mirrors TestSandboxClaimCleanupPolicy (Policy=Retain, Sandbox not owned by claim -> skip
    deletion, SandboxStatus cleared), with upstream's message (Go-quoted names)."""
    expired = _expired_claim(
        "retain-claim-unowned", "Retain", status={"sandbox": {"name": "foreign-sandbox"}}
    )
    other = claim("other-claim", uid="other-uid")
    foreign = owned_by(member("foreign-sandbox"), other)
    cluster = world(expired, foreign)
    _, second = _two_passes(cluster, "retain-claim-unowned")
    assert actions_of(second, Delete) == []
    assert cluster.get("Sandbox", "foreign-sandbox") is not None
    status = cluster.must("SandboxClaim", "retain-claim-unowned")["status"]
    assert bound_name(status) is None
    assert pick(ready_of(status), "reason", "message") == {
        "reason": "ClaimExpired",
        "message": 'Claim expired. sandbox not owned by this claim: sandbox "foreign-sandbox" '
        'is not owned by claim "retain-claim-unowned"; deletion skipped.',
    }


@pytest.mark.parametrize(
    ("policy", "sandbox_expired", "propagation"),
    [
        pytest.param("Delete", True, None, id="Delete, Sandbox expired"),
        pytest.param("Delete", False, None, id="Delete, Sandbox running"),
        pytest.param("DeleteForeground", False, "Foreground", id="DeleteForeground, running"),
        pytest.param("DeleteForeground", True, "Foreground", id="DeleteForeground, expired"),
    ],
)
def test_expired_delete_policies_delete_the_claim(
    policy: str, sandbox_expired: bool, propagation: str | None
) -> None:
    """Mirrors TestSandboxClaimCleanupPolicy (Policy=Delete && Sandbox Expired/Running ->
    Should Delete Claim; Policy=DeleteForeground && Sandbox Running/Expired -> ... with
    foreground propagation): after ClaimExpired is on record, the claim itself is deleted
    (its uid as precondition); its Sandbox is left to the garbage collector."""
    expired = _expired_claim("delete-claim", policy)
    ready = (
        condition(status="False", reason="SandboxExpired")
        if sandbox_expired
        else condition(reason="SandboxReady")
    )
    cluster = world(expired, cold(expired, conditions=[ready]))
    first, second = _two_passes(cluster, "delete-claim")
    assert actions_of(first, Delete) == []
    (delete,) = actions_of(second, Delete)
    assert delete.target == ObjectKey("SandboxClaim", NS, "delete-claim")
    assert delete.uid == "delete-claim-uid"
    assert delete.propagation == propagation
    assert cluster.get("SandboxClaim", "delete-claim") is None
    assert cluster.get("Sandbox", "delete-claim") is not None
    assert second.requeue_after is None


def test_finished_is_mirrored_and_the_ttl_is_scheduled() -> None:
    """Mirrors TestSandboxClaimMirrorsFinishedConditionAndSchedulesTTL: the Sandbox's Finished
    condition (PodSucceeded, with its time) is mirrored, Ready is SandboxNotReady, and the claim
    comes back when its ttlSecondsAfterFinished runs out (120 s after a finish 30 s ago). The
    echo of our own status write does not wake the claim, so the plan must ask for it."""
    finished_at = NOW - timedelta(seconds=30)
    ttl_claim = claim("ttl-mirror-claim", lifecycle={"ttlSecondsAfterFinished": 120})
    done = condition("Finished", "True", "PodSucceeded", "Pod succeeded", at=finished_at)
    sandbox = cold(ttl_claim, conditions=[done])
    plan = plan_of(ttl_claim, pool(), template(), sandbox, name="ttl-mirror-claim")
    status = must_status(plan)
    assert finished_of(status) == done
    assert reason_in(status) == "SandboxNotReady"
    assert plan.requeue_after == pytest.approx(90.0)


@pytest.mark.parametrize("policy", ["Retain", "DeleteForeground"])
def test_ttl_after_finished_cleanup(policy: str) -> None:
    """Mirrors TestSandboxClaimTTLAfterFinishedCleanupPolicy (retain deletes sandbox and
    preserves finished condition; delete foreground deletes claim): pass 1 records ClaimExpired
    with Finished kept and comes back; pass 2 acts on the policy and does not come back."""
    finished_at = NOW - timedelta(minutes=1)
    done = condition("Finished", "True", "PodSucceeded", "Pod succeeded", at=finished_at)
    name = f"ttl-{policy.lower()}"
    ttl_claim = claim(
        name,
        lifecycle={"shutdownPolicy": policy, "ttlSecondsAfterFinished": 0},
        status={"conditions": [done]},
    )
    cluster = world(ttl_claim, cold(ttl_claim, conditions=[done]))
    first, second = _two_passes(cluster, name)
    assert actions_of(first, Delete) == []
    assert first.requeue_after is not None and first.requeue_after > 0
    recorded = status_written(first)
    assert reason_in(recorded) == "ClaimExpired"
    assert reason_in(recorded, "Finished") == "PodSucceeded"
    assert second.requeue_after is None
    if policy == "Retain":
        assert cluster.get("Sandbox", name) is None
        kept = cluster.must("SandboxClaim", name)["status"]
        assert reason_in(kept) == "ClaimExpired"
        assert reason_in(kept, "Finished") == "PodSucceeded"
    else:
        assert cluster.get("SandboxClaim", name) is None
        assert cluster.get("Sandbox", name) is not None


def test_ttl_cleanup_requires_the_expired_status_on_record() -> None:
    """Mirrors TestSandboxClaimTTLCleanupRequiresPersistedExpiredStatus: with policy Delete,
    the claim is deleted only by a pass that comes after ClaimExpired is on record (with the
    Sandbox still there), and nothing comes back after the delete. Ours takes one pass more:
    the pass that mirrors the Sandbox's Finished condition (which starts the ttl) only writes
    it and comes back at once, the next records ClaimExpired, the one after deletes; upstream
    sets ClaimExpired in the mirroring pass already."""
    done = condition("Finished", "True", "PodSucceeded", at=NOW - timedelta(minutes=1))
    ttl_claim = claim(
        "stale-ttl-claim",
        lifecycle={"shutdownPolicy": "Delete", "ttlSecondsAfterFinished": 0},
        annotations={ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: stamp(NOW)},
    )
    cluster = world(ttl_claim, cold(ttl_claim, conditions=[done]))
    plans: list[Plan] = []
    recorded_with_sandbox = False
    while cluster.get("SandboxClaim", "stale-ttl-claim") is not None and len(plans) < 5:
        plans.append(cluster.run(cluster.start("stale-ttl-claim")).plan)
        stored = cluster.get("SandboxClaim", "stale-ttl-claim")
        if stored is not None and reason_in(stored.get("status")) == "ClaimExpired":
            recorded_with_sandbox |= cluster.get("Sandbox", "stale-ttl-claim") is not None
    deleting = [i for i, plan in enumerate(plans) if actions_of(plan, Delete)]
    assert deleting == [len(plans) - 1]
    assert [a.target.kind for a in actions_of(plans[-1], Delete)] == ["SandboxClaim"]
    assert reason_of(plans[-2]) == "ClaimExpired"
    assert recorded_with_sandbox
    assert all(p.requeue_after is not None and 0 < p.requeue_after <= 0.001 for p in plans[:-1])
    assert plans[-1].requeue_after is None


def test_cold_start_records_sandbox_provisioned() -> None:
    """Mirrors TestSandboxProvisionEvent: the cold start records a Normal SandboxProvisioned
    event about the claim, 'Created Sandbox "<name>"' (ours: an events.k8s.io/v1 Event, created
    after the status write), and none with ``--disable-claim-events``."""
    fresh = claim("provision-event-claim")
    plan = plan_of(fresh, pool(), template(), name="provision-event-claim")
    (event,) = [a.body for a in actions_of(plan, Create) if a.body["kind"] == "Event"]
    assert (event["type"], event["reason"], event["note"]) == (
        "Normal",
        "SandboxProvisioned",
        'Created Sandbox "provision-event-claim"',
    )
    assert event["regarding"]["kind"] == "SandboxClaim"
    assert event["regarding"]["name"] == "provision-event-claim"
    quiet = plan_of(
        fresh,
        pool(),
        template(),
        name="provision-event-claim",
        settings=ClaimSettings(events=False),
    )
    assert event_reasons(quiet) == []
    assert len(sandbox_creates(quiet)) == 1


def test_cold_start_copies_the_templates_volume_claim_templates() -> None:
    """Mirrors TestCreateSandboxPropagatesVolumeClaimTemplates."""
    data = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    (body,) = sandbox_creates(plan_of(claim(), pool(), template(volumeClaimTemplates=[data])))
    assert body["spec"]["volumeClaimTemplates"] == [data]


# -- warm adoption ----------------------------------------------------------------------------


def test_adopts_the_first_queued_ready_sandbox() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (adopts oldest ready sandbox from warm pool) and
    TestSandboxClaimAdoptionStrategy (picks oldest ready sandbox (FIFO queue order)): the queue
    hands out its oldest entry; the claim adopts it in one pass: its annotation first
    (conditional on the claim's version), then the Sandbox (conditional on the member's
    version), then one status write with the name, pod IPs and the forwarded Ready, then the
    entry's ack; entries it does not need go back to the queue."""
    members = [member(f"pool-sb-{i}") for i in (1, 2, 3)]
    plan = plan_of(
        claim(),
        pool(),
        template(),
        *members,
        offers=[entry(m, f"t{i}") for i, m in enumerate(members)],
    )
    annotate, patch = claim_patches(plan)[0], sandbox_patches(plan)[0]
    assert annotate.patch["metadata"]["annotations"][ANNOTATION_SANDBOX_NAME] == "pool-sb-1"
    assert annotate.patch["metadata"]["resourceVersion"] == "5"
    assert patch.target.name == "pool-sb-1"
    assert patch.patch["metadata"]["resourceVersion"] == "10"
    status = must_status(plan)
    assert status["sandbox"] == {"name": "pool-sb-1", "podIPs": [IP]}
    assert pick(ready_of(status), "status", "reason") == {
        "status": "True",
        "reason": "DependenciesReady",
    }
    order = [index_of(plan, a) for a in (annotate, patch, *actions_of(plan, Ack))]
    assert order == sorted(order)
    assert acked(plan) == ["t0"]
    assert sorted(released(plan)) == ["t1", "t2"]
    assert not takes(plan)
    assert sandbox_creates(plan) == []
    assert "SandboxAdopted" in event_reasons(plan)
    result = adopted(plan, members[0])
    labels = result["metadata"]["labels"]
    assert LABEL_WARM_POOL_SANDBOX not in labels
    assert labels[LABEL_SANDBOX_TEMPLATE_REF_HASH] == REF_HASH
    assert labels[LABEL_LAUNCH_TYPE] == "warm"
    assert result["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "name": CLAIM,
            "uid": CLAIM_UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert result["metadata"]["annotations"][ANNOTATION_POD_NAME] == "pool-sb-1"
    assert pod_metadata(result)["labels"][LABEL_CLAIM_UID] == CLAIM_UID
    assert ANNOTATION_SAFE_TO_EVICT not in (pod_metadata(result).get("annotations") or {})


def test_empty_queue_starts_cold() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (creates new sandbox when no warm pool sandboxes
    exist): with the queue empty the take lets the plan go on to the cold start in the same
    pass: a Sandbox named like the claim, launch-type cold."""
    cluster = world(claim())
    plans = cluster.reconcile(CLAIM)
    assert takes(plans[0])
    sandbox = cluster.must("Sandbox", CLAIM)
    assert sandbox is not None
    assert sandbox["metadata"]["labels"][LABEL_LAUNCH_TYPE] == "cold"
    assert claim_controller(sandbox) == CLAIM_UID


def _other_controller(name: str) -> Json:
    sandbox = member(name)
    sandbox["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "other-controller",
            "uid": "other-uid-456",
            "controller": True,
        }
    ]
    return sandbox


@pytest.mark.parametrize(
    "ineligible",
    [
        pytest.param(_other_controller("other-sb-1"), id="different controller"),
        pytest.param(member("deleting-sb", deleting=True), id="being deleted"),
    ],
)
def test_ineligible_entries_are_dropped_for_the_next(ineligible: Json) -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (skips sandboxes with different controller;
    skips sandboxes being deleted): the ineligible entry is acked away (never adopted, never
    handed to another claim), and the next one is adopted."""
    good = member("pool-sb-1")
    plan = plan_of(
        claim(),
        pool(),
        template(),
        ineligible,
        good,
        offers=[entry(ineligible, "bad"), entry(good, "good")],
    )
    assert [p.target.name for p in sandbox_patches(plan)] == ["pool-sb-1"]
    assert acked(plan) == ["bad", "good"]
    assert released(plan) == []


def test_only_ineligible_entries_lead_to_a_cold_start() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (creates new sandbox when only ineligible warm
    pool sandboxes exist): both entries are acked away, the claim takes again, and starts cold
    when the queue is empty."""
    other, deleting = _other_controller("other-sb-1"), member("deleting-sb", deleting=True)
    plan = plan_of(
        claim(),
        pool(),
        template(),
        other,
        deleting,
        offers=[entry(other, "a"), entry(deleting, "b")],
    )
    assert sandbox_patches(plan) == []
    assert acked(plan) == ["a", "b"]
    assert takes(plan)
    assert [b["metadata"]["name"] for b in sandbox_creates(plan)] == [CLAIM]
    assert index_of(plan, actions_of(plan, Ack)[-1]) < index_of(plan, actions_of(plan, Take)[0])


def test_adopts_the_entry_it_is_offered_even_when_it_went_not_ready() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (adopts ready sandboxes from queue prioritizing
    ready state) and TestSandboxClaimAdoptionStrategy (skips unready sandbox to adopt younger
    ready sandbox), for OUR behaviour: the queue only holds members the pool saw Ready, and a
    claim takes one entry at a time, so there is no scan for a Ready one. An offered member
    that is no longer Ready but still has its pod IP is adopted (the claim forwards its
    Ready=False); the younger Ready one stays in the queue for the next claim."""
    not_ready = member("not-ready", ready=False)
    young = member("young-ready")
    plan = plan_of(
        claim(),
        pool(),
        template(),
        not_ready,
        young,
        offers=[entry(not_ready, "old"), entry(young, "young")],
    )
    assert [p.target.name for p in sandbox_patches(plan)] == ["not-ready"]
    assert released(plan) == ["young"]
    assert pick(ready_of(must_status(plan)), "status") == {"status": "False"}


def test_offered_sandbox_without_pod_ip_is_held_within_the_grace() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (adopts first available non-ready sandbox from
    queue), TestGetCandidateRequeuesUnnetworkedWarmPoolSandboxes and
    TestSandboxClaimWarmCandidateGrace (pending candidate briefly requeues), for OUR behaviour:
    the queue only offers members the pool saw Ready, so the non-ready candidate upstream
    adopts becomes an offered member that lost its pod IP. Within 2 s of the claim's creation
    the claim keeps the entry (neither adopts, releases nor starts cold), writes no status
    (no misleading failure condition) and looks again within 500 ms."""
    rotating = member("rotating-sb", ready=False, ips=())
    young = claim(created=NOW - timedelta(seconds=1))
    plan = plan_of(young, pool(), template(), rotating, offers=[entry(rotating)])
    assert plan.actions == ()
    assert plan.requeue_after is not None and 0 < plan.requeue_after <= 0.5


def test_offered_sandbox_the_cache_shows_older_than_its_entry_is_read_not_waited_for() -> None:
    """The pool queued the member Ready at a version the claim worker's cache has not caught
    up with (there it has no pod IP yet): the claim reads it instead of waiting out the grace,
    since no change of that member would wake the claim."""
    queued = member("lagging-sb")
    queued["metadata"]["resourceVersion"] = "7"
    lagging = member("lagging-sb", ready=False, ips=())
    lagging["metadata"]["resourceVersion"] = "5"
    plan = plan_of(claim(created=NOW), pool(), template(), lagging, offers=[entry(queued)])
    assert [a.target for a in actions_of(plan, Refresh)] == [ObjectKey("Sandbox", NS, "lagging-sb")]
    assert released(plan) == [] and sandbox_patches(plan) == [] and not takes(plan)


def test_offered_sandbox_without_pod_ip_is_given_back_after_the_grace() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (falls through to cold creation after grace
    expires when warm candidates lack PodIPs) and TestSandboxClaimWarmCandidateGrace (pending
    candidate past deadline cold starts): the entries go back to the queue and the claim starts
    cold, without taking again."""
    rotating = [member(f"rotating-sb-{i}", ready=False, ips=()) for i in (1, 2)]
    old = claim(created=NOW - timedelta(seconds=3))
    plan = plan_of(
        old,
        pool(),
        template(),
        *rotating,
        offers=[entry(r, f"r{i}") for i, r in enumerate(rotating)],
    )
    assert sorted(released(plan)) == ["r0", "r1"]
    assert not takes(plan)
    assert [b["metadata"]["name"] for b in sandbox_creates(plan)] == [CLAIM]
    assert sandbox_patches(plan) == []


def test_empty_pool_cold_starts_at_once() -> None:
    """Mirrors TestSandboxClaimWarmCandidateGrace (truly empty pool cold starts immediately):
    a young claim with nothing offered takes, and starts cold in the same pass, with no timer."""
    plan = plan_of(claim(created=NOW), pool(), template())
    assert takes(plan)
    assert len(sandbox_creates(plan)) == 1
    assert plan.requeue_after is None


def test_skips_an_unnetworked_entry_for_a_networked_one() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (adopts not-ready sandbox with backing pod,
    skipping rotating sandboxes without pods): of two offered entries the one with a pod IP is
    adopted and the one without goes back to the queue."""
    rotating = member("rotating-sb", ready=False, ips=())
    with_pod = member("not-ready-with-pod", ready=False)
    plan = plan_of(
        claim(),
        pool(),
        template(),
        rotating,
        with_pod,
        offers=[entry(rotating, "rot"), entry(with_pod, "pod")],
    )
    assert [p.target.name for p in sandbox_patches(plan)] == ["not-ready-with-pod"]
    assert released(plan) == ["rot"]
    assert acked(plan) == ["pod"]


def test_candidate_that_gains_its_ip_within_the_grace_is_adopted() -> None:
    """Mirrors TestSandboxClaimAdoptsCandidateThatBecomesNetworkReadyDuringGrace: the first
    pass waits; once the member reports a pod IP and Ready, the next pass adopts it."""
    pending = member("pending-sandbox", ready=False, ips=())
    young = claim(created=NOW)
    cluster = world(young, pending)
    cluster.held[CLAIM] = [cluster.enqueue(pending)]
    cluster.queue.clear()
    first = cluster.run(cluster.start(CLAIM)).plan
    assert first.actions == () and first.requeue_after is not None
    networked = cluster.must("Sandbox", "pending-sandbox")
    assert networked is not None
    networked["status"] = {"podIPs": ["10.0.0.8"], "conditions": [condition(reason="Ready")]}
    cluster.bump(networked)
    cluster.now = NOW + timedelta(milliseconds=500)
    cluster.reconcile(CLAIM)
    adopted_sandbox = cluster.must("Sandbox", "pending-sandbox")
    assert claim_controller(adopted_sandbox) == CLAIM_UID
    assert assigned(cluster.must("SandboxClaim", CLAIM)) == "pending-sandbox"
    assert cluster.held.get(CLAIM) == []


@pytest.mark.parametrize(
    ("annotations", "kept"),
    [
        pytest.param({ANNOTATION_POD_NAME: "stale-pod-name"}, {}, id="stale pod-name corrected"),
        pytest.param(
            {ANNOTATION_POD_NAME: "pool-sb-1", "test.annotation/preserved": "true"},
            {"test.annotation/preserved": "true"},
            id="correct pod-name accepted",
        ),
    ],
)
def test_pod_name_annotation_on_adoption(annotations: Json, kept: Json) -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (corrects stale pod-name annotation when adopting
    sandbox; accepts existing correct pod-name annotation when adopting sandbox)."""
    sb = member("pool-sb-1")
    sb["metadata"]["annotations"] = {**sb["metadata"]["annotations"], **annotations}
    result = adopted(plan_of(claim(), pool(), template(), sb, offers=[entry(sb)]), sb)
    assert result["metadata"]["annotations"][ANNOTATION_POD_NAME] == "pool-sb-1"
    for key, value in kept.items():
        assert result["metadata"]["annotations"][key] == value


@pytest.mark.parametrize("template_found", [True, False], ids=["template", "template missing"])
def test_template_safe_to_evict_false_survives_adoption(template_found: bool) -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (preserves template eviction annotation false
    when adopting sandbox; ... when template lookup fails (fallback path))."""
    tpl = template(
        podTemplate={
            "metadata": {"annotations": {ANNOTATION_SAFE_TO_EVICT: "false"}},
            "spec": {"containers": [{"name": "test-container", "image": "test-image"}]},
        }
    )
    sb = member("pool-sb-1", of_template=tpl)
    assert pod_metadata(sb)["annotations"][ANNOTATION_SAFE_TO_EVICT] == "false"
    objects = [claim(), pool(), sb] + ([tpl] if template_found else [])
    result = adopted(plan_of(*objects, offers=[entry(sb)]), sb)
    assert pod_metadata(result)["annotations"][ANNOTATION_SAFE_TO_EVICT] == "false"


def test_claim_safe_to_evict_true_survives_adoption() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (preserves claim eviction annotation true when
    adopting sandbox)."""
    asking = claim(additionalPodMetadata={"annotations": {ANNOTATION_SAFE_TO_EVICT: "true"}})
    sb = member("pool-sb-1")
    result = adopted(plan_of(asking, pool(), template(), sb, offers=[entry(sb)]), sb)
    assert pod_metadata(result)["annotations"][ANNOTATION_SAFE_TO_EVICT] == "true"


@pytest.mark.parametrize(
    ("claim_labels", "expected"),
    [
        pytest.param({LABEL_CREATED_BY: "go-client"}, "go-client", id="propagated, overwritten"),
        pytest.param(None, None, id="removed when the claim lacks it"),
    ],
)
def test_created_by_on_adoption(claim_labels: dict[str, str] | None, expected: str | None) -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (propagates and overwrites created-by label during
    adoption; removes created-by label during adoption when claim lacks it): the member's
    ``created-by=controller`` gives way to the claim's, on the Sandbox and its pod template."""
    sb = member("pool-sb-1")
    assert sb["metadata"]["labels"][LABEL_CREATED_BY] == "controller"
    result = adopted(
        plan_of(claim(labels=claim_labels), pool(), template(), sb, offers=[entry(sb)]), sb
    )
    assert result["metadata"]["labels"].get(LABEL_CREATED_BY) == expected
    assert pod_metadata(result)["labels"].get(LABEL_CREATED_BY) == expected


def _stale_member(name: str, tpl: Json) -> Json:
    sb = member(name, of_template=tpl)
    sb["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_HASH] = "stale-hash"
    sb["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = "old-image"
    return sb


@pytest.mark.parametrize(
    ("strategy", "make", "adopts"),
    [
        pytest.param("Recreate", "stale", False, id="Recreate skips stale, cold starts"),
        pytest.param("Recreate", "fresh", True, id="Recreate adopts fresh"),
        pytest.param("Recreate", "unlabelled", True, id="Recreate adopts current, no hash label"),
        pytest.param("OnReplenish", "stale", True, id="OnReplenish adopts stale"),
        pytest.param("", "stale", True, id="unset strategy adopts stale"),
    ],
)
def test_update_strategy_decides_about_stale_members(
    strategy: str, make: str, adopts: bool
) -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (skips stale candidate under Recreate strategy and
    cold starts; adopts fresh candidate under Recreate strategy; adopts semantically-current
    candidate with missing hash label under Recreate; adopts stale candidate under OnReplenish
    strategy (no regression); ... when warm pool strategy unset): a stale member is dropped
    from the queue under Recreate only (its pool replaces it)."""
    tpl = template()
    if make == "stale":
        sb = _stale_member("candidate", tpl)
    else:
        sb = member("candidate", of_template=tpl)
        assert sb["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_HASH] == blueprint_hash(tpl["spec"])
        if make == "unlabelled":
            del sb["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_HASH]
            spec = sb["spec"]["podTemplate"]["spec"]
            assert spec == apply_secure_defaults(spec, tpl["spec"])
    plan = plan_of(claim(), pool(strategy=strategy), tpl, sb, offers=[entry(sb, "e")])
    if adopts:
        assert [p.target.name for p in sandbox_patches(plan)] == ["candidate"]
        assert sandbox_creates(plan) == []
    else:
        assert sandbox_patches(plan) == []
        assert acked(plan) == ["e"]
        assert takes(plan)
        assert [b["metadata"]["name"] for b in sandbox_creates(plan)] == [CLAIM]


def test_recreate_pool_without_its_template_adopts_nothing() -> None:
    """Mirrors TestGetCandidateRequeuesRecreateCandidateOnTemplateLookupError: under Recreate a
    member cannot be checked for staleness without the template, so it is not adopted; its
    entry goes back to the queue (kept for when the template is back), the claim takes no
    other, and reports TemplateNotFound."""
    recreate = pool(template_name="missing-template", strategy="Recreate")
    candidate = member(
        "recreate-candidate", of_pool=recreate, of_template=template("missing-template")
    )
    plan = plan_of(claim(), recreate, candidate, offers=[entry(candidate, "e")])
    assert sandbox_patches(plan) == []
    assert assigned_in(plan) is None
    assert released(plan) == ["e"]
    assert not takes(plan)
    assert reason_of(plan) == "TemplateNotFound"
    assert plan.error is None


def assigned_in(plan: Plan) -> str | None:
    for action in claim_patches(plan):
        annotations = (action.patch.get("metadata") or {}).get("annotations") or {}
        if annotations.get(ANNOTATION_SANDBOX_NAME):
            return str(annotations[ANNOTATION_SANDBOX_NAME])
    return None


def test_unowned_sandbox_with_pool_labels_is_not_adopted() -> None:
    """Mirrors TestSandboxClaimSandboxAdoption (rejects unowned sandboxes with mock labels)."""
    unowned = member("unowned-sb")
    unowned["metadata"].pop("ownerReferences")
    plan = plan_of(claim(), pool(), template(), unowned, offers=[entry(unowned, "u")])
    assert sandbox_patches(plan) == []
    assert acked(plan) == ["u"]
    assert [b["metadata"]["name"] for b in sandbox_creates(plan)] == [CLAIM]


@pytest.mark.parametrize(
    ("api_version", "kind", "adopts"),
    [
        ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool", True),
        ("extensions.agents.x-k8s.io/v1alpha1", "SandboxWarmPool", True),
        ("other.group.io/v1", "SandboxWarmPool", False),
        ("extensions.agents.x-k8s.io/v1beta1", "ReplicaSet", False),
        (None, None, False),
    ],
    ids=["pool v1beta1", "pool v1alpha1", "other group", "other kind", "unowned"],
)
def test_only_a_pool_controlled_member_is_adoptable(
    api_version: str | None, kind: str | None, adopts: bool
) -> None:
    """Mirrors TestIsAdoptable_RejectsUnowned: unowned rejected; pool-owned (v1beta1 or
    v1alpha1 apiVersion) accepted; other group / kind rejected."""
    sb = member("pool-sb-1")
    if kind is None:
        sb["metadata"].pop("ownerReferences")
    else:
        sb["metadata"]["ownerReferences"][0].update(apiVersion=api_version, kind=kind)
    plan = plan_of(claim(), pool(), template(), sb, offers=[entry(sb, "e")])
    assert bool(sandbox_patches(plan)) is adopts
    assert bool(sandbox_creates(plan)) is not adopts


def test_assigned_sandbox_without_pod_ips_is_completed() -> None:
    """Mirrors TestSandboxClaimPreservesAssignedWarmPoolSandboxWithoutPodIPs: a claim whose
    annotation names a member that lost its pod IP finishes that adoption (it is never
    abandoned for another candidate), without writing its annotation again."""
    rotating = member("rotating-sb", ready=False, ips=())
    named = claim(annotations={ANNOTATION_SANDBOX_NAME: "rotating-sb"})
    plan = plan_of(named, pool(), template(), rotating)
    assert [p.target.name for p in sandbox_patches(plan)] == ["rotating-sb"]
    assert assigned_in(plan) is None
    assert not takes(plan)
    assert claim_controller(adopted(plan, rotating)) == CLAIM_UID


def test_ghost_entry_is_dropped_and_the_next_is_taken() -> None:
    """Mirrors the claim half of TestSandboxEventHandler_Delete_RemovesGhostPods: an entry
    whose Sandbox a read found gone is acked away, never adopted, and the claim takes again;
    an entry for a Sandbox the cache has not shown yet is read first (it may be new)."""
    ghost = member("ghost-pod")
    known = plan_of(claim(), pool(), template(), offers=[entry(ghost, "g")], gone=["ghost-pod"])
    assert acked(known) == ["g"]
    assert takes(known)
    unknown = plan_of(claim(), pool(), template(), offers=[entry(ghost, "g")])
    assert [a.target for a in actions_of(unknown, Refresh)] == [
        ObjectKey("Sandbox", NS, "ghost-pod")
    ]
    assert acked(unknown) == [] and released(unknown) == []
    assert not takes(unknown) and sandbox_creates(unknown) == []


def test_pool_deletion_drops_its_queue() -> None:
    """Mirrors TestWarmPoolEventHandler_Delete_RemovesEntireQueue through ``plan_queue``: the
    queue of a deleted pool goes, consumer and entries."""
    memo = QueueMemo(template_hash=REF_HASH)
    plan = plan_queue(
        QueueObservation(namespace=NS, name="old-warmpool", pool=None, memo=memo), NOW
    )
    (drop,) = plan.actions
    assert isinstance(drop, DropQueue)
    assert drop.queue == WarmQueue(NS, REF_HASH, "old-warmpool")
    assert plan.memo is None


def test_bound_claim_never_adopts_again() -> None:
    """Mirrors TestSandboxClaimNoReAdoption: a claim whose status names the Sandbox it controls
    takes nothing from the queue (an entry it holds goes back), leaves other members alone, and
    the adopted Sandbox gets its missing launch-type label, warm (not named like the claim)."""
    bound = claim(status={"sandbox": {"name": "adopted-sb"}})
    mine = owned_by(member("adopted-sb"), bound)
    mine["metadata"]["labels"].pop(LABEL_LAUNCH_TYPE)
    extra = member("pool-sb-extra")
    plan = plan_of(bound, pool(), template(), mine, extra, offers=[entry(extra, "x")])
    assert not takes(plan)
    assert [p.target.name for p in sandbox_patches(plan)] == ["adopted-sb"]
    assert adopted(plan, mine)["metadata"]["labels"][LABEL_LAUNCH_TYPE] == "warm"
    assert released(plan) == ["x"]
    assert sandbox_creates(plan) == []


@pytest.mark.parametrize(
    ("name", "existing", "expected"),
    [
        pytest.param("adopted-sb", "warm", "warm", id="existing warm kept"),
        pytest.param(CLAIM, "cold", "cold", id="existing cold kept"),
        pytest.param("adopted-sb", "cold", "cold", id="cold label on a warm-named one kept"),
        pytest.param(CLAIM, None, "cold", id="missing, named like the claim: cold"),
        pytest.param("adopted-sb", None, "warm", id="missing, other name: warm"),
    ],
)
def test_launch_type_label(name: str, existing: str | None, expected: str) -> None:
    """Mirrors TestInitializeSandboxLaunchTypeLabel (existing warm/cold never overwritten;
    missing label is initialized)."""
    bound = claim(status={"sandbox": {"name": name}})
    mine = owned_by(member(name), bound)
    if existing is None:
        mine["metadata"]["labels"].pop(LABEL_LAUNCH_TYPE)
    else:
        mine["metadata"]["labels"][LABEL_LAUNCH_TYPE] = existing
    plan = plan_of(bound, pool(), template(), mine)
    patches = sandbox_patches(plan, name)
    result = after(mine, patches[0].patch) if patches else mine
    assert result["metadata"]["labels"][LABEL_LAUNCH_TYPE] == expected


def test_claim_takes_only_from_its_own_namespace_and_pool() -> None:
    """Mirrors TestVerifySandboxCandidate_NamespaceIsolation: cross-namespace adoption cannot
    happen by construction: a claim takes from the queue of its own namespace and pool, and an
    offered name is looked up in the claim's namespace."""
    plan = plan_of(claim(), pool(), template())
    (take,) = actions_of(plan, Take)
    assert take.queue == WarmQueue(NS, REF_HASH, POOL)


@pytest.mark.parametrize(
    ("from_label", "owner_api_version"),
    [
        (False, "extensions.agents.x-k8s.io/v1beta1"),
        (True, "extensions.agents.x-k8s.io/v1beta1"),
        (True, "extensions.agents.x-k8s.io/v1alpha1"),
    ],
    ids=["annotation", "deprecated label", "deprecated label with v1alpha1 owner reference"],
)
def test_reference_to_another_claims_sandbox_is_removed(
    from_label: bool, owner_api_version: str
) -> None:
    """Mirrors TestSandboxClaimClearsAssignedSandboxOwnedByAnotherClaim: the reference goes
    (the annotation, or the deprecated label), with the claim's version as precondition; the
    other claim's Sandbox is not touched; the claim goes on to find its own."""
    ref = {ANNOTATION_SANDBOX_NAME: "lost-sandbox"}
    lost_claim = claim(labels=ref) if from_label else claim(annotations=ref)
    lost = owned_by(member("lost-sandbox"), claim("other-claim", uid="other-claim-uid"))
    lost["metadata"]["ownerReferences"][0]["apiVersion"] = owner_api_version
    plan = plan_of(lost_claim, pool(), template(), lost)
    assert sandbox_patches(plan) == []
    removal = claim_patches(plan)[0]
    assert removal.patch["metadata"]["resourceVersion"] == "5"
    stored = after(lost_claim, removal.patch)
    assert ANNOTATION_SANDBOX_NAME not in (stored["metadata"].get("annotations") or {})
    assert LEGACY_LABEL_SANDBOX_NAME not in (stored["metadata"].get("labels") or {})
    assert takes(plan)


def _stale_view_claim(**kwargs: Any) -> Json:
    return claim(
        annotations={
            ANNOTATION_SANDBOX_NAME: "adopted-sb",
            ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: stamp(NOW),
        },
        **kwargs,
    )


def test_assigned_sandbox_prevents_a_second_adoption_under_cache_lag() -> None:
    """Mirrors TestSandboxClaimPreventsDuplicateAdoptionDuringCacheLag: the claim's annotation
    names adopted-sb, which a lagging cache still shows as the pool's: the claim finishes (or
    repeats, idempotently) the adoption of that one Sandbox, never takes another from the
    queue, finalizes its status in the same pass, and needs no timer; once the cache shows the
    adoption, the claim keeps it (launch-type warm) and still leaves the extra member alone."""
    stale = member("adopted-sb")
    stale["status"] = {"podIPs": [IP]}
    extra = member("pool-sb-extra")
    for _ in range(2):
        plan = plan_of(
            _stale_view_claim(), pool(), template(), stale, extra, offers=[entry(extra, "x")]
        )
        assert [p.target.name for p in sandbox_patches(plan)] == ["adopted-sb"]
        assert not takes(plan)
        assert released(plan) == ["x"]
        status = must_status(plan)
        assert bound_name(status) == "adopted-sb"
        assert pick(ready_of(status), "status", "reason", "message") == NOT_READY
        assert plan.requeue_after is None
    converged = owned_by(stale, _stale_view_claim())
    converged["metadata"]["labels"].pop(LABEL_LAUNCH_TYPE)
    plan = plan_of(_stale_view_claim(), pool(), template(), converged, extra)
    assert [p.target.name for p in sandbox_patches(plan)] == ["adopted-sb"]
    assert adopted(plan, converged)["metadata"]["labels"][LABEL_LAUNCH_TYPE] == "warm"
    assert not takes(plan)


def test_stale_view_repatches_idempotently_and_keeps_the_status() -> None:
    """Mirrors TestSandboxClaimAdoptionCacheLagRepatchesIdempotently: each pass on the stale
    view sends the same adoption patch again (conditional: a stale one is refused and the
    claim planned again on the fresh object), never wipes the finalized binding, and needs no
    timer."""
    stale = member("adopted-sb")
    stale["metadata"]["resourceVersion"] = "100"
    finalized = _stale_view_claim(
        status={"sandbox": {"name": "adopted-sb", "podIPs": [IP]}, "conditions": []}
    )
    first = plan_of(_stale_view_claim(), pool(), template(), stale)
    later = plan_of(finalized, pool(), template(), stale)
    for plan in (first, later):
        (patch,) = sandbox_patches(plan)
        assert patch.target.name == "adopted-sb"
        assert patch.patch["metadata"]["resourceVersion"] == "100"
        assert patch.on_conflict == "refresh"
        assert plan.requeue_after is None
    assert sandbox_patches(first)[0].patch == sandbox_patches(later)[0].patch
    assert bound_name(status_written(first)) == "adopted-sb"
    written = status_written(later)
    assert written is None or bound_name(written) == "adopted-sb"


def test_stale_view_keeps_a_finalized_ready_status() -> None:
    """Mirrors TestSandboxClaimAdoptionCacheLagPreservesFinalizedStatus: a claim already
    Ready=True and bound, seeing a stale pool-owned view of its Sandbox, does not downgrade its
    status (name, pod IPs and Ready stay)."""
    ready = condition(reason="Ready", message="Sandbox is ready", at=NOW)
    stale = member("adopted-sb", ips=["10.1.2.3"])
    stale["status"]["conditions"] = [ready]
    finalized = _stale_view_claim(
        status={
            "conditions": [{**ready, "observedGeneration": 1}],
            "sandbox": {"name": "adopted-sb", "podIPs": ["10.1.2.3"]},
        }
    )
    plan = plan_of(finalized, pool(), template(), stale)
    assert status_written(plan) is None
    assert plan.error is None


def test_fresh_adoption_then_stale_view_keeps_the_status() -> None:
    """Mirrors TestSandboxClaimFreshAdoptionStaleCacheKeepsFinalizedStatus: after a fresh
    adoption from the queue, later passes on a view where the Sandbox still looks like the
    pool's keep the finalized binding."""
    warm = member("warm-sb")
    warm["metadata"]["resourceVersion"] = "100"
    cluster = world(claim(), warm)
    cluster.held[CLAIM] = [cluster.enqueue(warm)]
    cluster.queue.clear()
    cluster.run(cluster.start(CLAIM))
    stored = cluster.must("SandboxClaim", CLAIM)
    assert stored is not None and bound_name(stored["status"]) == "warm-sb"
    for _ in range(2):
        plan = plan_of(stored, pool(), template(), warm)
        written = status_written(plan)
        assert written is None or bound_name(written) == "warm-sb"
        assert [p.target.name for p in sandbox_patches(plan)] == ["warm-sb"]
        assert plan.requeue_after is None


def test_candidate_of_another_pool_is_not_adopted() -> None:
    """Mirrors TestSandboxClaimPreventsAdoptionFromWrongWarmPool: the (legacy label) reference
    to a member of another pool is removed, that member is left alone, and the claim gets a
    new Sandbox of its own, named like the claim."""
    wrong = member("wrong-pool-sb", of_pool=pool("wrong-pool", uid="wrong-pool-uid"))
    named = claim(labels={LEGACY_LABEL_SANDBOX_NAME: "wrong-pool-sb"}, pool_name="correct-pool")
    cluster = Cluster().add(
        named,
        pool("correct-pool", template_name="correct-template"),
        template("correct-template"),
        wrong,
    )
    cluster.reconcile(CLAIM)
    untouched = cluster.must("Sandbox", "wrong-pool-sb")
    assert untouched is not None
    assert untouched["metadata"]["labels"].get(LABEL_WARM_POOL_SANDBOX)
    assert claim_controller(untouched) is None
    mine = cluster.must("Sandbox", CLAIM)
    assert mine is not None and claim_controller(mine) == CLAIM_UID
    stored = cluster.must("SandboxClaim", CLAIM)
    assert LEGACY_LABEL_SANDBOX_NAME not in (stored["metadata"].get("labels") or {})


def test_recovers_when_the_template_is_created() -> None:
    """Mirrors TestSandboxClaimRecoveryWhenTemplateCreated: without the template the claim
    reports TemplateNotFound, no error, and looks again in a minute; once the template exists
    the next pass creates the Sandbox."""
    cluster = Cluster().add(claim("recovery-claim"), pool())
    first = cluster.run(cluster.start("recovery-claim")).plan
    assert first.error is None and first.requeue_after == 60.0
    stored = cluster.must("SandboxClaim", "recovery-claim")
    assert reason_in(stored["status"]) == "TemplateNotFound"
    cluster.add(template())
    cluster.reconcile("recovery-claim")
    assert cluster.get("Sandbox", "recovery-claim") is not None


def test_legacy_label_is_migrated_to_the_annotation() -> None:
    """Mirrors TestSandboxClaimLegacyLabelMigration: a claim that names its (controlled) Sandbox
    with the deprecated label gets the annotation instead, in one conditional write."""
    legacy = claim(labels={LEGACY_LABEL_SANDBOX_NAME: "adopted-sb-legacy"})
    mine = owned_by(member("adopted-sb-legacy"), legacy)
    plan = plan_of(legacy, pool(), template(), mine)
    migration = claim_patches(plan)[0]
    assert migration.patch["metadata"]["resourceVersion"] == "5"
    stored = after(legacy, migration.patch)
    assert LEGACY_LABEL_SANDBOX_NAME not in (stored["metadata"].get("labels") or {})
    assert stored["metadata"]["annotations"][ANNOTATION_SANDBOX_NAME] == "adopted-sb-legacy"
    assert not takes(plan)


def _vct(name: str, storage: str = "1Gi") -> Json:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    }


@pytest.mark.parametrize(
    ("policy", "template_vcts", "claim_vcts", "expected"),
    [
        pytest.param(
            "Overrides",
            [_vct("data", "1Gi")],
            [_vct("data", "5Gi")],
            [_vct("data", "5Gi")],
            id="Overrides replaces",
        ),
        pytest.param(
            "Allowed",
            [_vct("data")],
            [_vct("scratch")],
            [_vct("data"), _vct("scratch")],
            id="Allowed appends",
        ),
        pytest.param(
            "", [_vct("data")], [], [_vct("data")], id="no claim volumes bypass the policy"
        ),
    ],
)
def test_volume_claim_templates_on_the_cold_path(
    policy: str, template_vcts: list[Json], claim_vcts: list[Json], expected: list[Json]
) -> None:
    """Mirrors TestCreateSandboxClaimVolumeClaimTemplatesSuccess (policy=Overrides overrides
    template volume; policy=Allowed allows adding new custom volumes; bypasses VCT policy check
    if claim requests no custom volumes); a claim with volumes starts cold."""
    spec: Json = {"volumeClaimTemplates": template_vcts}
    if policy:
        spec["volumeClaimTemplatesPolicy"] = policy
    asking = claim(volumeClaimTemplates=claim_vcts) if claim_vcts else claim()
    plan = plan_of(asking, pool(), template(**spec))
    (body,) = sandbox_creates(plan)
    assert body["spec"]["volumeClaimTemplates"] == expected
    assert takes(plan) is not bool(claim_vcts)


@pytest.mark.parametrize(
    ("policy", "template_vcts", "claim_vcts"),
    [
        pytest.param("Disallowed", [], [_vct("scratch")], id="disallowed"),
        pytest.param("Allowed", [_vct("data")], [_vct("data")], id="override forbidden"),
        pytest.param("", [], [_vct("scratch")], id="empty policy is Disallowed"),
        pytest.param("Allowed", [], [_vct("")], id="empty name in claim"),
        pytest.param("Allowed", [], [_vct("a"), _vct("a")], id="duplicate name in claim"),
        pytest.param("Allowed", [_vct("")], [], id="empty name in template"),
        pytest.param("Allowed", [_vct("b"), _vct("b")], [], id="duplicate name in template"),
    ],
)
def test_volume_claim_templates_refused(
    policy: str, template_vcts: list[Json], claim_vcts: list[Json]
) -> None:
    """Mirrors TestCreateSandboxClaimVolumeClaimTemplatesErrors (disallowed; forbidden
    override; default empty policy is Disallowed; empty / duplicate volume name in claim or
    template VCTs): VolumeClaimTemplatesError, no Sandbox, no backoff."""
    spec: Json = {"volumeClaimTemplates": template_vcts}
    if policy:
        spec["volumeClaimTemplatesPolicy"] = policy
    asking = claim(volumeClaimTemplates=claim_vcts) if claim_vcts else claim()
    plan = plan_of(asking, pool(), template(**spec))
    assert sandbox_creates(plan) == []
    assert reason_of(plan) == "VolumeClaimTemplatesError"
    assert plan.error is None


def test_failed_metadata_patch_keeps_the_binding() -> None:
    """Mirrors TestSandboxClaimReconcile_PatchErrorPreservesStatus, for OUR behaviour: the
    failed Sandbox write ends the pass before the status write, and the next pass (told the
    failure) still binds the same Sandbox. Ours does not turn the failure into
    Ready=ReconcilerError: it is recorded in the pass's decision and retried with backoff."""
    bound = claim(status={"sandbox": {"name": "warm-sandbox"}})
    mine = owned_by(member("warm-sandbox"), bound)
    mine["spec"]["podTemplate"]["metadata"] = {}
    cluster = world(bound, mine)
    cluster.fail_next.add(CLAIM)
    flight = cluster.run(cluster.start(CLAIM))
    assert sandbox_patches(flight.plan)
    assert cluster.refused and cluster.refused[0][0] is sandbox_patches(flight.plan)[0]
    assert cluster.must("SandboxClaim", CLAIM)["status"] == {"sandbox": {"name": "warm-sandbox"}}
    again = plan_claim(cluster.observe(CLAIM), NOW)
    assert bound_name(status_written(again)) == "warm-sandbox"
    assert not takes(again) and sandbox_creates(again) == []


def test_bound_sandbox_not_seen_yet_is_read_and_the_status_kept() -> None:
    """Mirrors TestSandboxClaimReconcile_TransientLookupErrorPreservesStatus, for OUR
    behaviour: the planner reads a cache, so there is no transient lookup error; the analogue is
    a claim whose Sandbox the cache does not show (yet). The claim reads it from the API server
    and writes no status in that pass, so the binding is not wiped, and takes nothing."""
    bound = claim(
        annotations={ANNOTATION_SANDBOX_NAME: "warm-sandbox"},
        status={"sandbox": {"name": "warm-sandbox"}},
    )
    plan = plan_of(bound, pool(), template())
    assert [a.target for a in plan.actions] == [ObjectKey("Sandbox", NS, "warm-sandbox")]
    assert isinstance(plan.actions[0], Refresh)


def test_status_write_is_conditional_on_the_claims_version() -> None:
    """Mirrors TestSandboxClaimStatusPatchCarriesOptimisticLock (and the no-stale-commit half of
    TestSandboxClaimStaleStatusPatchConflictDroppedWithoutMetrics): when the claim changed
    after the pass read it, the pass's status write is refused instead of committing a status
    computed from the old claim; the claim is planned again on the fresh claim and its status
    is then written."""
    bound = claim(
        status={"sandbox": {"name": CLAIM}},
        annotations={ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: stamp(NOW)},
    )
    cluster = world(bound, cold(bound, conditions=[SANDBOX_READY], ips=[IP]))
    flight = cluster.start(CLAIM)
    assert status_written(flight.plan) is not None
    edited = cluster.must("SandboxClaim", CLAIM)
    edited["metadata"]["labels"] = {"sandbox.users.io/team": "a"}
    cluster.bump(edited)
    cluster.run(flight)
    assert [(a.target.kind, why[:3]) for a, why in cluster.refused] == [("SandboxClaim", "409")]
    assert cluster.must("SandboxClaim", CLAIM)["status"] == {"sandbox": {"name": CLAIM}}
    cluster.reconcile(CLAIM)
    status = cluster.must("SandboxClaim", CLAIM)["status"]
    assert reason_in(status) == "SandboxReady"
    assert status["sandbox"] == {"name": CLAIM, "podIPs": [IP]}


def test_adoption_annotation_conflict_is_resolved_on_the_fresh_claim() -> None:
    """Mirrors TestSandboxClaimAdoptionConflictRetriedInPass, for OUR mechanics: the claim
    changed after the plan read it, so the annotation write is refused (409); the claim is
    planned again on the fresh claim, still holding the entry, and adopts the same candidate
    without an error."""
    sb = member("pool-sb-1")
    cluster = world(claim(), sb)
    cluster.held[CLAIM] = [cluster.enqueue(sb)]
    cluster.queue.clear()
    flight = cluster.start(CLAIM)
    changed = cluster.must("SandboxClaim", CLAIM)
    changed["metadata"]["labels"] = {"someone": "else"}
    cluster.bump(changed)
    cluster.run(flight)
    assert "409" in cluster.refused[0][1]
    cluster.reconcile(CLAIM)
    stored = cluster.must("SandboxClaim", CLAIM)
    assert assigned(stored) == "pool-sb-1"
    assert bound_name(stored["status"]) == "pool-sb-1"
    assert claim_controller(cluster.get("Sandbox", "pool-sb-1")) == CLAIM_UID


def test_adoption_patch_conflict_never_switches_candidates() -> None:
    """Mirrors TestSandboxClaimAdoptionCompletionConflictDoesNotSwitchCandidates and
    TestSandboxClaimSandboxAdoption (resolves adoption-patch conflict on the same candidate):
    the member changed between the plan and its patch (409); the claim already names it, so
    the next pass finishes the adoption of that same member on its fresh version and gives
    the second entry back; the second member is never written."""
    first, second = member("pool-sb-1"), member("pool-sb-2")
    cluster = world(claim(), first, second)
    cluster.held[CLAIM] = [cluster.enqueue(first), cluster.enqueue(second)]
    cluster.queue.clear()
    flight = cluster.start(CLAIM)
    moved = cluster.must("Sandbox", "pool-sb-1")
    moved["status"]["nodeName"] = "node-a"
    cluster.bump(moved)
    cluster.run(flight)
    assert [a.target.name for a, _ in cluster.refused] == ["pool-sb-1"]
    again = cluster.start(CLAIM)
    assert [p.target.name for p in sandbox_patches(again.plan)] == ["pool-sb-1"]
    cluster.run(again)
    cluster.reconcile(CLAIM)
    assert claim_controller(cluster.get("Sandbox", "pool-sb-1")) == CLAIM_UID
    untouched = cluster.must("Sandbox", "pool-sb-2")
    assert untouched == second
    written = {a.target.name for a in cluster.writes if isinstance(a, Patch)}
    assert "pool-sb-2" not in written
    assert [e.name for e in cluster.queue] == ["pool-sb-2"]


def test_stale_repatch_then_fresh_view_writes_nothing() -> None:
    """Mirrors TestSandboxClaimStaleAdoptionRepatchIdempotentWithoutWrite: a pass on the stale
    (pre-adoption) view costs one doomed patch, which the API server refuses; on the fresh view
    the linkage is already true and the status already final, so the next pass writes
    nothing."""
    sb = member("adopted-sb")
    named = _stale_view_claim()
    adoption = plan_of(named, pool(), template(), sb)
    done = adopted(adoption, sb)
    done["metadata"]["resourceVersion"] = "11"
    finalized = after(named, {"status": status_written(adoption)})
    finalized["metadata"]["annotations"][ANNOTATION_CLAIM_FIRST_READY_AT] = stamp(NOW)
    cluster = world(finalized, done)
    flight = cluster.start(CLAIM)
    flight.plan = plan_of(finalized, pool(), template(), sb)
    cluster.run(flight)
    assert [(a.target.name, why[:3]) for a, why in cluster.refused] == [("adopted-sb", "409")]
    assert cluster.start(CLAIM).plan.actions == ()
    assert bound_name(cluster.must("SandboxClaim", CLAIM)["status"]) == "adopted-sb"


@pytest.mark.parametrize("from_label", [False, True], ids=["annotation", "deprecated label"])
def test_deleted_assigned_sandbox_is_let_go_and_the_claim_heals(from_label: bool) -> None:
    """Mirrors TestSandboxClaimAssignedSandboxDeletedTerminalCleanup (annotation reference;
    deprecated label reference), for OUR behaviour: the adoption patch of the ghost finds it
    gone (404), the claim is planned again, drops the reference (annotation or label), and in
    that same pass takes from the queue and adopts the spare member. Upstream reports
    AdoptionConflict for one pass and re-adopts on the next; ours needs no failed pass (the
    reference is removed, conditionally, before anything else is taken)."""
    ref = {ANNOTATION_SANDBOX_NAME: "ghost-sb"}
    named = claim(labels=ref) if from_label else claim(annotations=ref)
    ghost, spare = member("ghost-sb"), member("pool-sb-2")
    cluster = world(named, spare)
    cluster.enqueue(spare)
    flight = cluster.start(CLAIM)
    flight.plan = plan_of(named, pool(), template(), ghost, spare)
    assert [p.target.name for p in sandbox_patches(flight.plan)] == ["ghost-sb"]
    cluster.run(flight)
    assert cluster.refused[-1][1] == "404 NotFound"
    plans = cluster.reconcile(CLAIM)
    removal = claim_patches(plans[0])[0]
    assert removal.patch["metadata"]["annotations"] == {ANNOTATION_SANDBOX_NAME: None}
    assert index_of(plans[0], removal) < index_of(plans[0], actions_of(plans[0], Take)[0])
    assert all(p.error is None for p in plans)
    stored = cluster.must("SandboxClaim", CLAIM)
    assert stored is not None
    assert LEGACY_LABEL_SANDBOX_NAME not in (stored["metadata"].get("labels") or {})
    assert assigned(stored) == "pool-sb-2"
    assert bound_name(stored["status"]) == "pool-sb-2"
    assert claim_controller(cluster.get("Sandbox", "pool-sb-2")) == CLAIM_UID


def test_persistent_contention_keeps_the_reference() -> None:
    """Mirrors TestSandboxClaimAdoptionCompletionExhaustedContentionKeepsReference: however
    often the member changes under the claim's patch, the claim keeps naming it and each pass
    patches that same member again, on its newest version."""
    sb = member("pool-sb-1")
    named = claim(annotations={ANNOTATION_SANDBOX_NAME: "pool-sb-1"})
    cluster = world(named, sb, member("pool-sb-2"))
    for _ in range(3):
        flight = cluster.start(CLAIM)
        (patch,) = sandbox_patches(flight.plan)
        assert patch.target.name == "pool-sb-1"
        current = cluster.must("Sandbox", "pool-sb-1")
        assert patch.patch["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        cluster.bump(current)
        cluster.run(flight)
        assert assigned(cluster.must("SandboxClaim", CLAIM)) == "pool-sb-1"
        assert not takes(flight.plan)


def test_failed_reference_cleanup_keeps_the_reference_and_retries() -> None:
    """Mirrors TestSandboxClaimAdoptionCleanupFailureKeepsReferenceAndRetries: removing a stale
    reference is the first write; when it fails nothing else happens (no take, no cold start),
    the reference stays, and the next pass removes it and heals."""
    named = claim(annotations={ANNOTATION_SANDBOX_NAME: "lost-sandbox"})
    lost = owned_by(member("lost-sandbox"), claim("other-claim", uid="other-claim-uid"))
    cluster = world(named, lost)
    cluster.fail_next.add(CLAIM)
    flight = cluster.run(cluster.start(CLAIM))
    assert isinstance(flight.plan.actions[0], Patch)
    assert flight.index == 1
    assert assigned(cluster.must("SandboxClaim", CLAIM)) == "lost-sandbox"
    assert cluster.get("Sandbox", CLAIM) is None
    cluster.reconcile(CLAIM)
    stored = cluster.must("SandboxClaim", CLAIM)
    # The lost reference is gone; the claim names its own cold Sandbox instead.
    assert assigned(stored) == CLAIM
    assert bound_name(stored["status"]) == CLAIM
    assert cluster.get("Sandbox", "lost-sandbox") == lost


def test_annotation_and_patch_conflicts_both_resolve() -> None:
    """Mirrors TestSandboxClaimAdoptionAnnotationAndCompletionConflictsResolvedSamePass, for
    OUR mechanics (a new pass per conflict instead of in-pass retries): the claim and then the
    member change under the claim's writes; the claim still ends up with that member, bound,
    with no error."""
    sb = member("pool-sb-1")
    cluster = world(claim(), sb)
    cluster.held[CLAIM] = [cluster.enqueue(sb)]
    cluster.queue.clear()
    flight = cluster.start(CLAIM)
    cluster.bump(cluster.must("SandboxClaim", CLAIM))
    cluster.run(flight)
    flight = cluster.start(CLAIM)
    cluster.bump(cluster.must("Sandbox", "pool-sb-1"))
    cluster.run(flight)
    assert len(cluster.refused) == 2
    plans = cluster.reconcile(CLAIM)
    assert all(p.error is None for p in plans)
    stored = cluster.must("SandboxClaim", CLAIM)
    assert bound_name(stored["status"]) == "pool-sb-1"
    assert claim_controller(cluster.get("Sandbox", "pool-sb-1")) == CLAIM_UID


def test_already_existing_cold_sandbox_is_used() -> None:
    """Mirrors TestCreateSandboxToleratesAlreadyExists, for OUR mechanics: a cache that does not
    show the claim's cold Sandbox yet makes the create answer AlreadyExists; the shell reads it
    and the claim is planned again at once, no error, and then simply uses it. The binding is
    never wiped meanwhile, and Ready never reads SandboxCreatePending (ours does not write
    that reason: the next pass already sees the Sandbox)."""
    bound = claim(status={"sandbox": {"name": CLAIM}})
    existing = cold(bound)
    lagging = plan_of(bound, pool(), template())
    assert [b["metadata"]["name"] for b in sandbox_creates(lagging)] == [CLAIM]
    assert bound_name(status_written(lagging)) == CLAIM
    cluster = world(bound, existing)
    flight = cluster.start(CLAIM)
    flight.plan = lagging
    cluster.run(flight)
    assert cluster.refused[-1][1] == "409 AlreadyExists"
    assert cluster.must("SandboxClaim", CLAIM)["status"] == {"sandbox": {"name": CLAIM}}
    plans = cluster.reconcile(CLAIM)
    assert sandbox_creates(plans[0]) == []
    status = cluster.must("SandboxClaim", CLAIM)["status"]
    assert bound_name(status) == CLAIM
    assert reason_in(status) == "SandboxNotReady"


def test_forwarded_ready_carries_the_claims_generation() -> None:
    """Mirrors TestSandboxClaimReadyConditionUsesClaimGeneration: the Sandbox's Ready is
    forwarded verbatim, with observedGeneration made the claim's."""
    ready = condition(reason="DependenciesReady", message="Pod is Ready", generation=2)
    mine = cold(claim(generation=4), conditions=[ready], ips=[IP])
    plan = plan_of(claim(generation=4), pool(), template(), mine)
    assert ready_of(status_written(plan)) == {**ready, "observedGeneration": 4}


def test_bound_sandbox_deleted_self_heals() -> None:
    """Mirrors docs/agent-sandbox.md §3.3a / §11.21 (claims self-heal; the re-adoption pass of
    TestSandboxClaimAssignedSandboxDeletedTerminalCleanup): when the bound warm Sandbox is
    gone, the claim drops the reference and, in the same pass, adopts another warm member;
    when that is gone too and the queue is empty, it starts cold under its own name. It is
    never marked failed."""
    cluster = world(claim(), member("pool-sb-1"), member("pool-sb-2"))
    cluster.pool_sync()
    cluster.reconcile(CLAIM)
    first = bound_name(cluster.must("SandboxClaim", CLAIM)["status"])
    assert first == "pool-sb-1"
    cluster.delete("Sandbox", "pool-sb-1")
    cluster.reconcile(CLAIM)
    stored = cluster.must("SandboxClaim", CLAIM)
    assert bound_name(stored["status"]) == "pool-sb-2"
    assert assigned(stored) == "pool-sb-2"
    cluster.delete("Sandbox", "pool-sb-2")
    plans = cluster.reconcile(CLAIM)
    assert all(reason_of(p) not in ("ReconcilerError", "SandboxMissing") for p in plans)
    assert claim_controller(cluster.get("Sandbox", CLAIM)) == CLAIM_UID
    assert bound_name(cluster.must("SandboxClaim", CLAIM)["status"]) == CLAIM


def test_warm_pool_pod_exclusivity() -> None:
    """Mirrors TestWarmPoolPodExclusivity: 2 Ready warm members and 3 claims reconciled in turn
    against one queue: every Sandbox has at most one claim as controller, every claim controls
    exactly one Sandbox, both warm members are adopted and the third claim starts cold."""
    claims = [claim(f"claim-{i}") for i in range(3)]
    cluster = world(*claims, member("pool-sb-0"), member("pool-sb-1"))
    cluster.pool_sync()
    for each in claims:
        cluster.reconcile(each["metadata"]["name"])
    owners: dict[str, list[str]] = {}
    for sandbox in cluster.sandboxes():
        uid = claim_controller(sandbox)
        if uid is not None:
            owners.setdefault(uid, []).append(sandbox["metadata"]["name"])
    assert owners == {
        "claim-0-uid": ["pool-sb-0"],
        "claim-1-uid": ["pool-sb-1"],
        "claim-2-uid": ["claim-2"],
    }
    assert cluster.queue == [] and not any(cluster.held.values())


def test_claim_being_deleted_gives_back_what_it_holds() -> None:
    """docs/agent-sandbox.md §3.3 step 3 (no upstream test of its own): a claim being deleted does
    nothing but give its held entries back to the queue, so another claim can adopt them."""
    sb = member("pool-sb-1")
    plan = plan_of(claim(deleting=True), pool(), template(), sb, offers=[entry(sb, "e")])
    assert [type(a) for a in plan.actions] == [Release]
    assert released(plan) == ["e"]


def test_first_observation_is_stamped_once() -> None:
    """docs/agent-sandbox.md §3.3 step 4 (``controller-first-observed-at``; upstream pins it in
    sandboxclaim_rawpatch_test.go, outside these three files): the first pass stamps the claim
    when the controller first saw it (Go RFC3339Nano), in the adoption's own annotation write
    when it adopts; a stamped claim is not stamped again."""
    sb = member("pool-sb-1")
    plan = plan_of(claim(), pool(), template(), sb, offers=[entry(sb)])
    annotations = claim_patches(plan)[0].patch["metadata"]["annotations"]
    assert annotations[ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT] == "2026-07-19T15:27:56Z"
    stamped = claim(annotations={ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: stamp(NOW)})
    later = plan_of(stamped, pool(), template())
    for patch in claim_patches(later):
        assert ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT not in (
            (patch.patch.get("metadata") or {}).get("annotations") or {}
        )


def test_pod_ips_the_sandbox_lost_leave_the_claims_status() -> None:
    """docs/agent-sandbox.md §3.7 (``status.sandbox.podIPs`` is the Sandbox's; no upstream test of
    its own): when the Sandbox no longer reports pod IPs, the claim's status stops reporting them
    too: the status write removes them (a merge patch would otherwise keep the old ones, and the
    SDK would connect to an address that is gone)."""
    bound = claim(
        status={"conditions": [], "sandbox": {"name": "adopted-sb", "podIPs": [IP]}},
    )
    mine = owned_by(member("adopted-sb", ready=False, ips=()), bound)
    plan = plan_of(bound, pool(), template(), mine)
    (write,) = [p for p in claim_patches(plan) if p.subresource == "status"]
    stored = after(bound, write.patch)
    assert stored["status"]["sandbox"] == {"name": "adopted-sb"}


def test_entry_of_the_claims_own_sandbox_is_acked_not_given_back() -> None:
    """docs/agent-sandbox.md §3.5 (the queue offers adoptable members only; no upstream test:
    upstream's queue has no acks): a pass that stopped after adopting but before acking (its status
    write failed) leaves the claim holding the entry of the Sandbox it now controls; the next pass
    acks it away instead of handing it to the next claim, while an entry another claim could
    still adopt goes back."""
    named = claim(annotations={ANNOTATION_SANDBOX_NAME: "adopted-sb"})
    before = member("adopted-sb")
    mine = owned_by(before, named)
    spare = member("pool-sb-2")
    plan = plan_of(
        named, pool(), template(), mine, spare, offers=[entry(before, "own"), entry(spare, "spare")]
    )
    assert acked(plan) == ["own"]
    assert released(plan) == ["spare"]


def test_created_by_follows_the_claim_on_its_sandbox() -> None:
    """docs/agent-sandbox.md §3.4 fast path (upstream reconcileActive, no test of its own): the
    claim's ``created-by`` label is kept in step on its Sandbox and pod template, and removed when
    the claim drops it."""
    labelled = claim(
        labels={LABEL_CREATED_BY: "python-client"}, status={"sandbox": {"name": CLAIM}}
    )
    mine = cold(claim(status={"sandbox": {"name": CLAIM}}))
    result = adopted(plan_of(labelled, pool(), template(), mine), mine)
    assert result["metadata"]["labels"][LABEL_CREATED_BY] == "python-client"
    assert pod_metadata(result)["labels"][LABEL_CREATED_BY] == "python-client"
    unlabelled = claim(status={"sandbox": {"name": CLAIM}})
    back = adopted(plan_of(unlabelled, pool(), template(), result), result)
    assert LABEL_CREATED_BY not in back["metadata"]["labels"]
    assert LABEL_CREATED_BY not in pod_metadata(back)["labels"]
