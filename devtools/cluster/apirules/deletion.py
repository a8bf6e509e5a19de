"""What a DELETE does to an object, decided as a pure function (the functional core).

:func:`plan_delete` reproduces the generic registry's ``Delete`` (``store.go``), with
``rest.BeforeDelete`` and ``updateForGracefulDeletionAndFinalizers``, plus the two registries
that override it here (namespaces, CRDs). Given the live object and the DeleteOptions it returns
a :class:`DeletePlan`: whether the deletion is already pending (nothing changes), whether the
object must be written (deletionTimestamp, grace period, finalizers) and whether it must then be
removed. The rules, in upstream order:

1. Preconditions (uid, resourceVersion) → 409 Conflict naming the Kind, as BeforeDelete does.
2. Graceful kinds (Pods): a first DELETE sets ``deletionTimestamp = now + period`` and
   ``deletionGracePeriodSeconds = period`` (generation +1 if set); a later DELETE may only
   shorten the period; otherwise it is a no-op ("pending graceful").
3. The garbage-collector finalizers follow the propagation policy: ``orphan`` (Orphan, or the
   kind's default, e.g. batch/v1 Jobs), ``foregroundDeletion`` (Foreground), neither
   (Background); an explicit policy replaces what the object carried.
4. With finalizers left the object is only marked (``deletionTimestamp`` now, grace 0,
   generation +1); without, a non-graceful object — or a graceful one whose period is 0 — is
   removed.

Namespaces go Terminating instead (the namespace controller finishes them); a CRD's first DELETE
adds its cleanup finalizer and a Terminating condition.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from api.objects import Json
from devtools.cluster.apirules import errors
from devtools.cluster.apirules.crds import mark_terminating
from devtools.cluster.apirules.errors import Cause, field_invalid
from devtools.cluster.apirules.meta import FINALIZER_FOREGROUND, FINALIZER_ORPHAN, now_rfc3339
from devtools.cluster.apirules.resources import ResourceType
from devtools.cluster.storage.jsontree import copy_stored

__all__ = [
    "DeletePlan",
    "plan_delete",
    "should_delete_during_update",
    "validate_delete_options",
]

_PROPAGATION = ("Orphan", "Background", "Foreground")
CRD_STORAGE = "customresourcedefinitions.apiextensions.k8s.io"


@dataclass
class DeletePlan:
    obj: Json  # the object to write (or, when pending, as it is)
    pending: bool = False  # deletion already in progress: change nothing
    write: bool = False  # persist ``obj`` (a MODIFIED event)
    remove: bool = False  # then remove the object (a DELETED event)


def _parse_time(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def validate_delete_options(options: Json) -> None:
    """ValidateDeleteOptions: 422 on DeleteOptions, 400 for a malformed grace period."""
    causes: list[Cause] = []
    policy = options.get("propagationPolicy")
    if policy is not None and policy not in _PROPAGATION:
        causes.append(errors.field_not_supported("propagationPolicy", policy, _PROPAGATION))
    if policy is not None and options.get("orphanDependents") is not None:
        causes.append(
            field_invalid(
                "propagationPolicy",
                policy,
                "orphanDependents and deletionPropagation cannot be both set",
            )
        )
    grace = options.get("gracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
        raise errors.bad_request(
            "json: cannot unmarshal into Go struct field DeleteOptions.gracePeriodSeconds of "
            "type int64"
        )
    if causes:
        raise errors.invalid("meta.k8s.io", "DeleteOptions", "", causes)


def should_delete_during_update(new: Json, old: Json) -> bool:
    """ShouldDeleteDuringUpdate: the last finalizer left an object whose deletion is due."""
    if new["metadata"].get("finalizers"):
        return False
    old_meta = old["metadata"]
    if not old_meta.get("deletionTimestamp"):
        return False
    return not old_meta.get("deletionGracePeriodSeconds")


def _check_preconditions(rtype: ResourceType, obj: Json, preconditions: Json) -> None:
    meta = obj["metadata"]
    uid = preconditions.get("uid")
    if uid is not None and uid != meta.get("uid"):
        raise errors.conflict(
            rtype.group,
            rtype.kind,
            meta["name"],
            f"the UID in the precondition ({uid}) does not match the UID in record "
            f"({meta.get('uid')}). The object might have been deleted and then recreated",
        )
    rv = preconditions.get("resourceVersion")
    if rv is not None and rv != meta.get("resourceVersion"):
        raise errors.conflict(
            rtype.group,
            rtype.kind,
            meta["name"],
            f"the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion "
            f"in record ({meta.get('resourceVersion')}). The object might have been modified",
        )


def gc_finalizers(default_orphan: bool, meta: Json, options: Json) -> tuple[bool, list[str]]:
    """deletionFinalizersForGarbageCollection: which of orphan/foregroundDeletion to carry."""
    current = list(meta.get("finalizers") or [])
    orphan_option = options.get("orphanDependents")
    policy = options.get("propagationPolicy")

    if orphan_option is not None:
        orphan = bool(orphan_option)
    elif policy in _PROPAGATION:
        orphan = policy == "Orphan"
    elif FINALIZER_ORPHAN in current or FINALIZER_FOREGROUND in current:
        orphan = FINALIZER_ORPHAN in current
    else:
        orphan = default_orphan

    if orphan_option is not None:
        foreground = False
    elif policy in _PROPAGATION:
        foreground = policy == "Foreground"
    else:
        foreground = FINALIZER_FOREGROUND in current and FINALIZER_ORPHAN not in current

    kept = [f for f in current if f not in (FINALIZER_ORPHAN, FINALIZER_FOREGROUND)]
    if orphan:
        kept.append(FINALIZER_ORPHAN)
    if foreground:
        kept.append(FINALIZER_FOREGROUND)
    if set(kept) == set(current):
        return False, current
    return True, kept


def _mark_as_deleting(meta: Json, now: str) -> None:
    if not meta.get("deletionTimestamp") and meta.get("generation"):
        meta["generation"] += 1
    existing = meta.get("deletionTimestamp")
    if not existing or existing > now:
        meta["deletionTimestamp"] = now
    meta["deletionGracePeriodSeconds"] = 0


def _plan_namespace(obj: Json, options: Json, now: str) -> DeletePlan:
    """``registry/core/namespace`` Delete: Terminating first, removal once nothing holds it."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp"):
        meta["deletionTimestamp"] = now
        meta["deletionGracePeriodSeconds"] = 0
        obj.setdefault("status", {})["phase"] = "Terminating"
    changed, finalizers = gc_finalizers(False, meta, options)
    if changed:
        meta["finalizers"] = finalizers
    held = bool((obj.get("spec") or {}).get("finalizers") or meta.get("finalizers"))
    return DeletePlan(obj, write=held, remove=not held)


def plan_delete(rtype: ResourceType, live: Json, options: Json, *, now: datetime) -> DeletePlan:
    """Decide what a DELETE with ``options`` does to ``live`` (which is not modified)."""
    obj = copy_stored(live)
    meta = obj["metadata"]
    stamp = now_rfc3339(now)
    strategy = rtype.strategy
    _check_preconditions(rtype, obj, options.get("preconditions") or {})
    requested = options.get("gracePeriodSeconds")
    if isinstance(requested, int) and requested < 0:
        requested = 1  # negative grace periods count as 1 s

    graceful = False
    period = 0
    if strategy.graceful:
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and current:
            if requested is None or requested >= current:
                return DeletePlan(copy_stored(live), pending=True)
            start = _parse_time(meta["deletionTimestamp"]) - timedelta(seconds=current)
            meta["deletionTimestamp"] = now_rfc3339(start + timedelta(seconds=requested))
            meta["deletionGracePeriodSeconds"] = requested
            graceful, period = True, requested
        elif not meta.get("deletionTimestamp"):
            period = strategy.grace_period(obj, requested)
            meta["deletionTimestamp"] = now_rfc3339(now + timedelta(seconds=period))
            meta["deletionGracePeriodSeconds"] = period
            if meta.get("generation"):
                meta["generation"] += 1
            graceful = True

    if rtype.storage == "namespaces":
        return _plan_namespace(obj, options, stamp)
    if rtype.storage == CRD_STORAGE and not meta.get("deletionTimestamp"):
        mark_terminating(obj, stamp)

    changed, finalizers = gc_finalizers(strategy.default_orphan, meta, options)
    if changed:
        meta["finalizers"] = finalizers
    held = bool(meta.get("finalizers"))
    if graceful:
        return DeletePlan(obj, write=True, remove=not held and period == 0)
    if held:
        _mark_as_deleting(meta, stamp)
        return DeletePlan(obj, write=True)
    return DeletePlan(obj, remove=True)
