"""Expectations across a restart of the worker, against a real nats-server and the development
cluster, with no watcher: the bus never shows the worker its own creates, the worst lag there
is. A worker that kept its expectations only in memory (or had none) would create the children
again after its restart; the runtime keeps them on the memo stream, so it does not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext

from api.objects import Json, metadata_of
from devtools.cluster import DevCluster, LatencyModel
from events.envelope import ObjectKey, key_of
from events.types import observed_event
from services.runtime.bus import BusConfig, ensure_bus, publish_event
from services.runtime.kube import KubeApi
from services.runtime.reconcile.actions import Create, Plan
from services.runtime.reconcile.memory import KeyRecord, MemoStore
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import Observed, Reconciler, WorkerDefinition, WorkerSettings
from tests.support.samples import NS
from tests.support.stack import api_client, running
from tests.support.statetable import state_table_copied
from tests.support.waiting import until

OWNER = ObjectKey("SandboxTemplate", NS, "pool-1")
REPLICAS = 3


@dataclass(frozen=True)
class ChildrenPerTemplate:
    """A toy pool: ``REPLICAS`` Sandboxes with generated names, controlled by the template."""

    expects: bool
    kind: str = "SandboxTemplate"

    def observe(self, key: ObjectKey, observed: Observed) -> dict[str, Any]:
        template = observed.cache.get(key)
        uid = str(metadata_of(template or {}).get("uid") or "")
        names = {str(metadata_of(c)["name"]) for c in observed.cache.owned_by("Sandbox", uid)}
        unnamed = 0
        if observed.expectations is not None:
            names |= observed.expectations.pending_names("Sandbox")
            unnamed = observed.expectations.pending("Sandbox") - len(
                observed.expectations.pending_names("Sandbox")
            )
        return {"template": template, "have": len(names) + unnamed}

    def plan(self, inputs: dict[str, Any], now: datetime) -> Plan:
        template = inputs["template"]
        if template is None:
            return Plan()
        missing = REPLICAS - inputs["have"]
        return Plan(actions=tuple(Create(child_of(template)) for _ in range(max(missing, 0))))


def reconciler_of(toy: ChildrenPerTemplate) -> Reconciler[dict[str, Any]]:
    return Reconciler(toy.kind, toy.observe, toy.plan, expects=toy.expects)


def child_of(template: Json) -> Json:
    meta = metadata_of(template)
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": NS,
            "ownerReferences": [
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxTemplate",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "operatingMode": "Suspended",
            "podTemplate": {"spec": {"containers": [{"name": "app", "image": "busybox"}]}},
        },
    }


@pytest.fixture
async def world(
    nats_url: str, tmp_path: Path
) -> AsyncIterator[tuple[DevCluster, JetStreamContext, KubeApi, BusConfig]]:
    bus = BusConfig(storage="memory")
    async with DevCluster(port=0, latency=LatencyModel.zero()) as cluster:
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            await ensure_bus(js, bus)
            async with api_client(cluster, tmp_path, "test") as client:
                yield cluster, js, KubeApi(client, field_manager="toy-pool"), bus
        finally:
            await nc.close()


async def sandboxes(kube: KubeApi) -> list[Json]:
    return await kube.list("Sandbox", NS)


async def one_life(worker: Worker) -> None:
    """Run ``worker`` until it has loaded and has nothing left to do, then stop it."""
    async with running(worker.run(), "toy pool worker"):
        await until(lambda: _loaded(worker))
        async with asyncio.timeout(10):
            await worker.settled()


async def _loaded(worker: Worker) -> bool:
    return worker.feed.loaded.is_set()


@pytest.mark.parametrize(("expects", "after_restart"), [(True, REPLICAS), (False, 2 * REPLICAS)])
async def test_a_restarted_worker_keeps_waiting_for_its_own_creates(
    world: tuple[DevCluster, JetStreamContext, KubeApi, BusConfig],
    expects: bool,
    after_restart: int,
) -> None:
    """With expectations, the creates of the worker's first life still count after it restarts
    (exactly ``REPLICAS``); without them (the control) the same worker creates them again."""
    _, js, kube, bus = world
    template = await kube.create(
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxTemplate",
            "metadata": {"name": OWNER.name, "namespace": NS},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "b"}]}}},
        }
    )
    event = observed_event("added", template, time=datetime.now(UTC))
    await publish_event(js, event, bus)
    await state_table_copied(js, 1, bus)

    definition = WorkerDefinition(
        name="toypool",
        reconcilers=(reconciler_of(ChildrenPerTemplate(expects)),),
        watched_kinds=("SandboxTemplate", "Sandbox"),
        wakes=lambda kind, obj, cache: [key_of(obj, kind)] if kind == "SandboxTemplate" else [],
    )

    def worker() -> Worker:
        return Worker(definition, js=js, api=kube, bus=bus, settings=WorkerSettings(max_delay=1))

    await one_life(worker())
    assert len(await sandboxes(kube)) == REPLICAS

    restarted = worker()
    await one_life(restarted)
    assert len(await sandboxes(kube)) == after_restart
    if expects:
        record = (await restarted.memos.load())[OWNER]
        assert record.expectations is not None
        assert len(record.expectations.pending_names("Sandbox")) == REPLICAS


async def test_a_memo_that_does_not_decode_is_skipped_on_load(
    world: tuple[DevCluster, JetStreamContext, KubeApi, BusConfig],
) -> None:
    """Garbage on a worker's memo subject costs that key its memory, not the worker its start."""
    _, js, _, bus = world
    await js.publish("sandbus.memo.toypool.sandbox.default.x", b"{not json", stream=bus.memo_stream)
    good = KeyRecord(kind="Sandbox", namespace="default", name="y", memo={"n": 1})
    store = MemoStore(js, worker="toypool", bus=bus)
    await store.put(good)
    assert await store.load() == {good.key: good}
