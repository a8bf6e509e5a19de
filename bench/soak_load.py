"""The soak's load: what users do, at a steady rate, in an order drawn from the seed.

Claims on three warm pools (``warm-a`` and ``warm-b`` kept full, ``dry`` with no members, so its
claims start cold), some with an expiry that deletes them; claims released; pools scaled up and
down; templates changed, so that pools roll their members over; plain Sandboxes created,
suspended, resumed and deleted; OpenSandbox BatchSandboxes from a Pool and from a template,
created, paused (a snapshot committed), resumed and deleted. The population stays bounded, so
a long run does not grow without end.

The load remembers what it made and what it asked to go: once the system is quiet, every object
it made and kept must still be there, and every one it deleted or let expire must be gone
(:meth:`Load.unkept`). An operation the API refuses (a Conflict with a controller's write, a
claim deleted by its expiry just before) is counted as refused, not retried: a user would look
again and decide anew, as the next operation does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import random
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass, field
from typing import Any

from api.objects import Json
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError

__all__ = ["NS", "Load", "Unkept"]

NS = "default"
TEMPLATES = ("tpl-a", "tpl-b")
WARM_POOLS = {"warm-a": ("tpl-a", 4), "warm-b": ("tpl-b", 3), "dry": ("tpl-a", 0)}
OPEN_POOL = "open"
IMAGES = ("python:3.12", "python:3.12-slim")
LIMITS = {"SandboxClaim": 16, "Sandbox": 6, "BatchSandbox": 4}
"""The most live objects of each kind the load keeps at once."""

_CLAIM = ("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim")
_TEMPLATE = ("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate")
_WARM_POOL = ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool")
_SANDBOX = ("agents.x-k8s.io/v1beta1", "Sandbox")
_OPEN = "sandbox.opensandbox.io/v1alpha1"


def _object(kind: tuple[str, str], name: str, spec: Json) -> Json:
    return {
        "apiVersion": kind[0],
        "kind": kind[1],
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def _pod_spec(image: str, container: str = "app") -> Json:
    return {"containers": [{"name": container, "image": image}]}


@dataclass(frozen=True)
class Unkept:
    """An object whose fate differs from what the load asked for."""

    key: ObjectKey
    detail: str


@dataclass
class Load:
    kube: KubeApi
    rng: random.Random
    done: collections.Counter[str] = field(default_factory=collections.Counter)
    refused: collections.Counter[str] = field(default_factory=collections.Counter)
    kept: dict[ObjectKey, str] = field(default_factory=dict)
    """Objects made and not asked to go, with what made them."""
    gone: dict[ObjectKey, str] = field(default_factory=dict)
    """Objects deleted, or made with an expiry that deletes them, with why."""
    expiring: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, name) of the claims made with an expiry that deletes them."""
    _serial: int = 0
    _images: dict[str, int] = field(default_factory=dict)

    async def setup(self) -> None:
        """The templates, the warm pools and the OpenSandbox Pool every operation uses."""
        for template in TEMPLATES:
            self._images[template] = 0
            body = _object(_TEMPLATE, template, {"podTemplate": {"spec": _pod_spec(IMAGES[0])}})
            await self.kube.create(body)
        for pool, (template, replicas) in WARM_POOLS.items():
            spec = {"replicas": replicas, "sandboxTemplateRef": {"name": template}}
            await self.kube.create(_object(_WARM_POOL, pool, spec))
        capacity = {"bufferMin": 2, "bufferMax": 4, "poolMin": 2, "poolMax": 10}
        open_pool = {
            "template": {"spec": _pod_spec(IMAGES[0], "main")},
            "capacitySpec": capacity,
            "scaleStrategy": {"maxUnavailable": "100%"},
        }
        await self.kube.create(_object((_OPEN, "Pool"), OPEN_POOL, open_pool))

    # -- the operations -----------------------------------------------------------------------

    def _name(self, prefix: str) -> str:
        self._serial += 1
        return f"{prefix}-{self._serial:05d}"

    def _live(self, kind: str) -> list[ObjectKey]:
        return sorted(key for key in self.kept if key.kind == kind)

    async def _make(self, body: Json, why: str, *, expires: bool = False) -> None:
        created = await self.kube.create(body)
        key = ObjectKey(created["kind"], NS, created["metadata"]["name"])
        if expires:
            self.gone[key] = why
            self.expiring.add((NS, key.name))
        else:
            self.kept[key] = why

    async def _delete(self, key: ObjectKey) -> None:
        """Delete ``key``; refused (an API server restarting), it stays kept."""
        try:
            await self.kube.delete(key)
        except KubeError as error:
            if not error.not_found:
                raise
        del self.kept[key]
        self.gone[key] = "deleted by the load"

    async def claim(self) -> None:
        if len(self._live("SandboxClaim")) >= LIMITS["SandboxClaim"]:
            return await self.release()
        pool = self.rng.choices(list(WARM_POOLS), weights=(5, 4, 1))[0]
        spec: Json = {"warmPoolRef": {"name": pool}}
        expires = self.rng.random() < 0.15
        if expires:
            at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
                seconds=self.rng.uniform(3, 15)
            )
            spec["lifecycle"] = {
                "shutdownTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "shutdownPolicy": "Delete",
            }
        why = f"claim on {pool}" + (", expiring" if expires else "")
        await self._make(_object(_CLAIM, self._name("c"), spec), why, expires=expires)

    async def release(self) -> None:
        live = self._live("SandboxClaim")
        if live:
            await self._delete(self.rng.choice(live))

    async def scale(self) -> None:
        pool = self.rng.choice(["warm-a", "warm-b"])
        replicas = self.rng.randint(2, 6)
        await self.kube.patch(
            ObjectKey("SandboxWarmPool", NS, pool), {"spec": {"replicas": replicas}}
        )

    async def rollout(self) -> None:
        template = self.rng.choice(TEMPLATES)
        self._images[template] = 1 - self._images[template]
        image = IMAGES[self._images[template]]
        patch = {"spec": {"podTemplate": {"spec": _pod_spec(image)}}}
        await self.kube.patch(ObjectKey("SandboxTemplate", NS, template), patch)

    async def sandbox(self) -> None:
        if len(self._live("Sandbox")) >= LIMITS["Sandbox"]:
            return await self.sandbox_delete()
        spec = {"podTemplate": {"spec": _pod_spec(IMAGES[0])}}
        await self._make(_object(_SANDBOX, self._name("sb"), spec), "plain Sandbox")

    async def sandbox_delete(self) -> None:
        live = self._live("Sandbox")
        if live:
            await self._delete(self.rng.choice(live))

    async def suspend_or_resume(self) -> None:
        live = self._live("Sandbox")
        if live:
            key = self.rng.choice(live)
            mode = self.rng.choice(["Suspended", "Running"])
            await self.kube.patch(key, {"spec": {"operatingMode": mode}})

    async def batch(self) -> None:
        if len(self._live("BatchSandbox")) >= LIMITS["BatchSandbox"]:
            return await self.batch_delete()
        pooled = self.rng.random() < 0.75
        spec: Json = {"replicas": self.rng.randint(1, 2)}
        if pooled:
            spec["poolRef"] = OPEN_POOL
        else:
            spec["template"] = {"spec": _pod_spec(IMAGES[0], "main")}
        why = "BatchSandbox " + ("from the Pool" if pooled else "from a template")
        await self._make(_object((_OPEN, "BatchSandbox"), self._name("bs"), spec), why)

    async def pause_or_resume(self) -> None:
        live = self._live("BatchSandbox")
        if live:
            pause = self.rng.random() < 0.5
            await self.kube.patch(self.rng.choice(live), {"spec": {"pause": pause}})

    async def batch_delete(self) -> None:
        live = self._live("BatchSandbox")
        if live:
            await self._delete(self.rng.choice(live))

    def operations(self) -> dict[str, tuple[int, Callable[[], Coroutine[Any, Any, None]]]]:
        """Each operation by name, with its weight in the mix."""
        return {
            "claim": (30, self.claim),
            "release": (16, self.release),
            "scale": (4, self.scale),
            "rollout": (2, self.rollout),
            "sandbox": (8, self.sandbox),
            "sandbox-delete": (5, self.sandbox_delete),
            "suspend-or-resume": (6, self.suspend_or_resume),
            "batch": (8, self.batch),
            "batch-delete": (5, self.batch_delete),
            "pause-or-resume": (4, self.pause_or_resume),
        }

    async def step(self) -> str:
        """One operation drawn from the mix; its name."""
        operations = self.operations()
        name = self.rng.choices(list(operations), weights=[w for w, _ in operations.values()])[0]
        try:
            await operations[name][1]()
        except KubeError as error:
            self.refused[f"{name}: {error.status}"] += 1
        else:
            self.done[name] += 1
        return name

    async def run(self, rate: float, stop: asyncio.Event) -> None:
        """Operations at ``rate`` a second, one after another, until ``stop`` is set."""
        interval = 1.0 / rate
        while not stop.is_set():
            await self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    # -- what must hold once quiet -----------------------------------------------------------

    def unkept(self, present: Collection[ObjectKey]) -> list[Unkept]:
        """Objects the load made and kept that are not there, and objects it deleted (or
        that expired) that still are. ``present``: every object of the load's kinds, by key."""
        problems = [
            Unkept(key, f"lost: made ({why}) and never deleted, but not there")
            for key, why in self.kept.items()
            if key not in present
        ]
        problems += [
            Unkept(key, f"still there ({why})") for key, why in self.gone.items() if key in present
        ]
        return problems
