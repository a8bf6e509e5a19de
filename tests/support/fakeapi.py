"""One fake API server for the planner tests: objects in memory, and a plan's writes carried out
on them as a Kubernetes API server carries them out.

A planner test builds the objects, plans, hands the plan's actions to :class:`FakeApiServer`
and plans again on what it stored, until nothing is left to do. What the server does with each
write (:meth:`FakeApiServer.write`):

- a Create gets AlreadyExists (409) for a name that is taken; otherwise the object gets its name
  (from ``generateName``), a uid, a resourceVersion, and the server's time as its
  creationTimestamp when the server has a clock (``now``);
- a Patch is a JSON merge patch (RFC 7386, :func:`apply_merge_patch`) of the object without its
  ``status``, or, for the status subresource, of its ``status`` only. A patch whose body
  carries ``metadata.resourceVersion``, or a ``conditional`` one (made on the version the
  writer knows: ``known``), gets 409 Conflict unless that is the stored version; the version in
  the patch is a precondition, never stored. A patch of a missing object gets 404;
- a Replace (PUT) with a stale ``metadata.resourceVersion`` gets 409; without one it is
  unconditional for built-in kinds and refused (422 Invalid) for custom resources;
- a Delete whose ``uid`` or ``resource_version`` does not match gets 409; of a missing object it
  is done already (the worker shell counts it done);
- a write that changes something bumps the resourceVersion (from one counter, from 100 up); a
  write that changes nothing keeps it, as on a real server.

The errors are :class:`~services.runtime.kube.KubeError`, worded as the API server words them.
A world adds what its tests need by overriding the hooks: :meth:`~FakeApiServer.new_uid`,
:meth:`~FakeApiServer.new_name`, :meth:`~FakeApiServer.admitted` (a created Pod is Pending),
:meth:`~FakeApiServer.deleting` (graceful deletion, finalizers, garbage collection) and
:meth:`~FakeApiServer.changed` (an object whose last finalizer went); and by narrowing
``carries_out`` to the action kinds its planner may write.

:func:`apply_merge_patch` is written out here, independently of the code under test.
:class:`ScriptedApi`, at the end, is something else: the worker shell's async stand-in, whose
answers a test scripts.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Self

from api.kinds import ALL_KINDS
from api.objects import Json
from events.envelope import ObjectKey, key_of
from services.runtime.kube import KubeError, resource_for
from services.runtime.reconcile.actions import Create, Delete, Patch, Replace
from tests.support.samples import NS, stamp

__all__ = [
    "CUSTOM_KINDS",
    "FROM_BODY",
    "MODIFIED",
    "FakeApiServer",
    "ScriptedApi",
    "already_exists",
    "apply_merge_patch",
    "conflict",
    "not_found",
]

MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
CUSTOM_KINDS = frozenset(kind.KIND.kind for kind in ALL_KINDS)
"""Kinds served from a CRD: a PUT without a resourceVersion is refused for them."""

FROM_BODY: Any = object()
"""The default precondition of a patch: the resourceVersion its body names, if any."""


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the JSON merge patch ``patch`` applied (RFC 7386: objects merge, a null
    removes, anything else, lists included, replaces), as a new value; neither is changed."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = apply_merge_patch(result.get(name), value)
    return result


# -- the API server's answers ----------------------------------------------------------------------


def _plural(kind: str) -> str:
    try:
        resource = resource_for(kind)
    except KubeError:
        return f"{kind.lower()}s"
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def not_found(key: ObjectKey) -> KubeError:
    """404 NotFound as the API server words it."""
    return KubeError(404, "NotFound", f'{_plural(key.kind).split(".")[0]} "{key.name}" not found')


def already_exists(key: ObjectKey) -> KubeError:
    """409 AlreadyExists as the API server words it."""
    plural = _plural(key.kind).split(".")[0]
    return KubeError(409, "AlreadyExists", f'{plural} "{key.name}" already exists')


def conflict(key: ObjectKey, why: str = MODIFIED) -> KubeError:
    """409 Conflict as the API server words it (``errors.NewConflict``)."""
    return KubeError(
        409, "Conflict", f'Operation cannot be fulfilled on {_plural(key.kind)} "{key.name}": {why}'
    )


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _without_version(obj: Json) -> Json:
    bare = copy.deepcopy(obj)
    bare.get("metadata", {}).pop("resourceVersion", None)
    return bare


# -- the server ------------------------------------------------------------------------------------


@dataclass
class FakeApiServer:
    """Objects by key, and the writes of a plan carried out on them (see the module's text)."""

    carries_out: ClassVar[tuple[type, ...]] = (Create, Patch, Replace, Delete)
    """The action kinds :meth:`write` carries out; any other is a test's mistake."""
    bumps_generation: ClassVar[bool] = False
    """Does a change of ``spec`` bump ``metadata.generation`` (as for custom resources)?"""

    objects: dict[ObjectKey, Json] = field(default_factory=dict)
    now: datetime | None = None
    """The server's clock, for creationTimestamps (None: none are written)."""
    _versions: itertools.count[int] = field(
        default_factory=lambda: itertools.count(100), repr=False
    )
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    # -- objects -------------------------------------------------------------------------------

    def add(self, *objs: Json) -> Self:
        """Store ``objs`` as they are (copies), as if they had been there all along."""
        for obj in objs:
            self.objects[key_of(obj)] = copy.deepcopy(obj)
        return self

    def get(self, kind: str, name: str, namespace: str = NS) -> Json | None:
        return self.objects.get(ObjectKey(kind, namespace, name))

    def must(self, kind: str, name: str, namespace: str = NS) -> Json:
        """The stored object, which must exist."""
        found = self.get(kind, name, namespace)
        assert found is not None, f"{kind} {name} does not exist"
        return found

    def bump(self, obj: Json) -> Json:
        """Give ``obj`` the next resourceVersion."""
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return obj

    # -- hooks ---------------------------------------------------------------------------------

    def new_name(self, generate_name: str) -> str:
        """The name of a created object that asks for one with ``generateName``."""
        return f"{generate_name}{next(self._names):05d}"

    def new_uid(self, key: ObjectKey) -> str:
        """The uid of a created object."""
        return f"uid-{key.name}"

    def admitted(self, body: Json) -> None:
        """What else the server sets on a created object before it stores it."""

    def deleting(self, key: ObjectKey) -> None:
        """Delete ``key`` (its preconditions held): at once, unless a world says otherwise."""
        del self.objects[key]

    def changed(self, key: ObjectKey) -> None:
        """After a write changed ``key`` (a world may finish a deletion here)."""

    # -- writes --------------------------------------------------------------------------------

    def write(self, action: Any, known: MutableMapping[ObjectKey, str] | None = None) -> None:
        """Carry out one write, or raise a :class:`KubeError` as the API server would answer.

        ``known`` is what the writer knows of each object's version: a ``conditional`` Patch is
        made on it, and each write's answer goes into it."""
        if not isinstance(action, self.carries_out):
            raise AssertionError(f"the fake API server does not carry out {action!r}")
        if isinstance(action, Create):
            answer = self.create_object(action.body)
        elif isinstance(action, Patch):
            precondition = FROM_BODY
            if action.conditional and known is not None:
                precondition = known.get(action.target)
            answer = self.patch_object(
                action.target,
                action.patch,
                subresource=action.subresource,
                precondition=precondition,
            )
        elif isinstance(action, Replace):
            answer = self.replace_object(action.body)
        else:
            self.delete_object(
                action.target, uid=action.uid, resource_version=action.resource_version
            )
            return
        if known is not None:
            known[key_of(answer)] = _version(answer)

    def create_object(self, body: Json) -> Json:
        """POST ``body``; the object as stored."""
        body = copy.deepcopy(body)
        meta = body["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self.new_name(meta.pop("generateName"))
        key = key_of(body)
        if key in self.objects:
            raise already_exists(key)
        meta["uid"] = self.new_uid(key)
        if self.now is not None:
            meta["creationTimestamp"] = stamp(self.now)
        self.admitted(body)
        self.objects[key] = self.bump(body)
        return body

    def patch_object(
        self,
        key: ObjectKey,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
        precondition: str | None = FROM_BODY,
    ) -> Json:
        """A merge patch of ``key`` (of its ``status`` only, for the status subresource);
        ``precondition``: the version it is made on (by default the one its body names, if
        any). The object as written (as it was, for a patch that changes nothing)."""
        current = self.objects.get(key)
        if current is None:
            raise not_found(key)
        body = copy.deepcopy(dict(patch))
        named = (body.get("metadata") or {}).pop("resourceVersion", None)
        wanted = named if precondition is FROM_BODY else precondition
        if wanted and wanted != _version(current):
            raise conflict(key)
        if subresource == "status":
            body = {"status": body["status"]} if "status" in body else {}
        else:
            body.pop("status", None)
        written = apply_merge_patch(current, body)
        if self.bumps_generation and written.get("spec") != current.get("spec"):
            written["metadata"]["generation"] = int(current["metadata"].get("generation") or 0) + 1
        return self._store(key, current, written)

    def replace_object(self, body: Json) -> Json:
        """PUT ``body``; its ``metadata.resourceVersion`` is the precondition."""
        key = key_of(body)
        current = self.objects.get(key)
        if current is None:
            raise not_found(key)
        wanted = _version(body)
        if not wanted and key.kind in CUSTOM_KINDS:
            raise KubeError(
                422,
                "Invalid",
                f"{key.kind} {key.name!r}: metadata.resourceVersion: Invalid value: 0x0: "
                "must be specified for an update",
            )
        if wanted and wanted != _version(current):
            raise conflict(key)
        return self._store(key, current, copy.deepcopy(body))

    def delete_object(
        self, key: ObjectKey, *, uid: str | None = None, resource_version: str | None = None
    ) -> None:
        """DELETE ``key`` with its preconditions; of a missing object, nothing happens."""
        existing = self.objects.get(key)
        if existing is None:
            return
        found = str(existing["metadata"].get("uid") or "")
        if uid is not None and uid != found:
            raise conflict(
                key,
                f"the UID in the precondition ({uid}) does not match the UID in record ({found}). "
                "The object might have been deleted and then recreated",
            )
        version = _version(existing)
        if resource_version is not None and resource_version != version:
            raise conflict(
                key,
                f"the ResourceVersion in the precondition ({resource_version}) does not match "
                f"the ResourceVersion in record ({version}). The object might have been modified",
            )
        self.deleting(key)

    def _store(self, key: ObjectKey, current: Json, written: Json) -> Json:
        if _without_version(written) == _without_version(current):
            return current  # a no-op write: nothing stored, the resourceVersion stays
        self.objects[key] = self.bump(written)
        self.changed(key)
        return written


# -- the worker shell's stand-in ------------------------------------------------------------------


class ScriptedApi:
    """A :class:`~services.runtime.kube.KubeApi` stand-in for the tests of the worker shell
    (async, as the shell calls it): a store plus errors to raise, by (verb, name), and every
    call made. Every write succeeds unless a test scripts it to fail: those tests judge what
    the shell does with an answer, not the API server's rules, which :class:`FakeApiServer`
    keeps for the planner tests."""

    def __init__(self, *objs: dict[str, Any]) -> None:
        self.store = {
            ObjectKey(o["kind"], "ns", o["metadata"]["name"]): copy.deepcopy(o) for o in objs
        }
        self.errors: dict[tuple[str, str], KubeError] = {}
        self.calls: list[tuple[str, str]] = []
        self.version = 100

    def _fail(self, verb: str, name: str) -> None:
        self.calls.append((verb, name))
        error = self.errors.get((verb, name))
        if error is not None:
            raise error

    def _bump(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(body)

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        self._fail("create", body["metadata"]["name"])
        key = ObjectKey(body["kind"], "ns", body["metadata"]["name"])
        if key in self.store:
            raise KubeError(409, "AlreadyExists", f"{key} already exists")
        self.store[key] = copy.deepcopy(body)
        return self._bump(self.store[key])

    async def get(self, key: ObjectKey) -> dict[str, Any]:
        self._fail("get", key.name)
        if key not in self.store:
            raise KubeError(404, "NotFound", str(key))
        return copy.deepcopy(self.store[key])

    async def patch(
        self, key: ObjectKey, patch: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        self._fail("patch", key.name)
        if key not in self.store:
            raise KubeError(404, "NotFound", str(key))
        self.store[key] = apply_merge_patch(self.store[key], patch)
        return self._bump(self.store[key])

    async def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        self._fail("replace", body["metadata"]["name"])
        key = ObjectKey(body["kind"], "ns", body["metadata"]["name"])
        self.store[key] = copy.deepcopy(body)
        return self._bump(self.store[key])

    async def delete(self, key: ObjectKey, **_: Any) -> dict[str, Any]:
        self._fail("delete", key.name)
        if key not in self.store:
            raise KubeError(404, "NotFound", str(key))
        del self.store[key]
        return {"kind": "Status", "status": "Success"}
