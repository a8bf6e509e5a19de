"""The allocation ledger of an OpenSandbox Pool (services/pool/core/opensandbox/ledger.py), row
by row of upstream's ``allocation_store_test.go`` and ``algorithm/packed_test.go``
(docs/opensandbox.md §7.1), and the traps of §9.3 and §9.4 it is built to avoid.

Upstream's store is an in-memory map with Get/Set/Update/Recover; ours is the Pool's memo, a
value each pass returns and the next one reads. So the store's rows become statements about
that value: what recovery from the annotations gives (in any order), what a pass leaves in the
memo, and that one pool never sees another's."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta

import msgspec
import pytest

from api.opensandbox import ANNOTATION_ALLOC_RELEASE, ANNOTATION_ALLOC_STATUS
from services.domain.opensandbox.allocation import (
    MalformedAnnotation,
    appended,
    parse_pod_list,
    pod_list_annotation,
)
from services.pool.core.opensandbox.ledger import (
    Holding,
    PoolLedger,
    pack,
    recover_ledger,
    sandbox_view,
)
from tests.support.plans import actions_of
from tests.unit.pool.opensandbox.world import (
    NOW,
    held,
    kept,
    ledger_of,
    observe,
    plan,
    pod,
    pool,
    restarted,
    sandbox,
)


def holders(ledger: PoolLedger) -> dict[str, str]:
    return {name: holding.sandbox for name, holding in ledger.pods.items()}


# -- recovery ---------------------------------------------------------------------------------


def test_recover() -> None:
    """Upstream TestInMemoryAllocationStore_Recover: every Pod of alloc-status, minus those of
    alloc-released (their recycle finished); a sandbox of another pool is not this pool's
    business (the observation only holds sandboxes naming it), and a pool with no sandbox
    recovers to an empty ledger."""
    views = [
        sandbox_view(sandbox("sandbox1", alloc_status=["pod1", "pod2"])),
        sandbox_view(sandbox("sandbox2", alloc_status=["pod3", "pod4"], alloc_released=["pod4"])),
    ]
    recovered = recover_ledger(views)
    assert holders(recovered) == {"pod1": "sandbox1", "pod2": "sandbox1", "pod3": "sandbox2"}
    assert recovered.released == {"uid-sandbox2": ["pod4"]}
    assert recover_ledger([]) == PoolLedger()
    other = observe(pool(), sandbox("sandbox3", pool_name="pool2", alloc_status=["pod9"]))
    assert other.sandboxes == ()


SHUFFLES = list(itertools.permutations(range(3)))


@pytest.mark.parametrize("order", SHUFFLES)
def test_recover_release_only_own_pods(order: tuple[int, ...]) -> None:
    """Upstream TestInMemoryAllocationStore_Recover_ReleaseOnlyOwnPods: a Pod sandbox1 released
    and sandbox2 holds now stays with sandbox2. Upstream gets this right only when the old
    holder is listed first (by name, in its test); ours in any order (§9.3)."""
    views = [
        sandbox_view(sandbox("sandbox1", alloc_status=["pod1"], alloc_released=["pod1"])),
        sandbox_view(sandbox("sandbox2", alloc_status=["pod1"])),
        sandbox_view(sandbox("sandbox0", alloc_status=[])),
    ]
    assert holders(recover_ledger([views[i] for i in order])) == {"pod1": "sandbox2"}


@pytest.mark.parametrize("order", SHUFFLES)
def test_recover_release_pod_reassigned_multiple_times(order: tuple[int, ...]) -> None:
    """Upstream TestInMemoryAllocationStore_Recover_ReleasePodReassignedMultipleTimes: after
    three holders the one that has not released it holds it, in any order."""
    views = [
        sandbox_view(sandbox("sandbox1", alloc_status=["pod1"], alloc_released=["pod1"])),
        sandbox_view(sandbox("sandbox2", alloc_status=["pod1"], alloc_released=["pod1"])),
        sandbox_view(sandbox("sandbox3", alloc_status=["pod1"])),
    ]
    assert holders(recover_ledger([views[i] for i in order])) == {"pod1": "sandbox3"}


@pytest.mark.parametrize("holder_first", [True, False])
@pytest.mark.parametrize("holder_older", [True, False])
def test_recovery_does_not_depend_on_order(holder_first: bool, holder_older: bool) -> None:
    """§9.3: a Pod moved from sandbox B (released) to sandbox A comes back free upstream when
    A sorts before B, and can then be handed to a third sandbox while A uses it. Here A holds
    it whatever the names, the creation times and the list order."""
    a_created = NOW - timedelta(hours=2 if holder_older else 1)
    b_created = NOW - timedelta(hours=1 if holder_older else 2)
    a = sandbox_view(sandbox("a-holder", alloc_status=["pod1"], created=a_created))
    b = sandbox_view(
        sandbox("b-old", alloc_status=["pod1"], alloc_released=["pod1"], created=b_created)
    )
    views = [a, b] if holder_first else [b, a]
    assert holders(recover_ledger(views)) == {"pod1": "a-holder"}
    # ...and a pass on that recovery gives a newcomer a fresh Pod, never pod1.
    newcomer = sandbox("c-new", created=NOW)
    planned = plan(
        pool(pool_max=1),
        pod("pod1"),
        sandbox("a-holder", alloc_status=["pod1"], created=a_created),
        sandbox("b-old", alloc_status=["pod1"], alloc_released=["pod1"], created=b_created),
        newcomer,
    )
    assert held(planned.memo, "a-holder") == ["pod1"]
    assert held(planned.memo, "c-new") == []


def test_two_unreleased_holders_give_the_pod_to_the_later() -> None:
    """Ours, no upstream row: two sandboxes list the same Pod and neither released it (a
    release whose annotation was lost). The later-created one holds it; the earlier one's
    holding must be the stale one, since the Pod went to the later only after a release."""
    old = sandbox_view(sandbox("zeta", alloc_status=["pod1"], created=NOW - timedelta(hours=2)))
    new = sandbox_view(sandbox("alpha", alloc_status=["pod1"], created=NOW - timedelta(hours=1)))
    assert holders(recover_ledger([new, old])) == {"pod1": "alpha"}
    assert holders(recover_ledger([old, new])) == {"pod1": "alpha"}


def test_recover_clears_existing() -> None:
    """Upstream TestInMemoryAllocationStore_Recover_ClearsExisting: what recovery gives comes
    from the annotations alone. Here recovery runs only when the Pool has no memo (a new Pool,
    or one taken over from upstream's controller); with a memo the memo is the truth and the
    annotations are its projection, so an annotation that disagrees does not change it."""
    objects = (pool(), pod("new-pod"), sandbox("sandbox1", alloc_status=["new-pod"]))
    assert held(plan(*objects).memo, "sandbox1") == ["new-pod"]
    memo = ledger_of({"old-pod": "sandbox1"})
    remembered = plan(*objects, pod("old-pod"), ledger=memo).memo
    assert held(remembered, "sandbox1") == ["old-pod"]


def test_a_malformed_annotation_is_reported_and_does_not_stop_recovery() -> None:
    """§9.4: upstream exits the process (``os.Exit(1)``) on one annotation that does not parse.
    Here the sandbox is read with its problem named and left out of recovery; the others
    recover."""
    bad = sandbox("bad", annotations={ANNOTATION_ALLOC_STATUS: "{not json"})
    view = sandbox_view(bad)
    assert view.problem is not None and ANNOTATION_ALLOC_STATUS in view.problem
    good = sandbox_view(sandbox("good", alloc_status=["pod1"]))
    assert holders(recover_ledger([view, good])) == {"pod1": "good"}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (None, []),
        ("", []),
        ('{"pods":["a","b"]}', ["a", "b"]),
        ('{"pods":[]}', []),
        ("{}", []),
        ('{"pods":null}', []),
        ('{"pods":["a"],"poolRef":"p","generation":7}', ["a"]),
    ],
)
def test_parse_pod_list(text: str | None, want: list[str]) -> None:
    """The annotations' format: ``{"pods":[...]}`` (fields a later upstream adds, such as
    poolRef and generation, are ignored)."""
    annotations = {} if text is None else {ANNOTATION_ALLOC_RELEASE: text}
    assert parse_pod_list(annotations, ANNOTATION_ALLOC_RELEASE) == want


@pytest.mark.parametrize(
    "text", ["{not json", '["a"]', '{"pods":"a"}', '{"pods":[1]}', '{"pods":[""]}', "7"]
)
def test_a_pod_list_that_is_not_one_is_malformed(text: str) -> None:
    """Upstream TestSyncSandboxAllocation_GetFailed: an annotation that does not parse is an
    error, never an empty list (which would free what the sandbox holds)."""
    with pytest.raises(MalformedAnnotation):
        parse_pod_list({ANNOTATION_ALLOC_STATUS: text}, ANNOTATION_ALLOC_STATUS)


def test_the_annotation_is_written_as_upstream_writes_it() -> None:
    """§9.1: the exact JSON (compact ``{"pods":[...]}``), and a list that only grows, in the
    order Pods were given."""
    assert pod_list_annotation(["a", "b"]) == '{"pods":["a","b"]}'
    assert json.loads(pod_list_annotation([])) == {"pods": []}
    assert appended(["b", "a"], ["a", "c", "c"]) == ["b", "a", "c"]


# -- the store's operations, as a pass's memo -------------------------------------------------


def test_get_allocation_empty() -> None:
    """Upstream TestInMemoryAllocationStore_GetAllocation_Empty: a new Pool's ledger is empty
    (an empty memo, not none: the next pass does not recover again)."""
    planned = plan(pool())
    assert planned.memo == PoolLedger(next_pod=1), "no holdings; one Pod name handed out"
    assert kept(planned.memo) == planned.memo


def test_set_and_get_allocation() -> None:
    """Upstream TestInMemoryAllocationStore_SetAndGetAllocation: the memo comes back as it was
    written, through the bus (msgspec JSON) too."""
    ledger = ledger_of(
        {"pod1": "sandbox1", "pod2": "sandbox2"},
        recycling=["pod2"],
        released={"sandbox1": ["pod0"]},
        lost={"sandbox2": ["pod9"]},
    )
    assert kept(ledger) == ledger
    assert restarted(ledger) == ledger
    encoded = json.loads(msgspec.json.encode(ledger))
    assert encoded["pods"]["pod2"] == {
        "sandbox": "sandbox2",
        "uid": "uid-sandbox2",
        "recycling": True,
    }


def test_update_allocation_add_pods() -> None:
    """Upstream TestInMemoryAllocationStore_UpdateAllocation_AddPods: giving Pods to a sandbox
    adds Pod → sandbox entries."""
    planned = plan(pool(), pod("pod1"), pod("pod2"), sandbox("sandbox1", replicas=2))
    assert holders(planned.memo) == {"pod1": "sandbox1", "pod2": "sandbox1"}


def test_update_allocation_replace_pods() -> None:
    """Upstream TestInMemoryAllocationStore_UpdateAllocation_ReplacePods: a sandbox's entries
    are replaced, here by a release: pod1 and pod2 leave the ledger once given back (Noop) and
    are recorded as released, and the sandbox's next Pods are new ones."""
    objects = [
        pool(recycle="Noop", buffer_min=0, buffer_max=0),
        *(pod(f"pod{i}") for i in (1, 2, 3, 4)),
    ]
    given = ledger_of({"pod1": "sandbox1", "pod2": "sandbox1"})
    releasing = sandbox(
        "sandbox1", replicas=4, alloc_status=["pod1", "pod2"], alloc_release=["pod1", "pod2"]
    )
    memo = plan(*objects, releasing, ledger=given).memo
    assert held(memo, "sandbox1") == ["pod3", "pod4"], "its other two, never a released Pod"
    assert memo.released == {"uid-sandbox1": ["pod1", "pod2"]}


def test_update_allocation_multiple_sandboxes() -> None:
    """Upstream TestInMemoryAllocationStore_UpdateAllocation_MultipleSandboxes: the entries of
    one sandbox leave the others alone."""
    given = ledger_of({"pod1": "sandbox1", "pod2": "sandbox1"})
    memo = plan(
        pool(),
        *(pod(f"pod{i}") for i in (1, 2, 3, 4)),
        sandbox("sandbox1", replicas=2, alloc_status=["pod1", "pod2"]),
        sandbox("sandbox2", replicas=2),
        ledger=given,
    ).memo
    assert holders(memo) == {
        "pod1": "sandbox1",
        "pod2": "sandbox1",
        "pod3": "sandbox2",
        "pod4": "sandbox2",
    }


def test_pools_are_isolated() -> None:
    """Upstream ..._UpdateAllocation_MultiplePools, ..._GetAllocation_IsolatedByPool and
    ..._MultiNamespaceSamePoolName: a Pool sees only its own Pods (by controller uid) and the
    sandboxes of its namespace that name it; a pool of the same name elsewhere is another."""
    pool2 = pool("pool2", uid="pool2-uid")
    elsewhere = sandbox("sandbox3")
    elsewhere["metadata"]["namespace"] = "other"
    obs = observe(
        pool(),
        pool2,
        pod("pod1"),
        pod("pod3", of_pool=pool2),
        sandbox("sandbox1"),
        sandbox("sandbox2", pool_name="pool2"),
        elsewhere,
    )
    assert [p["metadata"]["name"] for p in obs.pods] == ["pod1"]
    assert [s["metadata"]["name"] for s in obs.sandboxes] == ["sandbox1"]


@pytest.mark.parametrize(
    ("recycle", "left", "deleted"),
    [("Noop", {"pod3": "sandbox2"}, []), ("Delete", None, ["pod1", "pod2"])],
)
def test_sandbox_deleted_pods_returned_to_pool(
    recycle: str, left: dict[str, str] | None, deleted: list[str]
) -> None:
    """Upstream ..._SandboxDeleted_PodsReturnedToPool, ..._UpdateAllocation_EmptyPods_
    ReleaseAll and ..._SetAllocation_ReplaceAll: the entries of a sandbox that is gone are
    orphans and go back through the recycle strategy, the others stay: under Noop they are
    free at once; under Delete they are deleted, held until they are gone."""
    given = ledger_of({"pod1": "sandbox1", "pod2": "sandbox1", "pod3": "sandbox2"})
    planned = plan(
        pool(recycle=recycle, buffer_min=0, buffer_max=3),
        *(pod(f"pod{i}") for i in (1, 2, 3)),
        sandbox("sandbox2", alloc_status=["pod3"]),
        ledger=given,
    )
    if left is not None:
        assert holders(planned.memo) == left
    else:
        assert planned.memo.pods["pod1"].recycling and planned.memo.pods["pod2"].recycling
        assert not planned.memo.pods["pod3"].recycling
    assert sorted(a.target.name for a in actions_of(planned) if a.verb == "delete") == deleted


def test_get_allocation_returns_copy() -> None:
    """Upstream ..._GetAllocation_ReturnsCopy and ..._ThreadSafety: the ledger is a frozen
    value; a pass returns a new one and never changes the one it was given."""
    given = ledger_of({"pod1": "sandbox1"})
    before = msgspec.json.encode(given)
    plan(pool(), pod("pod1"), pod("pod2"), sandbox("sandbox2"), ledger=given)
    assert msgspec.json.encode(given) == before
    with pytest.raises(AttributeError):
        given.pods = {}  # type: ignore[misc]
    assert isinstance(given.pods["pod1"], Holding)


# -- the packed algorithm ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "requests", "want_given", "want_short"),
    [
        pytest.param(
            ["pod1", "pod2"],
            [("sbx1", 1), ("sbx2", 1)],
            {"sbx1": ["pod1"], "sbx2": ["pod2"]},
            0,
            id="AllocateNormally",
        ),
        pytest.param(["pod1"], [("sbx1", 2)], {"sbx1": ["pod1"]}, 1, id="NotEnoughPods"),
        pytest.param([], [("sbx1", 2)], {}, 2, id="NoAvailablePods"),
        pytest.param(["pod3"], [("sbx1", 1)], {"sbx1": ["pod3"]}, 0, id="WithRelease"),
        pytest.param(["pod1"], [("sbx1", 0)], {}, 0, id="NoNeed"),
        pytest.param(
            ["pod1"], [("sbx1", 2), ("sbx2", 1)], {"sbx1": ["pod1"]}, 2, id="PartialAllocation"
        ),
        pytest.param(
            ["pod1", "pod2", "pod3", "pod4"],
            [("sbx1", 3), ("sbx2", 2), ("sbx3", 2)],
            {"sbx1": ["pod1", "pod2", "pod3"], "sbx2": ["pod4"]},
            3,
            id="PackedAllocation",
        ),
    ],
)
def test_packed_schedule(
    free: list[str],
    requests: list[tuple[str, int]],
    want_given: dict[str, list[str]],
    want_short: int,
) -> None:
    """Upstream algorithm/packed_test.go TestPackedSchedule: in the requests' order, each
    sandbox takes its whole need from the head of the free Pods before the next; a short pool
    gives a partial allocation and the shortfall adds up. (Its WithRelease row also passes the
    release list through: here releases are settled before the packing, see test_plan.)"""
    assert pack(free, requests) == (want_given, want_short)


def test_a_sandbox_is_never_packed_a_pod_it_listed_before() -> None:
    """Ours: a Pod a sandbox held once (its alloc-status lists it) is not given to it again,
    since the annotations could not say it holds that Pod a second time; the next one is."""
    given, short = pack(["pod1", "pod2"], [("sbx1", 1)], refused={"sbx1": {"pod1"}})
    assert (given, short) == ({"sbx1": ["pod2"]}, 0)
