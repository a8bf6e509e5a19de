"""A pool's world for the planner's tests: a pool, its template, members, and the fake API server
(:mod:`tests.support.fakeapi`) that applies plans as the real one would (generateName, uids,
growing resourceVersions, creationTimestamps from the test's clock, preconditions)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import Json
from events.envelope import ObjectKey
from services.domain.agentsandbox.blueprint import pool_sandbox
from services.pool.core.observation import PoolMemo, PoolObservation, PoolSettings, observe_pool
from services.pool.core.plan import plan_pool
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan
from services.runtime.reconcile.expectations import Expectations
from tests.support.fakeapi import FakeApiServer
from tests.support.plans import actions_of
from tests.support.samples import stamp

NS = "default"
NOW = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
POOL = ObjectKey("SandboxWarmPool", NS, "pool")


def template(name: str = "tpl", image: str = "python:3.12", **spec: Any) -> Json:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "3"},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "app", "image": image}]}},
            **spec,
        },
    }


def pool(
    replicas: int | None = 3,
    *,
    template_ref: str = "tpl",
    strategy: str | None = None,
    generation: int = 1,
    status: Json | None = None,
) -> Json:
    spec: Json = {"sandboxTemplateRef": {"name": template_ref}}
    if replicas is not None:
        spec["replicas"] = replicas
    if strategy is not None:
        spec["updateStrategy"] = {"type": strategy}
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {
            "name": POOL.name,
            "namespace": NS,
            "uid": "uid-pool",
            "resourceVersion": "5",
            "generation": generation,
        },
        "spec": spec,
        "status": status or {},
    }


def ready(obj: Json, status: str = "True") -> Json:
    obj = copy.deepcopy(obj)
    obj.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": status}]
    return obj


@dataclass
class PoolWorld(FakeApiServer):
    """Objects by key, and every write that reached them."""

    carries_out = (Create, Patch, Delete)
    writes: list[Any] = field(default_factory=list)
    now: datetime = NOW

    def member(
        self, name: str, *, ready_status: str | None = "True", age: float = 3600.0, **meta: Any
    ) -> Json:
        """A member as this pool would have made it, ``age`` seconds old."""
        body = pool_sandbox(
            self.objects[POOL], self.objects[ObjectKey("SandboxTemplate", NS, "tpl")]
        )
        body["metadata"].pop("generateName")
        body["metadata"].update(
            name=name,
            uid=f"uid-{name}",
            resourceVersion=str(next(self._versions)),
            creationTimestamp=stamp(self.now - timedelta(seconds=age)),
            **meta,
        )
        if ready_status is not None:
            body = ready(body, ready_status)
        self.add(body)
        return body

    def members(self) -> list[Json]:
        return [
            obj
            for key, obj in sorted(self.objects.items())
            if key.kind == "Sandbox"
            and (obj["metadata"].get("labels") or {}).get(LABEL_WARM_POOL_SANDBOX)
            == name_hash(POOL.name)
        ]

    def cache(self) -> ObjectCache:
        cache = ObjectCache(label_indexes=[("Sandbox", LABEL_WARM_POOL_SANDBOX)])
        for obj in self.objects.values():
            cache.observe("added", obj)
        return cache

    def observe(
        self,
        settings: PoolSettings | None = None,
        *,
        expectations: Expectations | None = None,
        memo: PoolMemo | None = None,
        last_error: str | None = None,
        failure_persists: bool = False,
    ) -> PoolObservation:
        return observe_pool(
            POOL,
            self.cache(),
            settings=settings or PoolSettings(),
            expectations=expectations,
            memo=memo,
            last_error=last_error,
            failure_persists=failure_persists,
        )

    def plan(self, settings: PoolSettings | None = None, **kwargs: Any) -> Plan:
        return plan_pool(self.observe(settings, **kwargs), self.now)

    def apply(self, plan: Plan, *, fail_creates_after: int | None = None) -> None:
        """Apply like the runtime: in order, the plan stopping at the first failure (a refused
        write raises its :class:`~services.runtime.kube.KubeError`)."""
        created = 0
        for action in actions_of(plan):
            self.writes.append(action)
            if isinstance(action, Create):
                if fail_creates_after is not None and created >= fail_creates_after:
                    return
                created += 1
            self.write(action)

    def creates(self, kind: str = "Sandbox") -> list[Create]:
        return [w for w in self.writes if isinstance(w, Create) and w.body["kind"] == kind]


def world(replicas: int | None = 3, **pool_options: Any) -> PoolWorld:
    return PoolWorld().add(pool(replicas, **pool_options), template())
