"""The arithmetic of an OpenSandbox Pool (services/pool/core/opensandbox/scaling.py), row by row
of upstream's ``pool_update_test.go``, ``pool_eviction_test.go`` and
``internal/utils/pod_test.go`` (docs/opensandbox.md §7.1), and the rules of §2.7 and §9.8-9.10
on their own."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from api.objects import Json
from api.opensandbox import LABEL_EVICT, LABEL_POOL_REVISION
from services.domain.opensandbox.pods import is_pod_ready
from services.pool.core.opensandbox.scaling import (
    Capacity,
    deletion_order,
    desired_schedulable,
    evict,
    max_unavailable_problem,
    needs_eviction,
    oldest_first,
    plan_recreate,
    resolve_max_unavailable,
    scale_up,
)
from tests.unit.pool.opensandbox.world import NOW, stamp

OLDER = NOW - timedelta(hours=1)
NEWER = NOW - timedelta(minutes=30)


def names(pods: Any) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def bare(
    name: str,
    *,
    node: str = "",
    phase: str | None = None,
    conditions: list[Json] | None = None,
    created: datetime | None = None,
    restarts: tuple[int, ...] = (),
    labels: dict[str, str] | None = None,
    deleting: bool = False,
) -> Json:
    """A Pod with only what a case sets, as upstream's tests build them."""
    meta: Json = {"name": name}
    if created is not None:
        meta["creationTimestamp"] = stamp(created)
    if labels is not None:
        meta["labels"] = labels
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
    status: Json = {}
    if phase is not None:
        status["phase"] = phase
    if conditions is not None:
        status["conditions"] = conditions
    if restarts:
        status["containerStatuses"] = [{"restartCount": n} for n in restarts]
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


def ready(at: datetime | None = None) -> Json:
    cond: Json = {"type": "Ready", "status": "True"}
    if at is not None:
        cond["lastTransitionTime"] = stamp(at)
    return cond


# -- maxUnavailable ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "base", "want"),
    [
        pytest.param(None, 10, 3, id="default 25% of 10 = 3 (rounded up)"),
        pytest.param(None, 4, 1, id="default 25% of 4 = 1"),
        pytest.param("50%", 10, 5, id="custom percentage 50% of 10 = 5"),
        pytest.param(3, 10, 3, id="custom absolute value 3"),
        pytest.param("0", 10, 1, id="absolute value 0 defaults to 1"),
        pytest.param("10%", 9, 1, id="percentage rounds up - 10% of 9 = 1"),
        pytest.param(0, 10, 1, id="integer 0 is 1"),
        pytest.param(-2, 10, 1, id="a negative integer is 1"),
        pytest.param("100%", 7, 7, id="100% is all"),
        pytest.param("25%", 0, 1, id="of nothing, still 1"),
    ],
)
def test_resolve_max_unavailable(value: int | str | None, base: int, want: int) -> None:
    """Upstream TestResolveMaxUnavailable, plus the edges of the same rule (rounded up, never
    below 1). Its case "absolute value 0" is the *string* ``"0"``, which Go's
    ``GetScaledValueFromIntOrPercent`` refuses (not a percentage): 1, as any unreadable value."""
    assert resolve_max_unavailable(value, base) == want


@pytest.mark.parametrize("value", ["0", "3", "abc", "25 %", "%", "--10%", "1_0%", 2.5, True, [1]])
def test_an_unreadable_max_unavailable_counts_as_one_and_is_named(value: Any) -> None:
    """Upstream silently takes 1 for a value it cannot read; here it is 1 as well, and
    :func:`max_unavailable_problem` names it for the decision (docs/architecture.md invariant 7)."""
    assert resolve_max_unavailable(value, 100) == 1
    problem = max_unavailable_problem(value)
    assert problem is not None and repr(value) in problem


@pytest.mark.parametrize("value", [None, 0, 5, -1, "25%", "150%", "-10%", "+10%"])
def test_a_readable_max_unavailable_is_no_problem(value: Any) -> None:
    assert max_unavailable_problem(value) is None


# -- IsPodReady -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "conditions", "want"),
    [
        pytest.param("Running", [ready()], True, id="running and ready"),
        pytest.param(
            "Running", [{"type": "Ready", "status": "False"}], False, id="running but not ready"
        ),
        pytest.param("Running", None, False, id="running but no ready condition"),
        pytest.param("Pending", [ready()], False, id="pending with stale ready=true"),
        pytest.param("Unknown", [ready()], False, id="unknown phase with stale ready=true"),
        pytest.param("Failed", None, False, id="failed phase"),
        pytest.param("Succeeded", None, False, id="succeeded phase"),
    ],
)
def test_is_pod_ready(phase: str, conditions: list[Json] | None, want: bool) -> None:
    """Upstream K/internal/utils/pod_test.go TestIsPodReady: Running *and* Ready=True."""
    assert is_pod_ready(bare("p", phase=phase, conditions=conditions)) is want


# -- ComparePodsForDeletion -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(
            bare("unassigned"), bare("assigned", node="node-1"), id="unassigned < assigned"
        ),
        pytest.param(
            bare("pending", phase="Pending"),
            bare("running", phase="Running"),
            id="pending < running",
        ),
        pytest.param(
            bare("unknown", phase="Unknown"),
            bare("running", phase="Running"),
            id="unknown < running",
        ),
        pytest.param(
            bare("pending", phase="Pending"),
            bare("unknown", phase="Unknown"),
            id="pending < unknown",
        ),
        pytest.param(
            bare("not-ready", phase="Running", conditions=[]),
            bare("ready", phase="Running", conditions=[ready()]),
            id="not ready < ready",
        ),
        pytest.param(
            bare("shorter", phase="Running", conditions=[ready(OLDER)]),
            bare("longer", phase="Running", conditions=[ready(NEWER)]),
            id="shorter ready time < longer ready time",
        ),
        pytest.param(
            bare("high-restarts", phase="Running", restarts=(5,)),
            bare("low-restarts", phase="Running", restarts=(1,)),
            id="higher restarts < lower restarts",
        ),
        pytest.param(
            bare("newer", created=NEWER), bare("older", created=OLDER), id="newer < older"
        ),
    ],
)
def test_compare_pods_for_deletion(first: Json, second: Json) -> None:
    """Upstream pod_test.go TestComparePodsForDeletion: each pair's first Pod goes first, in
    either input order (the "X > Y" rows are the same pairs swapped).

    The row named "shorter ready time < longer ready time" gives its "shorter" Pod the *older*
    Ready transition: the Pod that has been Ready longest goes first (§9.10), whatever the
    name says."""
    assert names(deletion_order([second, first])) == [
        first["metadata"]["name"],
        second["metadata"]["name"],
    ]
    assert names(deletion_order([first, second])) == [
        first["metadata"]["name"],
        second["metadata"]["name"],
    ]


def test_equal_pods_fall_back_to_their_names() -> None:
    """Upstream's "equal pods" / "both (un)assigned - equal" rows: neither goes first, and its
    sort keeps the input order. Ours orders such Pods by name, so a plan does not depend on the
    order the cache lists them in."""
    twins = [bare(name, node="node-1", phase="Running", created=NOW) for name in ("b", "a")]
    assert names(deletion_order(twins)) == ["a", "b"]
    assert names(deletion_order([bare("b", node="n2"), bare("a", node="n1")])) == ["a", "b"]


def test_a_terminal_phase_sorts_with_pending() -> None:
    """Upstream's phase map knows Pending 0, Unknown 1 and Running 2; a Failed or Succeeded Pod
    gets Go's zero value, 0: it goes with the Pending ones, before Unknown and Running."""
    failed = bare("failed", phase="Failed", created=OLDER)
    pending = bare("pending", phase="Pending", created=NEWER)
    unknown = bare("unknown", phase="Unknown")
    assert names(deletion_order([unknown, failed, pending])) == ["pending", "failed", "unknown"]


def test_restarts_are_those_of_the_container_that_restarted_most() -> None:
    """Upstream's ``maxContainerRestarts``: the largest count of one container, not the sum."""
    spread = bare("spread", phase="Running", restarts=(3, 3))
    single = bare("single", phase="Running", restarts=(4,))
    assert names(deletion_order([spread, single])) == ["single", "spread"]


def test_compare_pods_for_deletion_sort_integration() -> None:
    """Upstream pod_test.go TestComparePodsForDeletion_SortIntegration."""
    pods = [
        bare(
            "assigned-ready",
            node="node-1",
            phase="Running",
            conditions=[ready(NOW - timedelta(hours=2))],
            created=NOW - timedelta(hours=1),
        ),
        bare("unassigned-pending", phase="Pending", created=NOW - timedelta(hours=2)),
        bare("assigned-not-ready", node="node-2", phase="Running", conditions=[], created=NOW),
    ]
    assert names(deletion_order(pods)) == [
        "unassigned-pending",
        "assigned-not-ready",
        "assigned-ready",
    ]


def test_scale_in_takes_the_oldest_first() -> None:
    """§2.7 and §9.10: scale-in removes the oldest idle Pods first, the reverse of a
    ReplicaSet's (and of the update's order)."""
    pods = [bare("mid", created=NOW - timedelta(hours=1)), bare("new", created=NOW)]
    pods.append(bare("old", created=NOW - timedelta(hours=2)))
    assert names(oldest_first(pods)) == ["old", "mid", "new"]


# -- the recreate update ----------------------------------------------------------------------

_counter = iter(range(1, 1000))


def make_pod(name: str, revision: str, ready_: bool, idle: bool) -> Json:
    """Upstream's ``makePod``: on node-1, Running, Ready when asked, created a second later than
    the one before; an allocated Pod is simply left out of the idle list."""
    del idle
    return bare(
        name,
        node="node-1",
        phase="Running",
        conditions=[ready()] if ready_ else None,
        created=NOW + timedelta(seconds=next(_counter)),
        labels={LABEL_POOL_REVISION: revision},
    )


@pytest.mark.parametrize(
    ("max_unavailable", "pods", "idle", "want_idle", "want_delete"),
    [
        pytest.param(
            "25%",
            [("pod-1", "v2", True, True), ("pod-2", "v2", True, True)],
            ["pod-1", "pod-2"],
            {"pod-1", "pod-2"},
            set(),
            id="all pods already at update revision - no deletion",
        ),
        pytest.param(
            "100%",
            [("pod-1", "v1", True, True), ("pod-2", "v1", True, True)],
            ["pod-1", "pod-2"],
            set(),
            {"pod-1", "pod-2"},
            id="all idle pods at old revision - delete within budget",
        ),
        pytest.param(
            "25%",
            [(f"pod-{i}", "v1", True, True) for i in range(1, 5)],
            ["pod-1", "pod-2", "pod-3", "pod-4"],
            {"pod-1", "pod-2", "pod-3"},
            {"pod-4"},
            id="old revision pods exceed budget - partial deletion",
        ),
        pytest.param(
            "25%",
            [("pod-1", "v1", False, True)] + [(f"pod-{i}", "v1", True, True) for i in (2, 3, 4)],
            ["pod-1", "pod-2", "pod-3", "pod-4"],
            {"pod-2", "pod-3", "pod-4"},
            {"pod-1"},
            id="unavailable pods don't consume budget",
        ),
        pytest.param(
            "100%",
            [("pod-1", "v1", True, True), ("pod-2", "v2", True, True), ("pod-3", "v1", True, True)],
            ["pod-1", "pod-2", "pod-3"],
            {"pod-2"},
            {"pod-1", "pod-3"},
            id="mixed revisions - only delete old revision",
        ),
        pytest.param(
            "100%",
            [
                ("pod-1", "v1", True, True),
                ("pod-2", "v1", True, False),
                ("pod-3", "v1", True, True),
            ],
            ["pod-1", "pod-3"],
            set(),
            {"pod-1", "pod-3"},
            id="allocated pods not in idle list are ignored",
        ),
        pytest.param(
            "50%",
            [
                ("pod-1", "v1", False, False),
                ("pod-2", "v1", False, False),
                ("pod-3", "v1", True, True),
                ("pod-4", "v1", True, True),
            ],
            ["pod-3", "pod-4"],
            {"pod-3", "pod-4"},
            set(),
            id="unready pods count towards curUnavailable",
        ),
        pytest.param(
            "25%",
            [("pod-1", "v1", True, False), ("pod-2", "v1", True, False)],
            [],
            set(),
            set(),
            id="empty idle pods",
        ),
    ],
)
def test_recreate_update_strategy_compute(
    max_unavailable: str,
    pods: list[tuple[str, str, bool, bool]],
    idle: list[str],
    want_idle: set[str],
    want_delete: set[str],
) -> None:
    """Upstream pool_update_test.go TestRecreateUpdateStrategy_Compute (update revision v2):
    the budget is maxUnavailable against every schedule Pod less those not Ready; an outdated
    Pod that is not Ready goes without budget; each deletion is one Pod to supply."""
    made = [make_pod(*row) for row in pods]
    result = plan_recreate(
        [p for p in made if p["metadata"]["name"] in idle],
        revision="v2",
        schedulable=made,
        max_unavailable=max_unavailable,
    )
    assert set(names(result.kept)) == want_idle
    assert set(names(result.delete)) == want_delete
    assert result.supply == len(want_delete)


def test_recreate_update_strategy_compute_sorting() -> None:
    """Upstream TestRecreateUpdateStrategy_Compute_Sorting: the outdated idle Pods go in
    ``ComparePodsForDeletion`` order (unassigned Pending, then assigned not Ready), and the
    Ready one stays while the budget (25% of 3 = 1, less 2 not Ready) is 0."""
    old = {LABEL_POOL_REVISION: "v1"}
    pods = [
        bare(
            "assigned-running",
            node="node-1",
            phase="Running",
            conditions=[ready(NOW - timedelta(hours=2))],
            created=NOW - timedelta(hours=1),
            labels=old,
        ),
        bare("unassigned-pending", phase="Pending", created=NOW - timedelta(hours=2), labels=old),
        bare(
            "assigned-not-ready",
            node="node-2",
            phase="Running",
            conditions=[],
            created=NOW,
            labels=old,
        ),
    ]
    result = plan_recreate(pods, revision="v2", schedulable=pods, max_unavailable="25%")
    assert names(result.delete) == ["unassigned-pending", "assigned-not-ready"]
    assert names(result.kept) == ["assigned-running"]


# -- eviction ---------------------------------------------------------------------------------

EVICT = {LABEL_EVICT: ""}
NORMAL = {"app": "test"}


@pytest.mark.parametrize(
    ("pods", "allocated", "want_kept", "want_evicted"),
    [
        pytest.param(
            [("pod-1", NORMAL, False), ("pod-2", NORMAL, False)],
            set(),
            ["pod-1", "pod-2"],
            [],
            id="no eviction labels keeps all pods",
        ),
        pytest.param(
            [("pod-1", EVICT, False), ("pod-2", NORMAL, False)],
            set(),
            ["pod-2"],
            ["pod-1"],
            id="unallocated eviction-labeled pods are evicted and excluded",
        ),
        pytest.param(
            [("pod-1", EVICT, False), ("pod-2", NORMAL, False)],
            {"pod-1"},
            ["pod-1", "pod-2"],
            [],
            id="allocated eviction-labeled pods are kept",
        ),
        pytest.param(
            [("pod-1", EVICT, False), ("pod-2", EVICT, False), ("pod-3", NORMAL, False)],
            {"pod-1"},
            ["pod-1", "pod-3"],
            ["pod-2"],
            id="mix of allocated and unallocated eviction-labeled pods",
        ),
        pytest.param(
            [("pod-1", EVICT, True)],
            set(),
            ["pod-1"],
            [],
            id="deleting pods with eviction label are not evicted",
        ),
        pytest.param([], set(), [], [], id="empty pod list"),
        pytest.param(
            [("pod-1", EVICT, False), ("pod-2", EVICT, False), ("pod-3", EVICT, False)],
            {"pod-2"},
            ["pod-2"],
            ["pod-1", "pod-3"],
            id="evicts multiple idle pods and keeps allocated ones",
        ),
    ],
)
def test_handle_eviction(
    pods: list[tuple[str, dict[str, str], bool]],
    allocated: set[str],
    want_kept: list[str],
    want_evicted: list[str],
) -> None:
    """Upstream pool_eviction_test.go TestHandleEviction (and eviction_test.go NeedsEviction:
    the label's presence counts, its value does not; a terminating Pod is not evicted)."""
    made = [bare(name, labels=labels, deleting=deleting) for name, labels, deleting in pods]
    result = evict(made, allocated)
    assert names(result.kept) == want_kept
    assert names(result.evicted) == want_evicted
    assert all(needs_eviction(p) for p in result.evicted)


# -- the buffer band and pacing ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("band", "schedulable", "allocated", "supply", "want"),
    [
        pytest.param((1, 3, 0, 5), 2, 0, 0, 2, id="inside the band: as it is"),
        pytest.param((1, 3, 0, 5), 0, 0, 0, 2, id="below: the midpoint"),
        pytest.param((1, 4, 0, 9), 7, 0, 0, 2, id="above: the midpoint, integer division"),
        pytest.param((1, 3, 0, 9), 3, 2, 2, 5, id="allocated and supply on top"),
        pytest.param((0, 0, 3, 9), 0, 0, 0, 3, id="poolMin is a floor"),
        pytest.param((0, 0, 3, 9), 2, 2, 0, 3, id="poolMin counts allocated Pods"),
    ],
)
def test_the_buffer_band_aims_at_its_midpoint(
    band: tuple[int, int, int, int], schedulable: int, allocated: int, supply: int, want: int
) -> None:
    """§2.7 and §9.8: inside [bufferMin, bufferMax] the buffer stays; outside it the pool aims
    at (bufferMin + bufferMax) // 2; poolMin bounds allocated + idle."""
    capacity = Capacity(*band)
    got = desired_schedulable(capacity, schedulable=schedulable, allocated=allocated, supply=supply)
    assert got == want


@pytest.mark.parametrize(
    ("desired", "schedulable", "total", "not_ready", "pool_max", "max_unavailable", "want"),
    [
        pytest.param(10, 0, 0, 0, 10, None, 3, id="25% of the target 10"),
        pytest.param(10, 0, 0, 0, 10, "20%", 2, id="20% of 10"),
        pytest.param(10, 0, 0, 0, 10, 1, 1, id="integer 1"),
        pytest.param(10, 3, 3, 3, 10, None, 0, id="three not Ready use the budget up"),
        pytest.param(10, 3, 3, 1, 10, None, 2, id="one not Ready leaves two"),
        pytest.param(10, 0, 0, 0, 2, "100%", 2, id="poolMax is a ceiling on creation"),
        pytest.param(5, 3, 6, 0, 6, "100%", 0, id="evicting Pods count toward poolMax"),
        pytest.param(2, 3, 3, 0, 10, "100%", 0, id="nothing to create above the target"),
    ],
)
def test_scale_up_is_paced_against_its_target(
    desired: int,
    schedulable: int,
    total: int,
    not_ready: int,
    pool_max: int,
    max_unavailable: int | str | None,
    want: int,
) -> None:
    """§2.7 and §9.9: scale-up creates toward the target, within poolMax - total, and no more
    than scaleStrategy.maxUnavailable of the *target* (rounded up) less the Pods not Ready."""
    capacity = Capacity(buffer_min=0, buffer_max=0, pool_min=0, pool_max=pool_max)
    got = scale_up(
        capacity,
        desired=desired,
        schedulable=schedulable,
        total=total,
        not_ready=not_ready,
        max_unavailable=max_unavailable,
    )
    assert got == want
