"""The BatchSandbox planner (services/claim/core/batch/plan.py): one test per upstream test of
batchsandbox_controller_test.go that involves neither tasks nor pause (docs/opensandbox.md
§7.1, and the envtest rows of §7.2 as passes against a fake API server), each naming the one
it mirrors, then what sandbus adds or does otherwise on purpose: the PoolAllocationPending
(PoolCapacityExhausted, PoolNotFound), PoolAssignFailed and AllocationRefused conditions and
their Warning Events, the pool-allocation finalizer of a sandbox
whose Pool is gone, expiry, the first writes that wait, a sticky Failed, shard patches that
cannot be applied, and creates the bus has not shown yet."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from api.objects import Json
from api.opensandbox import (
    ANNOTATION_ALLOC_STATUS,
    ANNOTATION_ENDPOINTS,
    FINALIZER_POOL_ALLOCATION,
    FINALIZER_TASK_CLEANUP,
    LABEL_BATCH_SANDBOX_NAME,
    LABEL_POD_INDEX,
)
from events.envelope import ObjectKey
from services.claim.core.batch.plan import (
    ASSIGN_RETRY,
    EXPECTATIONS_RECHECK,
    TAKEN_RECHECK,
    pod_index,
)
from services.runtime.reconcile.actions import Create, Delete, Patch
from services.runtime.reconcile.expectations import Expectations, Expected
from tests.support.plans import actions_of
from tests.unit.claim.batch.world import (
    CREATING,
    NAME,
    NOW,
    NS,
    POOL,
    READY,
    UID,
    Cluster,
    batch_sandbox,
    batch_status,
    condition,
    conditions_of,
    created_names,
    creates,
    endpoints_patch,
    observe,
    pending_pod,
    plan,
    pod,
    pod_template,
    pool,
    stamp,
    status_patch,
    warnings,
)

KEY = ObjectKey("BatchSandbox", NS, NAME)


def ready_status(replicas: int = 3, *, at: Any = NOW - timedelta(minutes=3)) -> Json:
    return batch_status(
        phase="Succeed",
        replicas=replicas,
        ready=replicas,
        conditions=[condition(*READY, at=at)],
    )


def endpoints(*ips: str) -> str:
    return json.dumps(list(ips), separators=(",", ":"))


def pods_of(sandbox: Json, count: int = 3, **kwargs: Any) -> list[Json]:
    return [pod(f"{NAME}-{i}", owner=sandbox, **kwargs) for i in range(count)]


# -- upstream's unit tests ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "name", "index"),
    [
        ({LABEL_POD_INDEX: "2"}, "anything-7", 2),
        ({}, "bs-1", 1),
        ({}, "my-batch-sandbox-12", 12),
        ({LABEL_POD_INDEX: ""}, "bs-4", 4),
        ({}, "bs-x", None),
        ({}, "nodash", None),
        ({LABEL_POD_INDEX: "abc"}, "bs-3", None),
        ({LABEL_POD_INDEX: "-1"}, "bs-3", None),
        ({LABEL_POD_INDEX: "a-3"}, "bs-5", None),
        ({}, "bs-\u0663", None),
    ],
)
def test_parse_index(labels: dict[str, str], name: str, index: int | None) -> None:
    """Test_parseIndex: the index comes from the pod-index label, else from the name's suffix
    after the last ``-``. Where upstream returns an error (a bad name), ours answers None; a
    label that is present decides, and only a whole decimal number is an index (a label of
    ``-1`` or ``a-3`` is none, not 1 or 3)."""
    assert pod_index(pod(name, labels=labels)) == index


def test_parse_index_an_unreadable_pod_holds_no_index() -> None:
    """Test_parseIndex, the error case as sandbus has it: upstream's pass fails on a Pod whose
    index it cannot read; ours lists it after the others (its IP last in the endpoints) and
    makes the indices it lacks."""
    sandbox = batch_sandbox(replicas=2)
    odd = pod("bs-odd", owner=sandbox, index="", ip="10.0.0.9")
    odd["metadata"]["labels"].pop(LABEL_POD_INDEX)
    result = plan(sandbox, odd, pod("bs-1", owner=sandbox))
    assert created_names(result) == ["bs-0"]
    assert endpoints_patch(result) == endpoints("10.0.0.2", "10.0.0.9")
    assert status_patch(result)["replicas"] == 2


@pytest.mark.parametrize(
    ("pods", "order"),
    [
        pytest.param(
            [("bs-2", "2"), ("bs-0", "0"), ("bs-1", "1")], ["bs-0", "bs-1", "bs-2"], id="label"
        ),
        pytest.param(
            [("bs-2", None), ("bs-0", None), ("bs-1", None)], ["bs-0", "bs-1", "bs-2"], id="name"
        ),
        pytest.param([("x-9", "1"), ("bs-2", None), ("y", "0")], ["y", "x-9", "bs-2"], id="mixed"),
        pytest.param([("bs-10", None), ("bs-9", None)], ["bs-9", "bs-10"], id="numeric"),
    ],
)
def test_cal_pod_index_template_mode(pods: list[tuple[str, str | None]], order: list[str]) -> None:
    """Test_calPodIndex, non-pooled: Pods in index order by label, by name, or both mixed (and
    numerically: 9 before 10), whatever order the cache lists them in."""
    sandbox = batch_sandbox(replicas=len(pods))
    objects = []
    for name, label in pods:
        obj = pod(name, owner=sandbox, ip=f"10.1.0.{len(objects)}")
        if label is None:
            obj["metadata"]["labels"].pop(LABEL_POD_INDEX)
        else:
            obj["metadata"]["labels"][LABEL_POD_INDEX] = label
        objects.append(obj)
    result = plan(sandbox, *objects)
    by_name = {o["metadata"]["name"]: o["status"]["podIP"] for o in objects}
    assert endpoints_patch(result) == endpoints(*(by_name[name] for name in order))


def test_cal_pod_index_pooled() -> None:
    """Test_calPodIndex, pooled: the order is the Pods' place in alloc-status; a Pod of the Pool
    that alloc-status does not list is none of the sandbox's."""
    sandbox = batch_sandbox(pool_ref=POOL, alloc=["pool-a-c", "pool-a-a", "pool-a-b"])
    the_pool = pool(total=4)
    pods = [
        pod(name, owner=the_pool, ip=ip)
        for name, ip in [
            ("pool-a-a", "10.0.0.1"),
            ("pool-a-b", "10.0.0.2"),
            ("pool-a-c", "10.0.0.3"),
            ("pool-a-d", "10.0.0.4"),
        ]
    ]
    observed = observe(sandbox, the_pool, *pods)
    assert [p["metadata"]["name"] for p in observed.pods] == ["pool-a-c", "pool-a-a", "pool-a-b"]
    result = plan(sandbox, the_pool, *pods)
    assert endpoints_patch(result) == endpoints("10.0.0.3", "10.0.0.1", "10.0.0.2")
    assert status_patch(result)["replicas"] == 3
    assert not creates(result)


def test_cal_pod_index_pooled_without_the_annotation() -> None:
    """Test_calPodIndex, pooled, no alloc-status: no Pods (the Pool has given none yet), so
    neither the endpoints nor the first status is written, and no Pod is made here."""
    sandbox = batch_sandbox(pool_ref=POOL)
    result = plan(sandbox, pool(total=1, available=1), pod("pool-a-a", owner=pool()))
    assert result.actions == ()


def test_cal_pod_index_pooled_bad_json() -> None:
    """Test_calPodIndex, pooled, bad JSON: upstream's pass fails with the parse error and
    writes nothing; ours reports AllocationRefused (see the AllocationRefused tests)."""
    sandbox = batch_sandbox(pool_ref=POOL, annotations={ANNOTATION_ALLOC_STATUS: "{not json"})
    status = status_patch(plan(sandbox, pool()))
    assert conditions_of(status)["AllocationRefused"][0] == "MalformedAnnotation"
    assert (
        f"annotation {ANNOTATION_ALLOC_STATUS} is not JSON"
        in (conditions_of(status)["AllocationRefused"][1])
    )


def test_build_runtime_view_aggregates_pod_failures_in_steady_state() -> None:
    """TestBuildRuntimeView_AggregatesPodFailuresInSteadyState: any failing container (Waiting
    with one of the four reasons) makes it Failed, with PodFailed naming the most frequent
    reason, the count and the first failing Pod; init containers and finished Pods are not
    looked at."""
    sandbox = batch_sandbox(replicas=5, status=ready_status(5))
    pods = [
        pending_pod("bs-0", sandbox, waiting="ErrImagePull"),
        pending_pod("bs-1", sandbox, waiting="CrashLoopBackOff"),
        pending_pod("bs-2", sandbox, waiting="ErrImagePull"),
        pod("bs-3", owner=sandbox),
        pod("bs-4", owner=sandbox, phase="Succeeded", waiting="ImagePullBackOff"),
    ]
    pods[3]["status"]["initContainerStatuses"] = [
        {"name": "init", "state": {"waiting": {"reason": "ErrImagePull"}}}
    ]
    status = status_patch(plan(sandbox, *pods))
    assert status["phase"] == "Failed"
    assert conditions_of(status) == {
        "PodFailed": (
            "ErrImagePull",
            "3/5 observed pods failed; primary reason=ErrImagePull; sample pod=bs-0",
        )
    }
    assert status["ready"] == 1


def test_build_runtime_view_preserves_condition_transition_time_when_unchanged() -> None:
    """TestBuildRuntimeView_PreservesConditionTransitionTimeWhenUnchanged: a status write that
    keeps a condition's status, reason and message keeps its lastTransitionTime; a condition
    that changes gets the time of the pass."""
    before = NOW - timedelta(minutes=3)
    sandbox = batch_sandbox(status=ready_status(2, at=before))
    status = status_patch(plan(sandbox, *pods_of(sandbox, 3)))
    assert status["replicas"] == 3
    assert status["conditions"] == [condition(*READY, at=before)]

    pending = batch_sandbox(
        status=batch_status(
            phase="Pending", replicas=3, conditions=[condition(*CREATING, at=before)]
        )
    )
    status = status_patch(plan(pending, *pods_of(pending, 3)))
    assert status["phase"] == "Succeed"
    [ready] = status["conditions"]
    assert (ready["type"], ready["lastTransitionTime"]) == ("Ready", "2026-06-12T09:30:00Z")


def test_persist_runtime_view_skips_status_update_when_runtime_status_unchanged() -> None:
    """TestPersistRuntimeView_SkipsStatusUpdateWhenRuntimeStatusUnchanged: nothing changed,
    nothing is written (neither the status nor the endpoints)."""
    sandbox = batch_sandbox(
        status=ready_status(3),
        annotations={ANNOTATION_ENDPOINTS: endpoints("10.0.0.1", "10.0.0.2", "10.0.0.3")},
    )
    result = plan(sandbox, *pods_of(sandbox, 3))
    assert result.actions == ()
    assert result.error is None
    assert result.reason == "3 of 3 Pods"


@pytest.mark.parametrize(
    ("ready", "phase"),
    [(True, "Succeed"), (False, "Pending")],
)
def test_phase_update_succeed(ready: bool, phase: str) -> None:
    """TestPhaseUpdate_Succeed: a Running and Ready Pod makes it Succeed, not Pending; one Ready
    Pod is enough whatever replicas says. Running but not Ready is still Pending."""
    sandbox = batch_sandbox(replicas=3)
    pods = [pod("bs-0", owner=sandbox, ready=ready), pending_pod("bs-1", sandbox)]
    pods.append(pending_pod("bs-2", sandbox))
    status = status_patch(plan(sandbox, *pods))
    assert status["phase"] == phase
    expected = READY if ready else CREATING
    assert conditions_of(status) == {expected[0]: expected[1:]}


def test_a_terminating_pod_is_listed_and_not_ready() -> None:
    """§1.2, §3.2: template mode lists every Pod it controls, terminating ones included (they
    count in replicas and keep their index), but a terminating Pod is never Ready."""
    sandbox = batch_sandbox(replicas=2)
    result = plan(sandbox, pod("bs-0", owner=sandbox), pod("bs-1", owner=sandbox, deleting=True))
    assert not creates(result)
    status = status_patch(result)
    assert (status["replicas"], status["ready"], status["phase"]) == (2, 1, "Succeed")


# -- upstream's envtest cases, as passes against a fake API server -------------------------


def test_non_pooled_create() -> None:
    """batchsandbox_controller_test.go:122: a non-pooled sandbox of 3 gets Pods <name>-0..2,
    labelled and controlled by it; the status says observedGeneration and replicas; the
    endpoints list the IPs in index order, "" for a Pod without one."""
    cluster = Cluster()
    cluster.add(batch_sandbox(replicas=3, generation=2))
    first = cluster.reconcile()
    assert created_names(first) == ["bs-0", "bs-1", "bs-2"]
    assert status_patch(first) is None, "the first status waits for a Pod"
    assert endpoints_patch(first) is None, "the first endpoints wait for something but []"
    for index, obj in enumerate(cluster.pods()):
        meta = obj["metadata"]
        assert meta["labels"] == {
            "app": "demo",
            LABEL_POD_INDEX: str(index),
            LABEL_BATCH_SANDBOX_NAME: NAME,
        }
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "sandbox.opensandbox.io/v1alpha1",
                "kind": "BatchSandbox",
                "name": NAME,
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert obj["spec"] == pod_template()["spec"]
    for name, ip in (("bs-0", "10.0.0.1"), ("bs-2", "10.0.0.3")):
        cluster.get("Pod", name)["status"] = {"phase": "Running", "podIP": ip}
    cluster.reconcile()
    stored = cluster.get("BatchSandbox", NAME)
    assert stored["metadata"]["annotations"][ANNOTATION_ENDPOINTS] == endpoints(
        "10.0.0.1", "", "10.0.0.3"
    )
    assert stored["status"]["observedGeneration"] == 2
    assert stored["status"]["replicas"] == 3
    assert stored["status"]["allocated"] == 2
    assert stored["status"]["phase"] == "Pending"


def test_converges_to_ready() -> None:
    """The whole non-pooled life until nothing is left to do: three Ready Pods, Succeed with
    Ready/PodsReady and no other condition, the endpoints in index order; a further pass writes
    nothing."""
    cluster = Cluster()
    cluster.add(batch_sandbox(replicas=3))
    plans = cluster.converge()
    assert len(plans) <= 4
    stored = cluster.get("BatchSandbox", NAME)
    assert stored["status"]["phase"] == "Succeed"
    assert (stored["status"]["replicas"], stored["status"]["ready"]) == (3, 3)
    assert conditions_of(stored["status"]) == {"Ready": READY[1:]}
    assert stored["metadata"]["annotations"][ANNOTATION_ENDPOINTS] == endpoints(
        "10.0.0.1", "10.0.0.2", "10.0.0.3"
    )
    assert cluster.reconcile().actions == ()
    assert all(not line.startswith("refused") for line in cluster.log)


def test_scale_out() -> None:
    """batchsandbox_controller_test.go:175: replicas + 1 makes one more Pod, the next index;
    the new generation is acknowledged."""
    cluster = Cluster()
    cluster.add(batch_sandbox(replicas=3))
    cluster.converge()
    stored = cluster.get("BatchSandbox", NAME)
    stored["spec"]["replicas"] = 4
    stored["metadata"]["generation"] = 2
    result = cluster.reconcile()
    assert created_names(result) == ["bs-3"]
    cluster.converge()
    stored = cluster.get("BatchSandbox", NAME)
    assert (stored["status"]["replicas"], stored["status"]["observedGeneration"]) == (4, 2)


def test_scale_in_removes_nothing() -> None:
    """§3.3, §9.27: there is no scale-in: lowering replicas deletes no Pod (and the status
    keeps counting all of them)."""
    sandbox = batch_sandbox(replicas=1, status=ready_status(3))
    result = plan(sandbox, *pods_of(sandbox, 3))
    assert not any(isinstance(a, Delete | Create) for a in actions_of(result))
    assert status_patch(result) is None


def test_recreate_a_deleted_pod() -> None:
    """batchsandbox_controller_test.go:203: a deleted Pod comes back under the same name, as a
    new Pod, once the old one is gone (while it terminates it still holds its index)."""
    cluster = Cluster()
    cluster.add(batch_sandbox(replicas=3))
    cluster.converge()
    old = cluster.get("Pod", "bs-1")
    cluster.delete("Pod", "bs-1")
    terminating = cluster.reconcile()
    assert not creates(terminating)
    assert cluster.get("BatchSandbox", NAME)["status"]["ready"] == 2
    cluster.terminate()
    cluster.now = NOW + timedelta(seconds=30)
    again = cluster.reconcile()
    assert created_names(again) == ["bs-1"]
    new = cluster.get("Pod", "bs-1")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["metadata"]["creationTimestamp"] == stamp(cluster.now)


def test_expire() -> None:
    """batchsandbox_controller_test.go:235: past its expireTime the sandbox is deleted (with
    its uid as precondition, so a successor under the name is safe), and its Pods go with it
    through the garbage collector."""
    cluster = Cluster()
    cluster.add(batch_sandbox(replicas=2, expire=NOW + timedelta(seconds=20)))
    cluster.converge()
    cluster.now = NOW + timedelta(seconds=21)
    result = cluster.reconcile()
    assert result.actions == (Delete(KEY, uid=UID, why="its expireTime passed"),)
    assert cluster.get("BatchSandbox", NAME) is None
    assert all(p["metadata"].get("deletionTimestamp") for p in cluster.pods())


def test_shard_patches() -> None:
    """batchsandbox_controller_test.go:329: shardPatches[i] is a strategic merge patch of Pod i:
    the main container, matched by name, gets command custom-command-i and keeps its image,
    the sidecar stays; a Pod beyond the patches is the template's."""
    patches = [
        {"spec": {"containers": [{"name": "main", "command": [f"custom-command-{i}"]}]}}
        for i in range(2)
    ]
    patches[1]["metadata"] = {"labels": {"shard": "one"}}
    sandbox = batch_sandbox(replicas=3, shard_patches=patches)
    bodies = creates(plan(sandbox))
    assert [b["metadata"]["name"] for b in bodies] == ["bs-0", "bs-1", "bs-2"]
    for index, body in enumerate(bodies[:2]):
        main, sidecar = body["spec"]["containers"]
        assert main == {
            "name": "main",
            "image": "nginx:1.27",
            "command": [f"custom-command-{index}"],
        }
        assert sidecar == pod_template()["spec"]["containers"][1]
    assert bodies[1]["metadata"]["labels"]["shard"] == "one"
    assert bodies[1]["metadata"]["labels"][LABEL_POD_INDEX] == "1"
    assert bodies[2]["spec"] == pod_template()["spec"]
    assert sandbox["spec"]["template"] == pod_template(), "the template is not touched"


def test_pooled_endpoints() -> None:
    """batchsandbox_controller_test.go:409: pooled, the endpoints follow alloc-status, "" for a
    Pod not assigned yet; a Pod asked back through alloc-release is no longer listed."""
    the_pool = pool(total=3)
    sandbox = batch_sandbox(pool_ref=POOL, replicas=3, alloc=["pool-a-z", "pool-a-y", "pool-a-x"])
    pods = [
        pod("pool-a-x", owner=the_pool, ip="10.0.0.7"),
        pending_pod("pool-a-y", the_pool),
        pod("pool-a-z", owner=the_pool, ip="10.0.0.9"),
    ]
    result = plan(sandbox, the_pool, *pods)
    assert endpoints_patch(result) == endpoints("10.0.0.9", "", "10.0.0.7")
    status = status_patch(result)
    assert (status["replicas"], status["allocated"], status["ready"]) == (3, 2, 2)

    released = batch_sandbox(
        pool_ref=POOL, replicas=3, alloc=["pool-a-z", "pool-a-y", "pool-a-x"], release=["pool-a-y"]
    )
    result = plan(released, the_pool, *pods)
    assert endpoints_patch(result) == endpoints("10.0.0.9", "10.0.0.7")
    assert status_patch(result)["replicas"] == 2


def test_the_decision_names_the_pods_and_their_pool() -> None:
    """What ``sandbus explain BatchSandbox/NS/NAME`` shows of a pooled pass: which Pods it
    holds, in index order, and from which Pool."""
    the_pool = pool(total=3)
    sandbox = batch_sandbox(pool_ref=POOL, replicas=3, alloc=["pool-a-z", "pool-a-y"])
    pods = [pod("pool-a-y", owner=the_pool, ip="10.0.0.7"), pod("pool-a-z", owner=the_pool)]
    assert plan(sandbox, the_pool, *pods).reason.startswith(
        f"2 of 3 Pods from Pool {POOL}: pool-a-z, pool-a-y"
    )


# -- PoolAllocationPending: PoolCapacityExhausted, PoolNotFound -----------------------------


def test_pool_allocation_pending_while_short_at_pool_max_and_cleared_when_the_pods_come() -> None:
    """§2.10, upstream #1581: while the sandbox is short and its Pool is at poolMax with no free
    Pod, PoolAllocationPending (reason PoolCapacityExhausted, status True) says so (its first
    status is written for it, Pod or not), with a Warning Event after the status write; once
    the Pods come it is gone, and the time of the Ready condition is the pass's."""
    the_pool = pool(pool_max=3, total=3, allocated=3, available=0)
    waiting = batch_sandbox(pool_ref=POOL, replicas=2)
    result = plan(waiting, the_pool)
    status = status_patch(result)
    assert status is not None
    message = "Pool pool-a is at poolMax (3) with 0 free Pods; waiting for 2 more"
    assert conditions_of(status)["PoolAllocationPending"] == ("PoolCapacityExhausted", message)
    (written,) = [c for c in status["conditions"] if c["type"] == "PoolAllocationPending"]
    assert written["status"] == "True"
    assert status["phase"] == "Pending"
    assert warnings(result) == [("PoolCapacityExhausted", f"PoolAllocationPending: {message}")]
    kinds = [type(a).__name__ for a in result.actions]
    assert kinds[-2:] == ["Patch", "Create"], "the Event follows the status write"

    partly = batch_sandbox(pool_ref=POOL, replicas=2, alloc=["pool-a-a"], status=status)
    pods = [pod("pool-a-a", owner=the_pool), pod("pool-a-b", owner=the_pool)]
    result = plan(partly, the_pool, *pods)
    status = status_patch(result)
    assert conditions_of(status)["PoolAllocationPending"][1].endswith("waiting for 1 more")
    assert status["phase"] == "Succeed"
    assert warnings(result) == [], "the same reason: no second Event"

    served = batch_sandbox(pool_ref=POOL, replicas=2, alloc=["pool-a-a", "pool-a-b"], status=status)
    status = status_patch(plan(served, the_pool, *pods))
    assert conditions_of(status) == {"Ready": READY[1:]}
    assert status["replicas"] == 2


@pytest.mark.parametrize(
    ("the_pool", "why"),
    [
        (pool(pool_max=5, total=3, available=0), "the Pool can still grow"),
        (pool(pool_max=3, total=3, available=2), "the Pool has free Pods for it"),
    ],
)
def test_pool_capacity_not_exhausted(the_pool: Json, why: str) -> None:
    """No PoolAllocationPending while the Pool can serve the sandbox: below poolMax, or with
    at least as many free Pods as it lacks (its next pass allocates them)."""
    sandbox = batch_sandbox(pool_ref=POOL, replicas=2)
    assert plan(sandbox, the_pool).actions == (), why


def test_pool_capacity_counts_released_pods_and_not_lost_ones() -> None:
    """A Pod asked back or released still counts against replicas (the Pool does not replace
    it), so it makes nobody short; a Pod that vanished without a release does not count (the
    Pool gives another), so that one is waited for."""
    the_pool = pool(pool_max=3, total=3, available=0)
    alloc = ["pool-a-a", "pool-a-b", "pool-a-c"]
    pods = [pod("pool-a-a", owner=the_pool), pod("pool-a-b", owner=the_pool)]
    released = batch_sandbox(
        pool_ref=POOL, replicas=3, alloc=alloc, release=["pool-a-b"], released=["pool-a-c"]
    )
    status = status_patch(plan(released, the_pool, *pods))
    assert "PoolAllocationPending" not in conditions_of(status)
    assert status["replicas"] == 1

    lost = batch_sandbox(pool_ref=POOL, replicas=3, alloc=alloc)
    status = status_patch(plan(lost, the_pool, *pods))
    assert conditions_of(status)["PoolAllocationPending"][1].endswith("waiting for 1 more")


@pytest.mark.parametrize("template", [None, pod_template()], ids=["pooled", "with-a-template"])
def test_pool_not_found_until_the_pool_is_created(template: Json | None) -> None:
    """A poolRef that names no Pool (issue #32; upstream writes nothing and its decisions read
    "0 of 2 Pods"): PoolAllocationPending, reason PoolNotFound, in a first status with no Pod,
    and a Warning Event; a template beside the poolRef changes nothing (the Pool serves it).
    Once the Pool exists (and has not given the Pods yet) the reason is no longer
    PoolNotFound; once it has, the condition is gone."""
    sandbox = batch_sandbox(pool_ref=POOL, replicas=2, template=template)
    result = plan(sandbox)
    assert not creates(result)
    status = status_patch(result)
    assert status is not None
    message = (
        "Pool pool-a does not exist in namespace default: create it, or set spec.poolRef to a "
        "Pool that exists; waiting for 2 Pods"
    )
    assert conditions_of(status) == {
        "PoolAllocationPending": ("PoolNotFound", message),
        "Progressing": ("Creating", "Sandbox is being created"),
    }
    assert (status["phase"], status["replicas"]) == ("Pending", 0)
    assert warnings(result) == [("PoolNotFound", f"PoolAllocationPending: {message}")]
    assert "PoolAllocationPending: Pool pool-a does not exist" in result.reason

    again = batch_sandbox(pool_ref=POOL, replicas=2, template=template, status=status)
    assert plan(again).actions == (), "nothing changed: nothing written, no second Event"

    the_pool = pool(pool_max=5, total=0, available=0)
    status = status_patch(plan(again, the_pool))
    assert "PoolAllocationPending" not in conditions_of(status)

    pods = [pod("pool-a-a", owner=the_pool), pod("pool-a-b", owner=the_pool)]
    served = batch_sandbox(
        pool_ref=POOL, replicas=2, template=template, alloc=["pool-a-a", "pool-a-b"], status=status
    )
    status = status_patch(plan(served, the_pool, *pods))
    assert conditions_of(status) == {"Ready": READY[1:]}


def test_the_former_type_pool_capacity_exhausted_is_replaced_on_the_next_pass() -> None:
    """An object written by sandbus before it took upstream's name carries the type
    PoolCapacityExhausted (reason PoolAtMax): the next status write drops it and writes
    PoolAllocationPending in its place, not beside it; and once nothing waits, it goes too."""
    old = condition(
        "PoolCapacityExhausted",
        "PoolAtMax",
        "Pool pool-a is at poolMax (3) with 0 free Pods; waiting for 2 more",
    )
    status = batch_status(phase="Pending", conditions=[condition(*CREATING), old])
    the_pool = pool(pool_max=3, total=3, allocated=3, available=0)
    waiting = batch_sandbox(pool_ref=POOL, replicas=2, status=status)
    written = status_patch(plan(waiting, the_pool))
    assert written is not None
    assert sorted(conditions_of(written)) == ["PoolAllocationPending", "Progressing"]

    pods = [pod("pool-a-a", owner=the_pool), pod("pool-a-b", owner=the_pool)]
    served = batch_sandbox(pool_ref=POOL, replicas=2, alloc=["pool-a-a", "pool-a-b"], status=status)
    written = status_patch(plan(served, the_pool, *pods))
    assert conditions_of(written) == {"Ready": READY[1:]}


# -- PoolAssignFailed and auto-assign -------------------------------------------------------


def test_pool_assign_failed_without_a_pool() -> None:
    """§2.12: ``poolRef: "*"`` and no Pool in the namespace: upstream returns an error and
    writes nothing; ours writes PoolAssignFailed (NoPool) into a first status, with no Pod, and
    looks again later (a Pool's change wakes it sooner)."""
    sandbox = batch_sandbox(pool_ref="*", replicas=1)
    result = plan(sandbox)
    assert not creates(result)
    status = status_patch(result)
    assert conditions_of(status)["PoolAssignFailed"] == (
        "NoPool",
        "no Pool in namespace default to choose from",
    )
    assert (status["phase"], status["replicas"]) == ("Pending", 0)
    assert result.requeue_after == ASSIGN_RETRY


def test_pool_assign_failed_when_no_pool_fits() -> None:
    """``"*"`` with Pools that do not fit: PoolAssignFailed (NoPoolFits) names each and why."""
    sandbox = batch_sandbox(pool_ref="*", template=pod_template("python:3.12"))
    status = status_patch(plan(sandbox, pool("pool-b", image="nginx:1.27")))
    reason, message = conditions_of(status)["PoolAssignFailed"]
    assert reason == "NoPoolFits"
    assert "pool-b (image:" in message


def test_auto_assign_patches_pool_ref_conditionally() -> None:
    """``"*"`` with a Pool that fits: one merge patch of spec.poolRef carrying the sandbox's
    resourceVersion (a concurrent edit makes it plan again), and nothing else in that pass;
    the next pass, on the assigned Pool, clears PoolAssignFailed."""
    failed = status_patch(plan(batch_sandbox(pool_ref="*")))
    sandbox = batch_sandbox(pool_ref="*", rv="41", status=failed)
    result = plan(sandbox, pool("pool-b", total=2), pool("pool-c", total=2, allocated=1))
    assert result.actions == (
        Patch(
            KEY,
            {"metadata": {"resourceVersion": "41"}, "spec": {"poolRef": "pool-b"}},
            why="auto-assign: pool-b",
            on_conflict="refresh",
        ),
    )
    assigned = batch_sandbox(pool_ref="pool-b", status=failed)
    status = status_patch(plan(assigned, pool("pool-b", total=2)))
    assert "PoolAssignFailed" not in conditions_of(status)


# -- AllocationRefused ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["{not json", '{"pods": "pool-a-a"}', '{"pods": [1]}', '{"pods": [""]}', '["pool-a-a"]'],
)
def test_allocation_refused_for_a_malformed_alloc_status(text: str) -> None:
    """A malformed alloc-status: the Pods are unknown, so the endpoints and the reported
    counters, phase and conditions stay as they are, and AllocationRefused
    (MalformedAnnotation) says which annotation is wrong."""
    before = ready_status(2)
    sandbox = batch_sandbox(
        pool_ref=POOL,
        replicas=2,
        annotations={
            ANNOTATION_ALLOC_STATUS: text,
            ANNOTATION_ENDPOINTS: endpoints("10.0.0.1", "10.0.0.2"),
        },
        status=before,
    )
    result = plan(sandbox, pool(total=3), pod("pool-a-a", owner=pool()))
    assert endpoints_patch(result) is None
    status = status_patch(result)
    assert {k: status[k] for k in ("replicas", "ready", "phase")} == {
        "replicas": 2,
        "ready": 2,
        "phase": "Succeed",
    }
    reason, message = conditions_of(status)["AllocationRefused"]
    assert reason == "MalformedAnnotation"
    assert ANNOTATION_ALLOC_STATUS in message
    assert conditions_of(status)["Ready"] == READY[1:]
    assert (
        status["conditions"][1]["lastTransitionTime"]
        == before["conditions"][0]["lastTransitionTime"]
    )
    assert "unknown of 2 Pods" in result.reason


def test_allocation_refused_for_a_malformed_alloc_release() -> None:
    """A malformed alloc-release: reported; the Pods of alloc-status are still listed."""
    the_pool = pool(total=2)
    sandbox = batch_sandbox(
        pool_ref=POOL,
        replicas=1,
        alloc=["pool-a-a"],
        annotations={"sandbox.opensandbox.io/alloc-release": "pool-a-a"},
    )
    result = plan(sandbox, the_pool, pod("pool-a-a", owner=the_pool, ip="10.0.0.5"))
    assert endpoints_patch(result) == endpoints("10.0.0.5")
    status = status_patch(result)
    assert status["replicas"] == 1
    assert conditions_of(status)["AllocationRefused"][0] == "MalformedAnnotation"


def test_allocation_refused_for_a_release_of_a_foreign_pod() -> None:
    """§9.14: an alloc-release naming a Pod the sandbox does not hold (another sandbox's) is
    reported (the Pool ignores it); the release of its own Pod takes that Pod off the list."""
    the_pool = pool(total=3)
    sandbox = batch_sandbox(
        pool_ref=POOL,
        replicas=2,
        alloc=["pool-a-a", "pool-a-b"],
        release=["pool-a-b", "pool-a-other"],
    )
    pods = [pod("pool-a-a", owner=the_pool), pod("pool-a-b", owner=the_pool)]
    status = status_patch(plan(sandbox, the_pool, *pods))
    assert conditions_of(status)["AllocationRefused"] == (
        "ReleaseOfForeignPod",
        "alloc-release names Pods this sandbox does not hold: pool-a-other",
    )
    assert status["replicas"] == 1


# -- deletion -------------------------------------------------------------------------------


def test_a_deleting_sandbox_drops_the_pool_finalizer_only_when_its_pool_is_gone() -> None:
    """§9.28: a deleting pooled sandbox whose Pool is gone drops pool-allocation itself (a
    conditional patch of the finalizers, the others kept), since no Pool will; while its
    Pool exists that is the Pool's job, and a template-mode sandbox leaves it to the garbage
    collector. A sandbox being deleted writes no status."""
    finalizers = ["example.com/keep", FINALIZER_POOL_ALLOCATION]
    sandbox = batch_sandbox(
        pool_ref=POOL, alloc=["pool-a-a"], finalizers=finalizers, deleting=True, rv="77"
    )
    orphaned = plan(sandbox, pod("pool-a-a", owner=pool()))
    assert orphaned.actions == (
        Patch(
            KEY,
            {"metadata": {"finalizers": ["example.com/keep"], "resourceVersion": "77"}},
            why="its Pool pool-a is gone: nothing else will release it",
            on_conflict="refresh",
        ),
    )
    assert plan(sandbox, pool(total=1), pod("pool-a-a", owner=pool())).actions == ()
    template_mode = batch_sandbox(finalizers=finalizers, deleting=True)
    assert plan(template_mode).actions == ()
    without = batch_sandbox(pool_ref=POOL, finalizers=["example.com/keep"], deleting=True)
    assert plan(without).actions == ()


def test_a_deleting_sandbox_without_tasks_to_stop_drops_task_cleanup() -> None:
    """TestBatchSandboxReconciler_reconcileTasks: on deletion with every task released (here:
    none left to stop), the task-cleanup finalizer is removed."""
    sandbox = batch_sandbox(finalizers=[FINALIZER_TASK_CLEANUP], deleting=True, rv="9")
    [patch] = plan(sandbox).actions
    assert isinstance(patch, Patch)
    assert patch.patch == {"metadata": {"finalizers": [], "resourceVersion": "9"}}


# -- expiry ---------------------------------------------------------------------------------


def test_expire_time_in_the_past_deletes_with_the_uid() -> None:
    """§3.6: expireTime < now deletes the sandbox, with its uid as precondition, and nothing
    else happens in that pass."""
    sandbox = batch_sandbox(expire=NOW - timedelta(seconds=1))
    result = plan(sandbox)
    assert result.actions == (Delete(KEY, uid=UID, why="its expireTime passed"),)


def test_expire_time_in_the_future_requeues_at_the_expiry() -> None:
    """§3.6: before the expiry it is looked at again when it comes, and a time that is exactly
    now has not passed yet (the comparison is strict)."""
    sandbox = batch_sandbox(expire=NOW + timedelta(minutes=2), status=ready_status(3))
    result = plan(sandbox, *pods_of(sandbox))
    assert not any(isinstance(a, Delete) for a in actions_of(result))
    assert result.requeue_after == 120.0
    at_now = plan(batch_sandbox(expire=NOW))
    assert not any(isinstance(a, Delete) for a in actions_of(at_now))
    assert at_now.requeue_after == 0.0


def test_a_deleting_sandbox_past_its_expiry_is_not_deleted_again() -> None:
    sandbox = batch_sandbox(expire=NOW - timedelta(hours=1), deleting=True)
    assert plan(sandbox).actions == ()


# -- the first writes -----------------------------------------------------------------------


def test_the_first_status_waits_for_a_pod_unless_there_is_something_to_report() -> None:
    """§3.7 step 2: no Pod, no phase yet, replicas > 0 and no condition of ours: no status
    (the pass only creates); with replicas 0 there is nothing to wait for, it is Pending."""
    result = plan(batch_sandbox(replicas=2))
    assert created_names(result) == ["bs-0", "bs-1"]
    assert status_patch(result) is None
    status = status_patch(plan(batch_sandbox(replicas=0)))
    assert (status["phase"], status["replicas"]) == ("Pending", 0)
    assert conditions_of(status) == {"Progressing": CREATING[1:]}


def test_every_status_write_carries_the_required_counters() -> None:
    """§1.2: the CRD requires all eight counters; the task counters are carried over."""
    sandbox = batch_sandbox(replicas=1)
    status = status_patch(plan(sandbox, pending_pod("bs-0", sandbox)))
    required = ["replicas", "allocated", "ready", "taskRunning", "taskSucceed", "taskFailed"]
    required += ["taskUnknown", "taskPending"]
    assert all(isinstance(status[k], int) for k in required)
    carried = batch_sandbox(replicas=1, status={**ready_status(1), "taskSucceed": 4})
    status = status_patch(plan(carried, pending_pod("bs-0", carried)))
    assert status["taskSucceed"] == 4


def test_the_status_patch_is_conditional_and_replans_on_conflict() -> None:
    sandbox = batch_sandbox(replicas=1)
    actions = actions_of(plan(sandbox, pod("bs-0", owner=sandbox)), Patch)
    [patch] = [a for a in actions if a.subresource == "status"]
    assert (patch.conditional, patch.on_conflict) == (True, "refresh")


def test_the_endpoints_first_write_waits_until_it_is_not_empty() -> None:
    """§3.8: no endpoints annotation is written while it would be ``[]``; once there, it goes
    down to ``[]`` when the Pods go (every Pod asked back)."""
    sandbox = batch_sandbox(pool_ref=POOL, replicas=1, alloc=[], status=ready_status(0))
    assert endpoints_patch(plan(sandbox, pool(total=1))) is None
    was = batch_sandbox(
        pool_ref=POOL,
        replicas=1,
        alloc=["pool-a-a"],
        release=["pool-a-a"],
        annotations={ANNOTATION_ENDPOINTS: endpoints("10.0.0.1")},
    )
    result = plan(was, pool(total=1), pod("pool-a-a", owner=pool()))
    assert endpoints_patch(result) == "[]"
    [patch] = [a for a in actions_of(result) if isinstance(a, Patch) and a.subresource is None]
    assert patch.patch == {"metadata": {"annotations": {ANNOTATION_ENDPOINTS: "[]"}}}


# -- Failed is sticky -----------------------------------------------------------------------


def test_failed_is_sticky() -> None:
    """§3.7: once Failed, it stays Failed when the Pods recover; PodFailed goes (conditions
    exist only while True) and no Ready condition comes."""
    failed = batch_status(
        phase="Failed",
        replicas=2,
        conditions=[condition("PodFailed", "ErrImagePull", "2/2 observed pods failed; ...")],
    )
    sandbox = batch_sandbox(replicas=2, status=failed)
    status = status_patch(plan(sandbox, *pods_of(sandbox, 2)))
    assert (status["phase"], status["ready"]) == ("Failed", 2)
    assert status["conditions"] == []
    settled = batch_sandbox(replicas=2, status=status)
    assert status_patch(plan(settled, *pods_of(settled, 2))) is None


def test_pause_conditions_survive_the_status_write() -> None:
    """TestPersistRuntimeView_PreservesPauseFailedConditionFromLatestStatus: a PauseFailed
    whose pause is still asked for survives the steady state's status write."""
    paused = condition("PauseFailed", "UnsupportedReplicas", "replicas must be 1")
    sandbox = batch_sandbox(replicas=2, status={**ready_status(1), "conditions": [paused]})
    sandbox["spec"]["pause"] = True
    status = status_patch(plan(sandbox, *pods_of(sandbox, 2)))
    assert conditions_of(status) == {
        "Ready": READY[1:],
        "PauseFailed": ("UnsupportedReplicas", "replicas must be 1"),
    }


# -- shard patches that cannot be applied, and no template ----------------------------------


@pytest.mark.parametrize(
    ("patch", "says"),
    [
        (
            {"spec": {"containers": [{"command": ["x"]}]}},
            "does not contain declared merge key: name",
        ),
        ({"spec": {"$patch": "explode"}}, "Unknown patch type"),
        ("not an object", "cannot unmarshal string"),
        ({"metadata": {"labels": ["a"]}}, "metadata or labels is no object"),
    ],
)
def test_a_shard_patch_that_cannot_be_applied_is_a_plan_error(patch: Any, says: str) -> None:
    """A shard patch that cannot be applied is a plan error naming its index and the reason
    (the decision is recorded as failed and retried with backoff), not a crash; the Pods
    before it are still made, and the status is still written."""
    sandbox = batch_sandbox(replicas=3, shard_patches=[{}, patch])
    result = plan(sandbox, pod("bs-2", owner=sandbox))
    assert created_names(result) == ["bs-0"]
    assert result.error is not None
    assert result.error.startswith("shardPatches[1] cannot be applied: ")
    assert says in result.error
    assert status_patch(result) is not None


def test_no_template_and_no_pool_is_an_invalid_spec_until_one_is_set() -> None:
    """Neither template nor poolRef (issue #32): nothing to make Pods from (upstream would send
    a Pod without containers to the API server, pass after pass). The status says
    InvalidSpec/NoTemplate, a Warning Event says it once, and there is no retry: a change of
    the spec wakes the sandbox. Once it has a template, the Pods come and the condition goes."""
    sandbox = batch_sandbox(replicas=2)
    del sandbox["spec"]["template"]
    result = plan(sandbox)
    assert not creates(result)
    assert result.error is None and result.requeue_after is None
    status = status_patch(result)
    assert status is not None
    message = (
        "neither spec.template nor spec.poolRef is set: there is nothing to make its 2 Pod(s) "
        "from; set spec.template, or spec.poolRef to take them from a Pool"
    )
    assert conditions_of(status) == {
        "InvalidSpec": ("NoTemplate", message),
        "Progressing": ("Creating", "Sandbox is being created"),
    }
    assert warnings(result) == [("NoTemplate", f"InvalidSpec: {message}")]
    stored = batch_sandbox(replicas=2, status=status)
    del stored["spec"]["template"]
    assert plan(stored).actions == (), "nothing changed: nothing written, no second Event"

    fixed = batch_sandbox(replicas=2, status=status)
    result = plan(fixed)
    assert created_names(result) == ["bs-0", "bs-1"]
    assert "InvalidSpec" not in conditions_of(status_patch(result))


# -- creates not seen yet, and names taken --------------------------------------------------


def expecting(*entries: tuple[str, str]) -> Expectations:
    return Expectations(
        owner_uid=UID,
        entries=tuple(
            Expected(verb="create", kind="Pod", namespace=NS, name=name, uid=uid, since=NOW)
            for name, uid in entries
        ),
    )


def test_a_create_not_seen_yet_is_not_made_twice() -> None:
    """§3.3: a Pod created but not shown by the bus yet is not created again; unlike upstream,
    which waits for all of them, the other missing indices are made (their names differ), and
    the pass looks again in a bounded time."""
    sandbox = batch_sandbox(replicas=3)
    result = plan(sandbox, pod("bs-0", owner=sandbox), expectations=expecting(("bs-1", "uid-1")))
    assert created_names(result) == ["bs-2"]
    assert result.requeue_after == EXPECTATIONS_RECHECK
    assert "waiting to see our creates of bs-1" in result.reason


def test_a_create_without_an_answer_is_issued_again() -> None:
    """A create whose answer never came (the worker died, the request timed out) is issued
    again under the same name: it makes the Pod or answers AlreadyExists, never a second one."""
    sandbox = batch_sandbox(replicas=2)
    result = plan(sandbox, pod("bs-0", owner=sandbox), expectations=expecting(("bs-1", "")))
    assert created_names(result) == ["bs-1"]


def test_a_name_held_by_a_former_incarnation_is_waited_for() -> None:
    """A sandbox recreated under its name while its former incarnation's Pods terminate: those
    names are not created over (upstream's create answers AlreadyExists, pass after pass); the
    pass waits, bounded, for them to go."""
    former = batch_sandbox(uid="uid-former")
    sandbox = batch_sandbox(replicas=2)
    result = plan(sandbox, pod("bs-0", owner=former, deleting=True))
    assert created_names(result) == ["bs-1"]
    assert result.error is None
    assert result.requeue_after == TAKEN_RECHECK
    assert "waiting for the old Pod bs-0 to go" in result.reason


def test_a_name_held_by_someone_else_is_a_plan_error() -> None:
    """A live Pod of another under one of its names: not created over, and said as an error."""
    someone = pod("bs-1", labels={"app": "other"})
    sandbox = batch_sandbox(replicas=2)
    result = plan(sandbox, someone)
    assert created_names(result) == ["bs-0"]
    assert (
        result.error == "Pod bs-1 exists and is not this BatchSandbox's: replica 1 cannot be made"
    )


def test_gone() -> None:
    assert plan(None).reason == "gone"
