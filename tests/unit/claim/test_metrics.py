"""agent-sandbox's claim metrics as the claim planner records them (``Record`` actions), through
the fake cluster, which keeps what each pass recorded. Mirrors TestSandboxClaimCreationMetric,
TestGetLaunchType, TestRecordCreationLatencyMetric,
TestRecordCreationLatencyMetric_ClaimFirstReadyAnnotation, TestClientClaimLatencyMetric,
TestReconcilePropagatesAnnotationPatchError, TestDisableFlagsWarmAdoptionClaimWrites and the
histogram half of TestSandboxClaimStaleStatusPatchConflictDroppedWithoutMetrics. What a
``Record`` does with ``since`` (a start in the future records nothing: upstream's "negative
webhook duration skipped") is the runtime's, in tests/unit/runtime/test_metrics.py.
"""

from __future__ import annotations

from datetime import timedelta

from api.keys import (
    ANNOTATION_CLAIM_FIRST_READY_AT,
    ANNOTATION_CLIENT_FIRST_REQUESTED_AT,
    ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT,
    ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT,
    LABEL_CREATED_BY,
)
from api.objects import Json
from events.envelope import ObjectKey
from services.claim.core.metrics import (
    CLAIM_STARTUP,
    CLIENT_STARTUP,
    CONTROLLER_STARTUP,
    CREATIONS,
    SANDBOX_CREATION,
    ClaimMemo,
    launch_type,
)
from services.runtime.reconcile.actions import Patch, Record
from services.runtime.times import rfc3339_nano
from tests.unit.claim.world import (
    CLAIM,
    NOW,
    NS,
    POOL,
    TEMPLATE,
    Cluster,
    claim,
    condition,
    member,
    world,
)

CLAIM_KEY = ObjectKey("SandboxClaim", NS, CLAIM)
WEBHOOK_AT = NOW - timedelta(seconds=3)
CLIENT_AT = NOW - timedelta(seconds=4)


def recorded(cluster: Cluster, metric: str) -> list[Record]:
    return [r for r in cluster.recorded if r.metric == metric]


def warm_world(*, claim_obj: Json | None = None) -> Cluster:
    cluster = world(claim_obj or claim())
    spare = member("pool-sb-1")
    cluster.add(spare)
    cluster.enqueue(spare)
    return cluster


def first_ready_of(cluster: Cluster) -> str | None:
    annotations = cluster.must("SandboxClaim", CLAIM)["metadata"].get("annotations") or {}
    value = annotations.get(ANNOTATION_CLAIM_FIRST_READY_AT)
    return str(value) if value is not None else None


def make_cold_sandbox_ready(cluster: Cluster) -> None:
    sandbox = cluster.must("Sandbox", CLAIM)
    sandbox.setdefault("status", {})["conditions"] = [condition(reason="DependenciesReady", at=NOW)]
    sandbox["status"]["podIPs"] = ["10.0.0.9"]
    cluster.bump(sandbox)


def test_a_warm_adoption_and_a_cold_start_are_counted_with_upstreams_labels() -> None:
    """TestSandboxClaimCreationMetric: warm → launch_type warm, the pool, pod_condition ready;
    cold → launch_type cold, the claim's pool, pod_condition not_ready; created_by
    normalised (python-client kept, anything else unknown)."""
    warm = warm_world(claim_obj=claim(labels={LABEL_CREATED_BY: "python-client"}))
    warm.reconcile(CLAIM)
    (count,) = recorded(warm, CREATIONS)
    assert count.labels == {
        "namespace": NS,
        "sandbox_template": TEMPLATE,
        "launch_type": "warm",
        "warmpool_name": POOL,
        "pod_condition": "ready",
        "created_by": "python-client",
    }
    cold = world(claim(labels={LABEL_CREATED_BY: "my-script"}))
    cold.reconcile(CLAIM)
    (count,) = recorded(cold, CREATIONS)
    assert count.labels == {
        "namespace": NS,
        "sandbox_template": TEMPLATE,
        "launch_type": "cold",
        "warmpool_name": POOL,
        "pod_condition": "not_ready",
        "created_by": "unknown",
    }


def test_the_launch_type_label() -> None:
    """TestGetLaunchType: warm label → warm; anything else → cold; no Sandbox → unknown."""
    assert launch_type({"metadata": {"labels": {"agents.x-k8s.io/launch-type": "warm"}}}) == "warm"
    assert launch_type({"metadata": {"labels": {}}}) == "cold"
    assert launch_type(None) == "unknown"


def test_first_ready_records_every_latency_once_and_remembers_it() -> None:
    """TestRecordCreationLatencyMetric (records on first Ready with the webhook annotation;
    controller latency from the first observation) and ..._ClaimFirstReadyAnnotation (stamps
    the annotation; here, for one write fewer per claim, the memo remembers it): a warm
    adoption is Ready in its first pass, which records the webhook, controller and client
    latencies from their moments and the Sandbox's creation latency (its pool fill time); the
    next pass, which sees the claim Ready, keeps ``was_ready`` in the claim's memo."""
    annotations = {
        ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT: rfc3339_nano(WEBHOOK_AT),
        ANNOTATION_CLIENT_FIRST_REQUESTED_AT: rfc3339_nano(CLIENT_AT),
    }
    cluster = warm_world(claim_obj=claim(annotations=annotations))
    cluster.reconcile(CLAIM)
    labels = {"launch_type": "warm", "sandbox_template": TEMPLATE}
    (webhook,) = recorded(cluster, CLAIM_STARTUP)
    (controller,) = recorded(cluster, CONTROLLER_STARTUP)
    (client,) = recorded(cluster, CLIENT_STARTUP)
    assert (webhook.since, webhook.labels) == (WEBHOOK_AT, labels)
    assert (client.since, client.labels) == (CLIENT_AT, labels)
    assert controller.since == NOW, "first observed in this same pass"
    (creation,) = recorded(cluster, SANDBOX_CREATION)
    # The member was created an hour before NOW and Ready a minute before NOW.
    assert creation.labels == {"namespace": NS, **labels}
    assert creation.value == (timedelta(hours=1) - timedelta(minutes=1)).total_seconds() * 1000
    assert cluster.memos[CLAIM] == ClaimMemo(was_ready=True)
    assert first_ready_of(cluster) is None, "no claim-first-ready-at write"


def test_without_the_webhook_or_client_annotation_only_those_are_skipped() -> None:
    """TestRecordCreationLatencyMetric (skips the startup metric without the webhook
    annotation) and TestClientClaimLatencyMetric (missing or unparsable client time
    ignored)."""
    cluster = warm_world(claim_obj=claim(annotations={ANNOTATION_CLIENT_FIRST_REQUESTED_AT: "x"}))
    cluster.reconcile(CLAIM)
    assert recorded(cluster, CLAIM_STARTUP) == recorded(cluster, CLIENT_STARTUP) == []
    assert len(recorded(cluster, CONTROLLER_STARTUP)) == 1


def test_a_claim_not_ready_records_nothing_until_its_sandbox_is_ready() -> None:
    """TestRecordCreationLatencyMetric (ignores Ready=False): a cold start is counted when its
    Sandbox is created, but the latencies wait for the Ready the status reports, measured
    from the controller's first sight of the claim."""
    cluster = world(claim())
    cluster.reconcile(CLAIM)
    assert len(recorded(cluster, CREATIONS)) == 1
    assert recorded(cluster, CONTROLLER_STARTUP) == [] and cluster.memos[CLAIM] is None
    make_cold_sandbox_ready(cluster)
    cluster.reconcile(CLAIM)
    (controller,) = recorded(cluster, CONTROLLER_STARTUP)
    assert controller.labels == {"launch_type": "cold", "sandbox_template": TEMPLATE}
    assert controller.since == NOW
    assert cluster.memos[CLAIM] == ClaimMemo(was_ready=True)
    assert len(recorded(cluster, CREATIONS)) == 1, "counted once"


def test_a_claim_that_was_ready_never_records_again() -> None:
    """..._ClaimFirstReadyAnnotation (skips when set; a flap does not count twice) and
    TestRecordCreationLatencyMetric (ignores already-Ready): Ready → not Ready → Ready records
    the latencies once, the memo remembering the first Ready across the flap."""
    cluster = world(claim())
    cluster.reconcile(CLAIM)
    make_cold_sandbox_ready(cluster)
    cluster.reconcile(CLAIM)
    sandbox = cluster.must("Sandbox", CLAIM)
    sandbox["status"]["conditions"] = [condition(status="False", reason="PodNotReady")]
    cluster.bump(sandbox)
    cluster.reconcile(CLAIM)
    make_cold_sandbox_ready(cluster)
    cluster.reconcile(CLAIM)
    assert len(recorded(cluster, CONTROLLER_STARTUP)) == 1


def test_upstreams_first_ready_annotation_or_a_ready_claim_counts_as_recorded() -> None:
    """TestRecordCreationLatencyMetric (no re-record when the first-ready annotation exists) and
    TestReconcilePropagatesAnnotationPatchError (the retry does not count twice): a claim taken
    over from upstream's controller with ``claim-first-ready-at``, or found Ready already (a
    memo lost), records nothing and is remembered as Ready."""
    stamped = claim(annotations={ANNOTATION_CLAIM_FIRST_READY_AT: "2026-07-19T15:00:00Z"})
    cluster = warm_world(claim_obj=stamped)
    cluster.reconcile(CLAIM)
    assert recorded(cluster, CONTROLLER_STARTUP) == []
    assert cluster.memos[CLAIM] == ClaimMemo(was_ready=True)

    ready = world(claim())
    ready.reconcile(CLAIM)
    make_cold_sandbox_ready(ready)
    ready.reconcile(CLAIM)
    ready.memos.clear()  # the memo is lost; the claim's status still says Ready
    sandbox = ready.must("Sandbox", CLAIM)
    sandbox["status"]["conditions"] = [condition(status="False", reason="PodNotReady")]
    ready.bump(sandbox)
    ready.reconcile(CLAIM)
    make_cold_sandbox_ready(ready)
    ready.reconcile(CLAIM)
    assert len(recorded(ready, CONTROLLER_STARTUP)) == 1


def test_a_refused_status_write_records_no_latency() -> None:
    """TestSandboxClaimStaleStatusPatchConflictDroppedWithoutMetrics (histograms observed
    exactly once): the Ready status write conflicts, so the pass stops before its records;
    the pass that writes the status records once."""
    cluster = world(claim())
    cluster.reconcile(CLAIM)
    make_cold_sandbox_ready(cluster)
    flight = cluster.start(CLAIM)
    stored = cluster.must("SandboxClaim", CLAIM)
    cluster.bump(stored)  # someone else writes the claim: the conditional status write fails
    cluster.run(flight)
    assert "409" in cluster.refused[-1][1]
    assert recorded(cluster, CONTROLLER_STARTUP) == []
    cluster.reconcile(CLAIM)
    assert len(recorded(cluster, CONTROLLER_STARTUP)) == 1


def test_a_warm_adoption_writes_the_claim_twice() -> None:
    """TestDisableFlagsWarmAdoptionClaimWrites, for our writes: a warm adoption writes the
    claim's reference and its status, nothing else (upstream adds a first-ready stamp). With
    the observability annotations off there is no ``controller-first-observed-at`` (so no
    controller latency); with them on, the first observation rides on the reference write."""
    for stamps in (False, True):
        cluster = warm_world()
        cluster.settings = type(cluster.settings)(observability_annotations=stamps)
        cluster.reconcile(CLAIM)
        stored = cluster.must("SandboxClaim", CLAIM)["metadata"]["annotations"]
        assert (ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT in stored) is stamps
        claim_writes = [a for a in cluster.writes if isinstance(a, Patch) and a.target == CLAIM_KEY]
        assert len(claim_writes) == 2, claim_writes  # the reference, the status
        assert len(recorded(cluster, CONTROLLER_STARTUP)) == int(stamps)
