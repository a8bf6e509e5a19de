"""A Pool that cannot make progress says why (issue #32, docs/conditions.md): the conditions
``InvalidSpec`` (``InvertedCapacity``, ``NoTemplate``) and ``ReplicaFailure``
(``FailedCreate``, from the error of the previous pass), each set while its cause lasts,
removed once it ends, and announced by one Warning Event when it appears. Upstream's Pool has no
conditions: it runs an inverted Pool at poolMax and leaves a refused create in its log."""

from __future__ import annotations

from typing import Any

from api.objects import Json
from services.runtime.reconcile.actions import Create, Patch, Plan, Together
from tests.support.plans import actions_of
from tests.unit.pool.opensandbox.world import (
    NOW,
    plan,
    pod,
    pod_creates,
    pod_deletes,
    pool,
    status_written,
)

REFUSED = (
    'create Pod/default/pool-x7k2q: Invalid (422): Pod "pool-x7k2q" is invalid: '
    "spec.containers[0].image: Required value"
)
REFUSED_MESSAGE = (
    "the API server refuses the Pool's Pods (Invalid, 422): Pod is invalid: "
    "spec.containers[0].image: Required value"
)


def conditions(status: Json | None) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c["reason"], c["message"])
        for c in (status or {}).get("conditions") or ()
    }


def warnings(planned: Plan) -> list[tuple[str, str]]:
    return [
        (a.body["reason"], a.body["note"])
        for a in actions_of(planned)
        if isinstance(a, Create) and a.body["kind"] == "Event" and a.body["type"] == "Warning"
    ]


def with_status(obj: Json, status: Json | None) -> Json:
    assert status is not None
    return {**obj, "status": status}


def kinds(planned: Plan) -> list[str]:
    """Each top-level action as ``verb Kind`` (``together`` for a group)."""

    def one(action: Any) -> str:
        if isinstance(action, Together):
            return "together"
        return f"{action.verb} {action.target.kind}"

    return [one(a) for a in planned.actions]


def test_an_inverted_capacity_is_refused_with_a_condition_until_it_is_fixed() -> None:
    """bufferMin 5 > bufferMax 2 and poolMin 4 > poolMax 1: upstream quietly runs at poolMax;
    here the Pool creates nothing and removes nothing for its scale, and says so in
    InvalidSpec/InvertedCapacity with a Warning Event. Fixed, the condition goes and the Pool
    fills."""
    inverted = pool(buffer_min=5, buffer_max=2, pool_min=4, pool_max=1)
    idle = [pod("pool-a", of_pool=inverted), pod("pool-b", of_pool=inverted)]
    planned = plan(inverted, *idle)
    assert pod_creates(planned) == [] and pod_deletes(planned) == []
    status = status_written(planned)
    message = (
        "capacitySpec.bufferMin (5) is greater than bufferMax (2); capacitySpec.poolMin (4) is "
        "greater than poolMax (1): the Pool neither scales nor updates its Pods until this is "
        "fixed"
    )
    assert conditions(status) == {"InvalidSpec": ("True", "InvertedCapacity", message)}
    assert status is not None and status["total"] == 2, "the counts are still reported"
    assert warnings(planned) == [("InvertedCapacity", f"InvalidSpec: {message}")]
    assert kinds(planned)[-2:] == ["patch status Pool", "create Event"]
    assert message in planned.reason

    again = plan(with_status(inverted, status), *idle)
    assert again.actions == (), "nothing changed: no write, no second Event"

    fixed = with_status(pool(buffer_min=3, buffer_max=5, pool_min=0, pool_max=10), status)
    planned = plan(fixed, *idle)
    assert len(pod_creates(planned)) == 1
    cleared = status_written(planned)
    assert cleared is not None and cleared["conditions"] is None, "a merge patch's null"
    assert warnings(planned) == []


def test_only_a_minimum_above_its_maximum_is_inverted() -> None:
    """bufferMax above poolMax is upstream's own case (the buffer is capped by poolMax)."""
    planned = plan(pool(buffer_min=3, buffer_max=3, pool_max=2, scale_max="100%"))
    assert len(pod_creates(planned)) == 2
    assert conditions(status_written(planned)) == {}


def test_a_create_the_api_server_refuses_is_reported_with_its_words() -> None:
    """The previous pass's create came back 422: the status says ReplicaFailure/FailedCreate
    with the API's message (without the Pod's name, which changes with every try), written
    before the creates that will be refused again, then a Warning Event; the creates are
    still made (the runtime's backoff paces them)."""
    the_pool = pool(buffer_min=2, buffer_max=2, scale_max="100%")
    planned = plan(the_pool, last_error=REFUSED)
    status = status_written(planned)
    assert conditions(status) == {"ReplicaFailure": ("True", "FailedCreate", REFUSED_MESSAGE)}
    assert warnings(planned) == [("FailedCreate", f"ReplicaFailure: {REFUSED_MESSAGE}")]
    assert kinds(planned) == ["patch status Pool", "create Event", "together"]
    assert len(pod_creates(planned)) == 2

    again = plan(with_status(the_pool, status), last_error=REFUSED.replace("x7k2q", "b4n9z"))
    assert status_written(again) is None, "the same message: nothing to write"
    assert warnings(again) == [] and len(pod_creates(again)) == 2


def test_the_refusal_clears_once_the_creates_go_through() -> None:
    """A pass after one whose creates went through (no error) drops the condition."""
    the_pool = pool(buffer_min=1, buffer_max=1)
    status = status_written(plan(the_pool, last_error=REFUSED))
    member = pod("pool-a", of_pool=the_pool)
    planned = plan(with_status(the_pool, status), member)
    cleared = status_written(planned)
    assert cleared is not None and cleared["conditions"] is None
    assert pod_creates(planned) == [] and warnings(planned) == []


def test_other_errors_are_not_a_refused_create() -> None:
    """A server error (not a refusal), or a refused write of something else, is no
    ReplicaFailure; nor is a refused create when this pass makes no Pod."""
    the_pool = pool(buffer_min=1, buffer_max=1)
    for error in (
        "create Pod/default/pool-x7k2q: InternalError (500): etcd is unhappy",
        'patch BatchSandbox/default/b: Invalid (422): BatchSandbox "b" is invalid: x',
    ):
        assert conditions(status_written(plan(the_pool, last_error=error))) == {}
    full = plan(the_pool, pod("pool-a", of_pool=the_pool), last_error=REFUSED)
    assert conditions(status_written(full)) == {}


def test_creates_that_keep_failing_are_reported_once_the_failures_persist() -> None:
    """A 500 on the Pod creates is retried without alarm; once the runtime says the passes
    have failed in a row for a while, it is ReplicaFailure/FailedCreate too, in the server's
    words and saying it keeps failing, and a Warning Event; it goes once the creates do."""
    the_pool = pool(buffer_min=2, buffer_max=2, scale_max="100%")
    broken = "create Pod/default/pool-x7k2q: InternalError (500): etcd is unhappy"
    assert conditions(status_written(plan(the_pool, last_error=broken))) == {}
    planned = plan(the_pool, last_error=broken, failure_persists=True)
    status = status_written(planned)
    message = (
        "the Pool's Pod creates keep failing (InternalError, 500): etcd is unhappy; they are "
        "retried with backoff"
    )
    assert conditions(status) == {"ReplicaFailure": ("True", "FailedCreate", message)}
    assert warnings(planned) == [("FailedCreate", f"ReplicaFailure: {message}")]
    assert kinds(planned) == ["patch status Pool", "create Event", "together"]
    timeout = "create Pod/default/pool-b4n9z: Timeout: no answer within 10s"
    quiet = conditions(status_written(plan(the_pool, last_error=timeout, failure_persists=True)))
    assert quiet["ReplicaFailure"][2] == (
        "the Pool's Pod creates keep failing: Timeout: no answer within 10s; they are retried "
        "with backoff"
    )
    cleared = status_written(plan(with_status(the_pool, status), pod("pool-a", of_pool=the_pool)))
    assert cleared is not None and cleared["conditions"] is None


def test_a_pool_without_a_template_says_so_in_its_status() -> None:
    """Pods wanted and no template: InvalidSpec/NoTemplate (upstream crashes)."""
    planned = plan(pool(template={}))
    status, reason, message = conditions(status_written(planned))["InvalidSpec"]
    assert (status, reason) == ("True", "NoTemplate")
    assert "spec.template is missing" in message
    assert [r for r, _ in warnings(planned)] == ["NoTemplate"]


def test_a_condition_keeps_its_time_while_it_holds() -> None:
    """lastTransitionTime is the pass's when it appears, and stays while nothing changes."""
    inverted = pool(buffer_min=5, buffer_max=2)
    status = status_written(plan(inverted))
    assert status is not None
    (written,) = status["conditions"]
    assert written["lastTransitionTime"].startswith(NOW.strftime("%Y-%m-%dT%H:%M:%S"))
    patched = plan(with_status(inverted, {**status, "total": 7}))
    status = status_written(patched)
    assert status is not None and status["conditions"] == [written]
    assert isinstance(patched.actions[-1], Patch), "no Event for a condition that stays"
