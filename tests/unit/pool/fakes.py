"""The pool worker on the real reconciler runtime, against stand-ins: an API server that applies
writes as the real one does (uids, growing resourceVersions, creationTimestamps,
resourceVersion and uid preconditions), and a JetStream that keeps memos and a warm stream that
holds one entry per subject and refuses a second (error 10077), as the real warm stream does.

The bus does not echo the API server's answers by itself: a test says what the bus shows with
:meth:`PoolRig.show`, so a lagging view is the default and catching up is explicit."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nats.js.api import PubAck
from nats.js.errors import APIError

from api.objects import Json
from events.envelope import ObjectKey, key_of
from events.ids import ChangeKind
from events.types import observed_event
from services.pool.core.observation import PoolSettings
from services.pool.worker import pool_worker
from services.runtime.bus import ERR_MAX_MSGS_PER_SUBJECT
from services.runtime.kube import KubeError
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import WorkerDefinition, WorkerSettings
from tests.support.fakeapi import apply_merge_patch
from tests.support.fakebus import MemoJetStream
from tests.support.samples import stamp
from tests.unit.pool.world import NOW, PoolWorld


class PoolApi:
    """A KubeApi stand-in: objects by key, every call made, and errors to raise by
    ``(verb, name)``. ``hold_creates``, when set, makes every Sandbox create wait for it
    (``creating`` counts the creates under way)."""

    def __init__(self, *objs: Json) -> None:
        self.store: dict[ObjectKey, Json] = {key_of(o): copy.deepcopy(o) for o in objs}
        self.calls: list[tuple[str, ObjectKey]] = []
        self.made: list[ObjectKey] = []
        """The keys of the creates that were made, in order."""
        self.errors: dict[tuple[str, str], Exception] = {}
        self.hold_creates: asyncio.Event | None = None
        self.creating = 0
        self.creating_seen = asyncio.Event()
        self._versions = itertools.count(1000)

    def _call(self, verb: str, key: ObjectKey) -> None:
        self.calls.append((verb, key))
        error = self.errors.get((verb, key.name))
        if error is not None:
            raise error

    def _bump(self, obj: Json) -> Json:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def created(self, kind: str = "Sandbox") -> list[ObjectKey]:
        """The keys of the creates of ``kind`` that were made."""
        return [key for key in self.made if key.kind == kind]

    async def create(self, body: Json) -> Json:
        body = copy.deepcopy(body)
        meta = body["metadata"]
        if meta.get("generateName"):
            meta["name"] = f"{meta.pop('generateName')}{len(self.store):05d}"
        key = key_of(body)
        if key.kind == "Sandbox" and self.hold_creates is not None:
            self.creating += 1
            self.creating_seen.set()
            try:
                await self.hold_creates.wait()
            finally:
                self.creating -= 1
        self._call("create", key)
        if key in self.store:
            raise KubeError(409, "AlreadyExists", f"{key} already exists")
        meta.update(uid=f"uid-{key.name}", creationTimestamp=stamp(NOW))
        self.store[key] = body
        self.made.append(key)
        return self._bump(body)

    async def get(self, key: ObjectKey) -> Json:
        self._call("get", key)
        if key not in self.store:
            raise KubeError(404, "NotFound", str(key))
        return copy.deepcopy(self.store[key])

    async def patch(self, key: ObjectKey, patch: Json, *, subresource: str | None = None) -> Json:
        self._call("patch", key)
        current = self.store.get(key)
        if current is None:
            raise KubeError(404, "NotFound", str(key))
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", "the object has been modified")
        self.store[key] = apply_merge_patch(current, patch)
        return self._bump(self.store[key])

    async def replace(self, body: Json) -> Json:
        key = key_of(body)
        self._call("replace", key)
        self.store[key] = copy.deepcopy(body)
        return self._bump(self.store[key])

    async def delete(self, key: ObjectKey, *, uid: str | None = None, **_: Any) -> Json:
        self._call("delete", key)
        current = self.store.get(key)
        if current is None:
            raise KubeError(404, "NotFound", str(key))
        if uid is not None and current["metadata"].get("uid") != uid:
            raise KubeError(409, "Conflict", "Precondition failed: UID in precondition")
        del self.store[key]
        return {"kind": "Status", "status": "Success"}


class WarmJetStream(MemoJetStream):
    """Memos, decisions, and the warm stream: one entry per subject, a second one refused."""

    def __init__(self) -> None:
        super().__init__()
        self.warm: dict[str, bytes] = {}
        self.purged: list[str] = []

    async def publish(self, subject: str, payload: bytes, **options: Any) -> PubAck:
        if subject.startswith("sandbus.warm."):
            if subject in self.warm:
                raise APIError(code=503, err_code=ERR_MAX_MSGS_PER_SUBJECT, description="maximum")
            self.warm[subject] = payload
            return PubAck(stream="SANDBUS_WARM", seq=len(self.warm))
        return await super().publish(subject, payload, **options)

    async def purge_stream(self, name: str, subject: str | None = None, **_: Any) -> bool:
        assert subject is not None, "the pool worker purges by subject only"
        self.purged.append(subject)
        for queued in [s for s in self.warm if _matches(subject, s)]:
            del self.warm[queued]
        return True


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` the rest."""
    want, got = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(got) > i
        if i >= len(got) or token not in ("*", got[i]):
            return False
    return len(want) == len(got)


@dataclass
class PoolRig:
    """A pool worker, its API server and its bus."""

    api: PoolApi
    js: WarmJetStream = field(default_factory=WarmJetStream)
    settings: WorkerSettings = field(
        # written_ttl=0: the worker's own answers do not outlive the pass that got them, so
        # read-your-writes cannot hide a lagging bus; only expectations can.
        default_factory=lambda: WorkerSettings(written_ttl=0, base_delay=0.01, max_delay=1.0)
    )
    pool_settings: PoolSettings = field(default_factory=PoolSettings)
    definition: WorkerDefinition | None = None
    """None: the pool worker as ``pool_settings`` configure it."""

    def __post_init__(self) -> None:
        self.worker = Worker(
            self.definition or pool_worker(self.pool_settings),
            js=self.js,  # type: ignore[arg-type]
            api=self.api,  # type: ignore[arg-type]
            settings=self.settings,
            clock=lambda: NOW,
        )
        self.worker.feed.loaded.set()  # as after the state table's first load

    def show(self, *objs: Json, change: ChangeKind = "added") -> None:
        """The bus delivers these objects (as the watcher would): into the cache, waking keys."""
        for obj in objs:
            self.worker.take_event(observed_event(change, obj, time=NOW))

    @classmethod
    def of(cls, world: PoolWorld, **options: Any) -> PoolRig:
        """A rig whose API server and bus both hold the objects of ``world``."""
        rig = cls(PoolApi(*world.objects.values()), **options)
        rig.show(*world.objects.values())
        return rig

    def show_store(self, kinds: Iterable[str] = ("Sandbox",)) -> None:
        """The bus catches up with everything of ``kinds`` the API server holds."""
        self.show(*(obj for key, obj in sorted(self.api.store.items()) if key.kind in kinds))
