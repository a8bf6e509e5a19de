"""The Sandbox's lifecycle Events (upstream v1.0.4, #1532) as ``kubectl describe sandbox`` would
show them: read back through kubernetes_asyncio's ``events.k8s.io/v1`` client from the
development cluster, with the watcher, a real nats-server and the sandbox worker running. One
Event per step, however many passes the worker makes; none with the switch off
(``SANDBUS_SANDBOX_EVENTS=false``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from devtools.cluster.controllers.kubelet.config import FAIL_ANNOTATION
from services.runtime.kube import KubeApi
from services.runtime.reconcile.worker import Worker, WorkerSettings
from services.sandbox.core.plan import CONTROLLER_NAME
from services.sandbox.worker import sandbox_worker
from tests.support.samples import NS, condition, sandbox_body
from tests.support.stack import (
    Stack,
    api_client,
    bounded,
    cluster_and_watcher,
    loaded,
    ready_sandbox,
)
from tests.support.waiting import until


@contextlib.asynccontextmanager
async def stack_with(
    nats_url: str, tmp_path: Path, *, events: bool
) -> AsyncIterator[tuple[Stack, k8s.EventsV1Api]]:
    """The stack with the sandbox worker's Events on or off, and a client of the test's own."""
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, nc, js, bus),
        bounded(api_client(cluster, tmp_path, "worker"), "the worker's API client") as client,
        bounded(api_client(cluster, tmp_path, "reader"), "the test's API client") as reader,
    ):
        kube = KubeApi(client, field_manager=CONTROLLER_NAME)
        worker = Worker(
            sandbox_worker(events=events),
            js=js,
            api=kube,
            bus=bus,
            settings=WorkerSettings(concurrency=16, max_delay=2.0),
        )
        async with loaded(worker, "sandbox worker"):
            yield Stack(cluster, nc, js, kube, worker, bus), k8s.EventsV1Api(reader)


async def events_about(events: k8s.EventsV1Api, name: str) -> list[Any]:
    """The Events regarding Sandbox ``name``, oldest first."""
    listed = await events.list_namespaced_event(NS)
    return sorted(
        (
            e
            for e in listed.items
            if e.regarding is not None
            and e.regarding.kind == "Sandbox"
            and e.regarding.name == name
        ),
        key=lambda e: e.event_time,
    )


def reasons(found: list[Any]) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in found]


async def test_each_step_is_one_event(nats_url: str, tmp_path: Path) -> None:
    async with stack_with(nats_url, tmp_path, events=True) as (stack, events):
        await stack.create(sandbox_body("lively"))
        sandbox = await ready_sandbox(stack, "lively")

        async def announced() -> list[Any] | None:
            found = await events_about(events, "lively")
            return found if len(found) >= 2 else None

        found = await until(announced)
        assert reasons(found) == [("Normal", "SandboxPodCreated"), ("Normal", "SandboxReady")]
        created = found[0]
        assert created.reporting_controller == "sandbox-controller"
        assert created.action == "PodCreation" and created.note == 'Created Pod "lively"'
        assert created.regarding.uid == sandbox["metadata"]["uid"]

        await stack.patch("Sandbox", "lively", {"spec": {"operatingMode": "Suspended"}})

        async def suspended() -> list[Any] | None:
            found = await events_about(events, "lively")
            return found if len(found) >= 3 else None

        found = await until(suspended)
        assert reasons(found)[2:] == [("Normal", "SandboxSuspended")]
        # More passes (a label changed: the Sandbox is reconciled again) announce nothing new.
        await stack.patch("Sandbox", "lively", {"metadata": {"labels": {"touched": "yes"}}})
        await asyncio.sleep(1.0)
        assert len(await events_about(events, "lively")) == 3

        body = sandbox_body("crashy")
        body["spec"]["podTemplate"]["metadata"] = {"annotations": {FAIL_ANNOTATION: "exit-1"}}
        body["spec"]["podTemplate"]["spec"]["restartPolicy"] = "Never"
        await stack.create(body)

        async def failed() -> list[Any] | None:
            found = await events_about(events, "crashy")
            return found if ("Warning", "PodFailed") in reasons(found) else None

        found = await until(failed)
        assert reasons(found) == [("Normal", "SandboxPodCreated"), ("Warning", "PodFailed")]
        assert condition(await stack.get("Sandbox", "crashy")) == ("False", "PodFailed")


async def test_the_switch_off_writes_none(nats_url: str, tmp_path: Path) -> None:
    async with stack_with(nats_url, tmp_path, events=False) as (stack, events):
        await stack.create(sandbox_body("quiet"))
        await ready_sandbox(stack, "quiet")
        await stack.patch("Sandbox", "quiet", {"spec": {"operatingMode": "Suspended"}})

        async def suspended() -> bool:
            found = await stack.get("Sandbox", "quiet")
            return condition(found, "Suspended") == ("True", "PodTerminated")

        await until(suspended)
        await asyncio.sleep(0.5)
        assert await events_about(events, "quiet") == []


pytestmark = pytest.mark.timeout(120)
