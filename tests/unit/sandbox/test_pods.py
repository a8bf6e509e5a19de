"""A Sandbox's Pod: create, adopt, relabel, delete, refuse (docs/agent-sandbox.md §2.3, §2.5)."""

from __future__ import annotations

from typing import Any

import pytest

from api.keys import (
    ANNOTATION_POD_NAME,
    ANNOTATION_PROPAGATED_ANNOTATIONS,
    ANNOTATION_PROPAGATED_LABELS,
    ANNOTATION_TRACE_CONTEXT,
    LABEL_ADOPTABLE,
    LABEL_CLAIM_UID,
    LABEL_CREATED_BY,
    LABEL_SANDBOX_NAME_HASH,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LABEL_WARM_POOL_SANDBOX,
    name_hash,
)
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Create, Delete, Patch
from services.sandbox.core.objects import Ownership, ownership
from services.sandbox.core.observation import resolve_pod_name
from services.sandbox.core.plan import plan_sandbox, read_sandbox
from services.sandbox.core.pods import PodPlan, merge_volume_claim_volumes, plan_pod
from tests.support.plans import actions_of
from tests.unit.sandbox.samples import (
    NOW,
    SANDBOX_UID,
    FakeCluster,
    observation,
    owned_pod,
    owner_ref,
    pod,
    sandbox,
    service,
    status_written,
)

HASH = name_hash("sb")


def plan(sb: dict[str, Any], *pods: dict[str, Any]) -> PodPlan:
    return plan_pod(read_sandbox(sb), tuple(pods), HASH)


def only_patch(result: PodPlan) -> dict[str, Any]:
    patches = [a for a in actions_of(result) if isinstance(a, Patch)]
    assert len(patches) == 1, result.actions
    metadata: dict[str, Any] = patches[0].patch["metadata"]
    return metadata


def created_pod(result: PodPlan) -> dict[str, Any]:
    creates = [a for a in actions_of(result) if isinstance(a, Create)]
    assert len(creates) == 1, result.actions
    body: dict[str, Any] = creates[0].body
    return body


POOL_OWNER = {
    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
    "kind": "SandboxWarmPool",
    "name": "pool",
    "uid": "pool-uid",
    "controller": True,
}
CLAIM_OWNER = {**POOL_OWNER, "kind": "SandboxClaim", "name": "claim", "uid": "claim-uid"}
OTHER_OWNER = owner_ref(uid="rs-uid", name="rs", kind="ReplicaSet")


# --- TestReconcilePod -------------------------------------------------------------------------


def test_creates_a_new_pod() -> None:
    """Upstream TestReconcilePod "creates new Pod": named like the Sandbox, labelled with its
    name hash, controlled by it, spec copied. Upstream also writes the pod-name annotation;
    named like the Sandbox, the Pod is the one an absent annotation names already, so that
    write would carry nothing new and is left out."""
    result = plan(sandbox(pod_labels={"team": "a"}, pod_annotations={"note": "x"}))
    body = created_pod(result)
    assert body["metadata"]["name"] == "sb"
    assert body["metadata"]["labels"] == {"team": "a", LABEL_SANDBOX_NAME_HASH: HASH}
    assert body["metadata"]["annotations"] == {
        "note": "x",
        ANNOTATION_PROPAGATED_LABELS: "team",
        ANNOTATION_PROPAGATED_ANNOTATIONS: "note",
    }
    assert body["metadata"]["ownerReferences"] == [owner_ref()]
    assert body["spec"] == {"containers": [{"name": "app", "image": "python:3.12"}]}
    assert not result.changes_annotation


def test_updates_the_label_and_owner_of_an_existing_pod() -> None:
    """Upstream TestReconcilePod "updates label and ownerRef of existing pod": an unowned Pod
    carrying the tracking label is adopted in one merge patch, conditional on the Pod's
    resourceVersion, and refreshed on 409 Conflict (docs/architecture.md invariant 2: another
    Sandbox may be adopting the same Pod)."""
    result = plan(sandbox(), pod(labels={"x": "y"}))
    patch = only_patch(result)
    assert patch["ownerReferences"] == [owner_ref()]
    assert patch["resourceVersion"] == "20"
    (adoption,) = of_type_in(result, Patch)
    assert adoption.on_conflict == "refresh"
    assert not of_type_in(result, Create)


def test_the_adoption_patch_is_exactly_owner_labels_and_precondition() -> None:
    """The whole adoption patch of an adoptable Pod: the controller reference (other owner
    references kept), the tracking label, and the version it was planned on; nothing else of
    the Pod."""
    garbage_collected = {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "cm-uid"}
    adoptable = pod(labels={LABEL_ADOPTABLE: "true"}, hashed_for=None)
    adoptable["metadata"]["ownerReferences"] = [garbage_collected]
    result = plan(sandbox(), adoptable)
    assert result.actions == (
        Patch(
            ObjectKey("Pod", "default", "sb"),
            {
                "metadata": {
                    "labels": {LABEL_SANDBOX_NAME_HASH: HASH},
                    "ownerReferences": [garbage_collected, owner_ref()],
                    "resourceVersion": "20",
                }
            },
            why="adopt the Pod",
            on_conflict="refresh",
        ),
    )
    assert not result.deferrable


def test_relabelling_an_owned_pod_is_not_conditional() -> None:
    """The labels of a Pod the Sandbox already controls are its own to decide, in a merge patch
    that touches nothing else: no precondition (which would fail at every kubelet update)."""
    result = plan(sandbox(pod_labels={"team": "a"}), owned_pod())
    (relabel,) = of_type_in(result, Patch)
    assert "resourceVersion" not in relabel.patch["metadata"]
    assert relabel.on_conflict == "fail"


def of_type_in(result: PodPlan, kind: type) -> list[Any]:
    return [a for a in actions_of(result) if isinstance(a, kind)]


def test_persists_the_owner_reference_when_adopting_a_correctly_labelled_pod() -> None:
    """Upstream TestReconcilePod "persists ownerRef when adopting correctly-labelled pod"."""
    cluster = FakeCluster().add(sandbox(), pod(owner=None))
    cluster.converge()
    adopted = cluster.get("Pod", "sb")
    assert adopted is not None
    assert ownership(adopted, SANDBOX_UID) is Ownership.OWNED
    assert adopted["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True


def test_adopts_a_legacy_labelled_pod() -> None:
    """Upstream TestReconcilePod "adopts legacy-labelled pod": the name-hash label alone
    authorises adoption."""
    result = plan(sandbox(), pod(labels={}, hashed_for="sb"))
    assert only_patch(result)["ownerReferences"] == [owner_ref()]


def test_adopts_a_pod_labelled_adoptable() -> None:
    """§2.5: ``agents.x-k8s.io/adoptable=true`` authorises adoption of an unlabelled Pod; it is
    then given the tracking label."""
    result = plan(sandbox(), pod(labels={LABEL_ADOPTABLE: "true"}, hashed_for=None))
    patch = only_patch(result)
    assert patch["labels"][LABEL_SANDBOX_NAME_HASH] == HASH
    assert patch["ownerReferences"] == [owner_ref()]


def test_drops_system_reserved_keys_of_the_template() -> None:
    """Upstream TestReconcilePod "drops user system-reserved labels/annotations"."""
    sb = sandbox(
        pod_labels={"team": "a", "agents.x-k8s.io/evil": "1", "extensions.agents.x-k8s.io/x": "2"},
        pod_annotations={
            "note": "x",
            "agents.x-k8s.io/pod-name": "other",
            ANNOTATION_TRACE_CONTEXT: "{}",
        },
    )
    body = created_pod(plan(sb))
    assert body["metadata"]["labels"] == {"team": "a", LABEL_SANDBOX_NAME_HASH: HASH}
    assert body["metadata"]["annotations"] == {
        "note": "x",
        ANNOTATION_PROPAGATED_LABELS: "team",
        ANNOTATION_PROPAGATED_ANNOTATIONS: "note",
    }


def test_scrubs_system_keys_an_older_controller_recorded() -> None:
    """Upstream TestReconcilePod "scrubs stale system keys from old controller": keys under the
    system prefixes listed in the propagated-* annotations are removed from the Pod, except the
    name-hash label and the bookkeeping annotations."""
    existing = owned_pod(
        labels={"team": "a", LABEL_CLAIM_UID: "c1"},
        annotations={
            "agents.x-k8s.io/sneaky": "1",
            ANNOTATION_PROPAGATED_LABELS: f"team,{LABEL_CLAIM_UID},{LABEL_SANDBOX_NAME_HASH}",
            ANNOTATION_PROPAGATED_ANNOTATIONS: (
                f"agents.x-k8s.io/sneaky,{ANNOTATION_PROPAGATED_LABELS}"
            ),
        },
    )
    patch = only_patch(plan(sandbox(pod_labels={"team": "a"}), existing))
    assert patch["labels"] == {LABEL_CLAIM_UID: None}
    assert patch["annotations"]["agents.x-k8s.io/sneaky"] is None
    assert patch["annotations"][ANNOTATION_PROPAGATED_ANNOTATIONS] == ""
    assert LABEL_SANDBOX_NAME_HASH not in patch["labels"]


def test_no_system_labels_reach_the_pod_from_sandbox_metadata_or_template() -> None:
    """Upstream TestReconcilePod "no system labels from Sandbox metadata or PodTemplate"
    (and sandbox_controller_test.go:1862): a claim's ``claim-uid`` never reaches the Pod."""
    sb = sandbox(
        labels={LABEL_CLAIM_UID: "c1", "agents.x-k8s.io/other": "x"},
        owner=CLAIM_OWNER,
        pod_labels={LABEL_CLAIM_UID: "c1"},
    )
    labels = created_pod(plan(sb))["metadata"]["labels"]
    assert labels == {LABEL_SANDBOX_NAME_HASH: HASH}


def test_template_ref_hash_is_not_copied_when_not_extension_owned() -> None:
    """Upstream TestReconcilePod "no template-ref-hash from metadata when not extension-owned"."""
    sb = sandbox(labels={LABEL_SANDBOX_TEMPLATE_REF_HASH: "abc"})
    assert LABEL_SANDBOX_TEMPLATE_REF_HASH not in created_pod(plan(sb))["metadata"]["labels"]
    other_group = {**POOL_OWNER, "apiVersion": "apps/v1"}
    sb = sandbox(labels={LABEL_SANDBOX_TEMPLATE_REF_HASH: "abc"}, owner=other_group)
    assert LABEL_SANDBOX_TEMPLATE_REF_HASH not in created_pod(plan(sb))["metadata"]["labels"]


def test_warm_pool_label_follows_pool_ownership() -> None:
    """Upstream TestReconcilePod warm-pool rows: propagated for a pool-owned Sandbox, added to
    an existing Pod, removed once the Sandbox is no longer pool-owned (adopted by a claim)."""
    labels = {LABEL_WARM_POOL_SANDBOX: "poolhash", LABEL_SANDBOX_TEMPLATE_REF_HASH: "tmpl"}
    pool_owned = sandbox(labels=labels, owner=POOL_OWNER)
    created = created_pod(plan(pool_owned))["metadata"]["labels"]
    assert created[LABEL_WARM_POOL_SANDBOX] == "poolhash"
    assert created[LABEL_SANDBOX_TEMPLATE_REF_HASH] == "tmpl"

    added = only_patch(plan(pool_owned, owned_pod()))
    assert added["labels"][LABEL_WARM_POOL_SANDBOX] == "poolhash"

    claimed = sandbox(labels=labels, owner=CLAIM_OWNER)
    removed = only_patch(
        plan(claimed, owned_pod(labels={LABEL_WARM_POOL_SANDBOX: "poolhash", **labels}))
    )
    assert removed["labels"] == {LABEL_WARM_POOL_SANDBOX: None}


def test_template_ref_hash_follows_extension_ownership() -> None:
    """Upstream TestReconcilePod template-ref-hash rows: propagated and added for claim- or
    pool-owned Sandboxes, coexisting with the pool label, removed when the Sandbox is not
    extension-owned or no longer carries the label."""
    claimed = sandbox(labels={LABEL_SANDBOX_TEMPLATE_REF_HASH: "tmpl"}, owner=CLAIM_OWNER)
    assert created_pod(plan(claimed))["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] == (
        "tmpl"
    )
    assert only_patch(plan(claimed, owned_pod()))["labels"] == {
        LABEL_SANDBOX_TEMPLATE_REF_HASH: "tmpl"
    }
    both = sandbox(
        labels={LABEL_SANDBOX_TEMPLATE_REF_HASH: "tmpl", LABEL_WARM_POOL_SANDBOX: "p"},
        owner=POOL_OWNER,
    )
    labels = created_pod(plan(both))["metadata"]["labels"]
    assert labels[LABEL_SANDBOX_TEMPLATE_REF_HASH] == "tmpl" and labels[LABEL_WARM_POOL_SANDBOX]
    stale = owned_pod(labels={LABEL_SANDBOX_TEMPLATE_REF_HASH: "tmpl"})
    assert only_patch(plan(sandbox(), stale))["labels"] == {LABEL_SANDBOX_TEMPLATE_REF_HASH: None}
    unlabelled = sandbox(owner=CLAIM_OWNER)
    assert only_patch(plan(unlabelled, stale))["labels"] == {LABEL_SANDBOX_TEMPLATE_REF_HASH: None}


def test_suspended_deletes_the_owned_pod() -> None:
    """Upstream TestReconcilePod "suspended marks owned pod for deletion", with a uid
    precondition so a successor Pod of the same name is never deleted."""
    result = plan(sandbox(operatingMode="Suspended"), owned_pod())
    deletes = of_type_in(result, Delete)
    assert deletes == [
        Delete(ObjectKey("Pod", "default", "sb"), uid="pod-uid-sb", why=deletes[0].why)
    ]
    assert result.finding.pod is not None and result.finding.owned


def test_suspended_without_a_pod_does_nothing() -> None:
    """Upstream TestReconcilePod "suspended no-op without pod"."""
    result = plan(sandbox(operatingMode="Suspended"))
    assert result.actions == () and not result.changes_annotation


def test_adopts_the_pod_named_by_the_annotation() -> None:
    """Upstream TestReconcilePod "adopts via annotation": a warm Pod of another name, tracked by
    ``agents.x-k8s.io/pod-name`` and labelled adoptable, is adopted; no Pod is created."""
    sb = sandbox(annotations={ANNOTATION_POD_NAME: "warm-1"})
    warm = pod("warm-1", labels={LABEL_ADOPTABLE: "true"}, hashed_for=None)
    result = plan(sb, warm)
    assert not of_type_in(result, Create)
    patch = only_patch(result)
    assert patch["ownerReferences"] == [owner_ref()]
    assert not result.changes_annotation


@pytest.mark.parametrize("mode", ["Running", "Suspended"])
def test_refuses_a_pod_owned_by_another_controller(mode: str) -> None:
    """Upstream TestReconcilePod "refuses pod owned by another controller (modify/delete/adopt)":
    no patch, no delete, no adoption; the annotation naming it is cleared."""
    sb = sandbox(operatingMode=mode, annotations={ANNOTATION_POD_NAME: "foreign"})
    foreign = pod("foreign", owner=OTHER_OWNER)
    result = plan(sb, foreign)
    assert result.actions == ()
    assert result.changes_annotation and result.pod_name_annotation is None
    if mode == "Running":
        assert result.finding.error == (
            'pod "foreign" is owned by ReplicaSet/rs (UID: rs-uid), not by sandbox "sb"'
        )


def test_refuses_to_delete_an_unowned_annotated_pod_when_suspended() -> None:
    """Upstream TestReconcilePod "refuses to delete unowned annotated pod and clears annotation
    when suspended"."""
    sb = sandbox(operatingMode="Suspended", annotations={ANNOTATION_POD_NAME: "warm-1"})
    result = plan(sb, pod("warm-1", labels={LABEL_ADOPTABLE: "true"}, hashed_for=None))
    assert result.actions == ()
    assert result.pod_name_annotation is None
    assert result.finding.pod is not None and not result.finding.owned


def test_removes_labels_and_annotations_dropped_from_the_template() -> None:
    """Upstream TestReconcilePod "removes labels/annotations dropped from template"."""
    existing = owned_pod(
        labels={"keep": "1", "gone": "2"},
        annotations={
            "keep-a": "1",
            "gone-a": "2",
            ANNOTATION_PROPAGATED_LABELS: "gone,keep",
            ANNOTATION_PROPAGATED_ANNOTATIONS: "gone-a,keep-a",
        },
    )
    sb = sandbox(pod_labels={"keep": "1"}, pod_annotations={"keep-a": "1"})
    patch = only_patch(plan(sb, existing))
    assert patch["labels"] == {"gone": None}
    assert patch["annotations"] == {
        "gone-a": None,
        ANNOTATION_PROPAGATED_LABELS: "keep",
        ANNOTATION_PROPAGATED_ANNOTATIONS: "keep-a",
    }


def test_refuses_an_unowned_pod_without_the_authorisation_label() -> None:
    """Upstream TestReconcilePod "refuses unowned pod lacking authorization label"."""
    result = plan(sandbox(), pod(labels={}, hashed_for=None))
    assert result.actions == ()
    assert result.finding.error == (
        'cannot adopt unowned pod "sb": missing required pool authorization label '
        f'("{LABEL_ADOPTABLE}") or sandbox tracking label ("{LABEL_SANDBOX_NAME_HASH}")'
    )


@pytest.mark.parametrize(
    ("on_sandbox", "on_pod", "expected"),
    [
        ("go-client", None, "go-client"),
        ("python-client", None, "python-client"),
        ("something-else", None, "unknown"),
        ("python-client", "go-client", "python-client"),
        (None, "go-client", None),
    ],
)
def test_created_by_is_normalised_and_kept_in_step(
    on_sandbox: str | None, on_pod: str | None, expected: str | None
) -> None:
    """Upstream TestReconcilePod created-by rows: propagated and normalised (anything but
    go-client, python-client, controller becomes ``unknown``), updated, removed."""
    sb = sandbox(labels={LABEL_CREATED_BY: on_sandbox} if on_sandbox else None)
    if on_pod is None:
        assert created_pod(plan(sb))["metadata"]["labels"].get(LABEL_CREATED_BY) == expected
    else:
        patch = only_patch(plan(sb, owned_pod(labels={LABEL_CREATED_BY: on_pod})))
        assert patch["labels"] == {LABEL_CREATED_BY: expected}


def test_an_owned_pod_in_step_needs_no_write() -> None:
    """The in-place metadata reconcile is idempotent: a Pod already in step is not patched."""
    sb = sandbox(pod_labels={"team": "a"}, annotations={ANNOTATION_POD_NAME: "sb"})
    existing = owned_pod(labels={"team": "a"}, annotations={ANNOTATION_PROPAGATED_LABELS: "team"})
    result = plan(sb, existing)
    assert result.actions == () and not result.changes_annotation


# --- the standalone pod tests ------------------------------------------------------------------


def test_recovers_the_owned_pod_when_the_tracked_pod_is_missing() -> None:
    """Upstream TestReconcilePodRecoversOwnedPodWhenTrackedPodIsMissing: the owned Pod found by
    the index is used and the annotation repaired; nothing is created."""
    sb = sandbox(annotations={ANNOTATION_POD_NAME: "gone"})
    result = plan(sb, owned_pod("warm-7"))
    assert not of_type_in(result, Create)
    assert result.finding.pod is not None and result.finding.pod["metadata"]["name"] == "warm-7"
    assert result.pod_name_annotation == "warm-7"


def test_prefers_the_owned_pod_over_a_stale_adoption_target() -> None:
    """Upstream TestReconcilePodPrefersOwnedPodOverStaleAdoptionTarget: owner UID beats the
    annotation."""
    sb = sandbox(annotations={ANNOTATION_POD_NAME: "stale"})
    stale = pod("stale", labels={LABEL_ADOPTABLE: "true"}, hashed_for=None)
    result = plan(sb, stale, owned_pod("real"))
    assert result.finding.pod is not None and result.finding.pod["metadata"]["name"] == "real"
    assert all(a.target.name == "real" for a in actions_of(result) if isinstance(a, Patch | Delete))
    assert result.pod_name_annotation == "real"


def test_fails_closed_for_multiple_owned_pods() -> None:
    """Upstream TestReconcilePodFailsClosedForMultipleOwnedPods: no Pod chosen, none created."""
    result = plan(sandbox(), owned_pod("a"), owned_pod("b"))
    assert result.actions == ()
    assert result.finding.multiple
    assert result.finding.error == (
        "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"
    )


def test_surfaces_multiple_owned_pods_as_ready_reason_and_one_event() -> None:
    """Upstream TestReconcileChildResourcesSurfacesMultipleOwnedPods: Ready=False/MultiplePods,
    a Warning event once, the Service untouched, and no hot loop (no error, no requeue)."""
    obs = observation(sandbox(service=True), pods=(owned_pod("a"), owned_pod("b")))
    result = plan_sandbox(obs, NOW)
    assert result.error is None and result.requeue_after is None
    written = status_written(result)
    assert written is not None
    ready = next(c for c in written["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "MultiplePods")
    events = [a.body for a in actions_of(result, Create)]
    assert [(e["kind"], e["reason"], e["type"]) for e in events] == [
        ("Event", "MultiplePods", "Warning")
    ]
    assert all(a.target.kind != "Service" for a in actions_of(result))

    already = sandbox(
        service=True,
        status={"conditions": [dict(ready, lastTransitionTime="2026-01-01T00:00:00Z")]},
    )
    again = plan_sandbox(observation(already, pods=(owned_pod("a"), owned_pod("b"))), NOW)
    assert not actions_of(again, Create), "the event is emitted once"


def test_only_pods_controlled_by_the_sandbox_uid_count() -> None:
    """Upstream TestSandboxOwnedPodsRequiresOwnerUID: a labelled Pod of another Sandbox UID
    (a predecessor of the same name) is not one of ours."""
    predecessor = pod("old", owner=owner_ref(uid="older-uid"))
    result = plan(sandbox(), predecessor, owned_pod("sb"))
    assert not result.finding.multiple
    assert result.finding.pod is not None and result.finding.pod["metadata"]["name"] == "sb"


def test_waits_for_an_owned_terminating_pod() -> None:
    """Upstream TestReconcilePodWaitsForOwnedTerminatingPod: the terminating Pod is returned as
    it is and no overlapping Pod is created."""
    terminating = owned_pod(deleting=True)
    result = plan(sandbox(), terminating)
    assert not of_type_in(result, Create)
    assert result.finding.pod is terminating


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (owned_pod(), Ownership.OWNED),
        (pod(), Ownership.UNOWNED),
        (pod(owner=OTHER_OWNER), Ownership.OTHER),
        (service(owner=owner_ref()), Ownership.OWNED),
        (service(), Ownership.UNOWNED),
        (service(owner=OTHER_OWNER), Ownership.OTHER),
    ],
)
def test_check_ownership(obj: dict[str, Any], expected: Ownership) -> None:
    """Upstream TestCheckOwnership: owned / no owner / other controller, for Pod and Service."""
    assert ownership(obj, SANDBOX_UID) is expected


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (None, "sb"),
        ({"other": "x"}, "sb"),
        ({ANNOTATION_POD_NAME: ""}, "sb"),
        ({ANNOTATION_POD_NAME: "warm-3"}, "warm-3"),
    ],
)
def test_resolve_pod_name(annotations: dict[str, str] | None, expected: str) -> None:
    """Upstream TestResolvePodName: the annotation when not empty, else the Sandbox's name."""
    assert resolve_pod_name(sandbox(annotations=annotations)) == expected


def test_merge_volume_claim_volumes() -> None:
    """Upstream TestMergeVolumeClaimVolumes: a claim volume replaces the pod volume of the same
    name (moved to the end), other claim volumes are appended, none is a no-op."""
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": "data-sb"}}
    existing = [{"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]
    assert merge_volume_claim_volumes(existing, [claim]) == [existing[1], claim]
    assert merge_volume_claim_volumes(existing[1:], [claim]) == [existing[1], claim]
    assert merge_volume_claim_volumes(existing, []) is existing


def test_a_pod_without_its_spec_plans_the_same() -> None:
    """Upstream TestPodCacheTransform and TestPodCacheTransformMergePatchUnaffected: what the
    planner reads of a Pod is its metadata, status and spec.nodeName; a Pod stripped of the
    rest yields the identical plan, patches byte for byte."""
    full = owned_pod(labels={"stale": "1"}, annotations={ANNOTATION_PROPAGATED_LABELS: "stale"})
    stripped = {**full, "spec": {"nodeName": full["spec"]["nodeName"]}}
    stripped["metadata"] = {**full["metadata"], "managedFields": None}
    del stripped["metadata"]["managedFields"]
    for sb in (sandbox(), sandbox(operatingMode="Suspended")):
        assert plan(sb, full).actions == plan(sb, stripped).actions
    ready_full = plan_sandbox(observation(sandbox(), pods=(owned_pod(),)), NOW)
    ready_stripped_pod = {**owned_pod(), "spec": {"nodeName": "node-1"}}
    ready_stripped = plan_sandbox(observation(sandbox(), pods=(ready_stripped_pod,)), NOW)
    assert ready_full.actions == ready_stripped.actions


def test_pod_metadata_is_written_in_the_same_pass() -> None:
    """Upstream TestWriteBehindDisabledIsSynchronous (the default, window 0): a metadata drift is
    patched in the pass that finds it, exactly once, and the status that pass computes is
    written after it in the same pass: the patch changes nothing the status reports, so no
    second pass is needed for it. (The window itself: test_write_behind.)"""
    cluster = FakeCluster().add(
        sandbox(pod_labels={"team": "b"}, annotations={ANNOTATION_POD_NAME: "sb"}),
        owned_pod(labels={"team": "a"}, annotations={ANNOTATION_PROPAGATED_LABELS: "team"}),
    )
    plans = cluster.converge()
    pod_patches = [w for w in cluster.writes if isinstance(w, Patch) and w.target.kind == "Pod"]
    assert len(pod_patches) == 1
    first = plans[0]
    assert first.actions[0] == pod_patches[0]
    status_writes = [a for a in first.actions if isinstance(a, Patch) and a.subresource == "status"]
    assert [a.target.kind for a in status_writes] == ["Sandbox"]
    assert len(plans) == 1 and first.requeue_after is None
    assert plan_sandbox(cluster.observe(), NOW).actions == ()  # nothing was left for later


def test_a_lost_memory_loses_no_write() -> None:
    """Upstream TestRequeueDeferralCrashRecovery (window 0): no write is held in memory between
    passes, so a worker that restarts recomputes the same pending write from the objects alone.
    (With a window: test_write_behind.)"""
    sb = sandbox(pod_labels={"team": "b"}, annotations={ANNOTATION_POD_NAME: "sb"})
    drifted = owned_pod(labels={"team": "a"}, annotations={ANNOTATION_PROPAGATED_LABELS: "team"})
    first = plan_sandbox(observation(sb, pods=(drifted,)), NOW)
    after_restart = plan_sandbox(observation(sb, pods=(drifted,)), NOW)
    assert first == after_restart and actions_of(first, Patch)
