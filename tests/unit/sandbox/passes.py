"""Passes of the sandbox worker's reconciler over a
:class:`~tests.unit.sandbox.samples.FakeCluster`, keeping its memo between passes as the
worker's shell keeps it per key: for the tests of the write-behind window and the status
window, which both run on that memo's clock."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Plan
from services.runtime.worker_api import Observed, Reconciler
from services.sandbox.core.observation import SandboxObservation
from tests.unit.sandbox.samples import (
    NOW,
    FakeCluster,
)

SB = ObjectKey("Sandbox", "default", "sb")


MEMOS: dict[tuple[int, int], tuple[Reconciler[SandboxObservation], FakeCluster, Any]] = {}
"""Each (reconciler, cluster)'s memo, as the worker's shell keeps it per key; the pair is kept
too, so that their ids cannot be reused by later objects."""


def reconcile(
    reconciler: Reconciler[SandboxObservation], cluster: FakeCluster, now: datetime
) -> Plan:
    """One pass through the worker's reconciler, keeping its memo (the write-behind clock)."""
    plan = reconciler.plan(
        reconciler.observe(SB, Observed(cluster.cache(), memo=memo_of(reconciler, cluster))), now
    )
    MEMOS[(id(reconciler), id(cluster))] = (reconciler, cluster, plan.memo)
    cluster.apply(plan)
    return plan


def memo_of(reconciler: Reconciler[SandboxObservation], cluster: FakeCluster) -> Any:
    """The memo the last :func:`reconcile` of this pair left (None: none yet)."""
    kept = MEMOS.get((id(reconciler), id(cluster)))
    return kept[2] if kept is not None else None


def at(seconds: float) -> datetime:
    """``seconds`` after the samples' NOW."""
    return NOW + timedelta(seconds=seconds)
