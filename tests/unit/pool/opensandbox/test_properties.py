"""Invariants of an OpenSandbox Pool under any sequence of events (hypothesis): sandboxes come,
release Pods and go; Pods are deleted from outside; the worker dies between writing the ledger
and acting, restarts, loses its memo altogether, or has its writes refused by a concurrent one.

After every event:

1. No Pod is in use by two sandboxes: at most one lists it in alloc-status without having
   asked for it back (alloc-release) or having it released (alloc-released). docs/architecture.md
   invariant 2.
2. Under ``Delete``, a Pod a sandbox gave back, or that belonged to a sandbox being deleted, is
   never listed by another sandbox afterwards (upstream #723).

And once the events stop and the Pool settles: every sandbox that lives holds its replicas
(the Pool has room for all), and a further pass writes nothing (upstream #1423).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.objects import metadata_of
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
)
from tests.unit.pool.opensandbox.world import Cluster, pods_in, pool, sandbox, world

NAMES = [
    *["tick"] * 6,
    *["add"] * 3,
    *["release"] * 3,
    "delete",
    "delete",
    "kill",
    "step",
    "kubelet",
    "die",
    "restart",
    "forget",
    "conflict",
]
"""Weighted: a tick (a pass, then the kubelet's round) is the common event."""
EVENTS = st.tuples(st.sampled_from(NAMES), st.integers(0, 9))


def sandboxes(cluster: Cluster) -> list[dict[str, Any]]:
    return [obj for key, obj in sorted(cluster.objects.items()) if key.kind == "BatchSandbox"]


def in_use(box: dict[str, Any]) -> set[str]:
    given = set(pods_in(box, ANNOTATION_ALLOC_STATUS))
    back = set(pods_in(box, ANNOTATION_ALLOC_RELEASE)) | set(
        pods_in(box, ANNOTATION_ALLOC_RELEASED)
    )
    return given - back


class Run:
    def __init__(self, recycle: str) -> None:
        self.cluster = world(of_pool=pool(buffer_min=0, buffer_max=2, pool_max=30, recycle=recycle))
        self.recycle = recycle
        self.count = 0
        self.dirty: dict[str, str] = {}
        """Pod → the sandbox that gave it back (or was deleted holding it)."""

    def pick(self, index: int) -> dict[str, Any] | None:
        live = [b for b in sandboxes(self.cluster) if not metadata_of(b).get("deletionTimestamp")]
        return live[index % len(live)] if live else None

    def apply(self, event: str, value: int) -> None:
        cluster = self.cluster
        if event == "add":
            self.count += 1
            replicas = 1 + value % 2
            cluster.add(sandbox(f"s{self.count:02d}", replicas=replicas, created=cluster.now))
        elif event == "tick":
            cluster.step()
            cluster.kubelet()
        elif event == "release":
            box = self.pick(value)
            if box is not None and in_use(box):
                name = metadata_of(box)["name"]
                pod = sorted(in_use(box))[0]
                asked = pods_in(box, ANNOTATION_ALLOC_RELEASE)
                cluster.release(name, *asked, pod)
                self.dirty[pod] = name
        elif event == "delete":
            box = self.pick(value)
            if box is not None:
                name = metadata_of(box)["name"]
                for pod in in_use(box):
                    self.dirty[pod] = name
                cluster.remove("BatchSandbox", name)
        elif event == "kill":
            box = self.pick(value)
            if box is not None and in_use(box):
                cluster.remove("Pod", sorted(in_use(box))[0], force=True)
        elif event == "step":
            cluster.step()
        elif event == "kubelet":
            cluster.kubelet()
        elif event == "die":
            cluster.step(dies=True)
        elif event == "restart":
            cluster.restart()
        elif event == "forget":
            cluster.ledger = None
        elif event == "conflict":
            box = self.pick(value)
            if box is not None:
                name = metadata_of(box)["name"]
                cluster.step(
                    meanwhile=lambda: cluster.edit("BatchSandbox", name, {"status": {"ready": 1}})
                )

    def check(self) -> None:
        users: dict[str, str] = {}
        for box in sandboxes(self.cluster):
            name = metadata_of(box)["name"]
            for pod in in_use(box):
                assert pod not in users, f"{pod} is used by {users[pod]} and {name}"
                users[pod] = name
            if self.recycle == "Delete":
                for pod in pods_in(box, ANNOTATION_ALLOC_STATUS):
                    giver = self.dirty.get(pod)
                    assert giver in (None, name), f"{pod}, given back by {giver}, went to {name}"


@settings(max_examples=200, deadline=None)
@given(
    recycle=st.sampled_from(["Delete", "Noop"]), events=st.lists(EVENTS, min_size=10, max_size=60)
)
def test_a_pod_serves_one_sandbox_whatever_happens(
    recycle: str, events: list[tuple[str, int]]
) -> None:
    run = Run(recycle)
    for event, value in events:
        run.apply(event, value)
        run.check()
    run.cluster.settle(passes=60)
    run.check()
    for box in sandboxes(run.cluster):
        meta = metadata_of(box)
        assert not meta.get("deletionTimestamp"), f"{meta['name']} is stuck being deleted"
        held = [
            p
            for p, h in (run.cluster.ledger.pods if run.cluster.ledger else {}).items()
            if h.uid == meta["uid"]
        ]
        released = pods_in(box, ANNOTATION_ALLOC_RELEASED)
        assert len(held) + len(released) == box["spec"]["replicas"], meta["name"]
        assert set(held) <= set(run.cluster.ready_pods())
    assert run.cluster.step().actions == ()
