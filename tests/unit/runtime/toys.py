"""Toy workers for the runtime's tests: a reconciler that gives every Widget a Pod
(:class:`PodPerWidget`, run by :func:`worker`), one whose plan is whatever the test sets
(:class:`Scripted`, run by :func:`make_worker`), both on the scripted API server and the fake
JetStream of tests/support, and the runtime's own executors for running a plan directly
(:func:`kube_writes`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Create, Patch, Plan
from services.runtime.reconcile.executing import (
    RUNTIME_EXECUTORS,
    ExecutionContext,
)
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import Observed, Reconciler, WorkerDefinition, WorkerSettings
from tests.support.fakeapi import ScriptedApi
from tests.support.fakebus import FakeJetStream, MemoJetStream
from tests.support.samples import obj


def kube_writes(api: Any, cache: ObjectCache) -> tuple[Any, ExecutionContext]:
    """The runtime's own executors and a context for them: ``execute(plan, *kube_writes(...))``."""
    return RUNTIME_EXECUTORS, ExecutionContext(api, cache)


NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WIDGET = ObjectKey("Widget", "ns", "w")
POD = ObjectKey("Pod", "ns", "w")


@dataclass
class PodPerWidget:
    """Toy reconciler: every Widget gets a Pod of its name; then the Widget is marked."""

    kind: str = "Widget"
    seen_errors: list[str | None] = field(default_factory=list)
    explode: bool = False
    always_write: bool = False
    expects: bool = False

    def reconciler(self) -> Reconciler[dict[str, Any]]:
        return Reconciler(self.kind, self.observe, self.plan, expects=self.expects)

    def observe(self, key: ObjectKey, observed: Observed) -> dict[str, Any]:
        self.seen_errors.append(observed.last_error)
        return {"widget": observed.cache.get(key), "pod": observed.cache.get(POD)}

    def plan(self, inputs: dict[str, Any], now: datetime) -> Plan:
        if self.explode:
            raise RuntimeError("bug")
        if inputs["widget"] is None:
            return Plan(reason="gone")
        if self.always_write:
            return Plan(
                actions=(Patch(WIDGET, {"metadata": {"labels": {"n": str(now)}}}),), requeue_after=0
            )
        if inputs["pod"] is None:
            return Plan(
                actions=(Create(obj("Pod", "w"), why="make the pod"),),
                requeue_after=0,
                reason="no pod",
            )
        return Plan(reason="has its pod", requeue_after=30)


def worker(reconciler: PodPerWidget, api: ScriptedApi, js: FakeJetStream | None = None) -> Worker:
    definition = WorkerDefinition(
        name="toy",
        reconcilers=(reconciler.reconciler(),),
        watched_kinds=("Widget", "Pod"),
        wakes=lambda kind, o, cache: [ObjectKey("Widget", "ns", o["metadata"]["name"])],
    )
    w = Worker(
        definition,
        js=js or FakeJetStream(),  # type: ignore[arg-type]
        api=api,  # type: ignore[arg-type]
        settings=WorkerSettings(base_delay=0.01, max_delay=1.0, max_write_passes=3),
        clock=lambda: NOW,
    )
    w.cache.observe("added", obj("Widget", "w"))
    w.feed.loaded.set()  # as after the state table's first load
    return w


@dataclass
class Scripted:
    """A reconciler whose plan is whatever the test sets; it keeps what observe was given."""

    plan_with: Any = None
    kind: str = "Widget"
    given: list[Observed] = field(default_factory=list)
    expects: bool = False

    def observe(self, key: ObjectKey, observed: Observed) -> dict[str, Any]:
        self.given.append(observed)
        widget = observed.cache.get(key)
        return {"widget": widget, "messages": [m.token for m in observed.messages]}

    def plan(self, inputs: dict[str, Any], now: datetime) -> Plan:
        return self.plan_with(inputs) if callable(self.plan_with) else Plan()

    def reconciler(self) -> Reconciler[dict[str, Any]]:
        return Reconciler(self.kind, self.observe, self.plan, expects=self.expects)


def make_worker(
    reconciler: Scripted,
    api: ScriptedApi | None = None,
    js: FakeJetStream | None = None,
    **definition: Any,
) -> Worker:
    w = Worker(
        WorkerDefinition(
            name="toy",
            reconcilers=(reconciler.reconciler(),),
            watched_kinds=("Widget",),
            wakes=lambda kind, o, cache: [],
            **definition,
        ),
        js=js or MemoJetStream(),  # type: ignore[arg-type]
        api=api or ScriptedApi(),  # type: ignore[arg-type]
        settings=WorkerSettings(base_delay=0.01, max_delay=1.0, keepalive=0.01),
        clock=lambda: NOW,
    )
    w.cache.observe("added", obj("Widget", "w"))
    return w
