"""Optimistic concurrency (docs/architecture.md invariant 2): the fake API server refuses a stale
precondition with 409 Conflict as the real one does, and two Sandboxes racing for one Pod
cannot both take it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api.keys import ANNOTATION_POD_NAME, LABEL_ADOPTABLE
from events.envelope import ObjectKey
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan, Replace
from services.sandbox.core.objects import Ownership, ownership
from services.sandbox.core.plan import plan_sandbox
from tests.support.plans import actions_of
from tests.support.samples import conditions_by_type
from tests.unit.sandbox.samples import (
    NOW,
    SANDBOX_UID,
    ClusterApi,
    FakeCluster,
    owned_pod,
    owner_ref,
    pod,
    sandbox,
)

POD = ObjectKey("Pod", "default", "sb")
SB = ObjectKey("Sandbox", "default", "sb")


def version(cluster: FakeCluster, key: ObjectKey = POD) -> str:
    return str(cluster.objects[key]["metadata"]["resourceVersion"])


def refused(cluster: FakeCluster, plan: Plan) -> KubeError:
    with pytest.raises(KubeError) as caught:
        cluster.apply(plan)
    return caught.value


def relabel(rv: str | None, *, status: bool = False) -> Patch:
    metadata: dict[str, Any] = {"labels": {"team": "a"}}
    if rv is not None:
        metadata["resourceVersion"] = rv
    if status:
        return Patch(POD, {"metadata": metadata, "status": {"phase": "Failed"}}, "status")
    return Patch(POD, {"metadata": metadata})


# --- the fake honours preconditions -----------------------------------------------------------


def test_a_patch_with_a_stale_resource_version_is_a_conflict() -> None:
    cluster = FakeCluster().add(owned_pod())
    before = copy.deepcopy(cluster.objects[POD])
    error = refused(cluster, Plan(actions=(relabel("19"),)))
    assert (error.status, error.reason, error.conflict) == (409, "Conflict", True)
    assert error.message == (
        'Operation cannot be fulfilled on pods "sb": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )
    assert cluster.objects[POD] == before, "nothing written"
    assert [action for action, _ in cluster.refused] == [relabel("19")]


def test_a_patch_at_the_current_version_gets_a_new_one() -> None:
    """The version in the patch is a precondition, never stored: the write gets a new one."""
    cluster = FakeCluster().add(owned_pod())
    cluster.apply(Plan(actions=(relabel("20"),)))
    assert cluster.objects[POD]["metadata"]["labels"]["team"] == "a"
    assert version(cluster) not in ("", "20")
    assert not cluster.refused


def test_a_patch_without_a_resource_version_is_unconditional() -> None:
    cluster = FakeCluster().add(owned_pod())
    cluster.objects[POD]["metadata"]["resourceVersion"] = "77"
    cluster.apply(Plan(actions=(relabel(None),)))
    assert cluster.objects[POD]["metadata"]["labels"]["team"] == "a"


def test_a_write_that_changes_nothing_keeps_the_version() -> None:
    """As on a real server, a no-op write is not stored and bumps nothing."""
    cluster = FakeCluster().add(owned_pod(labels={"team": "a"}))
    cluster.apply(Plan(actions=(relabel("20"),)))
    assert version(cluster) == "20"


def test_a_status_patch_checks_the_precondition_too() -> None:
    cluster = FakeCluster().add(owned_pod())
    error = refused(cluster, Plan(actions=(relabel("3", status=True),)))
    assert error.conflict
    cluster.apply(Plan(actions=(relabel("20", status=True),)))
    patched = cluster.objects[POD]
    assert patched["status"]["phase"] == "Failed"
    assert "team" not in patched["metadata"]["labels"], "a status patch only writes the status"


def test_patching_or_replacing_a_missing_object_is_not_found() -> None:
    cluster = FakeCluster()
    assert refused(cluster, Plan(actions=(relabel(None),))).not_found
    assert refused(cluster, Plan(actions=(Replace(owned_pod()),))).not_found


def test_a_replace_with_a_stale_resource_version_is_a_conflict() -> None:
    cluster = FakeCluster().add(owned_pod())
    stale = owned_pod(labels={"team": "a"})
    stale["metadata"]["resourceVersion"] = "19"
    assert refused(cluster, Plan(actions=(Replace(stale),))).conflict
    assert "team" not in cluster.objects[POD]["metadata"]["labels"]

    current = copy.deepcopy(stale)
    current["metadata"]["resourceVersion"] = "20"
    cluster.apply(Plan(actions=(Replace(current),)))
    assert cluster.objects[POD]["metadata"]["labels"]["team"] == "a"
    assert version(cluster) not in ("", "20")


def test_a_replace_without_a_resource_version() -> None:
    """Unconditional for built-in kinds; a custom resource's PUT must name its version."""
    cluster = FakeCluster().add(owned_pod(), sandbox())
    bare = owned_pod(labels={"team": "a"})
    del bare["metadata"]["resourceVersion"]
    cluster.apply(Plan(actions=(Replace(bare),)))
    assert cluster.objects[POD]["metadata"]["labels"]["team"] == "a"

    unversioned = sandbox(labels={"x": "y"})
    del unversioned["metadata"]["resourceVersion"]
    error = refused(cluster, Plan(actions=(Replace(unversioned),)))
    assert (error.status, error.reason) == (422, "Invalid")


@pytest.mark.parametrize(
    ("uid", "resource_version", "wording"),
    [
        ("pod-uid-other", None, "the UID in the precondition (pod-uid-other) does not match"),
        (None, "19", "the ResourceVersion in the precondition (19) does not match"),
    ],
    ids=["uid", "resourceVersion"],
)
def test_a_delete_with_a_precondition_that_does_not_match_is_a_conflict(
    uid: str | None, resource_version: str | None, wording: str
) -> None:
    cluster = FakeCluster().add(owned_pod())
    delete = Delete(POD, uid=uid, resource_version=resource_version)
    error = refused(cluster, Plan(actions=(delete,)))
    assert error.conflict and wording in error.message
    assert POD in cluster.objects


def test_a_delete_with_matching_preconditions_deletes() -> None:
    cluster = FakeCluster().add(owned_pod())
    cluster.apply(Plan(actions=(Delete(POD, uid="pod-uid-sb", resource_version="20"),)))
    assert POD not in cluster.objects


def test_a_refused_write_stops_the_plan() -> None:
    """Like the worker shell: the writes after a refused one are not made."""
    cluster = FakeCluster().add(owned_pod())
    later = Create(pod("other", hashed_for=None))
    refused(cluster, Plan(actions=(relabel("1"), later)))
    assert ObjectKey("Pod", "default", "other") not in cluster.objects
    assert cluster.writes == [relabel("1")]


async def test_the_worker_shells_api_answers_conflicts_too() -> None:
    """:class:`ClusterApi` (what the real shell calls) passes the preconditions on."""
    cluster = FakeCluster().add(owned_pod())
    api = ClusterApi(cluster)
    with pytest.raises(KubeError) as patched:
        await api.patch(POD, {"metadata": {"resourceVersion": "19", "labels": {"a": "b"}}})
    assert patched.value.conflict
    stale = owned_pod(labels={"a": "b"})
    stale["metadata"]["resourceVersion"] = "19"
    with pytest.raises(KubeError) as replaced:
        await api.replace(stale)
    assert replaced.value.conflict
    with pytest.raises(KubeError) as deleted:
        await api.delete(POD, uid="pod-uid-sb", resource_version="19")
    assert deleted.value.conflict
    with pytest.raises(KubeError) as recreated:
        await api.delete(POD, uid="an-earlier-pod")
    assert recreated.value.conflict
    written = await api.patch(POD, {"metadata": {"resourceVersion": "20", "labels": {"a": "b"}}})
    assert written["metadata"]["labels"]["a"] == "b"
    assert written["metadata"]["resourceVersion"] != "20"
    await api.delete(POD, uid="pod-uid-sb", resource_version=written["metadata"]["resourceVersion"])
    assert POD not in cluster.objects


# --- two Sandboxes race for one Pod -----------------------------------------------------------

OTHER_UID = "sandbox-uid-2"
WARM = ObjectKey("Pod", "default", "warm-1")


def racing_world() -> FakeCluster:
    """Two Sandboxes that both track the unowned, adoptable Pod ``warm-1``."""
    return FakeCluster().add(
        sandbox("sb", annotations={ANNOTATION_POD_NAME: "warm-1"}),
        sandbox("sb2", uid=OTHER_UID, annotations={ANNOTATION_POD_NAME: "warm-1"}),
        pod("warm-1", labels={LABEL_ADOPTABLE: "true"}, hashed_for=None),
    )


def adoptions(plan: Plan) -> list[Patch]:
    return [a for a in actions_of(plan) if isinstance(a, Patch) and a.target == WARM]


def test_the_second_of_two_racing_adoptions_gets_a_conflict_and_backs_off() -> None:
    """Both plans are made on the same version of the Pod and both would adopt it. The first
    write wins; the second, conditional on the version it saw, gets 409, and the pass planned
    again on the fresh Pod finds it controlled by the other Sandbox and does not take it (it
    forgets the Pod and, in later passes, makes its own)."""
    cluster = racing_world()
    first = plan_sandbox(cluster.observe("sb"), NOW)
    second = plan_sandbox(cluster.observe("sb2"), NOW)
    assert len(adoptions(first)) == len(adoptions(second)) == 1, "both want the Pod"
    assert adoptions(second)[0].on_conflict == "refresh"

    cluster.apply(first)
    error = refused(cluster, second)
    assert error.conflict
    assert cluster.refused[-1][0] == adoptions(second)[0]
    assert cluster.objects[WARM]["metadata"]["ownerReferences"] == [owner_ref()]

    refreshed = plan_sandbox(cluster.observe("sb2"), NOW)
    assert not adoptions(refreshed), "the refreshed plan does not take the Pod"
    assert refreshed.error == (
        'pod "warm-1" is owned by Sandbox/sb (UID: sandbox-uid-1), not by sandbox "sb2"'
    )

    cluster.converge("sb2")
    cluster.converge("sb2")
    cluster.converge("sb")
    warm = cluster.objects[WARM]
    assert ownership(warm, SANDBOX_UID) is Ownership.OWNED
    assert len(warm["metadata"]["ownerReferences"]) == 1
    own = cluster.get("Pod", "sb2")
    assert own is not None and ownership(own, OTHER_UID) is Ownership.OWNED
    assert conditions_by_type(cluster.objects[SB])["Ready"]["reason"] != "ReconcilerError"


def test_converge_refreshes_after_a_conflict() -> None:
    """The converge helper does what the shell does with ``on_conflict="refresh"``: the plan
    refused with 409 is followed by a new pass on the current objects, not by an error."""
    cluster = racing_world()
    second = plan_sandbox(cluster.observe("sb2"), NOW)
    cluster.apply(plan_sandbox(cluster.observe("sb"), NOW))
    refused(cluster, second)
    plans = cluster.converge("sb2")
    assert not any(adoptions(plan) for plan in plans)
    assert ownership(cluster.objects[WARM], SANDBOX_UID) is Ownership.OWNED


def test_without_the_precondition_the_second_adoption_would_steal_the_pod() -> None:
    """Why the adoption must be conditional: ownerReferences is a list, which a merge patch
    replaces whole, so an unconditional second adoption silently overwrites the first."""
    cluster = racing_world()
    first = plan_sandbox(cluster.observe("sb"), NOW)
    (adopt,) = adoptions(plan_sandbox(cluster.observe("sb2"), NOW))
    cluster.apply(first)
    metadata = {k: v for k, v in adopt.patch["metadata"].items() if k != "resourceVersion"}
    cluster.apply(Plan(actions=(Patch(WARM, {"metadata": metadata}),)))
    references = cluster.objects[WARM]["metadata"]["ownerReferences"]
    assert [ref["uid"] for ref in references] == [OTHER_UID], "the first owner lost its Pod"
