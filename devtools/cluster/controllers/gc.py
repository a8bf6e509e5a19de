"""The development cluster's garbage collector (docs/devcluster.md §2 row 19), a controller over
HTTP.

What it reproduces is kube-controller-manager's garbage collector as a user sees it:

- **Background** (the default propagation): the owner disappears at once; shortly after, every
  dependent whose owners are *all* absent is deleted. An owner is present only if an object with
  the reference's uid exists *where the reference can point*: same kind and API group, same name,
  and either cluster-scoped or in the dependent's own namespace, so an owner in another
  namespace counts as absent, as upstream (which GETs the owner in the dependent's namespace).
  A dependent that still has a live owner only loses its references to absent owners.
- **Foreground**: the owner carries ``deletionTimestamp`` and the ``foregroundDeletion``
  finalizer; its dependents are deleted (foreground again when they have dependents of their
  own), and the finalizer is removed once no dependent with ``blockOwnerDeletion: true`` is
  left. Dependents without that flag are deleted but not waited for.
- **Orphan**: the owner carries the ``orphan`` finalizer; every dependent's reference to it is
  removed, then the finalizer.

Shape: :func:`plan_gc` is pure. Given the object graph (uid → :class:`GraphNode`) and which kinds
the server knows, it returns the writes to make. :class:`GarbageCollector` is the shell. It
discovers every deletable resource (``/api/v1``, ``/apis``, ``/apis/G/V``, preferred versions),
list+watches each one into the graph, and re-discovers when CRDs change. Like upstream's
metadata informers, it decodes only the metadata it reads (:class:`WatchedMetadata`); the Pods
it reads from the kubelet's watch when the cluster shares one (:data:`_SHARED_PATHS`).
After any change it runs a planning pass, waiting ``delay`` first so a burst of events costs
one pass; the pass plans for what changed and its owners and dependents, not the whole graph.
The passes are the one key of a
work queue (:class:`api.workqueue.WorkQueue`: ``add_soon`` batches the burst, a pass whose writes
failed asks for another after ``retry_delay``, and the failed nodes stay marked until a pass
plans them, whatever starts it). Then it executes:
deletes carry a uid precondition, and metadata edits are merge patches under the observed
resourceVersion. Before deleting a dependent for want of an owner, the shell GETs each absent
owner. Watches of different resources are not ordered with respect to each other, so a
dependent can be seen before its freshly created owner; upstream guards against the same race
the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import msgspec

from api.objects import Json
from api.workqueue import QueueShutDown, WorkQueue
from devtools.cluster.controllers.informer import Informer, SharedInformers, cancel_tasks

if TYPE_CHECKING:
    from devtools.cluster.controllers.plug import ControllerContext

__all__ = [
    "DeleteObject",
    "GarbageCollector",
    "GcConfig",
    "GraphNode",
    "RemoveFinalizer",
    "ResourceInfo",
    "StripOwnerReferences",
    "graph_node",
    "plan_gc",
]

log = logging.getLogger(__name__)


FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


# ============================================================================================
# Pure core
# ============================================================================================


@dataclass(frozen=True)
class ResourceInfo:
    """A served resource, as discovery describes it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    def collection_path(self, namespace: str = "") -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"

    def object_path(self, namespace: str, name: str) -> str:
        return f"{self.collection_path(namespace)}/{name}"


@dataclass(frozen=True)
class GraphNode:
    """One object of the cluster, reduced to what garbage collection looks at."""

    uid: str
    resource: ResourceInfo
    namespace: str
    name: str
    resource_version: str
    owner_references: tuple[Json, ...] = ()
    finalizers: tuple[str, ...] = ()
    deleting: bool = False

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def group(self) -> str:
        return self.resource.group


def graph_node(obj: Json, resource: ResourceInfo) -> GraphNode:
    metadata = obj.get("metadata") or {}
    refs = tuple(ref for ref in metadata.get("ownerReferences") or () if isinstance(ref, dict))
    return GraphNode(
        uid=str(metadata.get("uid") or ""),
        resource=resource,
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        owner_references=refs,
        finalizers=tuple(str(f) for f in metadata.get("finalizers") or ()),
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def _group_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


@dataclass(frozen=True)
class DeleteObject:
    """Delete a dependent; ``verify_absent`` are owner references the shell must confirm gone."""

    node: GraphNode
    propagation: str
    verify_absent: tuple[Json, ...] = ()


@dataclass(frozen=True)
class StripOwnerReferences:
    """Remove the references to ``owner_uids`` from a dependent's ownerReferences."""

    node: GraphNode
    owner_uids: frozenset[str]
    verify_absent: tuple[Json, ...] = ()


@dataclass(frozen=True)
class RemoveFinalizer:
    node: GraphNode
    finalizer: str


GcAction = DeleteObject | StripOwnerReferences | RemoveFinalizer

KindKey = tuple[str, str]  # (API group, kind)


def resolve_owner(
    graph: Mapping[str, GraphNode], dependent: GraphNode, ref: Mapping[str, Any]
) -> GraphNode | None:
    """The object a reference points at, if it exists where the reference can reach."""
    owner = graph.get(str(ref.get("uid") or ""))
    if owner is None:
        return None
    if owner.kind != ref.get("kind") or owner.group != _group_of(str(ref.get("apiVersion") or "")):
        return None
    if owner.name != ref.get("name"):
        return None
    if owner.resource.namespaced and owner.namespace != dependent.namespace:
        return None  # owner references never cross namespaces
    return owner


def owner_uids(node: GraphNode) -> list[str]:
    """The uids ``node``'s references name (resolving or not)."""
    return [str(ref.get("uid") or "") for ref in node.owner_references]


def owner_index(graph: Mapping[str, GraphNode]) -> dict[str, dict[str, None]]:
    """uid → the uids of the nodes whose references name it, in graph order."""
    index: dict[str, dict[str, None]] = {}
    for node in graph.values():
        for uid in owner_uids(node):
            index.setdefault(uid, {})[node.uid] = None
    return index


def _dependents_of(
    graph: Mapping[str, GraphNode], owned: Mapping[str, Iterable[str]], owner_uid: str
) -> list[tuple[GraphNode, Json]]:
    """(dependent, the reference) for every reference to ``owner_uid`` that resolves."""
    found: list[tuple[GraphNode, Json]] = []
    for uid in owned.get(owner_uid, ()):
        node = graph.get(uid)
        if node is None:
            continue
        for ref in node.owner_references:
            if str(ref.get("uid") or "") != owner_uid:
                continue
            if resolve_owner(graph, node, ref) is not None:
                found.append((node, ref))
    return found


def _waiting_for_dependents(node: GraphNode) -> bool:
    return node.deleting and FOREGROUND in node.finalizers


def plan_gc(
    graph: Mapping[str, GraphNode],
    known_kinds: Iterable[KindKey],
    focus: Iterable[str] | None = None,
    owned: Mapping[str, Iterable[str]] | None = None,
) -> list[GcAction]:
    """Every write the garbage collector would make given this graph, for the nodes of
    ``focus`` (uids; None: every node). ``owned`` is :func:`owner_index` of the graph, kept by
    the caller as the graph changes (built here when None)."""
    kinds = set(known_kinds)
    owned = owned if owned is not None else owner_index(graph)
    nodes = list(graph.values()) if focus is None else [graph[u] for u in focus if u in graph]
    actions: list[GcAction] = []

    for node in nodes:
        if not node.deleting:
            continue
        mine = _dependents_of(graph, owned, node.uid)
        if ORPHAN in node.finalizers:
            for dependent, _ in mine:
                actions.append(StripOwnerReferences(dependent, frozenset({node.uid})))
            if not mine:
                actions.append(RemoveFinalizer(node, ORPHAN))
        elif FOREGROUND in node.finalizers:
            blocking = [d for d, ref in mine if ref.get("blockOwnerDeletion") is True]
            if not blocking:
                actions.append(RemoveFinalizer(node, FOREGROUND))

    for node in nodes:
        if not node.owner_references or node.deleting:
            continue
        solid: list[str] = []
        dangling: list[Json] = []
        waiting: list[str] = []
        unknown = False
        for ref in node.owner_references:
            owner = resolve_owner(graph, node, ref)
            if owner is None:
                kind_key = (_group_of(str(ref.get("apiVersion") or "")), str(ref.get("kind")))
                if kind_key not in kinds:
                    unknown = True  # cannot tell whether it exists: leave the object alone
                dangling.append(ref)
            elif owner.deleting and ORPHAN in owner.finalizers:
                solid.append(owner.uid)  # it is being orphaned: the reference is about to go
            elif _waiting_for_dependents(owner):
                waiting.append(owner.uid)
            else:
                solid.append(owner.uid)
        if unknown:
            continue
        if solid:
            if dangling or waiting:
                gone = frozenset(str(ref.get("uid")) for ref in dangling) | frozenset(waiting)
                actions.append(StripOwnerReferences(node, gone, tuple(dangling)))
            continue
        if waiting and _dependents_of(graph, owned, node.uid):
            actions.append(DeleteObject(node, "Foreground", tuple(dangling)))
            continue
        if ORPHAN in node.finalizers:
            policy = "Orphan"
        elif FOREGROUND in node.finalizers:
            policy = "Foreground"
        else:
            policy = "Background"
        actions.append(DeleteObject(node, policy, tuple(dangling)))
    return actions


# ============================================================================================
# Imperative shell
# ============================================================================================


@dataclass(frozen=True)
class GcConfig:
    enabled: bool = True
    delay: float = 0.05  # wait this long after a change before planning (batches bursts)
    retry_delay: float = 0.5  # replan this long after a write that failed
    rediscovery_interval: float = 5.0
    # Events have no owners in practice and churn the most; watching them would only cost.
    skip_resources: frozenset[str] = frozenset({"events", "events.events.k8s.io"})
    field_manager: str = "generic-garbage-collector"


class WatchedMetadata(msgspec.Struct, omit_defaults=True):
    """The keys of ``metadata`` the collector reads (:func:`graph_node`, the informers' keys
    and resourceVersions): its informers decode only these (see
    :class:`~devtools.cluster.controllers.informer.Informer`), since the rest of every object
    of every kind, and their managedFields, is never looked at. ``Any``: the values are taken
    as the server sends them, as a full decode would."""

    name: Any = None
    namespace: Any = None
    uid: Any = None
    resourceVersion: Any = None
    ownerReferences: Any = None
    finalizers: Any = None
    deletionTimestamp: Any = None


def _resources_from_list(group: str, version: str, body: Json) -> list[ResourceInfo]:
    result = []
    for entry in body.get("resources") or []:
        name = str(entry.get("name") or "")
        verbs = set(entry.get("verbs") or ())
        if "/" in name or not {"list", "watch", "delete"} <= verbs:
            continue
        result.append(
            ResourceInfo(
                group, version, name, str(entry.get("kind")), bool(entry.get("namespaced"))
            )
        )
    return result


_SHARED_PATHS = frozenset({"/api/v1/pods"})
"""The collections read through the cluster's :class:`SharedInformers` when it gives some: the
Pods, which the kubelet watches too and which change the most."""

_PASS = "pass"
"""The one key of the collector's work queue: a pass over what changed anywhere in the graph."""


class GarbageCollector:
    """``async with GarbageCollector(url, config):`` collects garbage until the block exits."""

    def __init__(
        self,
        base_url: str,
        config: GcConfig | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        informers: SharedInformers | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.config = config or GcConfig()
        self._headers = dict(headers or {})
        self._session: aiohttp.ClientSession | None = None
        self._shared = informers
        # Per resource: its informer, and the task running it (None: a shared informer, which
        # is not ours to stop; our handler on it is what we remove).
        self._informers: dict[ResourceInfo, tuple[Informer, asyncio.Task[Any] | None, Any]] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self.graph: dict[str, GraphNode] = {}
        self._owned: dict[str, dict[str, None]] = {}
        """:func:`owner_index` of the graph, kept as it changes."""
        self._dirty: set[str] = set()
        """The uids the next pass plans for: what changed, and its owners and dependents."""
        self._everything = True
        """The next pass plans for every node (the first, a new kind, :meth:`settle`)."""
        self._queue: WorkQueue[str] = WorkQueue()
        self._discover_now = asyncio.Event()
        # Writes already made for an object at a given resourceVersion: not repeated until the
        # object changes (its watch event is on its way, and forgets them).
        self._done: dict[str, set[tuple[str, Hashable]]] = {}
        self.passes = 0
        self._progress = asyncio.Condition()  # notified after each pass and each discovery

    async def __aenter__(self) -> GarbageCollector:
        try:
            await self.start()
        except BaseException:
            # Cancelled (or failed) half-way: a failed __aenter__ gets no __aexit__.
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def known_kinds(self) -> set[KindKey]:
        return {(r.group, r.kind) for r in self._informers}

    async def wait_watching(self, group: str, kind: str) -> None:
        """Return once the collector watches the resource of this kind (e.g. a new CRD's)."""
        async with self._progress:
            await self._progress.wait_for(lambda: (group, kind) in self.known_kinds)

    async def settle(self, passes: int = 2) -> None:
        """Run ``passes`` more planning passes over everything seen so far, and wait for them."""
        async with self._progress:
            target = self.passes + passes
            while self.passes < target:
                self._everything = True
                self._queue.add(_PASS)
                await self._progress.wait()

    async def _notify_progress(self) -> None:
        async with self._progress:
            self._progress.notify_all()

    async def start(self) -> None:
        if not self.config.enabled:
            return
        self._session = aiohttp.ClientSession(
            headers={"User-Agent": "devcluster-garbage-collector", **self._headers},
            read_bufsize=2**21,
        )
        await self._sync_resources()
        await asyncio.gather(*(inf.synced.wait() for inf, _, _ in self._informers.values()))
        self._tasks = [
            asyncio.create_task(self._plan_loop()),
            asyncio.create_task(self._discovery_loop()),
        ]
        self._wake()

    async def stop(self) -> None:
        self._queue.shutdown()
        for informer, task, handler in self._informers.values():
            if task is None:
                informer.remove_handler(handler)
        owned = [task for _, task, _ in self._informers.values() if task is not None]
        await cancel_tasks([*self._tasks, *owned])
        self._tasks.clear()
        self._informers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- discovery -----------------------------------------------------------------------------

    async def _get_json(self, path: str) -> Json | None:
        assert self._session is not None
        async with self._session.get(self.base_url + path) as response:
            if response.status != 200:
                return None
            body: Json = await response.json()
            return body

    async def discover(self) -> list[ResourceInfo]:
        resources: list[ResourceInfo] = []
        core = await self._get_json("/api/v1")
        if core is not None:
            resources += _resources_from_list("", "v1", core)
        groups = await self._get_json("/apis") or {}
        for group in groups.get("groups") or []:
            preferred = (group.get("preferredVersion") or {}).get("version")
            if not preferred:
                continue
            body = await self._get_json(f"/apis/{group['name']}/{preferred}")
            if body is not None:
                resources += _resources_from_list(group["name"], preferred, body)
        return [
            r
            for r in resources
            if (r.plural if not r.group else f"{r.plural}.{r.group}")
            not in self.config.skip_resources
        ]

    async def _sync_resources(self) -> None:
        assert self._session is not None
        wanted = set(await self.discover())
        known = set(self._informers)
        for resource in list(self._informers):
            if resource not in wanted:
                informer, task, handler = self._informers.pop(resource)
                if task is None:
                    informer.remove_handler(handler)
                else:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                self._forget_resource(resource)
        for resource in wanted - set(self._informers):
            path, handler = resource.collection_path(), self._handler_for(resource)
            if self._shared is not None and path in _SHARED_PATHS:
                # The kubelet's watch of the Pods, read in full: no second watch of them.
                informer = self._shared.informer(path)
                informer.add_handler(handler)
                self._informers[resource] = (informer, None, handler)
                continue
            informer = Informer(
                self._session, self.base_url, path, handler, metadata=WatchedMetadata
            )
            self._informers[resource] = (informer, asyncio.create_task(informer.run()), handler)
        if set(self._informers) != known:
            # References to a kind not watched before (a new CRD's) are decided now.
            self._everything = True
            self._wake()
        await self._notify_progress()

    def _forget_resource(self, resource: ResourceInfo) -> None:
        for uid in [uid for uid, node in self.graph.items() if node.resource == resource]:
            self._replace(uid, None)
        self._wake()

    def _handler_for(self, resource: ResourceInfo) -> Any:
        def handle(kind: str, obj: Json, old: Json | None) -> None:
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            self._replace(uid, None if kind == "DELETED" else graph_node(obj, resource))
            if resource.plural == "customresourcedefinitions":
                self._discover_now.set()
            self._wake()

        return handle

    def _replace(self, uid: str, node: GraphNode | None) -> None:
        """Put ``node`` (None: nothing) in the graph under ``uid``, and mark for the next pass
        what that can change the writes of: the node, the owners its references name (one may
        wait for its dependents to go) and its dependents (their owner changed, or vanished)."""
        previous = self.graph.pop(uid, None)
        if node is not None:
            self.graph[uid] = node
        self._done.pop(uid, None)
        self._dirty.add(uid)
        for owner in owner_uids(previous) if previous is not None else ():
            self._dirty.add(owner)
            named = self._owned.get(owner)
            if named is not None:
                named.pop(uid, None)
                if not named:
                    del self._owned[owner]
        for owner in owner_uids(node) if node is not None else ():
            self._dirty.add(owner)
            self._owned.setdefault(owner, {})[uid] = None
        self._dirty.update(self._owned.get(uid, ()))

    async def _discovery_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._discover_now.wait(), timeout=self.config.rediscovery_interval
                )
            self._discover_now.clear()
            try:
                await self._sync_resources()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.debug("gc: discovery failed: %r", error)

    # -- planning ------------------------------------------------------------------------------

    def _wake(self) -> None:
        """Ask for a pass within ``delay``: the rest of a burst of changes joins it."""
        self._queue.add_soon(_PASS, self.config.delay)

    async def _plan_loop(self) -> None:
        while True:
            try:
                key, _ = await self._queue.get()
            except QueueShutDown:
                return
            try:
                await self._plan_pass()
            finally:
                self._queue.done(key)

    async def _plan_pass(self) -> None:
        self.passes += 1
        # Only what changed and its neighbours: a pass over every object after each burst
        # was a quarter of the cluster's CPU while a pool of 1,000 filled.
        focus = None if self._everything else self._dirty
        self._everything, self._dirty = False, set()
        actions = plan_gc(self.graph, self.known_kinds, focus, self._owned)
        failed = False
        for action in actions:
            node = action.node
            marker = (node.resource_version, _action_key(action))
            if marker in self._done.get(node.uid, ()):
                continue
            try:
                outcome = await self._execute(action)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                outcome = "failed"
                log.debug("gc: %s failed: %r", action, error)
            current = self.graph.get(node.uid)
            if outcome == "done" and current is not None:
                if current.resource_version == node.resource_version:
                    self._done.setdefault(node.uid, set()).add(marker)
            elif outcome != "done":
                # Planned again, on the retry or with its owner's event: the node, and its
                # owners (a dependent's references are stripped in its orphaned owner's plan).
                self._dirty.add(node.uid)
                self._dirty.update(owner_uids(node))
                failed = failed or outcome == "failed"
        await self._notify_progress()
        if failed:
            self._queue.add_after(_PASS, self.config.retry_delay)

    async def _owner_exists(self, dependent: GraphNode, ref: Json) -> bool:
        """A live GET of an owner the graph says is absent (the graph may lag behind)."""
        group = _group_of(str(ref.get("apiVersion") or ""))
        resource = next(
            (r for r in self._informers if r.group == group and r.kind == ref.get("kind")), None
        )
        if resource is None:
            return True  # unknown kind: do not act on a guess
        namespace = dependent.namespace if resource.namespaced else ""
        body = await self._get_json(resource.object_path(namespace, str(ref.get("name"))))
        return body is not None and (body.get("metadata") or {}).get("uid") == ref.get("uid")

    async def _execute(self, action: GcAction) -> str:
        """Carry out one action: "done", "failed" (retry later) or "lagging" (owner exists)."""
        assert self._session is not None
        node = action.node
        url = self.base_url + node.resource.object_path(node.namespace, node.name)
        if isinstance(action, DeleteObject | StripOwnerReferences):
            for ref in action.verify_absent:
                if await self._owner_exists(node, ref):
                    return "lagging"  # the owner's watch event will bring a new pass
        if isinstance(action, DeleteObject):
            options = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "propagationPolicy": action.propagation,
                "preconditions": {"uid": node.uid},
            }
            async with self._session.delete(url, json=options) as response:
                return _outcome(response.status)
        if isinstance(action, StripOwnerReferences):
            remaining = [r for r in node.owner_references if r.get("uid") not in action.owner_uids]
            metadata: Json = {
                "resourceVersion": node.resource_version,
                "ownerReferences": remaining or None,
            }
        else:
            finalizers = [f for f in node.finalizers if f != action.finalizer]
            metadata = {"resourceVersion": node.resource_version, "finalizers": finalizers or None}
        async with self._session.patch(
            url,
            params={"fieldManager": self.config.field_manager},
            json={"metadata": metadata},
            headers={"Content-Type": "application/merge-patch+json"},
        ) as response:
            return _outcome(response.status)


def _outcome(status: int) -> str:
    # 404: already gone. 409: changed since we looked (or replaced); its event brings a new pass.
    return "done" if status in (200, 202, 404, 409) else "failed"


def _action_key(action: GcAction) -> Hashable:
    if isinstance(action, DeleteObject):
        return ("delete", action.propagation)
    if isinstance(action, StripOwnerReferences):
        return ("strip", action.owner_uids)
    return ("finalizer", action.finalizer)


async def run(ctx: ControllerContext) -> None:
    """Controller entry point for :class:`~devtools.cluster.cluster.DevCluster`.

    ``ctx.settings.options["garbage_collector"]`` may hold a :class:`GcConfig` or a dict of its
    fields.
    """
    overrides = ctx.settings.options.get("garbage_collector")
    config = overrides if isinstance(overrides, GcConfig) else GcConfig(**dict(overrides or {}))
    async with GarbageCollector(ctx.url, config, informers=ctx.informers):
        await asyncio.Event().wait()
