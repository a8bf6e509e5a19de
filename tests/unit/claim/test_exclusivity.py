"""Pod exclusivity under concurrency (docs/agent-sandbox.md §3.5 "Pod exclusivity invariant",
upstream issue #127; the random counterpart of TestWarmPoolPodExclusivity).

Hypothesis drives random interleavings against :class:`~tests.unit.claim.world.Cluster`: up to
four claims naming one pool are created; the pool makes members, which become Ready (with a pod
IP), lose it again, or are deleted (any Sandbox may be deleted, a claim's included, which the
claim must heal from); the pool worker catches up now and then (it queues Ready members and
purges the entries of members it would not offer any more). Each claim's worker plans on the
current state and carries its plan out one action at a time, interleaved with everything else;
a worker may die between any two actions (its plan is abandoned, the entries it held come back
at the head of the queue after a while, a redelivery), or an API write of it may fail. Writes
are checked as the API server checks them (resourceVersion preconditions, AlreadyExists,
uid-guarded deletes), and the queue behaves as the JetStream work queue does (one consumer gets
an entry; a purged entry never comes back).

After every step:

- no Sandbox has more than one controller, and no claim controls two Sandboxes;
- a claim whose status names an existing Sandbox controls it (what the SDK connects to is the
  claim's own).

And a claim never gives back to the queue an entry it saw no claim could adopt.

At the end every in-flight plan is carried out, the dead workers' entries come back, the pool
catches up once more, the claims' pod-IP grace runs out, and every claim is reconciled until
no pass writes anything (without deaths or failures). Then:

- every claim is bound to exactly one Sandbox, which it controls, and controls no other;
- no claim still holds an entry;
- every queue entry names a Sandbox that exists in the incarnation queued and is adoptable;
- every member the pool would offer (its own, Ready) is in the queue exactly once: no warm
  sandbox is lost to the claims' acks.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from api.objects import compare_resource_versions, controller_of, metadata_of
from services.claim.core.adoption import adoptable_by
from services.runtime.reconcile.actions import Release
from tests.support.plans import actions_of
from tests.unit.claim.world import (
    POOL,
    Cluster,
    Flight,
    bound_name,
    claim,
    claim_controller,
    condition,
    member,
    world,
)

CLAIMS = ("claim-a", "claim-b", "claim-c", "claim-d")
MAX_MEMBERS = 5
FINAL_ROUNDS = 10

VERBS = (
    *("plan",) * 4,
    *("act",) * 10,
    "die",
    "fail",
    "redeliver",
    *("pool",) * 2,
    "tick",
    *("ready",) * 3,
    "unready",
    "delete",
    *("member",) * 2,
    "claim",
)
"""What a step does, repeated to weight it: mostly the claims' workers planning and acting."""
TICKS = (200, 1000, 3000)
STEPS = st.lists(st.tuples(st.sampled_from(VERBS), st.integers(0, 11)), min_size=30, max_size=90)


class Run:
    """One drawn history: the cluster, the plans in flight, the members the pool made."""

    def __init__(self, claims: int, ready: int, bus_caught_up: bool) -> None:
        self.cluster: Cluster = world()
        self.cluster.bus_caught_up = bus_caught_up
        self.flights: dict[str, Flight] = {}
        self.members: list[str] = []
        for index in range(claims):
            self.do("claim", index)
        for index in range(ready):
            self.do("member", 0)
            self.do("ready", index)
        self.cluster.pool_sync()

    def claims(self) -> list[str]:
        return [str(metadata_of(c)["name"]) for c in self.cluster.claims()]

    def do(self, verb: str, arg: Any) -> None:
        cluster = self.cluster
        if verb == "claim":
            name = CLAIMS[arg % len(CLAIMS)]
            if cluster.get("SandboxClaim", name) is None:
                cluster.add(claim(name, created=cluster.now))
        elif verb == "member":
            if len(self.members) < MAX_MEMBERS:
                name = f"{POOL}-m{len(self.members)}"
                self.members.append(name)
                cluster.add(cluster.bump(member(name, ready=False, ips=())))
        elif verb in ("ready", "unready"):
            if self.members:
                sandbox = cluster.get("Sandbox", self.members[arg % len(self.members)])
                if sandbox is not None:
                    up = verb == "ready"
                    sandbox["status"] = {
                        "conditions": [condition(status="True" if up else "False")],
                        **({"podIPs": ["10.244.0.5"]} if up else {}),
                    }
                    cluster.bump(sandbox)
        elif verb == "delete":
            sandboxes = cluster.sandboxes()
            if sandboxes:
                doomed = sandboxes[arg % len(sandboxes)]
                cluster.delete("Sandbox", str(metadata_of(doomed)["name"]))
        elif verb == "pool":
            cluster.pool_sync()
        elif verb == "redeliver":
            cluster.redeliver()
        elif verb == "tick":
            cluster.now += timedelta(milliseconds=TICKS[arg % len(TICKS)])
        else:
            names = self.claims()
            if names:
                self.worker(verb, names[arg % len(names)])

    def worker(self, verb: str, name: str) -> None:
        cluster = self.cluster
        if verb == "plan":
            if name not in self.flights:
                started = cluster.start(name)
                check_releases(started)
                if started.plan.actions:
                    self.flights[name] = started
        elif verb == "act":
            flight = self.flights.get(name)
            if flight is not None and not cluster.step(flight):
                del self.flights[name]
        elif verb == "die":
            self.flights.pop(name, None)
            cluster.die(name)
        elif verb == "fail":
            cluster.fail_next.add(name)

    # -- the end ----------------------------------------------------------------------------

    def settle(self) -> None:
        """Every plan in flight finishes, then the system comes to rest without deaths."""
        cluster = self.cluster
        cluster.fail_next.clear()
        for flight in self.flights.values():
            cluster.run(flight)
        self.flights.clear()
        while cluster.redeliver():
            pass
        cluster.now += timedelta(seconds=10)
        cluster.pool_sync()
        for _ in range(FINAL_ROUNDS):
            wrote = False
            for name in self.claims():
                flight = cluster.start(name)
                check_releases(flight)
                if flight.plan.actions:
                    wrote = True
                    cluster.run(flight)
            if not wrote:
                return
        raise AssertionError(f"the claims did not come to rest in {FINAL_ROUNDS} rounds")


def check_releases(flight: Flight) -> None:
    """A claim gives back only entries another claim might adopt: never one whose Sandbox it
    saw gone, replaced by another incarnation, or no longer adoptable (its own, say)."""
    offers = {offer.token: offer for offer in flight.obs.offers}
    for action in actions_of(flight.plan, Release):
        offer = offers[action.token]
        sandbox = offer.sandbox
        if sandbox is None:
            assert not offer.known_gone, f"{flight.claim} gave back {offer.name}, known gone"
            continue
        meta = metadata_of(sandbox)
        assert meta.get("uid") == offer.uid, f"{flight.claim} gave back a replaced {offer.name}"
        newer = compare_resource_versions(str(meta["resourceVersion"]), offer.resource_version)
        assert adoptable_by(sandbox, POOL) or (newer is not None and newer < 0), (
            f"{flight.claim} gave back {offer.name}, which is {controller_of(sandbox)}'s"
        )


def check_exclusive(cluster: Cluster) -> None:
    controlled: Counter[str] = Counter()
    by_uid = {str(metadata_of(c)["uid"]): c for c in cluster.claims()}
    for sandbox in cluster.sandboxes():
        refs = metadata_of(sandbox).get("ownerReferences") or []
        assert sum(1 for ref in refs if ref.get("controller")) <= 1, sandbox
        uid = claim_controller(sandbox)
        if uid is not None:
            controlled[uid] += 1
    assert all(count == 1 for count in controlled.values()), controlled
    for uid, each in by_uid.items():
        named = bound_name(each.get("status"))
        found = cluster.get("Sandbox", named) if named is not None else None
        if found is not None:
            assert claim_controller(found) == uid, (metadata_of(each)["name"], found)


def check_settled(run: Run) -> None:
    cluster = run.cluster
    for each in cluster.claims():
        uid = str(metadata_of(each)["uid"])
        named = bound_name(each.get("status"))
        assert named is not None, each
        sandbox = cluster.get("Sandbox", named)
        assert sandbox is not None and claim_controller(sandbox) == uid, (each, sandbox)
        mine = [s for s in cluster.sandboxes() if claim_controller(s) == uid]
        assert [metadata_of(s)["name"] for s in mine] == [named]
        reported = (each["status"]["sandbox"]).get("podIPs")
        assert reported == ((sandbox.get("status") or {}).get("podIPs") or None), each
    assert not any(cluster.held.values()), cluster.held
    for queued in cluster.queue:
        sandbox = cluster.get("Sandbox", queued.name)
        assert sandbox is not None, f"{queued} names a Sandbox that is gone"
        assert metadata_of(sandbox)["uid"] == queued.uid, queued
        assert adoptable_by(sandbox, POOL), f"{queued} names {controller_of(sandbox)}'s Sandbox"
    offered = Counter(queued.name for queued in cluster.queue)
    for name in run.members:
        if cluster.offerable(name) is not None:
            assert offered[name] == 1, f"{name} is adoptable but queued {offered[name]} times"


ROUNDS = [("act", 0), ("act", 1)] * 6
PURGED_AND_QUEUED_AGAIN = [
    *[("plan", 0), ("act", 0)],  # a takes the member's entry
    *[("unready", 0), ("pool", 0), ("ready", 0), ("pool", 0)],  # purged, queued again
    *[("plan", 1), ("act", 1)],  # b takes the new entry: both hold one for the member
    *[("plan", 0), ("plan", 1)],
    *ROUNDS,
]
"""Two claims both hold an entry for one member (a purge does not take back a held message)
and race to adopt it."""
REDELIVERED_WHILE_COMPLETING = [
    *[("plan", 0), ("act", 0), ("plan", 0), ("act", 0)],  # a takes it, names it
    ("die", 0),  # a dies before the Sandbox write
    ("plan", 0),  # a's new worker sets out to finish the adoption
    *[("redeliver", 0), ("plan", 1), ("act", 1), ("plan", 1)],  # b gets the entry back
    *[("act", 1), ("act", 1), ("act", 0)],  # b adopts first; then a's patch
    *ROUNDS,
]
"""A claim finishing an interrupted adoption races the claim that got the entry again."""
GIVEN_BACK_AFTER_THE_GRACE = [
    *[("plan", 0), ("act", 0)],  # the claim takes the member's entry
    ("unready", 0),  # the member loses its pod IP before the pool notices
    ("tick", 2),  # the claim's pod-IP grace runs out
    ("plan", 0),
    *[("act", 0)] * 6,  # it starts cold and gives the entry back
    ("ready", 0),  # the member is Ready again: its entry must still be there
]
"""A warm member a claim could not use must stay offered."""
ADOPTED_THEN_DELETED = [
    *[("plan", 0), ("act", 0), ("plan", 0)],
    *[("act", 0)] * 6,  # the claim adopts the member
    ("delete", 0),  # which is deleted: the claim heals with a cold Sandbox
]
"""The binding moves from a warm Sandbox with a pod IP to a new one without."""
STOPPED_BEFORE_THE_ACK = [
    *[("plan", 0), ("act", 0), ("plan", 0), ("act", 0), ("act", 0)],  # taken, named, adopted
    *[("fail", 0), ("act", 0)],  # the status write fails: the entry is still held
    *[("plan", 0), ("act", 0), ("act", 0)],
]
"""The next pass holds the entry of the Sandbox the claim already has."""


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@example(claims=2, ready=1, steps=PURGED_AND_QUEUED_AGAIN, bus_caught_up=False)
@example(claims=2, ready=1, steps=REDELIVERED_WHILE_COMPLETING, bus_caught_up=False)
@example(claims=2, ready=1, steps=REDELIVERED_WHILE_COMPLETING, bus_caught_up=True)
@example(claims=1, ready=1, steps=GIVEN_BACK_AFTER_THE_GRACE, bus_caught_up=False)
@example(claims=1, ready=1, steps=ADOPTED_THEN_DELETED, bus_caught_up=False)
@example(claims=1, ready=1, steps=STOPPED_BEFORE_THE_ACK, bus_caught_up=False)
@given(
    claims=st.integers(1, len(CLAIMS)),
    ready=st.integers(0, MAX_MEMBERS - 1),
    steps=STEPS,
    bus_caught_up=st.booleans(),
)
def test_claims_and_warm_sandboxes_stay_one_to_one(
    claims: int, ready: int, steps: list[tuple[str, Any]], bus_caught_up: bool
) -> None:
    run = Run(claims, ready, bus_caught_up)
    for verb, arg in steps:
        run.do(verb, arg)
        check_exclusive(run.cluster)
    run.settle()
    check_exclusive(run.cluster)
    check_settled(run)
