"""The SandboxSnapshot planner (services/snapshot/core/plan.py): first one test per upstream test
of sandboxsnapshot_controller_test.go about the phases (docs/opensandbox.md §7.1, §4.1) and the
e2e case of a snapshot of a missing sandbox (pause_resume_test.go:766), each naming the one it
mirrors; then what sandbus does on purpose: the cleanup finalizer and the deletion, Committing
written by the pass that creates the Job, a commit Job taken up after a restart, a Job of
another snapshot holding the name, and the grace a succeeded Job's Pod has to report digests.

The source Pod's choice is in test_source.py, the Job's spec and the image names in
test_jobs.py."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from api.objects import Json
from api.opensandbox import FINALIZER_SNAPSHOT_CLEANUP, LABEL_SANDBOX_SNAPSHOT_NAME
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan
from services.snapshot.core.jobs import CommitterSettings
from services.snapshot.core.plan import (
    COMMITTING_RECHECK,
    TAKEN_RECHECK,
    SnapshotSettings,
)
from tests.support.plans import actions_of
from tests.unit.snapshot.world import (
    COMMITTER,
    JOB_FAILED_MESSAGE,
    JOB_UID,
    NAME,
    NODE,
    NOW,
    NS,
    REGISTRY,
    SNAP,
    SNAP_UID,
    batch_sandbox,
    commit_container,
    commit_pod,
    committing,
    conditions_of,
    created_job,
    creates,
    deletes,
    digests_message,
    image_of,
    job,
    job_args,
    metadata_patches,
    plan,
    pod,
    snapshot,
    status_patch,
    unpause,
)

KEY = ObjectKey("SandboxSnapshot", NS, SNAP)
READY = {"Ready": ("True", "SnapshotReady", "Snapshot is ready")}
NOW_TEXT = "2026-06-12T09:30:00Z"
NAMED_TAG = "snap-" + hashlib.sha256(SNAP.encode()).hexdigest()[:32]


def sandbox_and_pod() -> tuple[Json, Json]:
    """A template-mode sandbox and the Running Pod ``bs-0`` it controls, on NODE."""
    sandbox = batch_sandbox()
    return sandbox, pod(f"{NAME}-0", owner=sandbox)


def both_digests() -> str:
    return digests_message(
        ("main", image_of("main"), "sha256:" + "a" * 64),
        ("sidecar", image_of("sidecar"), "sha256:" + "b" * 64),
    )


# -- upstream's unit tests ------------------------------------------------------------------


def test_a_succeeded_commit_job_makes_it_succeed_and_ready() -> None:
    """TestHandleCommitting_SetsSucceedReadyCondition (sandboxsnapshot_controller_test.go:58):
    the Job succeeded → phase Succeed with the one condition Ready True ``SnapshotReady``
    "Snapshot is ready"; the source stays as it was, and nothing is looked at again."""
    done = job(state="succeeded")
    result = plan(
        snapshot(status=committing()),
        batch_sandbox(),
        done,
        commit_pod(done, message=both_digests()),
    )
    status = status_patch(result)
    assert status is not None
    assert status["phase"] == "Succeed"
    assert conditions_of(status) == READY
    assert status["conditions"][0]["lastTransitionTime"] == NOW_TEXT
    assert status["observedGeneration"] == 1
    assert (status["sourcePodName"], status["sourceNodeName"]) == (f"{NAME}-0", NODE)
    assert not creates(result)
    assert result.requeue_after is None


def test_digests_are_persisted_per_container_from_the_termination_message() -> None:
    """…PersistsImageDigestsFromTerminationMessage (sandboxsnapshot_controller_test.go:106):
    each container's ``imageDigest`` is the digest the commit Pod's ``commit`` container wrote
    for it in ``{"containers":[{"name","image","digest"}]}``; the image URIs stay the ones
    the snapshot committed to, and a name the snapshot does not have is ignored."""
    done = job(state="succeeded")
    message = digests_message(
        ("sidecar", "elsewhere/ignored:tag", "sha256:" + "b" * 64),
        ("main", image_of("main"), "sha256:" + "a" * 64),
        ("ghost", image_of("ghost"), "sha256:" + "c" * 64),
    )
    result = plan(snapshot(status=committing()), done, commit_pod(done, message=message))
    status = status_patch(result)
    assert status is not None
    assert status["containers"] == [
        {
            "containerName": "main",
            "imageUri": image_of("main"),
            "imageDigest": "sha256:" + "a" * 64,
        },
        {
            "containerName": "sidecar",
            "imageUri": image_of("sidecar"),
            "imageDigest": "sha256:" + "b" * 64,
        },
    ]


def test_a_container_the_message_leaves_out_has_no_digest() -> None:
    """…PersistsImageDigestsFromTerminationMessage, the partial message: a container that the
    committer did not report gets no ``imageDigest`` (never an empty one)."""
    done = job(state="succeeded")
    message = digests_message(("main", image_of("main"), "sha256:" + "a" * 64))
    status = status_patch(
        plan(snapshot(status=committing()), done, commit_pod(done, message=message))
    )
    assert status is not None and status["phase"] == "Succeed"
    assert [c.get("imageDigest") for c in status["containers"]] == ["sha256:" + "a" * 64, None]
    assert "imageDigest" not in status["containers"][1]


@pytest.mark.parametrize(
    ("phase", "state"),
    [
        ("Succeed", "failed"),
        ("Succeed", "succeeded"),
        ("Failed", "succeeded"),
        ("Failed", "failed"),
    ],
)
def test_a_terminal_phase_is_never_overwritten(phase: str, state: str) -> None:
    """TestUpdateSnapshotStatus_DoesNotDowngradeSucceededSnapshot (:166): a Succeed snapshot
    whose Job is later seen failed stays Succeed (and a Failed one stays Failed): no status
    write, no unpause Job, nothing to look at again."""
    status = committing(phase=phase)
    status["conditions"] = [
        {"type": "Ready", "status": "True", "reason": "SnapshotReady", "message": "x"}
    ]
    ended = job(state=state)
    result = plan(
        snapshot(status=status),
        *sandbox_and_pod(),
        ended,
        commit_pod(ended, message=both_digests()),
    )
    assert result.actions == ()
    assert result.requeue_after is None


@pytest.mark.parametrize("state", ["retrying", "active"])
def test_failed_pods_without_the_failed_condition_keep_it_committing(state: str) -> None:
    """…KeepsRetryingWhenJobHasNotTerminallyFailed (:198): Pods that failed while the Job has
    retries left are not a failure: no status write, and a look again later (upstream's 5 s;
    ours waits longer, since the Job's changes wake the snapshot)."""
    running = job(state=state)
    failed_pod = commit_pod(running, phase="Failed", exit_code=1, message="push failed")
    result = plan(snapshot(status=committing()), *sandbox_and_pod(), running, failed_pod)
    assert result.actions == ()
    assert status_patch(result) is None
    assert result.requeue_after == COMMITTING_RECHECK


def test_a_failed_commit_job_unpauses_the_containers_then_fails() -> None:
    """…CreatesUnpauseJobWhenCommitJobFailed (:233): the Job failed for good → the best-effort
    unpause Job ``<snap>-unpause`` runs ``unpause <pod> <ns> <containers...>`` on the source
    node without retries, and then the snapshot is Failed ``CommitJobFailed`` with the Job
    condition's message."""
    settings = SnapshotSettings(registry=REGISTRY, committer=CommitterSettings(push_secret="push"))
    result = plan(
        snapshot(status=committing()), *sandbox_and_pod(), job(state="failed"), settings=settings
    )
    assert [type(a) for a in result.actions] == [Create, Patch], "the unpause Job first"
    body = created_job(result, f"{SNAP}-unpause")
    container = commit_container(body)
    assert container["command"] == [COMMITTER]
    assert container["args"] == ["unpause", f"{NAME}-0", NS, "main", "sidecar"]
    spec = body["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["template"]["spec"]["nodeName"] == NODE
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert [v["name"] for v in spec["template"]["spec"]["volumes"]] == ["containerd-socket"], (
        "the unpause Job pushes nothing: no registry secret"
    )
    assert body["metadata"]["labels"][LABEL_SANDBOX_SNAPSHOT_NAME] == SNAP
    assert body["metadata"]["ownerReferences"][0]["uid"] == SNAP_UID
    status = status_patch(result)
    assert status is not None
    assert status["phase"] == "Failed"
    assert conditions_of(status) == {"Failed": ("True", "CommitJobFailed", JOB_FAILED_MESSAGE)}
    assert status["containers"] == committing()["containers"], "what was attempted stays"
    assert result.requeue_after is None


def test_the_unpause_job_is_made_once() -> None:
    """…CreatesUnpauseJobWhenCommitJobFailed, on a second pass (the status write failed): the
    unpause Job there already is not made again."""
    result = plan(snapshot(status=committing()), job(state="failed"), unpause())
    assert creates(result) == []
    status = status_patch(result)
    assert status is not None and status["phase"] == "Failed"


def test_a_failed_condition_without_a_message_names_its_reason() -> None:
    """sandbus: upstream copies an empty message; ours says the condition's reason instead,
    so the user reads why."""
    status = status_patch(plan(snapshot(status=committing()), job(state="failed", message="")))
    assert conditions_of(status)["Failed"] == ("True", "CommitJobFailed", "BackoffLimitExceeded")


def test_no_registry_fails_it() -> None:
    """TestHandlePending_MissingRegistrySetsFailedCondition (:281): no registry configured →
    Failed ``RegistryNotConfigured``, no Job; the message names the variable to set."""
    result = plan(snapshot(), *sandbox_and_pod(), settings=SnapshotSettings())
    status = status_patch(result)
    assert status is not None and status["phase"] == "Failed"
    ((kind, (state, reason, message)),) = conditions_of(status).items()
    assert (kind, state, reason) == ("Failed", "True", "RegistryNotConfigured")
    assert "SANDBUS_SNAPSHOT_REGISTRY" in message
    assert creates(result) == []


def test_a_snapshot_of_a_missing_sandbox_fails_without_a_job() -> None:
    """e2e pause_resume_test.go:766: a snapshot naming no BatchSandbox → Failed
    ``BatchSandboxLookupFailed`` with a message naming the sandbox and the namespace, and no
    Job is created."""
    result = plan(snapshot(sandbox="nope"), *sandbox_and_pod())
    status = status_patch(result)
    assert status is not None and status["phase"] == "Failed"
    (state, reason, message) = conditions_of(status)["Failed"]
    assert (state, reason) == ("True", "BatchSandboxLookupFailed")
    assert "'nope'" in message and NS in message
    assert creates(result) == []
    assert result.requeue_after is None


# -- the finalizer and the deletion ---------------------------------------------------------


def test_the_cleanup_finalizer_is_added_first() -> None:
    """sandbus (upstream adds it by an Update and comes back): a merge patch of the finalizers
    with the resourceVersion read, so a concurrent change is not overwritten; other
    finalizers stay; the same pass goes on to create the Job."""
    result = plan(snapshot(finalizers=("example.com/keep",)), *sandbox_and_pod())
    first = result.actions[0]
    assert isinstance(first, Patch) and first.subresource is None
    assert first.target == KEY
    assert first.patch == {
        "metadata": {
            "finalizers": ["example.com/keep", FINALIZER_SNAPSHOT_CLEANUP],
            "resourceVersion": "30",
        }
    }
    assert first.on_conflict == "refresh"
    assert [a.body["kind"] for a in result.actions[1:] if isinstance(a, Create)] == [
        "Job",
        "Event",
    ]
    assert status_patch(result) is not None


def test_a_snapshot_with_the_finalizer_is_not_patched_for_it() -> None:
    """sandbus: once it is on, no metadata write."""
    assert metadata_patches(plan(snapshot(), *sandbox_and_pod())) == []


def test_a_deleted_snapshot_deletes_its_jobs_then_lets_go() -> None:
    """sandbus (upstream's deletion, §4.1): the commit and unpause Jobs are deleted with
    Background propagation (their Pods go with them) on their uid, so a successor of the same
    name is never hit; then the cleanup finalizer is removed, the others kept. Nothing else:
    no status, no Job made, the images stay in the registry."""
    result = plan(
        snapshot(deleting=True, finalizers=(FINALIZER_SNAPSHOT_CLEANUP, "example.com/keep")),
        *sandbox_and_pod(),
        job(state="failed"),
        unpause(),
    )
    assert [(d.target, d.uid, d.resource_version, d.propagation) for d in deletes(result)] == [
        (ObjectKey("Job", NS, f"{SNAP}-commit"), JOB_UID, None, "Background"),
        (ObjectKey("Job", NS, f"{SNAP}-unpause"), f"uid-{SNAP}-unpause", None, "Background"),
    ]
    (finalizer,) = metadata_patches(result)
    assert finalizer.patch == {
        "metadata": {"finalizers": ["example.com/keep"], "resourceVersion": "30"}
    }
    assert result.actions[-1] is finalizer, "the Jobs are deleted before it lets go"
    assert status_patch(result) is None
    assert creates(result) == []


def test_a_deleted_snapshot_leaves_jobs_that_are_not_its_own() -> None:
    """sandbus: a Job of that name controlled by another snapshot (an earlier one of the same
    name) is not deleted, nor one already going; the finalizer is removed all the same."""
    earlier = snapshot(uid="uid-earlier")
    going = unpause()
    going["metadata"]["deletionTimestamp"] = NOW_TEXT
    result = plan(
        snapshot(deleting=True),
        job(owner=earlier, uid="uid-earlier-commit"),
        going,
    )
    assert deletes(result) == []
    (finalizer,) = metadata_patches(result)
    assert finalizer.patch["metadata"]["finalizers"] == []


def test_a_deleted_snapshot_without_the_finalizer_only_deletes() -> None:
    """sandbus: without our finalizer there is nothing to remove (and the snapshot may be gone
    before the pass runs)."""
    result = plan(snapshot(deleting=True, finalizers=("example.com/keep",)), job())
    assert [type(a) for a in result.actions] == [Delete]
    assert plan(snapshot(deleting=True, finalizers=("example.com/keep",))).actions == ()


def test_a_snapshot_that_is_gone_plans_nothing() -> None:
    """sandbus: a key woken for a snapshot that is gone (a Job's last event) does nothing."""
    result = plan(*sandbox_and_pod())
    assert result.actions == () and result.requeue_after is None


# -- Pending and Committing in one pass -----------------------------------------------------


def test_the_pass_that_creates_the_job_reports_committing() -> None:
    """sandbus: Pending is not written on its own. The pass that decides what to commit
    creates the Job, records the ``CreatedJob`` Event, and writes Committing with the source
    Pod and node and each container's image URI, in that order (a worker stopped between the
    create and the write finds the Job: see the take-up tests)."""
    result = plan(snapshot(), *sandbox_and_pod())
    assert [(type(a).__name__, getattr(a, "body", {}).get("kind")) for a in result.actions] == [
        ("Create", "Job"),
        ("Create", "Event"),
        ("Patch", None),
    ]
    assert commit_container(created_job(result))["args"] == job_args(tag=NAMED_TAG)
    assert status_patch(result) == {
        "observedGeneration": 1,
        "phase": "Committing",
        "format": "rootfs-v1",
        "sourcePodName": f"{NAME}-0",
        "sourceNodeName": NODE,
        "containers": [
            {"containerName": "main", "imageUri": f"{REGISTRY}/{NAME}-main:{NAMED_TAG}"},
            {"containerName": "sidecar", "imageUri": f"{REGISTRY}/{NAME}-sidecar:{NAMED_TAG}"},
        ],
        "conditions": [],
    }
    assert result.requeue_after == COMMITTING_RECHECK


def test_the_created_job_event_tells_the_user() -> None:
    """upstream's event ``CreatedJob`` (§4.1 step 6), about the snapshot, from
    sandboxsnapshot-controller, naming the Job, the Pod and the node."""
    (event,) = creates(plan(snapshot(), *sandbox_and_pod()), "Event")
    assert event["reason"] == "CreatedJob"
    assert event["type"] == "Normal"
    assert event["reportingController"] == "sandboxsnapshot-controller"
    assert event["regarding"]["kind"] == "SandboxSnapshot"
    assert event["regarding"]["name"] == SNAP
    assert event["regarding"]["uid"] == SNAP_UID
    assert event["metadata"]["namespace"] == NS
    assert f"{SNAP}-commit" in event["note"] and f"{NAME}-0" in event["note"]
    assert NODE in event["note"]


def test_no_event_when_events_are_off() -> None:
    """sandbus's SANDBUS_SNAPSHOT_EVENTS=false: the Job and the status, no Event."""
    settings = SnapshotSettings(registry=REGISTRY, events=False)
    result = plan(snapshot(), *sandbox_and_pod(), settings=settings)
    assert creates(result, "Event") == []
    assert [b["kind"] for b in creates(result)] == ["Job"]
    assert (status_patch(result) or {}).get("phase") == "Committing"


def test_a_pending_snapshot_goes_the_same_way() -> None:
    """A snapshot upstream's controller left Pending (its first write) is committed as a new
    one."""
    result = plan(
        snapshot(status={"phase": "Pending", "observedGeneration": 1}), *sandbox_and_pod()
    )
    assert [b["kind"] for b in creates(result)] == ["Job", "Event"]
    assert (status_patch(result) or {}).get("phase") == "Committing"


def test_a_committing_snapshot_whose_job_is_gone_makes_it_again() -> None:
    """Upstream's handleCommitting (§4.1): the Job missing (deleted, or taken by its TTL before
    its end was seen) → handlePending again, a new Job."""
    result = plan(snapshot(status=committing()), *sandbox_and_pod())
    assert commit_container(created_job(result))["args"][0] == f"{NAME}-0"
    assert (status_patch(result) or {}).get("phase") == "Committing"


# -- a commit Job taken up ------------------------------------------------------------------


@pytest.mark.parametrize("status", [None, {"phase": "Pending"}])
def test_a_commit_job_found_before_committing_is_taken_up(status: Json | None) -> None:
    """sandbus: the worker stopped between the Job's create and the status write. The Job
    there is taken up: no second Job, and the status is written from the Job's arguments
    (its Pod, its node, its images), not chosen again, even if the sandbox's Pod has moved
    since."""
    args = job_args("bs-old", ("main",), "snap-gen1")
    found = job(args=args, node="node-9")
    moved = pod(f"{NAME}-0", owner=batch_sandbox(), node="node-2")
    result = plan(snapshot(status=status), batch_sandbox(), moved, found)
    assert creates(result) == []
    assert status_patch(result) == {
        "observedGeneration": 1,
        "phase": "Committing",
        "format": "rootfs-v1",
        "sourcePodName": "bs-old",
        "sourceNodeName": "node-9",
        "containers": [{"containerName": "main", "imageUri": image_of("main", "snap-gen1")}],
        "conditions": [],
    }
    assert result.requeue_after == COMMITTING_RECHECK


def test_a_job_taken_up_needs_no_sandbox() -> None:
    """sandbus: the BatchSandbox gone meanwhile changes nothing: the commit runs on."""
    result = plan(snapshot(), job())
    assert creates(result) == []
    assert (status_patch(result) or {}).get("sourcePodName") == f"{NAME}-0"


def test_a_job_taken_up_after_it_succeeded_goes_straight_to_succeed() -> None:
    """sandbus: the Job ended while no worker was there; the containers come from its
    arguments, the digests from its Pod."""
    done = job(state="succeeded")
    result = plan(snapshot(), done, commit_pod(done, message=both_digests()))
    status = status_patch(result)
    assert status is not None and status["phase"] == "Succeed"
    assert conditions_of(status) == READY
    assert status["sourcePodName"] == f"{NAME}-0" and status["sourceNodeName"] == NODE
    assert [
        (c["containerName"], c["imageUri"], c["imageDigest"]) for c in status["containers"]
    ] == [
        ("main", image_of("main"), "sha256:" + "a" * 64),
        ("sidecar", image_of("sidecar"), "sha256:" + "b" * 64),
    ]
    assert creates(result) == []


def test_a_job_taken_up_after_it_failed_unpauses_its_pod() -> None:
    """sandbus: likewise for a failed one: the unpause Job on the Job's Pod, node and
    containers, then Failed ``CommitJobFailed``."""
    result = plan(snapshot(), job(state="failed", args=job_args("bs-9", ("app",)), node="node-3"))
    body = created_job(result, f"{SNAP}-unpause")
    assert commit_container(body)["args"] == ["unpause", "bs-9", NS, "app"]
    assert body["spec"]["template"]["spec"]["nodeName"] == "node-3"
    status = status_patch(result)
    assert status is not None and status["phase"] == "Failed"
    assert status["sourcePodName"] == "bs-9"
    assert conditions_of(status)["Failed"][1] == "CommitJobFailed"


@pytest.mark.parametrize(
    "args", [["bs-0", NS], ["bs-0", NS, "main"], ["bs-0", NS, ":uri"], ["bs-0", NS, "main:"]]
)
def test_a_job_of_ours_that_is_no_commit_fails_it(args: list[str]) -> None:
    """sandbus: a Job of ours by that name whose arguments are not a commit's cannot be taken
    up: Failed ``CommitJobInvalid``, and no second Job."""
    result = plan(snapshot(), *sandbox_and_pod(), job(args=args))
    assert conditions_of(status_patch(result))["Failed"][1] == "CommitJobInvalid"
    assert creates(result) == []


@pytest.mark.parametrize("status", [None, committing()])
def test_a_job_of_another_snapshot_holding_the_name_is_waited_for(status: Json | None) -> None:
    """sandbus: ``<snap>-commit`` is a Job of another snapshot (an earlier one of the same
    name, its garbage not collected yet): it is neither used, nor deleted, nor written to, and
    the snapshot's status is left alone until it goes."""
    earlier = snapshot(uid="uid-earlier")
    theirs = job(owner=earlier, uid="uid-earlier-commit", state="succeeded")
    result = plan(
        snapshot(status=status),
        *sandbox_and_pod(),
        theirs,
        commit_pod(theirs, message=both_digests()),
    )
    assert result.actions == ()
    assert result.requeue_after == TAKEN_RECHECK


def test_a_job_of_no_snapshot_holding_the_name_fails_the_snapshot() -> None:
    """sandbus: a Job of that name that no snapshot controls will not go by itself: the
    snapshot fails with CommitJobNameTaken, saying what to do, and the Job is left alone."""
    stray = job()
    del stray["metadata"]["ownerReferences"]
    result = plan(snapshot(finalizers=()), *sandbox_and_pod(), stray)
    status = status_patch(result)
    assert status is not None and status["phase"] == "Failed"
    assert conditions_of(status)["Failed"][1] == "CommitJobNameTaken"
    assert creates(result) == [] and deletes(result) == []


# -- the digests' grace ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param((), id="no Pod yet"),
        pytest.param((None,), id="no message"),
        pytest.param(("not json",), id="not the committer's"),
        pytest.param(('{"containers": "x"}',), id="no list"),
    ],
)
def test_a_succeeded_job_whose_pod_has_not_reported_waits(pods: tuple[str | None, ...]) -> None:
    """sandbus: a Job seen succeeded before its Pod shows the digests waits for them (upstream
    succeeds at once without digests): no status, a look again within a second."""
    done = job(state="succeeded", completed=NOW - timedelta(seconds=2))
    objects = [commit_pod(done, message=m) for m in pods]
    result = plan(snapshot(status=committing()), done, *objects)
    assert result.actions == ()
    assert result.requeue_after == 1.0


def test_the_last_look_within_the_grace_is_at_its_end() -> None:
    """sandbus: the last look is when the grace runs out, not a second after."""
    settings = SnapshotSettings(registry=REGISTRY, digest_grace=29.5)
    done = job(state="succeeded", completed=NOW - timedelta(seconds=29))
    result = plan(snapshot(status=committing()), done, settings=settings)
    assert result.actions == ()
    assert result.requeue_after == pytest.approx(0.5)


@pytest.mark.parametrize("grace", [30.0, 0.0])
def test_after_the_grace_it_succeeds_without_digests(grace: float) -> None:
    """sandbus: past ``digest_grace`` (or with none) the snapshot succeeds all the same, its
    containers without ``imageDigest``."""
    settings = SnapshotSettings(registry=REGISTRY, digest_grace=grace)
    done = job(state="succeeded", completed=NOW - timedelta(seconds=31))
    result = plan(snapshot(status=committing()), done, commit_pod(done), settings=settings)
    status = status_patch(result)
    assert status is not None and status["phase"] == "Succeed"
    assert conditions_of(status) == READY
    assert status["containers"] == committing()["containers"]


def test_a_succeeded_job_without_a_completion_time_waits() -> None:
    """sandbus: the grace counts from the Job's ``completionTime``; a Job counting a success
    before it has one (``SuccessCriteriaMet`` while its Pod terminates) is waited for."""
    done = job(state="succeeded", completed=None)
    result = plan(snapshot(status=committing()), done)
    assert result.actions == ()
    assert result.requeue_after == 1.0


def test_digests_of_a_pod_of_another_job_are_not_read() -> None:
    """sandbus: only Pods the commit Job controls say what it committed."""
    done = job(state="succeeded", completed=NOW - timedelta(seconds=60))
    other = job(f"{SNAP}-unpause", uid="uid-other", state="succeeded")
    result = plan(
        snapshot(status=committing()), done, other, commit_pod(other, message=both_digests())
    )
    status = status_patch(result)
    assert status is not None and status["phase"] == "Succeed"
    assert all("imageDigest" not in c for c in status["containers"])


# -- a commit Job the API server refuses (issue #32) ----------------------------------------

JOB_KEY = ObjectKey("Job", NS, f"{SNAP}-commit")
FORBIDDEN = (
    f'create {JOB_KEY}: Forbidden (403): jobs.batch "{SNAP}-commit" is forbidden: exceeded '
    "quota: jobs, requested: count/jobs.batch=1"
)
FORBIDDEN_MESSAGE = (
    f"the API server refuses the commit Job {SNAP}-commit (Forbidden, 403): jobs.batch is "
    "forbidden: exceeded quota: jobs, requested: count/jobs.batch=1. Fix what refuses it (a "
    "quota, an admission policy, the committer's settings); it is created again with backoff"
)


def status_patches(result: Plan) -> list[Json]:
    return [
        a.patch["status"]
        for a in actions_of(result)
        if isinstance(a, Patch) and a.subresource == "status"
    ]


def test_a_refused_commit_job_is_said_before_it_is_tried_again() -> None:
    """The previous pass's create of the commit Job was refused: this pass writes Pending with
    CommitJobFailure/FailedCreateJob in the server's words and a Warning Event
    ``FailedCreateJob`` (upstream's), then creates the Job again; once a create goes through,
    Committing removes the condition."""
    result = plan(snapshot(), *sandbox_and_pod(), last_error=FORBIDDEN)
    kinds = [(type(a).__name__, getattr(a, "body", {}).get("kind")) for a in actions_of(result)]
    assert kinds == [
        ("Patch", None),
        ("Create", "Event"),
        ("Create", "Job"),
        ("Create", "Event"),
        ("Patch", None),
    ]
    refused, committing = status_patches(result)
    assert refused["phase"] == "Pending"
    assert conditions_of(refused) == {
        "CommitJobFailure": ("True", "FailedCreateJob", FORBIDDEN_MESSAGE)
    }
    warning = creates(result, "Event")[0]
    assert (warning["type"], warning["reason"]) == ("Warning", "FailedCreateJob")
    assert warning["note"] == f"CommitJobFailure: {FORBIDDEN_MESSAGE}"
    assert committing["phase"] == "Committing" and committing["conditions"] == []

    # Refused again: said already, nothing more than the create.
    stored = snapshot(status={"observedGeneration": 1, **refused})
    again = plan(stored, *sandbox_and_pod(), last_error=FORBIDDEN)
    assert [b["reason"] for b in creates(again, "Event")] == ["CreatedJob"]
    assert [s["phase"] for s in status_patches(again)] == ["Committing"]


def test_a_commit_job_create_that_keeps_failing_is_said_once_it_persists() -> None:
    broken = f"create {JOB_KEY}: InternalError (500): Internal error occurred: etcd is unhappy"
    quiet = plan(snapshot(), *sandbox_and_pod(), last_error=broken)
    assert [s["phase"] for s in status_patches(quiet)] == ["Committing"], "not yet: it may pass"
    result = plan(snapshot(), *sandbox_and_pod(), last_error=broken, failure_persists=True)
    refused = status_patches(result)[0]
    assert conditions_of(refused)["CommitJobFailure"][1:] == (
        "FailedCreateJob",
        f"creating the commit Job {SNAP}-commit keeps failing (InternalError, 500): Internal "
        "error occurred: etcd is unhappy; it is created again with backoff",
    )
    other = f"create Job/{NS}/other-commit: Forbidden (403): no"
    unrelated = plan(snapshot(), *sandbox_and_pod(), last_error=other)
    assert [s["phase"] for s in status_patches(unrelated)] == ["Committing"]
