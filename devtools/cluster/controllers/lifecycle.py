"""The control loops that live inside a real control plane's own binaries.

Three of kube-apiserver's and kube-controller-manager's loops decide what the API *means*, so
they run in-process here (the kubelet, scheduler and garbage collector talk HTTP and live in
:mod:`.kubelet` / :mod:`.gc`):

- **CRD registration** (apiextensions ``crdHandler``): each change to a CRD re-derives its
  served resource types synchronously, inside the commit, so a CR endpoint exists as soon as
  the CRD create returns, and disappears with the CRD.
- **Naming and establishing** (``NamingConditionController``, ``EstablishingController``):
  writes NamesAccepted / Established and ``acceptedNames`` as a separate status write, a moment
  after the create, like upstream.
- **CRD cleanup** (``CRDFinalizer``): a CRD being deleted has its instances deleted, then its
  ``customresourcecleanup`` finalizer removed; CR creates get 405 meanwhile.
- **Namespace deletion** (``NamespaceController``): a Terminating namespace has every
  namespaced object in it deleted (Pods gracefully), its ``NamespaceContentRemaining``
  conditions kept current, and once empty its ``kubernetes`` finalizer removed, which deletes it.

Each loop is level-triggered: a change only queues a key on a work queue
(:class:`api.workqueue.WorkQueue`), and its one worker re-reads the store; a pass that fails
is tried again with the queue's per-key backoff.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable

from api.objects import Json
from api.workqueue import QueueShutDown, WorkQueue
from devtools.cluster.apirules.crds import CLEANUP_FINALIZER, accepted_status, served_types
from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.apirules.meta import now_rfc3339
from devtools.cluster.apirules.resources import Registry
from devtools.cluster.http.writes import Target, WriteOptions, Writer
from devtools.cluster.storage.store import Change, Store, decode

__all__ = ["CRD_STORAGE", "Lifecycle"]


log = logging.getLogger(__name__)

CRD_STORAGE = "customresourcedefinitions.apiextensions.k8s.io"
_SYSTEM = WriteOptions(field_manager="", user_agent="kube-controller-manager/v1.33.0")
# A pass that failed is tried again after 50 ms, doubling with each failure in a row up to 1 s
# (a change to the object asks for a pass at once all the same).
_RETRY_DELAY = 0.05
_MAX_RETRY_DELAY = 1.0


class _Loop:
    """One worker over a work queue (:class:`~api.workqueue.WorkQueue`): a key whose work
    raises, or answers False (not finished), is tried again with the queue's per-key backoff; a
    key that finishes has its backoff reset."""

    def __init__(self, name: str, work: Callable[[str], Awaitable[bool]]) -> None:
        self.name = name
        self._work = work
        self._queue: WorkQueue[str] = WorkQueue(base_delay=_RETRY_DELAY, max_delay=_MAX_RETRY_DELAY)
        self._task: asyncio.Task[None] | None = None
        self.idle = asyncio.Event()
        """Set while nothing is queued, being worked on or waiting to be tried again."""
        self.idle.set()

    def add(self, key: str) -> None:
        self._queue.add(key)
        self.idle.clear()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"devcluster-{self.name}")

    async def stop(self) -> None:
        self._queue.shutdown()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                key, _ = await self._queue.get()
            except QueueShutDown:
                return
            try:
                finished = await self._work(key)
            except StatusError as exc:
                log.debug("%s %s: %s", self.name, key, exc)
                finished = False
            except Exception:
                log.exception("%s failed on %s", self.name, key)
                finished = False
            if finished:
                self._queue.forget(key)
            else:
                self._queue.backoff(key)
            self._queue.done(key)
            if self._queue.idle() and not self._queue.scheduled:
                self.idle.set()


class Lifecycle:
    def __init__(self, store: Store, registry: Registry, writer: Writer) -> None:
        self.store = store
        self.registry = registry
        self.writer = writer
        self._crds = _Loop("crd-controller", self._reconcile_crd)
        self._namespaces = _Loop("namespace-controller", self._reconcile_namespace)
        self._subscriptions = [
            store.subscribe(CRD_STORAGE, self._on_crd_change),
            store.subscribe("namespaces", self._on_namespace_change),
            store.subscribe(None, self._on_any_change),
        ]

    # -- wiring -----------------------------------------------------------------------------

    def register_existing(self) -> None:
        """Serve the CRDs already in the store (after a restart from a data directory)."""
        for crd in self.store.items(CRD_STORAGE):
            self._serve(crd)
            self._crds.add(crd["metadata"]["name"])
        for namespace in self.store.items("namespaces"):
            if namespace["metadata"].get("deletionTimestamp"):
                self._namespaces.add(namespace["metadata"]["name"])

    def start(self) -> None:
        self._crds.start()
        self._namespaces.start()

    async def stop(self) -> None:
        for sub in self._subscriptions:
            sub.close()
        await self._crds.stop()
        await self._namespaces.stop()

    async def settle(self) -> None:
        """Wait until both loops have nothing queued (bound it with ``asyncio.timeout``)."""
        await self._crds.idle.wait()
        await self._namespaces.idle.wait()

    def _serve(self, crd: Json) -> None:
        name = str(crd["metadata"]["name"])
        self.registry.remove_crd(name)
        for rtype in served_types(crd):
            self.registry.add(rtype)
        if crd["metadata"].get("deletionTimestamp"):
            self.registry.terminating.add(name)

    def _on_crd_change(self, change: Change) -> None:
        if change.type == "DELETED":
            self.registry.remove_crd(change.name)
            self.registry.terminating.discard(change.name)
            return
        assert change.new is not None
        crd = decode(change.new)
        try:
            self._serve(crd)
        except Exception:  # a CRD that validated but cannot be served stays unserved
            log.exception("cannot serve CRD %s", change.name)
        self._crds.add(change.name)

    def _on_namespace_change(self, change: Change) -> None:
        if change.type == "DELETED" or change.new is None:
            return
        if decode(change.new)["metadata"].get("deletionTimestamp"):
            self._namespaces.add(change.name)

    def _on_any_change(self, change: Change) -> None:
        """Content leaving a Terminating namespace may let it finish."""
        if change.type == "DELETED" and change.namespace:
            namespace = self.store.get("namespaces", "", change.namespace)
            if namespace is not None and namespace["metadata"].get("deletionTimestamp"):
                self._namespaces.add(change.namespace)
        if change.type == "DELETED" and change.resource in self._terminating_storages():
            for crd in self.registry.terminating:
                self._crds.add(crd)

    def _terminating_storages(self) -> set[str]:
        return {t.storage for t in self.registry.all() if t.crd_name in self.registry.terminating}

    # -- CRDs -------------------------------------------------------------------------------

    async def _reconcile_crd(self, name: str) -> bool:
        crd = self.store.get(CRD_STORAGE, "", name)
        if crd is None:
            return True
        if crd["metadata"].get("deletionTimestamp"):
            return await self._clean_up_crd(crd)
        await self._write_crd_status(name, lambda c: accepted_status(c, self.registry, self._now()))
        return True

    async def establish(self, name: str) -> None:
        """Run the naming/establishing step now (installation at start-up uses it)."""
        await self._reconcile_crd(name)

    def _now(self) -> str:
        return now_rfc3339(self.writer.clock())

    async def _write_crd_status(self, name: str, status_of: Callable[[Json], Json]) -> None:
        async with self.store.writing():
            crd = self.store.get(CRD_STORAGE, "", name)
            if crd is None:
                return
            updated = copy.deepcopy(crd)
            updated["status"] = status_of(crd)
            self.store.update(CRD_STORAGE, updated)

    async def _clean_up_crd(self, crd: Json) -> bool:
        meta = crd["metadata"]
        name = str(meta["name"])
        if CLEANUP_FINALIZER not in (meta.get("finalizers") or []):
            return True
        types = [t for t in self.registry.all() if t.crd_name == name]
        for rtype in types[:1]:
            for obj in self.store.items(rtype.storage):
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                target = Target(
                    rtype, obj["metadata"].get("namespace") or "", obj["metadata"]["name"]
                )
                try:
                    await self.writer.delete(target, {"propagationPolicy": "Background"}, _SYSTEM)
                except StatusError as exc:
                    if exc.code != 404:
                        raise
        if types and self.store.count(types[0].storage):
            return True  # instances with finalizers remain; their DELETED events re-queue us
        async with self.store.writing():
            current = self.store.get(CRD_STORAGE, "", name)
            if current is None:
                return True
            finalizers = [
                f for f in current["metadata"].get("finalizers") or [] if f != CLEANUP_FINALIZER
            ]
            current["metadata"]["finalizers"] = finalizers
            if not finalizers:
                self.store.delete(CRD_STORAGE, "", name)
            else:
                self.store.update(CRD_STORAGE, current)
        return True

    # -- namespaces -------------------------------------------------------------------------

    def _namespaced_content(self, namespace: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for storage in self.registry.namespaced_storages():
            count = self.store.count(storage, namespace)
            if count:
                counts[storage] = count
        return counts

    async def _reconcile_namespace(self, name: str) -> bool:
        namespace = self.store.get("namespaces", "", name)
        if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
            return True
        if "kubernetes" not in ((namespace.get("spec") or {}).get("finalizers") or []):
            return True
        for storage in self.registry.namespaced_storages():
            rtypes = self.registry.by_storage(storage)
            if not rtypes:
                continue
            rtype = rtypes[0]
            for obj in self.store.items(storage, name):
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                target = Target(rtype, name, obj["metadata"]["name"])
                try:
                    await self.writer.delete(target, {"propagationPolicy": "Background"}, _SYSTEM)
                except StatusError as exc:
                    if exc.code != 404:
                        raise
        remaining = self._namespaced_content(name)
        await self._write_namespace_conditions(name, remaining)
        if remaining:
            return True  # re-queued by the DELETED events of the remaining content

        def finalize(current: Json) -> Json:
            spec = dict(current.get("spec") or {})
            finalizers = [f for f in spec.get("finalizers") or [] if f != "kubernetes"]
            current["spec"] = {"finalizers": finalizers} if finalizers else {}
            return current

        await self.writer.finalize_namespace(name, finalize, _SYSTEM)
        return True

    async def _write_namespace_conditions(self, name: str, remaining: dict[str, int]) -> None:
        now = self._now()
        if remaining:
            listing = ", ".join(
                f"{storage} has {count} resource instances"
                for storage, count in sorted(remaining.items())
            )
            content = ("True", "SomeResourcesRemain", f"Some resources are remaining: {listing}")
        else:
            content = ("False", "ContentRemoved", "All content successfully removed")
        wanted = [
            (
                "NamespaceDeletionDiscoveryFailure",
                "False",
                "ResourcesDiscovered",
                "All resources successfully discovered",
            ),
            (
                "NamespaceDeletionGroupVersionParsingFailure",
                "False",
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            ),
            (
                "NamespaceDeletionContentFailure",
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            ),
            ("NamespaceContentRemaining", *content),
            (
                "NamespaceFinalizersRemaining",
                "False",
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished",
            ),
        ]
        async with self.store.writing():
            namespace = self.store.get("namespaces", "", name)
            if namespace is None:
                return
            status = namespace.setdefault("status", {})
            old = {c["type"]: c for c in status.get("conditions") or []}
            conditions = []
            for ctype, cstatus, reason, message in wanted:
                previous = old.get(ctype)
                stamp = (
                    previous["lastTransitionTime"]
                    if previous and previous["status"] == cstatus
                    else now
                )
                conditions.append(
                    {
                        "type": ctype,
                        "status": cstatus,
                        "lastTransitionTime": stamp,
                        "reason": reason,
                        "message": message,
                    }
                )
            status["conditions"] = conditions
            self.store.update("namespaces", namespace)
