"""Everything a worker's modules need from the runtime, in one place.

A worker's ``worker.py`` declares its :class:`WorkerDefinition`: a :class:`Reconciler` per kind
(observe reads an :class:`Observed`; tracing asks for a :class:`ReconcileSpan`), its wakes as
rules (:class:`Wakes` of :func:`wake_self`, :func:`wake_owner`, :func:`wake_named`,
:func:`wake_label`, :func:`wake_referrers`, or a :class:`Wake` of its own), the executors of its
own action kinds (:class:`Executed`, :class:`ExecutionContext`; the warm queues' are
:data:`WARM_EXECUTORS` and :class:`WarmTaker`) and its :class:`Gauge` readings. Its
``service.py`` reads its settings with :func:`setting` and runs it with :func:`serve_worker`.
docs/writing-a-worker.md walks through one.

Its planners (``core/``) import none of this: they are pure, and take their vocabulary from
:mod:`services.runtime.reconcile.actions`.
"""

from services.runtime.bus import BusConfig
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.definition import (
    Gauge,
    Observed,
    Reconciler,
    WorkerDefinition,
    WorkerSettings,
)
from services.runtime.reconcile.executing import Executed, ExecutionContext
from services.runtime.reconcile.serving import WorkerService, serve_worker
from services.runtime.reconcile.tracing import ReconcileSpan
from services.runtime.reconcile.wakes import (
    Wake,
    Wakes,
    controller_name,
    wake_label,
    wake_named,
    wake_owner,
    wake_referrers,
    wake_self,
)
from services.runtime.reconcile.warm import WARM_EXECUTORS, WarmTaker
from services.runtime.settings import Settings, setting

__all__ = [
    "WARM_EXECUTORS",
    "BusConfig",
    "Executed",
    "ExecutionContext",
    "Gauge",
    "ObjectCache",
    "Observed",
    "ReconcileSpan",
    "Reconciler",
    "Settings",
    "Wake",
    "Wakes",
    "WarmTaker",
    "WorkerDefinition",
    "WorkerService",
    "WorkerSettings",
    "controller_name",
    "serve_worker",
    "setting",
    "wake_label",
    "wake_named",
    "wake_owner",
    "wake_referrers",
    "wake_self",
]
