"""What the watcher tests share: the cluster's own record of changes, reading the event log back,
waiting for conditions, running a watcher in-process, and objects of every watched kind."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

from kubernetes_asyncio import client as k8s
from nats.aio.client import Client
from nats.js import JetStreamContext

from api.objects import Json
from devtools.cluster import DevCluster, LatencyModel, WatchSettings
from devtools.cluster.storage.store import Change as StoreChange
from devtools.cluster.storage.store import decode
from events.codec import EventDecodeError, decode_event
from events.types import ObjectAdded, ObjectDeleted, ObjectEvent, ObjectModified
from services.runtime.bus import BusConfig
from services.runtime.lease import LeaseTimings
from services.runtime.streams import read_to_end
from services.watcher.config import WatcherConfig
from services.watcher.service import Watcher
from tests.support.waiting import until
from tests.unit.api.manifests import EXAMPLES_DIR, load_documents

ObjectId = tuple[str, str, str]  # kind, namespace, name


# --- the cluster's own history ---------------------------------------------------------------


@dataclass(frozen=True)
class Committed:
    """One write the development cluster committed, as the watcher should see it."""

    rv: str
    type: str  # ADDED / MODIFIED / DELETED
    kind: str
    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    at: float
    owner_references: tuple[Json, ...] = ()

    @property
    def object_id(self) -> ObjectId:
        return (self.kind, self.namespace, self.name)

    @property
    def marks(self) -> Json:
        """What decides whether the watcher selects it (labels, controller), as an object."""
        metadata = {"labels": self.labels, "ownerReferences": list(self.owner_references)}
        return {"metadata": metadata}


@dataclass
class ClusterHistory:
    """Every committed change of the watched resources, captured at commit time (the store's
    own history ring forgets after 75 s; this does not)."""

    changes: list[Committed] = field(default_factory=list)

    def sink(self, change: StoreChange) -> None:
        raw = change.new if change.new is not None else change.old
        if raw is None:
            return
        obj = decode(raw)
        metadata = obj.get("metadata") or {}
        self.changes.append(
            Committed(
                rv=str(change.rv),
                type=change.type,
                kind=obj.get("kind", ""),
                namespace=change.namespace,
                name=change.name,
                uid=metadata.get("uid", ""),
                labels=dict(metadata.get("labels") or {}),
                at=time.monotonic(),
                owner_references=tuple(metadata.get("ownerReferences") or ()),
            )
        )

    def of(self, kinds: Iterable[str]) -> list[Committed]:
        wanted = set(kinds)
        return [c for c in self.changes if c.kind in wanted]


def record_history(cluster: DevCluster) -> ClusterHistory:
    history = ClusterHistory()
    cluster.store.subscribe(None, history.sink)
    return history


# --- the event log ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Logged:
    seq: int
    event: ObjectEvent
    msg_id: str | None
    headers: dict[str, str]
    payload: bytes = b""

    @property
    def change(self) -> str:
        return {ObjectAdded: "added", ObjectModified: "modified", ObjectDeleted: "deleted"}[
            type(self.event)
        ]

    @property
    def object_id(self) -> ObjectId:
        return (self.event.kind, self.event.namespace or "", self.event.name)

    @property
    def rv(self) -> str:
        return str(self.event.data.object["metadata"]["resourceVersion"])

    @property
    def uid(self) -> str:
        return str(self.event.data.object["metadata"]["uid"])


async def event_log(
    js: JetStreamContext, stream: str = "SANDBUS_EVENTS", *, strict: bool = True
) -> list[Logged]:
    """Every observed-change event on the log, in log order, decoded strictly; with
    ``strict=False`` messages that are not events (a test's garbage) are stepped over."""
    logged: list[Logged] = []
    async for msg in read_to_end(js, stream, ["sandbus.events.>"]):
        try:
            event = decode_event(msg.data)
        except EventDecodeError:
            if strict:
                raise
            continue
        assert isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted), event
        headers = dict(msg.headers or {})
        logged.append(
            Logged(
                msg.metadata.sequence.stream,
                event,
                headers.get("Nats-Msg-Id"),
                headers,
                bytes(msg.data),
            )
        )
    return logged


def by_object(logged: Iterable[Logged]) -> dict[ObjectId, list[Logged]]:
    result: dict[ObjectId, list[Logged]] = {}
    for entry in logged:
        result.setdefault(entry.object_id, []).append(entry)
    return result


# --- judging the log against the cluster ----------------------------------------------------

_CHANGE = {"ADDED": "added", "MODIFIED": "modified", "DELETED": "deleted"}


def committed(history: ClusterHistory, kinds: Iterable[str]) -> dict[ObjectId, list[Committed]]:
    """The commits of the selected objects of ``kinds``, per object, in commit order."""
    from services.watcher.resources import WATCHED_RESOURCES

    resources = {r.kind: r for r in WATCHED_RESOURCES}
    result: dict[ObjectId, list[Committed]] = {}
    for commit in history.of(kinds):
        if resources[commit.kind].selects(commit.marks):
            result.setdefault(commit.object_id, []).append(commit)
    return result


def assert_exact(history: ClusterHistory, logged: list[Logged], kinds: Iterable[str]) -> None:
    """Every commit on the log, once, in commit order per object, and nothing else."""
    expected = {
        object_id: [(c.uid, c.rv, _CHANGE[c.type]) for c in commits]
        for object_id, commits in committed(history, kinds).items()
    }
    seen = {
        object_id: [(e.uid, e.rv, e.change) for e in entries]
        for object_id, entries in by_object(logged).items()
    }
    assert seen == expected
    assert len({e.event.id for e in logged}) == len(logged)


def assert_consistent(
    history: ClusterHistory,
    logged: list[Logged],
    kinds: Iterable[str],
    *,
    exact_before: float | None = None,
    exact_after: float | None = None,
) -> int:
    """The log against the cluster's commits when the watcher had gaps (restarts, relists).

    No id twice. Per object: the events that are not synthetic are commits of that object, in
    commit order; synthetic ones are deletions; the last event is the final state (or a
    deletion). A commit may be missing only where a relist collapsed it into a later commit of
    the same object; commits made before ``exact_before`` or after ``exact_after`` (monotonic
    times), when a watcher was surely watching, may not be missing at all. Returns how many
    commits were collapsed.
    """
    ids = [e.event.id for e in logged]
    duplicates = {i for i in ids if ids.count(i) > 1}
    assert not duplicates, f"published more than once: {sorted(duplicates)[:5]}"
    commits = committed(history, kinds)
    events = by_object(logged)
    assert set(events) <= set(commits), f"events of unknown objects: {set(events) - set(commits)}"
    collapsed = 0
    for object_id, truth in commits.items():
        entries = events.get(object_id, [])
        position = {(c.uid, c.rv): i for i, c in enumerate(truth)}
        published: set[int] = set()
        last = -1
        for entry in entries:
            if entry.event.data.synthetic:
                assert entry.change == "deleted", f"{entry.event.id} is synthetic"
                continue
            index = position.get((entry.uid, entry.rv))
            assert index is not None, f"{entry.event.id} is not a commit of {object_id}"
            assert index > last, f"{object_id}: {entry.event.id} is out of order"
            commit = truth[index]
            first_seen = entry.change == "added" and all(
                c.uid != commit.uid or i not in published for i, c in enumerate(truth[:index])
            )
            # A relist reports an incarnation it never saw as added, in whatever state it is.
            assert entry.change == _CHANGE[commit.type] or first_seen, (
                f"{entry.event.id} reports commit {commit.type} {commit.rv}"
            )
            published.add(index)
            last = index
        final = truth[-1]
        if final.type == "DELETED":
            assert not entries or entries[-1].change == "deleted", f"{object_id} not deleted"
        else:
            assert last == len(truth) - 1, f"{object_id} does not end in its final state"
        for index, commit in enumerate(truth):
            if index in published:
                continue
            collapsed += 1
            surely_watched = (exact_before is not None and commit.at < exact_before) or (
                exact_after is not None and commit.at > exact_after
            )
            assert not surely_watched, f"{object_id}: commit {commit.rv} is missing"
    return collapsed


def lagging(
    history: ClusterHistory,
    logged: list[Logged],
    kinds: Iterable[str],
    unseen: Iterable[ObjectId] = (),
    gap: tuple[float, float] | None = None,
) -> list[str]:
    """What keeps the event log from saying every object's final state (empty: caught up).

    An object that ends deleted, or without our labels, ends with a deletion (or, if it never
    carried our labels, has no event at all). ``unseen`` objects lived and died while no
    watcher ran: they have no event at all; so has an incarnation that lived and died entirely
    within ``gap`` (monotonic times when no watcher ran).
    """
    from services.watcher.resources import WATCHED_RESOURCES

    resources = {r.kind: r for r in WATCHED_RESOURCES}
    wanted = set(kinds)
    never = set(unseen)
    problems = [f"{e.object_id}: nobody could see it" for e in logged if e.object_id in never]
    final: dict[ObjectId, Committed] = {}
    ever_selected: set[ObjectId] = set()
    for change in history.changes:
        if change.kind in wanted and change.object_id not in never:
            final[change.object_id] = change
            if resources[change.kind].selects(change.marks):
                ever_selected.add(change.object_id)
    last = {entry.object_id: entry for entry in logged}
    for object_id, change in final.items():
        entry = last.get(object_id)
        selected = resources[change.kind].selects(change.marks)
        if change.type == "DELETED" or not selected:
            if entry is None:
                if object_id in ever_selected:
                    problems.append(f"{object_id}: no event, ends deleted at {change.rv}")
            elif entry.change != "deleted" or (
                entry.uid != change.uid and not _lived_in(history, change.uid, gap)
            ):
                problems.append(f"{object_id}: last event {entry.event.id}, ends deleted")
        elif entry is None or entry.change == "deleted" or entry.rv != change.rv:
            where = entry.event.id if entry else "none"
            problems.append(f"{object_id}: last event {where}, final state {change.rv}")
    return problems


def _lived_in(history: ClusterHistory, uid: str, gap: tuple[float, float] | None) -> bool:
    if gap is None:
        return False
    return all(gap[0] <= c.at <= gap[1] for c in history.changes if c.uid == uid)


async def wait_caught_up(
    js: JetStreamContext,
    history: ClusterHistory,
    kinds: Iterable[str],
    within: float = 30.0,
    unseen: Iterable[ObjectId] = (),
    strict: bool = True,
    gap: tuple[float, float] | None = None,
) -> list[Logged]:
    """Wait until the event log says the final state of every object; returns the log."""
    deadline = time.monotonic() + within
    while True:
        logged = await event_log(js, strict=strict)
        problems = lagging(history, logged, kinds, unseen, gap)
        if not problems:
            return logged
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the event log is not caught up after {within} s: {problems[:5]} "
                f"({len(problems)} objects)"
            )
        await asyncio.sleep(0.2)


async def wait_publishing(client: k8s.ApiClient, nc: Client, marker: str) -> float:
    """Create ``marker`` and wait for its event: from then on a watcher watches every change.

    Returns the time of the marker's appearance; writes after it come after the watcher's list.
    """
    await k8s.CustomObjectsApi(client).create_namespaced_custom_object(
        *SANDBOXES, example("Sandbox", marker)
    )

    async def seen() -> bool:
        return any(e.event.name == marker for e in await event_log(nc.jetstream()))

    await until(seen, within=30.0, interval=0.05)
    return time.monotonic()


# --- clusters, clients and in-process watchers -----------------------------------------------


def quiet_cluster(**kwargs: Any) -> DevCluster:
    """The development cluster with no latency and no simulated node components, so that every
    change in it is one a test made."""
    kwargs.setdefault("latency", LatencyModel.zero())
    kwargs.setdefault("controllers", [])
    kwargs.setdefault(
        "watch", WatchSettings(bookmark_interval=1.0, bookmark_before_deadline=0.3, idle_check=0.05)
    )
    kwargs.setdefault("port", 0)
    return DevCluster(**kwargs)


@contextlib.asynccontextmanager
async def api_client(cluster: DevCluster, tmp_path: Path) -> AsyncIterator[k8s.ApiClient]:
    from kubernetes_asyncio import config as k8s_config

    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    async with k8s.ApiClient(configuration) as client:
        yield client


def watcher_config(identity: str = "watcher-test", **overrides: Any) -> WatcherConfig:
    """Fast timings: a 2 s lease and a small duplicate window, so that a duplicate the watcher
    published would be stored (and counted) instead of being hidden by deduplication."""
    values: dict[str, Any] = {
        "identity": identity,
        "lease": LeaseTimings.for_duration(2.0),
        "inactivity_limit": 5.0,
        "bus": BusConfig(duplicate_window=0.2),
    }
    values.update(overrides)
    return WatcherConfig(**values)


@contextlib.asynccontextmanager
async def running_watcher(
    nc: Client, client: k8s.ApiClient, config: WatcherConfig, *, ready: bool = True
) -> AsyncIterator[Watcher]:
    watcher = Watcher(nc, client, config)
    task = asyncio.create_task(watcher.run(), name=f"watcher {config.identity}")
    try:
        if ready:
            await wait_ready(watcher, task)
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_ready(watcher: Watcher, task: asyncio.Task[None] | None = None) -> None:
    async def ready() -> bool:
        if task is not None and task.done():
            task.result()  # raises what the watcher died of
            raise AssertionError("the watcher stopped")
        return watcher.session is not None and watcher.session.ready.is_set()

    await until(ready, within=20.0, interval=0.05)


# --- objects ---------------------------------------------------------------------------------

CUSTOM_EXAMPLES = {
    "Sandbox": "agents/sandbox.yaml",
    "SandboxTemplate": "agents/sandboxtemplate.yaml",
    "SandboxClaim": "agents/sandboxclaim.yaml",
    "SandboxWarmPool": "agents/sandboxwarmpool.yaml",
    "Pool": "opensandbox/pool.yaml",
    "BatchSandbox": "opensandbox/batchsandbox-nonpooled.yaml",
    "SandboxSnapshot": "opensandbox/sandboxsnapshot.yaml",
}


def example(kind: str, name: str, namespace: str = "default") -> Json:
    """A valid object of one of our seven kinds (from examples/), renamed."""
    docs = [d for d in load_documents(EXAMPLES_DIR / CUSTOM_EXAMPLES[kind]) if d["kind"] == kind]
    obj = docs[0]
    obj["metadata"] = {"name": name, "namespace": namespace, "labels": {"test": "watcher"}}
    return obj


def labelled_pod(name: str, labels: dict[str, str]) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "python:3.12"}]},
    }


def labelled_service(name: str, labels: dict[str, str]) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
    }


def labelled_pvc(name: str, labels: dict[str, str]) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def labelled_job(name: str, labels: dict[str, str]) -> Json:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "commit", "image": "busybox"}],
                }
            }
        },
    }


SANDBOXES = ("agents.x-k8s.io", "v1beta1", "default", "sandboxes")
MERGE = "application/merge-patch+json"


async def burst(
    client: k8s.ApiClient,
    changes: int,
    faults: dict[int, Callable[[], Awaitable[None]]] | None = None,
    *,
    objects: int = 20,
    seed: int = 7,
    prefix: str = "sb",
) -> None:
    """``changes`` writes over ``objects`` Sandboxes: creates, updates, deletes, and re-creates
    under the same name (a new uid); ``faults[i]`` runs just before write number ``i``."""
    custom = k8s.CustomObjectsApi(client)
    rng = Random(seed)
    alive: set[str] = set()
    for index in range(changes):
        fault = (faults or {}).get(index)
        if fault is not None:
            await fault()
        name = f"{prefix}-{rng.randrange(objects)}"
        if name not in alive:
            await custom.create_namespaced_custom_object(*SANDBOXES, example("Sandbox", name))
            alive.add(name)
        elif rng.random() < 0.1:
            await custom.delete_namespaced_custom_object(*SANDBOXES, name)
            alive.discard(name)
        else:
            patch = {"metadata": {"labels": {"n": str(index)}}}
            await custom.patch_namespaced_custom_object(
                *SANDBOXES, name, patch, _content_type=MERGE
            )
