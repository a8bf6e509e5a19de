"""The tasks of a BatchSandbox (services/claim/core/batch/tasks.py, through plan_batch): one test
per upstream test of the task strategy, the scheduler and the BatchSandbox controller's task
paths (docs/opensandbox.md §7.1-7.3), each naming the one it mirrors, then what sandbus does
otherwise on purpose: the assignment and the results kept in the memo, a task read by name, a
finished task not sent again, and a task whose Pod is lost run again elsewhere."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from msgspec.structs import replace

from api.objects import Json
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    FINALIZER_POOL_ALLOCATION,
    FINALIZER_TASK_CLEANUP,
)
from services.claim.core.batch.plan import plan_batch
from services.claim.core.batch.tasks import (
    PROBE_INTERVAL,
    SyncTasks,
    TaskMemo,
    TaskRecord,
    TaskReport,
    TaskTemplateError,
    build_tasks,
)
from services.runtime.reconcile.actions import Patch, Plan
from tests.support.plans import actions_of
from tests.unit.claim.batch.world import (
    NAME,
    NOW,
    POOL,
    batch_sandbox,
    observe,
    pending_pod,
    pod,
    pool,
    status_patch,
)


def task_template(command: list[str] | None = None, **spec: Any) -> Json:
    process: Json = {"command": command or ["python", "-c", "print('hi')"]}
    return {"spec": {"process": process, **spec}}


def with_tasks(replicas: int = 2, *, patches: list[Any] | None = None, **kwargs: Any) -> Json:
    sandbox = batch_sandbox(replicas=replicas, **kwargs)
    sandbox["spec"]["taskTemplate"] = task_template(timeoutSeconds=60)
    if patches is not None:
        sandbox["spec"]["shardTaskPatches"] = patches
    sandbox["metadata"].setdefault("finalizers", []).append(FINALIZER_TASK_CLEANUP)
    return sandbox


def running(name: str) -> Json:
    return {"name": name, "processStatus": {"running": {"startedAt": "2026-06-12T09:29:00Z"}}}


def ended(name: str, code: int, reason: str = "", message: str = "") -> Json:
    terminated: Json = {"exitCode": code}
    if reason:
        terminated["reason"] = reason
    if message:
        terminated["message"] = message
    return {"name": name, "processStatus": {"terminated": terminated}}


def report(pod_name: str, *tasks: Json, reachable: bool = True, age: float = 0.0) -> TaskReport:
    index = int(pod_name.rsplit("-", 1)[-1]) if pod_name.rsplit("-", 1)[-1].isdigit() else 98
    return TaskReport(
        pod=pod_name,
        ip=f"10.0.0.{index + 1}",
        at=NOW - timedelta(seconds=age),
        reachable=reachable,
        tasks=tasks,
    )


def memo(**tasks: TaskRecord) -> TaskMemo:
    return TaskMemo(tasks={name.replace("_", "-"): record for name, record in tasks.items()})


def run(
    sandbox: Json,
    *objects: Json,
    task_memo: TaskMemo | None = None,
    reports: dict[str, TaskReport] | None = None,
) -> Plan:
    observed = observe(sandbox, *objects)
    return plan_batch(replace(observed, task_memo=task_memo, reports=reports or {}), NOW)


def syncs(result: Plan) -> list[SyncTasks]:
    return actions_of(result, SyncTasks)


def own_pods(sandbox: Json, count: int) -> list[Json]:
    return [pod(f"{NAME}-{i}", owner=sandbox) for i in range(count)]


# -- the strategy -----------------------------------------------------------------------------


def test_tasks_are_named_per_replica_and_need_a_template() -> None:
    """task_scheduling_strategy_default_test NeedTaskScheduling and the names: a task per
    replica, ``<bs>-<i>``; none without a taskTemplate."""
    assert build_tasks(batch_sandbox(replicas=2)) == []
    tasks = build_tasks(with_tasks(3))
    assert [t["name"] for t in tasks] == [f"{NAME}-0", f"{NAME}-1", f"{NAME}-2"]
    assert all(t["process"]["timeoutSeconds"] == 60 for t in tasks)


def test_a_shard_task_patch_replaces_and_timeout_stays_the_base() -> None:
    """…strategy test: a shard patch replaces the command; an index beyond the patches gets the
    base template; §9.23: env is replaced, not merged, and timeoutSeconds is never patched."""
    sandbox = with_tasks(
        3,
        patches=[
            {
                "spec": {
                    "process": {"command": ["echo", "zero"], "env": [{"name": "B", "value": "2"}]}
                }
            },
            {"spec": {"timeoutSeconds": 5}},
        ],
    )
    sandbox["spec"]["taskTemplate"]["spec"]["process"]["env"] = [{"name": "A", "value": "1"}]
    first, second, third = build_tasks(sandbox)
    assert first["process"]["command"] == ["echo", "zero"]
    assert first["process"]["env"] == [{"name": "B", "value": "2"}]
    assert second["process"]["timeoutSeconds"] == 60
    assert third["process"]["command"] == ["python", "-c", "print('hi')"]


@pytest.mark.parametrize(
    "patch", ["not an object", {"spec": "no"}, {"spec": {"process": {"command": None}}}]
)
def test_an_invalid_shard_task_patch_is_an_error(patch: Any) -> None:
    """…strategy test: an invalid patch → an error (here a plan error; the status is still
    written, nothing is sent)."""
    sandbox = with_tasks(1, patches=[patch])
    with pytest.raises(TaskTemplateError):
        build_tasks(sandbox)
    result = run(sandbox, *own_pods(sandbox, 1))
    assert result.error is not None
    assert syncs(result) == []


# -- the scheduler ----------------------------------------------------------------------------


def test_tasks_are_assigned_in_order_to_free_pods_with_an_ip() -> None:
    """Test_assignTaskNodes: tasks go to Pods with an IP, in order; none without a free Pod
    (taskPending, envtest :561: taskPending = replicas while Pods have no IP)."""
    sandbox = with_tasks(2)
    result = run(sandbox, pod(f"{NAME}-0", owner=sandbox), pending_pod(f"{NAME}-1", sandbox))
    [sync] = syncs(result)
    assert (sync.pod, sync.ip) == (f"{NAME}-0", "10.0.0.1")
    assert [t["name"] for t in sync.desired or ()] == [f"{NAME}-0"]
    status = status_patch(result)
    assert status is not None
    assert (status["taskPending"], status["taskUnknown"]) == (1, 1)
    assert result.memo.tasks[f"{NAME}-0"].pod == f"{NAME}-0"
    none_free = run(sandbox, pending_pod(f"{NAME}-0", sandbox), pending_pod(f"{NAME}-1", sandbox))
    assert syncs(none_free) == []


def test_a_running_task_is_sent_again_and_counted() -> None:
    """Test_scheduleSingleTaskNode, running → setTask(task); Test_parseTaskState running."""
    sandbox = with_tasks(1)
    pods = own_pods(sandbox, 1)
    assigned = memo(bs_0=TaskRecord(pod=f"{NAME}-0", state="Running"))
    fresh = run(
        sandbox,
        *pods,
        task_memo=assigned,
        reports={f"{NAME}-0": report(f"{NAME}-0", running(f"{NAME}-0"))},
    )
    assert syncs(fresh) == [], "a report younger than the interval is not asked again"
    assert fresh.requeue_after is not None and fresh.requeue_after <= PROBE_INTERVAL
    assert status_patch(fresh)["taskRunning"] == 1  # type: ignore[index]
    old = report(f"{NAME}-0", running(f"{NAME}-0"), age=PROBE_INTERVAL)
    [sync] = syncs(run(sandbox, *pods, task_memo=assigned, reports={f"{NAME}-0": old}))
    assert [t["name"] for t in sync.desired or ()] == [f"{NAME}-0"]


@pytest.mark.parametrize(
    ("reported", "state", "counter"),
    [
        (ended(f"{NAME}-0", 0), "Succeed", "taskSucceed"),
        (ended(f"{NAME}-0", 1, "Failed", "boom"), "Failed", "taskFailed"),
        (ended(f"{NAME}-0", 137, "TaskTimeout"), "Failed", "taskFailed"),
        (
            {"name": f"{NAME}-0", "processStatus": {"waiting": {"reason": "Pending"}}},
            "Unknown",
            "taskUnknown",
        ),
        ({"name": f"{NAME}-0"}, "Unknown", "taskUnknown"),
    ],
)
def test_parse_task_state(reported: Json, state: str, counter: str) -> None:
    """Test_parseTaskState: running / succeed / failed (a timeout too) / unknown."""
    sandbox = with_tasks(1)
    result = run(
        sandbox,
        *own_pods(sandbox, 1),
        task_memo=memo(bs_0=TaskRecord(pod=f"{NAME}-0", state="Running")),
        reports={f"{NAME}-0": report(f"{NAME}-0", reported)},
    )
    assert result.memo.tasks[f"{NAME}-0"].state == state
    status = status_patch(result)
    assert status is not None and status[counter] == 1
    if state == "Failed":
        assert status["taskLastErrorMessage"].startswith(f"task {NAME}-0 failed: exit ")


def test_an_executor_that_does_not_answer_makes_the_task_unknown() -> None:
    """Test_collectTaskStatus: a failed or empty response clears the status: Unknown."""
    sandbox = with_tasks(1)
    result = run(
        sandbox,
        *own_pods(sandbox, 1),
        task_memo=memo(bs_0=TaskRecord(pod=f"{NAME}-0", state="Running")),
        reports={f"{NAME}-0": report(f"{NAME}-0", reachable=False)},
    )
    assert status_patch(result)["taskUnknown"] == 1  # type: ignore[index]


def test_a_finished_task_is_not_sent_again_and_keeps_its_result() -> None:
    """sandbus: a Succeed task is neither sent again nor downgraded by an executor that
    restarted and no longer lists it; the probing stops."""
    sandbox = with_tasks(1)
    done = memo(bs_0=TaskRecord(pod=f"{NAME}-0", state="Succeed"))
    result = run(
        sandbox,
        *own_pods(sandbox, 1),
        task_memo=done,
        reports={f"{NAME}-0": report(f"{NAME}-0", age=5)},
    )
    assert syncs(result) == []
    assert result.memo.tasks[f"{NAME}-0"].state == "Succeed"
    assert result.requeue_after is None


def test_a_succeeded_task_under_release_gives_its_pod_back() -> None:
    """TestBatchSandboxReconciler_scheduleTasks and Test_scheduleSingleTaskNode: a succeeded
    task under Release is stopped (setTask(nil)); once its executor lists nothing it is
    released: Succeed=1 and its Pod in alloc-release."""
    sandbox = with_tasks(1, pool_ref=POOL, alloc=["pool-a-x"], template=None)
    sandbox["spec"].pop("template", None)
    sandbox["spec"]["taskResourcePolicyWhenCompleted"] = "Release"
    given = pod("pool-a-x", owner=pool(), ip="10.0.0.7")
    succeeded = run(
        sandbox,
        given,
        pool(),
        task_memo=memo(bs_0=TaskRecord(pod="pool-a-x", state="Running")),
        reports={
            "pool-a-x": TaskReport(
                pod="pool-a-x",
                ip="10.0.0.7",
                at=NOW,
                reachable=True,
                tasks=(ended(f"{NAME}-0", 0),),
            )
        },
    )
    record = succeeded.memo.tasks[f"{NAME}-0"]
    assert (record.state, record.releasing, record.released) == ("Succeed", True, False)
    stop_later = TaskReport(
        pod="pool-a-x",
        ip="10.0.0.7",
        at=NOW - timedelta(seconds=2),
        reachable=True,
        tasks=(ended(f"{NAME}-0", 0),),
    )
    [stop] = syncs(
        run(sandbox, given, pool(), task_memo=succeeded.memo, reports={"pool-a-x": stop_later})
    )
    assert stop.desired == ()
    emptied = TaskReport(pod="pool-a-x", ip="10.0.0.7", at=NOW, reachable=True)
    released = run(sandbox, given, pool(), task_memo=succeeded.memo, reports={"pool-a-x": emptied})
    assert released.memo.tasks[f"{NAME}-0"].released
    patches = [a for a in actions_of(released) if isinstance(a, Patch) and a.subresource is None]
    asked = [
        p.patch["metadata"]["annotations"][ANNOTATION_ALLOC_RELEASE]
        for p in patches
        if ANNOTATION_ALLOC_RELEASE in (p.patch.get("metadata") or {}).get("annotations", {})
    ]
    assert [json.loads(a) for a in asked] == [{"pods": ["pool-a-x"]}]
    assert status_patch(released)["taskSucceed"] == 1  # type: ignore[index]


def test_a_task_whose_pod_is_lost_runs_again_on_another() -> None:
    """sandbus: a task not finished whose Pod is gone goes back to the queue and runs on the
    next free Pod; upstream's in-memory scheduler loses track of it."""
    sandbox = with_tasks(1)
    lost = memo(bs_0=TaskRecord(pod="gone-pod", state="Running"))
    result = run(sandbox, *own_pods(sandbox, 1), task_memo=lost)
    assert result.memo.tasks[f"{NAME}-0"].pod == f"{NAME}-0"
    assert [s.pod for s in syncs(result)] == [f"{NAME}-0"]
    assert "lost its Pod gone-pod" in result.reason


def test_the_assignment_survives_a_restart() -> None:
    """sandbus: the memo says which Pod runs which task; a worker with no reports (restarted)
    asks that Pod again and never gives the task to another."""
    sandbox = with_tasks(2)
    kept = memo(
        bs_0=TaskRecord(pod=f"{NAME}-1", state="Running"),
        bs_1=TaskRecord(pod=f"{NAME}-0", state="Running"),
    )
    result = run(sandbox, *own_pods(sandbox, 2), task_memo=kept)
    assert sorted((s.pod, (s.desired or ({},))[0].get("name")) for s in syncs(result)) == [
        (f"{NAME}-0", f"{NAME}-1"),
        (f"{NAME}-1", f"{NAME}-0"),
    ]


# -- the finalizer and deletion ---------------------------------------------------------------


def test_the_task_cleanup_finalizer_is_added() -> None:
    """envtest :551 task finalizer: a sandbox with a taskTemplate gets task-cleanup."""
    sandbox = with_tasks(1)
    sandbox["metadata"]["finalizers"] = []
    patches = [
        a.patch for a in actions_of(run(sandbox)) if isinstance(a, Patch) and a.subresource is None
    ]
    assert {"metadata": {"finalizers": [FINALIZER_TASK_CLEANUP], "resourceVersion": "5"}} in patches


def test_deletion_stops_every_task_before_the_finalizer_goes() -> None:
    """Test_scheduleSingleTaskNode (assigned + deleting → setTask(nil); pending + deleting →
    released) and TestBatchSandboxReconciler_reconcileTasks (all released → the finalizer
    goes); the counters are not written while deleting."""
    sandbox = with_tasks(2, deleting=True, rv="11")
    pods = own_pods(sandbox, 1)
    state = memo(bs_0=TaskRecord(pod=f"{NAME}-0", state="Running"))
    stopping = run(sandbox, *pods, task_memo=state)
    assert [(s.pod, s.desired) for s in syncs(stopping)] == [(f"{NAME}-0", ())]
    assert status_patch(stopping) is None
    assert not any(isinstance(a, Patch) for a in actions_of(stopping))
    stopped = run(
        sandbox, *pods, task_memo=stopping.memo, reports={f"{NAME}-0": report(f"{NAME}-0")}
    )
    [patch] = [a for a in actions_of(stopped) if isinstance(a, Patch)]
    assert patch.patch["metadata"]["finalizers"] == []


def test_deletion_with_pending_tasks_completes() -> None:
    """envtest :578 delete with pending tasks: tasks that never had a Pod hold nothing up."""
    sandbox = with_tasks(2, deleting=True)
    result = run(sandbox, task_memo=memo(bs_0=TaskRecord(), bs_1=TaskRecord()))
    [patch] = [a for a in actions_of(result) if isinstance(a, Patch)]
    assert patch.patch["metadata"]["finalizers"] == []


def test_deletion_counts_an_unreachable_executor_as_stopped() -> None:
    """§9.25: an executor that does not answer has no task left; the deletion goes on."""
    sandbox = with_tasks(1, deleting=True)
    pods = own_pods(sandbox, 1)
    stopping = memo(bs_0=TaskRecord(pod=f"{NAME}-0", state="Running", releasing=True))
    result = run(
        sandbox,
        *pods,
        task_memo=stopping,
        reports={f"{NAME}-0": report(f"{NAME}-0", reachable=False)},
    )
    [patch] = [a for a in actions_of(result) if isinstance(a, Patch)]
    assert FINALIZER_TASK_CLEANUP not in patch.patch["metadata"]["finalizers"]
    assert FINALIZER_POOL_ALLOCATION not in patch.patch["metadata"]["finalizers"]


def test_a_paused_sandbox_runs_no_tasks_and_forgets_them() -> None:
    """TestReconcile_PausedSkipsTaskSchedulingAndClearsScheduler: while Paused nothing is
    sent and the tasks are forgotten, so a resumed sandbox runs them afresh (e2e :535)."""
    sandbox = with_tasks(1)
    sandbox["status"] = {"phase": "Paused", "replicas": 0, "allocated": 0, "ready": 0}
    sandbox["spec"]["pause"] = True
    result = run(sandbox, task_memo=memo(bs_0=TaskRecord(pod=f"{NAME}-0", state="Running")))
    assert syncs(result) == []
    assert result.memo is None


def test_a_pause_waits_for_its_tasks_to_stop_before_the_snapshot() -> None:
    """TestHandlePause_WaitsForTaskCleanupBeforeCreatingSnapshot and
    …CreatesSnapshotAfterTaskCleanup: the pause is acknowledged (Pausing) and the tasks are
    stopped; the snapshot is created once none runs."""
    sandbox = with_tasks(1)
    sandbox["status"] = {
        "phase": "Succeed",
        "replicas": 1,
        "allocated": 1,
        "ready": 1,
        "pauseObservedGeneration": 1,
    }
    sandbox["spec"]["pause"] = True
    sandbox["metadata"]["generation"] = 2
    pods = own_pods(sandbox, 1)
    running_task = memo(bs_0=TaskRecord(pod=f"{NAME}-0", state="Running"))
    asked = run(sandbox, *pods, task_memo=running_task)
    assert status_patch(asked)["phase"] == "Pausing"  # type: ignore[index]
    assert not [
        a for a in actions_of(asked) if getattr(a, "body", {}).get("kind") == "SandboxSnapshot"
    ]
    sandbox["status"]["phase"] = "Pausing"
    stopping = run(sandbox, *pods, task_memo=running_task)
    assert [(s.pod, s.desired) for s in syncs(stopping)] == [(f"{NAME}-0", ())]
    stopped = run(
        sandbox, *pods, task_memo=stopping.memo, reports={f"{NAME}-0": report(f"{NAME}-0")}
    )
    assert stopped.memo is not None and not any(
        r.pod and not r.released for r in stopped.memo.tasks.values()
    )
    created = run(sandbox, *pods, task_memo=stopped.memo)
    assert [a.body["kind"] for a in actions_of(created) if hasattr(a, "body")] == [
        "SandboxSnapshot"
    ]


def test_the_decision_says_each_assignment_and_change() -> None:
    """sandbus: ``sandbus explain`` shows every task given to a Pod and every change of state."""
    sandbox = with_tasks(1)
    pods = own_pods(sandbox, 1)
    given = run(sandbox, *pods)
    assert f"task {NAME}-0 given to Pod {NAME}-0" in given.reason
    done = run(
        sandbox,
        *pods,
        task_memo=given.memo,
        reports={f"{NAME}-0": report(f"{NAME}-0", ended(f"{NAME}-0", 0))},
    )
    assert f"task {NAME}-0: Pending -> Succeed" in done.reason
