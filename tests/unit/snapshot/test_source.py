"""Which Pod a snapshot commits (services/snapshot/core/source.py), and the containers it
commits: upstream's TestHandlePending_UsesSourcePodContainersWhenTemplateMissing, then the trap
of docs/opensandbox.md §9.19 as sandbus closes it. Upstream takes the first Running Pod of the
sandbox's ``alloc-status``, then of its name label, then ``<bs>-0``; ``alloc-status`` only
grows, so a resumed sandbox would commit a Pool Pod that now serves another tenant. Here a Pod
is committed only while the sandbox holds it: a pooled sandbox's Pool Pod that it has not given
back and no other sandbox holds, or else a Pod it controls."""

from __future__ import annotations

import pytest

from api.objects import Json
from api.opensandbox import ANNOTATION_ALLOC_STATUS, LABEL_BATCH_SANDBOX_NAME, LABEL_POOL_NAME
from services.runtime.reconcile.actions import Plan
from tests.unit.snapshot.world import (
    NAME,
    NODE,
    POOL,
    batch_sandbox,
    commit_container,
    conditions_of,
    created_job,
    creates,
    plan,
    pod,
    pool_pod,
    pooled,
    snapshot,
    status_patch,
    template,
)


def committed_pod(result: Plan) -> str:
    """The Pod the pass commits (and says it commits)."""
    args = commit_container(created_job(result))["args"]
    status = status_patch(result)
    assert status is not None and status["sourcePodName"] == args[0]
    return str(args[0])


def committed_containers(result: Plan) -> list[str]:
    args = commit_container(created_job(result))["args"]
    return [arg.split(":", 1)[0] for arg in args[2:]]


def not_found(result: Plan) -> str:
    """The message of a pass that found no Pod to commit (and so made no Job)."""
    assert creates(result) == []
    status = status_patch(result)
    assert status is not None and status["phase"] == "Failed"
    (state, reason, message) = conditions_of(status)["Failed"]
    assert (state, reason) == ("True", "SourcePodNotFound")
    return message


# -- the containers -------------------------------------------------------------------------


def test_a_pooled_sandbox_commits_the_containers_of_its_pod() -> None:
    """TestHandlePending_UsesSourcePodContainersWhenTemplateMissing (:314): a pooled sandbox
    has no template, so the containers are the Pod's, in its order, init containers never
    (they do not run any more)."""
    held = pool_pod("pool-a-x1", containers=("agent", "main"), init=("setup",))
    result = plan(snapshot(), pooled(), held)
    assert committed_containers(result) == ["agent", "main"]
    status = status_patch(result)
    assert status is not None
    assert [c["containerName"] for c in status["containers"]] == ["agent", "main"]
    assert status["sourceNodeName"] == NODE


def test_a_template_decides_the_containers() -> None:
    """§4.1 step 4: with a template, its containers (not the Pod's, not its init
    containers)."""
    sandbox = batch_sandbox(template_spec=template("web", "db", init=("migrate",)))
    running = pod(f"{NAME}-0", owner=sandbox, containers=("web", "db", "injected"))
    assert committed_containers(plan(snapshot(), sandbox, running)) == ["web", "db"]


def test_a_sandbox_with_no_containers_fails_it() -> None:
    """§4.1 step 4: neither the sandbox nor its Pod has a container → Failed
    ``NoContainers``, no Job."""
    result = plan(snapshot(), pooled(), pool_pod("pool-a-x1", containers=()))
    (state, reason, message) = conditions_of(status_patch(result))["Failed"]
    assert (state, reason) == ("True", "NoContainers")
    assert NAME in message
    assert creates(result) == []


# -- a pooled sandbox -----------------------------------------------------------------------


def test_a_pooled_sandbox_commits_the_pod_it_holds() -> None:
    """§9.19: the Pool Pod in its ``alloc-status``, labelled with its Pool, Running."""
    result = plan(snapshot(), pooled(), pool_pod("pool-a-x1"))
    assert committed_pod(result) == "pool-a-x1"


def test_the_first_running_pod_in_alloc_status_order() -> None:
    """Upstream's order: ``alloc-status``'s, not the names'; a Pod not Running is passed
    over."""
    sandbox = pooled(alloc=("pool-a-x3", "pool-a-x1", "pool-a-x2"))
    pods = [
        pool_pod("pool-a-x1"),
        pool_pod("pool-a-x2"),
        pool_pod("pool-a-x3", phase="Pending"),
    ]
    assert committed_pod(plan(snapshot(), sandbox, *pods)) == "pool-a-x1"


@pytest.mark.parametrize("annotation", ["release", "released"])
def test_a_pod_given_back_is_not_committed(annotation: str) -> None:
    """§9.19: a Pod in ``alloc-release`` (asked back) or ``alloc-released`` (back in the
    Pool) is no longer the sandbox's, though ``alloc-status`` still lists it."""
    back = ["pool-a-x1"]
    if annotation == "release":
        sandbox = pooled(alloc=("pool-a-x1", "pool-a-x2"), release=back)
        alone = pooled(alloc=("pool-a-x1",), release=back)
    else:
        sandbox = pooled(alloc=("pool-a-x1", "pool-a-x2"), released=back)
        alone = pooled(alloc=("pool-a-x1",), released=back)
    pods = [pool_pod("pool-a-x1"), pool_pod("pool-a-x2")]
    assert committed_pod(plan(snapshot(), sandbox, *pods)) == "pool-a-x2"
    assert NAME in not_found(plan(snapshot(), alone, pods[0]))


def test_a_pod_of_another_pool_is_not_committed() -> None:
    """§9.19: the Pod's ``pool-name`` label must be the sandbox's ``poolRef``."""
    elsewhere = pool_pod("pool-a-x1")
    elsewhere["metadata"]["labels"][LABEL_POOL_NAME] = "pool-b"
    not_found(plan(snapshot(), pooled(), elsewhere))
    unlabelled = pool_pod("pool-a-x1")
    del unlabelled["metadata"]["labels"][LABEL_POOL_NAME]
    not_found(plan(snapshot(), pooled(), unlabelled))


@pytest.mark.parametrize(
    "held",
    [
        pytest.param(pool_pod("pool-a-x1", phase="Pending"), id="pending"),
        pytest.param(pool_pod("pool-a-x1", phase="Succeeded"), id="ended"),
        pytest.param(pool_pod("pool-a-x1", deleting=True), id="deleting"),
    ],
)
def test_a_pod_that_is_not_running_is_not_committed(held: Json) -> None:
    """§4.1 step 3: Running, and (sandbus) not being deleted."""
    not_found(plan(snapshot(), pooled(), held))


def test_a_pod_listed_but_gone_is_not_committed() -> None:
    """§4.1 step 3: ``alloc-status`` names a Pod that does not exist (any more) → Failed
    ``SourcePodNotFound``."""
    not_found(plan(snapshot(), pooled()))


def test_a_pod_another_sandbox_holds_is_not_committed() -> None:
    """§9.19: another pooled sandbox of the namespace holds the same Pod (the allocation is
    being rewritten): neither's snapshot commits it."""
    other = pooled("bs-b", alloc=("pool-a-x1",))
    not_found(plan(snapshot(), pooled(), other, pool_pod("pool-a-x1")))
    result = plan(snapshot(sandbox="bs-b"), pooled(), other, pool_pod("pool-a-x1"))
    assert creates(result) == []


def test_a_stale_alloc_status_elsewhere_does_not_block_the_holder() -> None:
    """§9.19: a resumed sandbox (no ``poolRef`` any more) that still lists the Pod in its old
    ``alloc-status`` holds nothing of the Pool: the Pod's holder now snapshots it."""
    resumed = batch_sandbox("bs-old", pool_ref="", alloc=("pool-a-x1",))
    assert committed_pod(plan(snapshot(), pooled(), resumed, pool_pod("pool-a-x1"))) == "pool-a-x1"


def test_a_pooled_sandbox_with_an_unreadable_alloc_status_holds_nothing() -> None:
    """sandbus: upstream's pass fails on the parse error; ours finds no Pod it can tell is
    the sandbox's."""
    sandbox = batch_sandbox(pool_ref=POOL, annotations={ANNOTATION_ALLOC_STATUS: "{not json"})
    not_found(plan(snapshot(), sandbox, pool_pod("pool-a-x1")))


# -- a sandbox detached from its pool, and a template-mode one ------------------------------


def detached() -> Json:
    """A sandbox that was pooled, paused and resumed: ``poolRef`` cleared, the snapshot's
    template given, and the old ``alloc-status`` kept (upstream's writers expect it to only
    grow)."""
    return batch_sandbox(
        pool_ref="", template_spec=template("main", "agent"), alloc=("pool-a-x1",), generation=3
    )


def test_a_detached_sandbox_commits_the_pod_it_controls_not_its_old_pool_pod() -> None:
    """§9.19, the trap: the Pool Pod of its old ``alloc-status`` now serves ``bs-b``; the
    snapshot commits the Pod the resumed sandbox controls, not the other tenant's."""
    sandbox = detached()
    now_theirs = pooled("bs-b", alloc=("pool-a-x1",))
    own = pod(f"{NAME}-0", owner=sandbox, node="node-2", containers=("main", "agent"))
    result = plan(snapshot(), sandbox, now_theirs, pool_pod("pool-a-x1"), own)
    assert committed_pod(result) == f"{NAME}-0"
    assert created_job(result)["spec"]["template"]["spec"]["nodeName"] == "node-2"


def test_a_detached_sandbox_without_its_own_pod_commits_nothing() -> None:
    """§9.19: not the old Pool Pod either, even when it is Running and nobody holds it."""
    message = not_found(plan(snapshot(), detached(), pool_pod("pool-a-x1")))
    assert NAME in message


@pytest.mark.parametrize(
    "impostor",
    [
        pytest.param(pod(f"{NAME}-0", labels={LABEL_BATCH_SANDBOX_NAME: NAME}), id="no owner"),
        pytest.param(
            pod(f"{NAME}-0", owner=batch_sandbox(uid="uid-earlier-bs")), id="earlier sandbox"
        ),
        pytest.param(pod(f"{NAME}-0", owner=batch_sandbox("bs-b")), id="another sandbox"),
    ],
)
def test_a_pod_the_sandbox_does_not_control_is_not_committed(impostor: Json) -> None:
    """§9.19: upstream's fallbacks (the name label, the name ``<bs>-0``) are not ownership:
    anyone may create such a Pod. Only a Pod the sandbox controls is taken."""
    impostor["metadata"]["labels"][LABEL_BATCH_SANDBOX_NAME] = NAME
    not_found(plan(snapshot(), batch_sandbox(), impostor))


def test_a_template_mode_sandbox_commits_its_first_running_pod_by_name() -> None:
    """§4.1 step 3 for a Pod the sandbox controls: the first Running one by name (its index
    order for a one-replica sandbox), a Pending one passed over."""
    sandbox = batch_sandbox()
    pods = [
        pod(f"{NAME}-2", owner=sandbox),
        pod(f"{NAME}-0", owner=sandbox, phase="Pending"),
        pod(f"{NAME}-1", owner=sandbox),
    ]
    assert committed_pod(plan(snapshot(), sandbox, *pods)) == f"{NAME}-1"


def test_no_pod_fails_it() -> None:
    """§4.1 step 3: none → Failed ``SourcePodNotFound``, naming the sandbox, no Job."""
    assert NAME in not_found(plan(snapshot(), batch_sandbox()))
