"""The simulated scheduler/kubelet/Job controller's decisions, without a server.

A small driver plays the API server's part: it applies each planned write to the pod the way the
server would (binding sets nodeName, a status write merge-patches ``status``) and advances a fake
clock to each requested wake-up, so a whole pod lifecycle runs in microseconds.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devtools.cluster.controllers.kubelet.actions import (
    BindPod,
    DeletePod,
    Instant,
    LaunchJob,
    PatchStatus,
)
from devtools.cluster.controllers.kubelet.config import (
    FAIL_ANNOTATION,
    FailureRule,
    KubeletConfig,
    failure_mode,
)
from devtools.cluster.controllers.kubelet.jobs import JobMemory, JobOutcome, plan_job
from devtools.cluster.controllers.kubelet.nodes import ClusterView, allocate_pod_ip
from devtools.cluster.controllers.kubelet.stages import plan_pod
from devtools.cluster.controllers.kubelet.statuses import go_duration
from tests.support.samples import is_ready
from tests.unit.devcluster.kubelet import CONFIG, NODES, VIEW, Driver, make_pod


def conditions(pod: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}


# ----------------------------------------------------------------------------- happy path


def test_pod_goes_pending_scheduled_running_ready() -> None:
    driver = Driver(make_pod())
    assert driver.step() == []  # the scheduler waits schedule_delay first
    assert driver.clock == pytest.approx(100.0 + CONFIG.schedule_delay)
    assert driver.step() == [BindPod("devcluster-node-0")]
    (creating,) = driver.step()
    assert isinstance(creating, PatchStatus)
    pod = driver.pod
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["hostIP"] == "172.18.0.2"
    assert pod["status"]["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "ContainerCreating"}
    }
    assert [c["type"] for c in pod["status"]["conditions"]] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    driver.run_until(lambda p: p["status"]["phase"] == "Running")
    status = driver.pod["status"]
    assert status["podIP"] == "10.244.0.2"
    assert status["podIPs"] == [{"ip": "10.244.0.2"}]
    container = status["containerStatuses"][0]
    assert container["started"] is True
    assert container["ready"] is False
    assert "startedAt" in container["state"]["running"]
    assert container["containerID"].startswith("containerd://")
    assert not is_ready(driver.pod)
    driver.run_until(is_ready)
    assert driver.pod["status"]["containerStatuses"][0]["ready"] is True
    assert conditions(driver.pod) == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    # Ready is the last stage: nothing more to do, and no wake-up.
    decision = plan_pod(driver.pod, driver.memory, driver.at(), CONFIG, VIEW)
    assert decision.actions == () and decision.wake_after is None


def test_stage_delays_are_honoured_and_scaled() -> None:
    config = KubeletConfig(nodes=2, start_delay=1.0, pod_ready_delay=2.0, time_scale=0.5)
    driver = Driver(make_pod(), config)
    driver.run_until(lambda p: "containerStatuses" in p["status"])
    created_at = driver.clock
    driver.run_until(lambda p: p["status"]["phase"] == "Running")
    assert driver.clock - created_at == pytest.approx(0.5)
    running_at = driver.clock
    driver.run_until(is_ready)
    assert driver.clock - running_at == pytest.approx(1.0)


def test_readiness_probe_initial_delay_sets_the_ready_delay() -> None:
    pod = make_pod(
        containers=[
            {"name": "c", "image": "x", "readinessProbe": {"initialDelaySeconds": 7}},
        ]
    )
    driver = Driver(pod)
    driver.run_until(lambda p: p["status"]["phase"] == "Running")
    running_at = driver.clock
    driver.run_until(is_ready)
    assert driver.clock - running_at == pytest.approx(7.0)


def test_condition_transition_times_move_only_when_status_changes() -> None:
    driver = Driver(make_pod())
    driver.run_until(lambda p: p["status"]["phase"] == "Running")
    before = {c["type"]: c["lastTransitionTime"] for c in driver.pod["status"]["conditions"]}
    driver.clock += 17
    driver.run_until(is_ready)
    after = {c["type"]: c["lastTransitionTime"] for c in driver.pod["status"]["conditions"]}
    assert after["Initialized"] == before["Initialized"]
    assert after["PodScheduled"] == before["PodScheduled"]
    assert after["Ready"] != before["Ready"]


def test_init_containers_complete_before_the_pod_runs() -> None:
    pod = make_pod(initContainers=[{"name": "setup", "image": "busybox"}])
    driver = Driver(pod)
    driver.run_until(lambda p: "containerStatuses" in p["status"])
    assert conditions(driver.pod)["Initialized"] == "False"
    assert driver.pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == (
        "PodInitializing"
    )
    driver.run_until(lambda p: p["status"]["phase"] == "Running")
    init = driver.pod["status"]["initContainerStatuses"][0]
    assert init["state"]["terminated"]["reason"] == "Completed"
    assert conditions(driver.pod)["Initialized"] == "True"


# ----------------------------------------------------------------------------- scheduling


def test_scheduler_picks_the_least_loaded_node() -> None:
    view = ClusterView(NODES, pods_per_node={"devcluster-node-0": 3, "devcluster-node-1": 1})
    driver = Driver(make_pod(), view=view)
    driver.run_until(lambda p: "nodeName" in p["spec"])
    assert driver.pod["spec"]["nodeName"] == "devcluster-node-1"


def test_node_selector_restricts_the_choice() -> None:
    view = ClusterView(NODES, pods_per_node={"devcluster-node-0": 9})
    driver = Driver(make_pod(nodeSelector={"disk": "ssd"}), view=view)
    driver.run_until(lambda p: "nodeName" in p["spec"])
    assert driver.pod["spec"]["nodeName"] == "devcluster-node-0"


def test_no_fitting_node_marks_the_pod_unschedulable_once() -> None:
    driver = Driver(make_pod(nodeSelector={"gpu": "yes"}))
    driver.run_until(lambda p: "conditions" in p["status"])
    (scheduled,) = driver.pod["status"]["conditions"]
    assert scheduled["type"] == "PodScheduled"
    assert scheduled["status"] == "False"
    assert scheduled["reason"] == "Unschedulable"
    assert scheduled["message"].startswith("0/2 nodes are available: 2 node(s) didn't match")
    decision = plan_pod(driver.pod, driver.memory, driver.at(), CONFIG, VIEW)
    assert decision.actions == () and decision.wake_after is None


def scheduled_condition(pod: dict[str, Any], view: ClusterView) -> dict[str, Any]:
    driver = Driver(pod, view=view)
    driver.run_until(lambda p: "conditions" in p["status"])
    assert "nodeName" not in driver.pod["spec"]
    (scheduled,) = driver.pod["status"]["conditions"]
    assert (scheduled["type"], scheduled["status"]) == ("PodScheduled", "False")
    return scheduled


def test_a_full_node_is_passed_over() -> None:
    view = ClusterView(NODES, pods_per_node={"devcluster-node-1": 1}, max_pods=1)
    driver = Driver(make_pod(), view=view)
    driver.run_until(lambda p: "nodeName" in p["spec"])
    assert driver.pod["spec"]["nodeName"] == "devcluster-node-0"


def test_when_every_node_is_full_the_pod_is_unschedulable_with_too_many_pods() -> None:
    full = ClusterView(
        NODES, pods_per_node={"devcluster-node-0": 110, "devcluster-node-1": 110}, max_pods=110
    )

    scheduled = scheduled_condition(make_pod(), full)

    assert scheduled["reason"] == "Unschedulable"
    assert scheduled["message"] == (
        "0/2 nodes are available: 2 Too many pods. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod."
    )


def test_a_full_selected_node_and_an_unselected_one_are_both_named() -> None:
    # The wording and order of kube-scheduler's FitError: one count per reason, sorted.
    view = ClusterView(NODES, pods_per_node={"devcluster-node-0": 1}, max_pods=1)

    scheduled = scheduled_condition(make_pod(nodeSelector={"disk": "ssd"}), view)

    assert scheduled["message"] == (
        "0/2 nodes are available: 1 Too many pods, 1 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims "
        "found for incoming pod, 1 Preemption is not helpful for scheduling."
    )


def test_unschedulable_mode_never_binds() -> None:
    driver = Driver(make_pod(annotations={FAIL_ANNOTATION: "unschedulable"}))
    driver.run_until(lambda p: "conditions" in p["status"])
    assert "nodeName" not in driver.pod["spec"]
    assert driver.pod["status"]["conditions"][0]["reason"] == "Unschedulable"


def test_pods_for_another_scheduler_or_node_are_left_alone() -> None:
    other_scheduler = make_pod(schedulerName="my-scheduler")
    assert plan_pod(other_scheduler, None, Instant(0, "t"), CONFIG, VIEW).actions == ()
    other_node = make_pod(nodeName="somewhere-else")
    decision = plan_pod(other_node, None, Instant(0, "t"), CONFIG, VIEW)
    assert decision.actions == () and decision.wake_after is None


def test_pod_ips_skip_addresses_in_use() -> None:
    assert allocate_pod_ip(1, frozenset({"10.244.1.2", "10.244.1.3"})) == "10.244.1.4"
    assert allocate_pod_ip(0, frozenset(f"10.244.0.{h}" for h in range(2, 255))) is None
    view = ClusterView(NODES, ips_in_use={"devcluster-node-0": frozenset({"10.244.0.2"})})
    driver = Driver(make_pod(), view=view)
    driver.run_until(lambda p: p["status"]["phase"] == "Running")
    assert driver.pod["status"]["podIP"] == "10.244.0.3"
    ip_writes = [w for w in driver.writes if isinstance(w, PatchStatus) and w.pod_ip]
    assert [w.pod_ip for w in ip_writes] == ["10.244.0.3"]


# ----------------------------------------------------------------------------- failure modes


def test_image_pull_failure_goes_err_image_pull_then_back_off() -> None:
    driver = Driver(make_pod(annotations={FAIL_ANNOTATION: "image-pull"}))

    def waiting_reason(pod: dict[str, Any]) -> str | None:
        statuses = pod["status"].get("containerStatuses") or [{}]
        return (statuses[0].get("state") or {}).get("waiting", {}).get("reason")

    driver.run_until(lambda p: waiting_reason(p) == "ErrImagePull")
    assert (
        "nginx:1.25" in driver.pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    )
    driver.run_until(lambda p: waiting_reason(p) == "ImagePullBackOff")
    assert driver.pod["status"]["phase"] == "Pending"
    decision = plan_pod(driver.pod, driver.memory, driver.at(), CONFIG, VIEW)
    assert decision.actions == () and decision.wake_after is None


def test_crash_loops_with_growing_back_off() -> None:
    driver = Driver(make_pod(annotations={FAIL_ANNOTATION: "crash"}))
    driver.run_until(lambda p: p["status"]["phase"] == "Running")
    first_id = driver.pod["status"]["containerStatuses"][0]["containerID"]

    def restarts(pod: dict[str, Any]) -> int:
        return int(pod["status"]["containerStatuses"][0]["restartCount"])

    driver.run_until(lambda p: restarts(p) == 1)
    container = driver.pod["status"]["containerStatuses"][0]
    assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert (
        "back-off 200ms restarting failed container=app pod=p_default(uid-p)"
        in (container["state"]["waiting"]["message"])
    )
    assert container["lastState"]["terminated"]["exitCode"] == 1
    assert container["lastState"]["terminated"]["reason"] == "Error"
    assert driver.pod["status"]["phase"] == "Running"
    assert not is_ready(driver.pod)
    crashed_at = driver.clock
    driver.run_until(lambda p: "running" in p["status"]["containerStatuses"][0]["state"])
    assert driver.clock - crashed_at == pytest.approx(CONFIG.crash_backoff)
    assert driver.pod["status"]["containerStatuses"][0]["containerID"] != first_id
    driver.run_until(lambda p: restarts(p) == 2)
    crashed_again_at = driver.clock
    driver.run_until(lambda p: "running" in p["status"]["containerStatuses"][0]["state"])
    assert driver.clock - crashed_again_at == pytest.approx(2 * CONFIG.crash_backoff)


@pytest.mark.parametrize(
    ("mode", "policy", "phase", "reason"),
    [
        ("exit-0", "Never", "Succeeded", "Completed"),
        ("exit-1", "Never", "Failed", "Error"),
        ("exit-0", "OnFailure", "Succeeded", "Completed"),
    ],
)
def test_exit_modes_end_in_the_phase_restart_policy_gives(
    mode: str, policy: str, phase: str, reason: str
) -> None:
    driver = Driver(make_pod(annotations={FAIL_ANNOTATION: mode}, restartPolicy=policy))
    driver.run_until(lambda p: p["status"]["phase"] in ("Succeeded", "Failed"))
    assert driver.pod["status"]["phase"] == phase
    terminated = driver.pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == reason
    assert terminated["exitCode"] == (0 if mode == "exit-0" else 1)
    ready = next(c for c in driver.pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "PodCompleted"
    decision = plan_pod(driver.pod, driver.memory, driver.at(), CONFIG, VIEW)
    assert decision.actions == () and decision.wake_after is None


@pytest.mark.parametrize(
    ("mode", "policy", "exit_reason"),
    [("exit-1", "OnFailure", "Error"), ("exit-0", "Always", "Completed")],
)
def test_exits_the_policy_restarts_become_crash_loops(
    mode: str, policy: str, exit_reason: str
) -> None:
    driver = Driver(make_pod(annotations={FAIL_ANNOTATION: mode}, restartPolicy=policy))
    driver.run_until(lambda p: p["status"].get("containerStatuses", [{}])[0].get("restartCount"))
    container = driver.pod["status"]["containerStatuses"][0]
    assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert container["lastState"]["terminated"]["reason"] == exit_reason
    assert driver.pod["status"]["phase"] == "Running"


def test_never_ready_pod_runs_but_is_never_ready() -> None:
    driver = Driver(make_pod(annotations={FAIL_ANNOTATION: "never-ready"}))
    driver.run_until(lambda p: p["status"]["phase"] == "Running")
    decision = plan_pod(driver.pod, driver.memory, driver.at(), CONFIG, VIEW)
    assert decision.actions == () and decision.wake_after is None
    assert not is_ready(driver.pod)


def test_failure_rules_select_by_labels_namespace_and_name() -> None:
    config = KubeletConfig(
        failure_rules=(
            FailureRule("crash", selector="app=web,tier in (db)"),
            FailureRule("image-pull", namespace="other", name_pattern="bad-.*"),
        )
    )
    web_db = make_pod()
    web_db["metadata"]["labels"] = {"app": "web", "tier": "db"}
    assert failure_mode(web_db, config) == "crash"
    bad = make_pod("bad-1")
    bad["metadata"]["namespace"] = "other"
    assert failure_mode(bad, config) == "image-pull"
    assert failure_mode(make_pod("bad-1"), config) is None
    # The annotation wins over rules; unknown annotation values are ignored.
    web_db["metadata"]["annotations"] = {FAIL_ANNOTATION: "never-ready"}
    assert failure_mode(web_db, config) == "never-ready"
    web_db["metadata"]["annotations"] = {FAIL_ANNOTATION: "bogus"}
    assert failure_mode(web_db, config) == "crash"


def test_probability_draws_are_reproducible_per_seed_and_uid() -> None:
    rule = FailureRule("crash", probability=0.5)
    pods = [make_pod(f"p{i}") for i in range(200)]
    verdicts = [rule.matches(pod, seed=7) for pod in pods]
    assert verdicts == [rule.matches(pod, seed=7) for pod in pods]
    assert 60 < sum(verdicts) < 140
    assert verdicts != [rule.matches(pod, seed=8) for pod in pods]


def test_unknown_failure_mode_in_a_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown failure mode"):
        FailureRule("explode")


# ----------------------------------------------------------------------------- deletion


def test_graceful_deletion_stops_containers_then_deletes_with_grace_zero() -> None:
    driver = Driver(make_pod())
    driver.run_until(is_ready)
    driver.pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    driver.pod["metadata"]["deletionGracePeriodSeconds"] = 30
    start = driver.clock
    driver.run_until(lambda p: p["status"]["phase"] == "Succeeded")
    assert driver.clock - start == pytest.approx(CONFIG.termination_delay)
    terminated = driver.pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert driver.step() == [DeletePod("uid-p")]


def test_a_short_grace_period_wins_over_the_termination_delay() -> None:
    config = KubeletConfig(nodes=2, termination_delay=10.0)
    driver = Driver(make_pod(), config)
    driver.run_until(is_ready)
    driver.pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    driver.pod["metadata"]["deletionGracePeriodSeconds"] = 1
    start = driver.clock
    driver.run_until(lambda p: p["status"]["phase"] in ("Succeeded", "Failed"))
    assert driver.clock - start == pytest.approx(1.0)


def test_deleting_a_pod_that_never_started_fails_its_containers() -> None:
    driver = Driver(make_pod(annotations={FAIL_ANNOTATION: "image-pull"}))
    driver.run_until(lambda p: "containerStatuses" in p["status"])
    driver.pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    driver.pod["metadata"]["deletionGracePeriodSeconds"] = 30
    driver.run_until(lambda p: p["status"]["phase"] == "Failed")
    terminated = driver.pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "ContainerStatusUnknown"


def test_terminal_pod_without_deletion_is_kept() -> None:
    pod = make_pod(nodeName="devcluster-node-0")
    pod["status"]["phase"] = "Succeeded"
    decision = plan_pod(pod, None, Instant(0, "t"), CONFIG, VIEW)
    assert decision.actions == ()


def test_plan_pod_never_mutates_the_pod() -> None:
    driver = Driver(make_pod(annotations={FAIL_ANNOTATION: "crash"}))
    for _ in range(12):
        before = copy.deepcopy(driver.pod)
        plan_pod(driver.pod, driver.memory, driver.at(), CONFIG, VIEW)
        assert driver.pod == before
        driver.step()


def test_go_duration_formatting() -> None:
    assert go_duration(0.2) == "200ms"
    assert go_duration(10) == "10s"
    assert go_duration(300) == "5m0s"


# ----------------------------------------------------------------------------- jobs


def make_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "default", "uid": "uid-j", "resourceVersion": "5"},
        "spec": {"template": {"spec": {"containers": []}}, **spec},
    }


AT = Instant(10.0, "2024-01-01T00:00:10Z")


def test_job_is_started_then_launched_once() -> None:
    job = make_job()
    actions, memory = plan_job(job, JobMemory(), AT)
    (start,) = actions
    assert isinstance(start, PatchStatus)
    assert start.status["startTime"] == AT.wall
    assert start.status["active"] == 1
    job["status"] = start.status
    actions, memory = plan_job(job, memory, AT)
    assert actions == (LaunchJob(),)
    assert plan_job(job, memory, AT)[0] == ()  # launched: wait for the outcome


def test_job_success_writes_complete() -> None:
    job = make_job(completions=3)
    job["status"] = {"startTime": "t0", "active": 1}
    (finish,), _ = plan_job(job, JobMemory(launched=True, outcome=JobOutcome(True)), AT)
    assert isinstance(finish, PatchStatus)
    assert finish.status["succeeded"] == 3
    assert finish.status["active"] == 0
    assert finish.status["completionTime"] == AT.wall
    (condition,) = finish.status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Complete",
        "True",
        "CompletionsReached",
    )


def test_job_failure_writes_failed() -> None:
    job = make_job(backoffLimit=2)
    job["status"] = {"startTime": "t0", "active": 1}
    outcome = JobOutcome(False, "boom")
    (finish,), _ = plan_job(job, JobMemory(launched=True, outcome=outcome), AT)
    assert isinstance(finish, PatchStatus)
    assert finish.status["failed"] == 3
    (condition,) = finish.status["conditions"]
    assert (condition["type"], condition["reason"], condition["message"]) == (
        "Failed",
        "BackoffLimitExceeded",
        "boom",
    )
    assert "completionTime" not in finish.status


def test_finished_and_suspended_jobs_are_left_alone() -> None:
    done = make_job()
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert plan_job(done, JobMemory(), AT)[0] == ()
    assert plan_job(make_job(suspend=True), JobMemory(), AT)[0] == ()
