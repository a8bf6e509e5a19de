"""The simulated image-committer and the finished Pod a Job gets for it, without a server.

The committer's verdict is a function of the Job's arguments and the source Pod; the Job
controller's plan turns it into the Pod's create and status, then the Job's status.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from api.objects import Json
from devtools.cluster.controllers.kubelet.actions import CreatePod, DeletePod, Instant, PatchStatus
from devtools.cluster.controllers.kubelet.committer import (
    DEFAULT_COMMIT_FAILURE,
    USAGE,
    CommitterCall,
    CommitterExit,
    committer_call,
    image_digest,
    parse_committer_args,
    run_committer,
)
from devtools.cluster.controllers.kubelet.config import (
    FAIL_ANNOTATION,
    FAIL_COMMIT_ANNOTATION,
    KubeletConfig,
)
from devtools.cluster.controllers.kubelet.jobs import (
    JobMemory,
    JobOutcome,
    controlled_by_job,
    decide_job,
    job_pod,
    job_pod_name,
    plan_job,
)
from devtools.cluster.controllers.kubelet.nodes import ClusterView, NodeInfo
from devtools.cluster.controllers.kubelet.stages import observe_stage, plan_pod

URI = "registry.sandbus.local/snapshots/bs-main:snap-gen1"
SIDECAR_URI = "registry.sandbus.local/snapshots/bs-main-sidecar:snap-gen1"
CONFIG = KubeletConfig()
AT = Instant(10.0, "2024-01-01T00:00:10Z")


def committer_job(args: list[str], *, name: str = "snap-commit") -> Json:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
        },
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": {"sandbox.opensandbox.io/sandbox-snapshot-name": "snap"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": "devcluster-node-0",
                    "containers": [
                        {
                            "name": "commit",
                            "image": "image-committer:dev",
                            "command": ["/usr/local/bin/image-committer"],
                            "args": args,
                        }
                    ],
                },
            },
        },
    }


def source_pod(*containers: str, annotations: Json | None = None) -> Json:
    return {
        "metadata": {
            "name": "bs-main",
            "namespace": "default",
            "uid": "uid-bs-main",
            "annotations": annotations or {},
        },
        "spec": {"containers": [{"name": c, "image": "sandbox:1"} for c in containers]},
    }


COMMIT_ARGS = ["bs-main", "default", f"main:{URI}", f"sidecar:{SIDECAR_URI}"]


# ----------------------------------------------------------------------------- arguments


def test_a_commit_target_is_split_on_its_first_colon() -> None:
    call = parse_committer_args(COMMIT_ARGS)
    assert call == CommitterCall(
        False, "bs-main", "default", ("main", "sidecar"), (URI, SIDECAR_URI)
    )


def test_unpause_names_containers_without_images() -> None:
    call = parse_committer_args(["unpause", "bs-main", "default", "main", "sidecar"])
    assert call == CommitterCall(True, "bs-main", "default", ("main", "sidecar"))


@pytest.mark.parametrize(
    "args", [[], ["bs-main", "default"], ["unpause", "bs-main"], ["bs-main", "default", "main"]]
)
def test_arguments_that_are_not_a_committers_are_a_usage_error(args: list[str]) -> None:
    with pytest.raises(ValueError, match="usage: image-committer"):
        parse_committer_args(args)


def test_a_job_is_a_committer_by_its_command() -> None:
    assert committer_call(committer_job(COMMIT_ARGS)) is not None
    plain = committer_job(COMMIT_ARGS)
    plain["spec"]["template"]["spec"]["containers"][0]["command"] = ["/bin/sh"]
    assert committer_call(plain) is None
    del plain["spec"]["template"]["spec"]["containers"][0]["command"]
    assert committer_call(plain) is None


# ----------------------------------------------------------------------------- the verdict


def test_a_commit_reports_every_image_with_a_stable_digest() -> None:
    ended = run_committer(parse_committer_args(COMMIT_ARGS), source_pod("main", "sidecar"))
    assert ended.succeeded
    report = json.loads(ended.message)
    main_digest = "sha256:" + hashlib.sha256(f"uid-bs-main/main/{URI}".encode()).hexdigest()
    assert report == {
        "containers": [
            {"name": "main", "image": URI, "digest": main_digest},
            {
                "name": "sidecar",
                "image": SIDECAR_URI,
                "digest": image_digest("uid-bs-main", "sidecar", SIDECAR_URI),
            },
        ]
    }
    # Another pod, or another image of the same container, is another digest.
    assert image_digest("uid-other", "main", URI) != main_digest
    assert image_digest("uid-bs-main", "main", SIDECAR_URI) != main_digest


def test_a_missing_pod_or_container_fails_the_commit() -> None:
    call = parse_committer_args(COMMIT_ARGS)
    assert run_committer(call, None) == CommitterExit(1, "pod default/bs-main not found")
    assert run_committer(call, source_pod("main")) == CommitterExit(
        1, 'container "sidecar" not found in pod default/bs-main'
    )


def test_the_fail_commit_annotation_is_the_failure_message() -> None:
    call = parse_committer_args(COMMIT_ARGS)
    annotated = source_pod("main", "sidecar", annotations={FAIL_COMMIT_ANNOTATION: "disk full"})
    assert run_committer(call, annotated) == CommitterExit(1, "disk full")
    empty = source_pod("main", "sidecar", annotations={FAIL_COMMIT_ANNOTATION: ""})
    assert run_committer(call, empty) == CommitterExit(1, DEFAULT_COMMIT_FAILURE)


def test_unpause_succeeds_even_without_the_pod() -> None:
    call = parse_committer_args(["unpause", "bs-main", "default", "main"])
    assert run_committer(call, None) == CommitterExit(0, "")


# ----------------------------------------------------------------------------- the Job's outcome


def lookup(pod: Json | None) -> Any:
    def find(namespace: str, name: str) -> Json | None:
        meta = (pod or {}).get("metadata") or {}
        return pod if (meta.get("namespace"), meta.get("name")) == (namespace, name) else None

    return find


def test_decide_job_gives_committer_jobs_a_pod_report_and_others_none() -> None:
    job = committer_job(COMMIT_ARGS)
    outcome = decide_job(job, CONFIG, lookup(source_pod("main", "sidecar")))
    assert outcome.succeeded and outcome.message == ""
    assert outcome.termination_message is not None
    assert [c["name"] for c in json.loads(outcome.termination_message)["containers"]] == [
        "main",
        "sidecar",
    ]
    failed = decide_job(job, CONFIG, lookup(None))
    assert failed == JobOutcome(
        False, "pod default/bs-main not found", "pod default/bs-main not found"
    )
    plain = committer_job(COMMIT_ARGS)
    plain["spec"]["template"]["spec"]["containers"][0]["command"] = ["/bin/true"]
    assert decide_job(plain, CONFIG) == JobOutcome(True)


def test_a_failure_mode_fails_a_committer_job_too() -> None:
    job = committer_job(["unpause", "bs-main", "default", "main"])
    job["metadata"]["annotations"] = {FAIL_ANNOTATION: "exit-1"}
    outcome = decide_job(job, CONFIG, lookup(source_pod("main")))
    assert not outcome.succeeded
    assert outcome.termination_message == "devcluster: injected failure exit-1"


def test_bad_committer_arguments_fail_with_the_usage() -> None:
    outcome = decide_job(committer_job(["bs-main"]), CONFIG)
    assert (outcome.succeeded, outcome.message, outcome.termination_message) == (
        False,
        USAGE,
        USAGE,
    )


# ----------------------------------------------------------------------------- the Job's Pod


def test_the_job_pod_is_named_labelled_and_owned_like_upstreams() -> None:
    job = committer_job(COMMIT_ARGS)
    pod = job_pod(job)
    name = pod["metadata"]["name"]
    assert name == job_pod_name(job)
    assert name.startswith("snap-commit-") and len(name) == len("snap-commit-") + 5
    assert name[-5:].isalnum() and name[-5:] == name[-5:].lower()
    assert job_pod_name(job) == name  # every pass plans the same Pod
    recreated = committer_job(COMMIT_ARGS)
    recreated["metadata"]["uid"] = "uid-recreated"
    assert job_pod_name(recreated) != name
    assert pod["metadata"]["labels"] == {
        "sandbox.opensandbox.io/sandbox-snapshot-name": "snap",
        "batch.kubernetes.io/controller-uid": "uid-snap-commit",
        "batch.kubernetes.io/job-name": "snap-commit",
        "controller-uid": "uid-snap-commit",
        "job-name": "snap-commit",
    }
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "snap-commit",
        "uid": "uid-snap-commit",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert pod["spec"] == job["spec"]["template"]["spec"]
    assert pod["spec"] is not job["spec"]["template"]["spec"]
    assert controlled_by_job(pod)
    assert not controlled_by_job(source_pod("main"))


def test_a_long_job_name_is_cut_as_generate_name_cuts_it() -> None:
    assert len(job_pod_name(committer_job(COMMIT_ARGS, name="j" * 63))) == 63


def started(job: Json) -> Json:
    job["status"] = {"startTime": "2024-01-01T00:00:05Z", "active": 1}
    return job


def test_an_outcome_with_a_termination_message_creates_the_finished_pod_first() -> None:
    job = started(committer_job(COMMIT_ARGS))
    outcome = JobOutcome(True, termination_message='{"containers":[]}')
    (create, finish), _ = plan_job(job, JobMemory(launched=True, outcome=outcome), AT)
    assert isinstance(create, CreatePod) and isinstance(finish, PatchStatus)
    assert create.pod == job_pod(job)
    status = create.status
    assert status["phase"] == "Succeeded"
    assert status["startTime"] == "2024-01-01T00:00:05Z"
    (container,) = status["containerStatuses"]
    terminated = container["state"]["terminated"]
    assert (container["name"], container["ready"]) == ("commit", False)
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        0,
        "Completed",
        '{"containers":[]}',
    )
    assert (terminated["startedAt"], terminated["finishedAt"]) == (
        "2024-01-01T00:00:05Z",
        AT.wall,
    )
    assert finish.status["succeeded"] == 1


def test_a_failed_outcome_gives_a_failed_pod_and_job() -> None:
    job = started(committer_job(COMMIT_ARGS))
    outcome = JobOutcome(False, "disk full", termination_message="disk full")
    (create, finish), _ = plan_job(job, JobMemory(launched=True, outcome=outcome), AT)
    assert isinstance(create, CreatePod) and isinstance(finish, PatchStatus)
    assert create.status["phase"] == "Failed"
    terminated = create.status["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        1,
        "Error",
        "disk full",
    )
    assert finish.status["failed"] == 4  # backoffLimit 3 + 1
    (failed,) = finish.status["conditions"]
    assert (failed["type"], failed["message"]) == ("Failed", "disk full")


def test_an_empty_termination_message_still_gives_a_pod_but_no_message() -> None:
    job = started(committer_job(["unpause", "bs-main", "default", "main"], name="snap-unpause"))
    outcome = JobOutcome(True, termination_message="")
    (create, _finish), _ = plan_job(job, JobMemory(launched=True, outcome=outcome), AT)
    assert isinstance(create, CreatePod)
    assert "message" not in create.status["containerStatuses"][0]["state"]["terminated"]


def test_an_outcome_without_a_termination_message_runs_without_a_pod() -> None:
    job = started(committer_job(COMMIT_ARGS))
    (finish,), _ = plan_job(job, JobMemory(launched=True, outcome=JobOutcome(True)), AT)
    assert isinstance(finish, PatchStatus)


# ----------------------------------------------------------------------------- the kubelet


VIEW = ClusterView((NodeInfo("devcluster-node-0", 0),))


def test_the_kubelet_leaves_a_jobs_pod_alone_until_it_is_deleted() -> None:
    pod = job_pod(committer_job(COMMIT_ARGS))
    pod["metadata"] |= {"uid": "uid-pod", "resourceVersion": "3"}
    pod["status"] = {"phase": "Pending"}
    assert observe_stage(pod, VIEW) == "job-pod"
    assert plan_pod(pod, None, AT, CONFIG, VIEW).actions == ()
    del pod["spec"]["nodeName"]  # not even the scheduler binds it
    assert plan_pod(pod, None, AT, CONFIG, VIEW).actions == ()
    pod["metadata"]["deletionTimestamp"] = AT.wall
    assert observe_stage(pod, VIEW) == "deleting-job-pod"
    assert plan_pod(pod, None, AT, CONFIG, VIEW).actions == (DeletePod("uid-pod"),)


def test_without_the_job_simulation_a_jobs_pod_is_run_like_any_other() -> None:
    pod = job_pod(committer_job(COMMIT_ARGS))
    pod["metadata"] |= {"uid": "uid-pod", "resourceVersion": "3"}
    pod["status"] = {"phase": "Pending"}
    assert observe_stage(pod, VIEW, jobs_simulated=False) == "bound"
    (pending,) = plan_pod(pod, None, AT, KubeletConfig(manage_jobs=False), VIEW).actions
    assert isinstance(pending, PatchStatus)
