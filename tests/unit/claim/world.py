"""A claim's world for the planner's tests: a pool, its template, pool members, claims, and a
small API server with a warm queue that carries out plans as the worker shell and the real
servers would.

The builders make objects as the API serves them (pool members through the pool's own
:func:`~services.domain.agentsandbox.blueprint.pool_sandbox`, cold sandboxes through the claim's own
:func:`~services.claim.core.cold.cold_sandbox`). :func:`observe` goes through the real
:func:`~services.claim.core.observation.observe_claim` on a real
:class:`~services.runtime.cache.ObjectCache`, so the planner sees what the worker would give it.

:class:`Cluster` is the fake the multi-pass tests and the property test run plans against:

- a Patch whose body carries ``metadata.resourceVersion``, or that is ``conditional``, is
  refused with 409 unless that is the stored version (a conditional patch is made on the
  version the plan's worker knows: the one it planned on, or its own last write's answer; with
  ``bus_caught_up`` the one stored now); a Patch of a missing object gets 404; a change bumps
  the resourceVersion, a no-op keeps it;
- a Create of an existing name gets AlreadyExists; a Delete with a stale uid gets 409, of a
  missing object counts as done;
- the warm queue is a FIFO of entries: Take pops the head and holds it for the claim (the plan
  stops and the claim is planned again with the entry offered), or finds it empty and lets the
  plan go on; Ack drops a held entry; Release puts it back at the head; Refresh is a read (the
  fake's view is never stale) that only records "gone" when the object is missing.

A plan stops where the shell stops it: at a refused write, at AlreadyExists, at a 404, at a
Refresh and at a Take that got an entry. ``fail_next`` makes a claim's next API write fail like
a 500. :meth:`Cluster.die` is a worker death: its flight ends and what it held comes back only
with :meth:`Cluster.redeliver`. :meth:`Cluster.pool_sync` is the pool worker: it queues every
Ready member not queued yet and purges the entries of members that are no longer adoptable (a
purged entry is never delivered again, even when a claim that held it releases it).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from api.keys import ANNOTATION_SANDBOX_NAME, name_hash
from api.objects import (
    Json,
    condition_of,
    controller_of,
    controller_reference,
    is_ready,
    metadata_of,
)
from events.envelope import ObjectKey, key_of
from events.subjects import warm_subject
from services.claim.core.adoption import adoptable_by
from services.claim.core.cold import cold_sandbox
from services.claim.core.observation import ClaimObservation, ClaimSettings, observe_claim
from services.claim.core.plan import plan_claim
from services.domain.agentsandbox.blueprint import pool_sandbox
from services.domain.agentsandbox.warmpool import template_ref_name
from services.domain.agentsandbox.warmqueue import Take
from services.runtime.cache import ObjectCache
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import (
    Ack,
    Action,
    Create,
    Delete,
    Patch,
    Plan,
    Record,
    Refresh,
    Release,
)
from services.runtime.reconcile.sources import SourceMessage
from tests.support.fakeapi import FROM_BODY, FakeApiServer
from tests.support.plans import actions_of
from tests.support.samples import stamp

NS = "default"
NOW = datetime(2026, 7, 19, 15, 27, 56, tzinfo=UTC)
POOL = "test-pool"
POOL_UID = "pool-uid"
TEMPLATE = "test-template"
CLAIM = "test-claim"
CLAIM_UID = "claim-uid"
IP = "10.244.0.5"
SETTINGS = ClaimSettings()
API_VERSION = "extensions.agents.x-k8s.io/v1beta1"


# -- builders -------------------------------------------------------------------------------


def template(name: str = TEMPLATE, *, pod_metadata: Json | None = None, **spec: Any) -> Json:
    pod_template: Json = {
        "spec": {"containers": [{"name": "test-container", "image": "test-image"}]},
    }
    if pod_metadata is not None:
        pod_template["metadata"] = pod_metadata
    spec.setdefault("podTemplate", pod_template)
    return {
        "apiVersion": API_VERSION,
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "2"},
        "spec": spec,
    }


def pool(
    name: str = POOL, *, template_name: str = TEMPLATE, uid: str = POOL_UID, strategy: str = ""
) -> Json:
    spec: Json = {"replicas": 2, "sandboxTemplateRef": {"name": template_name}}
    if strategy:
        spec["updateStrategy"] = {"type": strategy}
    return {
        "apiVersion": API_VERSION,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "resourceVersion": "3"},
        "spec": spec,
    }


def claim(
    name: str = CLAIM,
    *,
    uid: str | None = None,
    pool_name: str = POOL,
    created: datetime = NOW,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    status: Json | None = None,
    rv: str = "5",
    generation: int = 1,
    deleting: bool = False,
    **spec: Any,
) -> Json:
    metadata: Json = {
        "name": name,
        "namespace": NS,
        "uid": uid or (CLAIM_UID if name == CLAIM else f"{name}-uid"),
        "resourceVersion": rv,
        "generation": generation,
        "creationTimestamp": stamp(created),
    }
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if deleting:
        metadata["deletionTimestamp"] = stamp(NOW)
    obj: Json = {
        "apiVersion": API_VERSION,
        "kind": "SandboxClaim",
        "metadata": metadata,
        "spec": {"warmPoolRef": {"name": pool_name}, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def condition(
    kind: str = "Ready",
    status: str = "True",
    reason: str = "DependenciesReady",
    message: str = "Pod is Ready",
    *,
    at: datetime = NOW - timedelta(minutes=1),
    generation: int | None = None,
) -> Json:
    cond: Json = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp(at),
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def member(
    name: str,
    *,
    of_pool: Json | None = None,
    of_template: Json | None = None,
    ready: bool = True,
    ips: Iterable[str] = (IP,),
    rv: str = "10",
    uid: str | None = None,
    deleting: bool = False,
) -> Json:
    """A member of ``of_pool`` as its pool made it, Ready with a pod IP by default."""
    body = pool_sandbox(of_pool or pool(), of_template or template())
    meta = body["metadata"]
    del meta["generateName"]
    meta.update(name=name, uid=uid or f"uid-{name}", resourceVersion=rv)
    meta["creationTimestamp"] = stamp(NOW - timedelta(hours=1))
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
    status: Json = {"conditions": [condition(status="True" if ready else "False")]}
    addresses = list(ips)
    if addresses:
        status["podIPs"] = addresses
    body["status"] = status
    return body


def claim_reference(of_claim: Json) -> Json:
    meta = metadata_of(of_claim)
    return controller_reference(API_VERSION, "SandboxClaim", str(meta["name"]), str(meta["uid"]))


def owned_by(sandbox: Json, of_claim: Json) -> Json:
    """``sandbox`` with ``of_claim`` as its only controller (as an adoption leaves it)."""
    copied = copy.deepcopy(sandbox)
    copied["metadata"]["ownerReferences"] = [claim_reference(of_claim)]
    return copied


def cold(
    of_claim: Json,
    *,
    of_pool: Json | None = None,
    of_template: Json | None = None,
    rv: str = "20",
    conditions: Iterable[Json] = (),
    ips: Iterable[str] = (),
) -> Json:
    """The Sandbox ``of_claim`` created on the cold path, as the API server stored it."""
    body = cold_sandbox(of_claim, of_pool or pool(), of_template or template())
    name = body["metadata"]["name"]
    body["metadata"].update(uid=f"uid-{name}", resourceVersion=rv)
    status: Json = {}
    if conditions:
        status["conditions"] = list(conditions)
    if ips:
        status["podIPs"] = list(ips)
    if status:
        body["status"] = status
    return body


def entry(sandbox: Json, token: str | None = None, *, pool_name: str = POOL) -> SourceMessage:
    """The warm-queue message that offers ``sandbox`` (as the pool queued it), held for a claim."""
    meta = metadata_of(sandbox)
    name = str(meta["name"])
    return SourceMessage(
        source="warm",
        token=token or f"warm:{name}",
        subject=warm_subject(NS, name_hash(TEMPLATE), pool_name, "", name),
        data={"data": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}},
    )


def observe(
    *objects: Json,
    name: str = CLAIM,
    offers: Iterable[SourceMessage] = (),
    gone: Iterable[str] = (),
    settings: ClaimSettings = SETTINGS,
    last_error: str | None = None,
    failure_persists: bool = False,
) -> ClaimObservation:
    """What the claim worker would hand ``plan_claim`` for claim ``name``, given the objects
    its cache holds, the warm entries held for the claim, and the Sandbox names a read of ours
    found gone."""
    cache = ObjectCache()
    for obj in objects:
        cache.observe("added", copy.deepcopy(obj))
    for sandbox in gone:
        cache.remember_gone(ObjectKey("Sandbox", NS, sandbox))
    return observe_claim(
        ObjectKey("SandboxClaim", NS, name),
        cache,
        settings=settings,
        messages=tuple(offers),
        last_error=last_error,
        failure_persists=failure_persists,
    )


# -- reading plans --------------------------------------------------------------------------


def sandbox_creates(plan: Plan) -> list[Json]:
    return [a.body for a in actions_of(plan, Create) if a.body.get("kind") == "Sandbox"]


def event_reasons(plan: Plan) -> list[str]:
    return [a.body["reason"] for a in actions_of(plan, Create) if a.body.get("kind") == "Event"]


def sandbox_patches(plan: Plan, name: str | None = None) -> list[Patch]:
    return [
        a
        for a in actions_of(plan, Patch)
        if a.target.kind == "Sandbox" and (name is None or a.target.name == name)
    ]


def claim_patches(plan: Plan) -> list[Patch]:
    return [a for a in actions_of(plan, Patch) if a.target.kind == "SandboxClaim"]


def status_written(plan: Plan) -> Json | None:
    """The claim status the plan writes (None: it writes none)."""
    for action in claim_patches(plan):
        if action.subresource == "status":
            status: Json = action.patch["status"]
            return status
    return None


def ready_of(status: Mapping[str, Any] | None) -> Json | None:
    return condition_in(status, "Ready")


def finished_of(status: Mapping[str, Any] | None) -> Json | None:
    return condition_in(status, "Finished")


def condition_in(status: Mapping[str, Any] | None, kind: str) -> Json | None:
    """Condition ``kind`` of ``status`` (a copy; None: no such condition)."""
    found = condition_of({"status": status or {}}, kind)
    return None if found is None else dict(found)


def reason_in(status: Mapping[str, Any] | None, kind: str = "Ready") -> str | None:
    """The reason of condition ``kind`` in ``status`` (None: no such condition)."""
    cond = condition_in(status, kind)
    return None if cond is None else str(cond.get("reason"))


def bound_name(status: Mapping[str, Any] | None) -> str | None:
    return ((status or {}).get("sandbox") or {}).get("name")


def claim_controller(sandbox: Mapping[str, Any] | None) -> str | None:
    """The uid of the claim that controls ``sandbox`` (None: none does, or no Sandbox)."""
    owner = controller_of(sandbox) if sandbox is not None else None
    if owner is None or owner.get("kind") != "SandboxClaim":
        return None
    return str(owner.get("uid"))


# -- the fake cluster -----------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One warm-queue message: the incarnation of a member the pool queued."""

    token: str
    name: str
    uid: str
    resource_version: str


@dataclass
class Flight:
    """A plan being carried out, action by action, for one claim."""

    claim: str
    plan: Plan
    obs: ClaimObservation
    known: dict[ObjectKey, str]
    """The versions the claim's worker knows: those it planned on, then its writes' answers."""
    index: int = 0


class Refused(Exception):
    """A write the fake API server refused (the plan stops there)."""


@dataclass
class Cluster(FakeApiServer):
    """The fake API server (:class:`~tests.support.fakeapi.FakeApiServer`), the warm queue, and
    the claim and pool workers around them (see the module's text)."""

    carries_out = (Create, Patch, Delete)
    now: datetime = NOW
    settings: ClaimSettings = SETTINGS
    queue: list[Entry] = field(default_factory=list)
    held: dict[str, list[Entry]] = field(default_factory=dict)
    lost: list[Entry] = field(default_factory=list)
    """Entries a dead worker held: the stream delivers them again after the ack wait."""
    purged: set[str] = field(default_factory=set)
    queued: dict[str, str] = field(default_factory=dict)
    """The pool worker's memory: member name → uid of the incarnation it queued."""
    read_gone: dict[str, set[ObjectKey]] = field(default_factory=dict)
    events: list[Json] = field(default_factory=list)
    recorded: list[Record] = field(default_factory=list)
    """The metrics the claims' plans recorded, in order."""
    memos: dict[str, Any] = field(default_factory=dict)
    """Each claim's memo, as the worker keeps it: written when its plan is made."""
    writes: list[Action] = field(default_factory=list)
    refused: list[tuple[Action, str]] = field(default_factory=list)
    fail_next: set[str] = field(default_factory=set)
    bus_caught_up: bool = False
    _tokens: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- objects ----------------------------------------------------------------------------

    def new_uid(self, key: ObjectKey) -> str:
        return f"uid-{key.name}-{next(self._versions)}"

    def sandboxes(self) -> list[Json]:
        return [obj for key, obj in sorted(self.objects.items()) if key.kind == "Sandbox"]

    def claims(self) -> list[Json]:
        return [obj for key, obj in sorted(self.objects.items()) if key.kind == "SandboxClaim"]

    def delete(self, kind: str, name: str) -> None:
        self.objects.pop(ObjectKey(kind, NS, name), None)

    # -- the pool worker --------------------------------------------------------------------

    def enqueue(self, sandbox: Json) -> Entry:
        meta = metadata_of(sandbox)
        queued = Entry(
            token=f"t{next(self._tokens)}",
            name=str(meta["name"]),
            uid=str(meta["uid"]),
            resource_version=str(meta["resourceVersion"]),
        )
        self.queue.append(queued)
        self.queued[queued.name] = queued.uid
        return queued

    def offerable(self, name: str) -> Json | None:
        """The member named ``name`` if the pool would offer it (its own, Ready, not going)."""
        sandbox = self.get("Sandbox", name)
        if sandbox is None or not adoptable_by(sandbox, POOL) or not is_ready(sandbox):
            return None
        return sandbox

    def pool_sync(self) -> None:
        """The pool worker catches up: purge the entries of members it would not offer now,
        queue the members it would offer and has not queued."""
        for name, uid in sorted(self.queued.items()):
            sandbox = self.offerable(name)
            if sandbox is None or metadata_of(sandbox).get("uid") != uid:
                self.purge(name)
        for sandbox in self.sandboxes():
            name = str(metadata_of(sandbox)["name"])
            if name not in self.queued and self.offerable(name) is not None:
                self.enqueue(sandbox)

    def purge(self, name: str) -> None:
        """Remove every message of ``name``'s subject from the stream."""
        self.queued.pop(name, None)
        doomed = [e for e in [*self.queue, *self.lost, *self.all_held()] if e.name == name]
        self.purged.update(e.token for e in doomed)
        self.queue = [e for e in self.queue if e.name != name]
        self.lost = [e for e in self.lost if e.name != name]

    def all_held(self) -> list[Entry]:
        return [e for entries in self.held.values() for e in entries]

    # -- the claim worker -------------------------------------------------------------------

    def observe(self, name: str) -> ClaimObservation:
        cache = ObjectCache()
        for obj in self.objects.values():
            cache.observe("added", copy.deepcopy(obj))
        for key in self.read_gone.get(name, set()):
            if key not in self.objects:
                cache.remember_gone(key)
        messages = tuple(
            SourceMessage(
                source="warm",
                token=held.token,
                subject=warm_subject(NS, name_hash(TEMPLATE), POOL, "", held.name),
                data={"data": {"uid": held.uid, "resourceVersion": held.resource_version}},
            )
            for held in self.held.get(name, [])
        )
        return observe_claim(
            ObjectKey("SandboxClaim", NS, name),
            cache,
            settings=self.settings,
            messages=messages,
            memo=self.memos.get(name),
        )

    def start(self, name: str) -> Flight:
        obs = self.observe(name)
        plan = plan_claim(obs, self.now)
        self.memos[name] = plan.memo
        known = {
            key_of(obj): str(metadata_of(obj).get("resourceVersion") or "")
            for obj in self.objects.values()
        }
        return Flight(claim=name, plan=plan, obs=obs, known=known)

    def die(self, name: str) -> None:
        """The worker serving ``name`` dies: what it held comes back later, its cache is gone."""
        self.lost.extend(self.held.pop(name, []))
        self.read_gone.pop(name, None)

    def redeliver(self) -> bool:
        """The oldest entry a dead worker held is delivered again (at the head of the queue)."""
        while self.lost:
            back = self.lost.pop(0)
            if back.token not in self.purged:
                self.queue.insert(0, back)
                return True
        return False

    def step(self, flight: Flight) -> bool:
        """Carry out the flight's next action; False when the flight is over (done or
        stopped)."""
        if flight.index >= len(flight.plan.actions):
            return False
        action = flight.plan.actions[flight.index]
        flight.index += 1
        self.writes.append(action)
        try:
            go_on = self._execute(action, flight)
        except Refused as refusal:
            self.refused.append((action, str(refusal)))
            return False
        return go_on and flight.index < len(flight.plan.actions)

    def run(self, flight: Flight) -> Flight:
        while self.step(flight):
            pass
        return flight

    def reconcile(self, name: str, *, passes: int = 12) -> list[Plan]:
        """Plan and carry out passes for claim ``name`` the way the worker would, until a pass
        writes nothing (its plan has no actions); returns the plans."""
        plans: list[Plan] = []
        for _ in range(passes):
            flight = self.start(name)
            plans.append(flight.plan)
            if not flight.plan.actions:
                return plans
            self.run(flight)
        raise AssertionError(f"claim {name} did not settle in {passes} passes: {plans}")

    # -- executing one action ---------------------------------------------------------------

    def _api_write(self, flight: Flight) -> None:
        if flight.claim in self.fail_next:
            self.fail_next.discard(flight.claim)
            raise Refused("500 InternalError (injected)")

    def _execute(self, action: Action, flight: Flight) -> bool:
        if isinstance(action, self.carries_out):
            return self._write(action, flight)
        if isinstance(action, Take):
            if not self.queue:
                return True
            self.held.setdefault(flight.claim, []).append(self.queue.pop(0))
            return False
        if isinstance(action, Ack | Release):
            return self._settle(action, flight)
        if isinstance(action, Record):
            self.recorded.append(action)
            return True
        if isinstance(action, Refresh):
            if action.target not in self.objects:
                self.read_gone.setdefault(flight.claim, set()).add(action.target)
            return False
        raise AssertionError(f"the fake does not carry out {action!r}")

    def _settle(self, action: Ack | Release, flight: Flight) -> bool:
        held = self.held.get(flight.claim, [])
        found = next((e for e in held if e.token == action.token), None)
        if found is None:
            raise Refused(f"message {action.token} is not held here")
        held.remove(found)
        if isinstance(action, Release) and found.token not in self.purged:
            self.queue.insert(0, found)
        return True

    def _write(self, action: Create | Patch | Delete, flight: Flight) -> bool:
        """One write to the API server: False when it stops the plan without failing it (the
        shell reads the object and plans again: AlreadyExists, NotFound)."""
        if isinstance(action, Create) and action.body.get("kind") == "Event":
            self.events.append(copy.deepcopy(action.body))
            return True
        self._api_write(flight)
        try:
            if isinstance(action, Create):
                created = self.create_object(action.body)
                flight.known[key_of(created)] = created["metadata"]["resourceVersion"]
            elif isinstance(action, Patch):
                precondition = FROM_BODY
                if action.conditional and action.target in self.objects:
                    precondition = (
                        self.objects[action.target]["metadata"]["resourceVersion"]
                        if self.bus_caught_up
                        else flight.known.get(action.target)
                    )
                    if not precondition:
                        raise Refused("no known version to make the patch conditional on")
                written = self.patch_object(
                    action.target,
                    action.patch,
                    subresource=action.subresource,
                    precondition=precondition,
                )
                flight.known[action.target] = written["metadata"]["resourceVersion"]
            else:
                existed = action.target in self.objects
                self.delete_object(
                    action.target, uid=action.uid, resource_version=action.resource_version
                )
                if existed:
                    self.read_gone.setdefault(flight.claim, set()).add(action.target)
        except KubeError as error:
            if error.already_exists:
                self.refused.append((action, "409 AlreadyExists"))
                return False
            if error.not_found:
                self.read_gone.setdefault(flight.claim, set()).add(action.target)
                self.refused.append((action, "404 NotFound"))
                return False
            raise Refused(f"{error.status} {error.reason}: {error.message}") from None
        return True


def assigned(of_claim: Mapping[str, Any]) -> str | None:
    annotations = metadata_of(of_claim).get("annotations") or {}
    value = annotations.get(ANNOTATION_SANDBOX_NAME)
    return str(value) if value else None


def world(*objs: Json) -> Cluster:
    """A cluster with the default pool and template and ``objs``."""
    return Cluster().add(pool(), template(), *objs)


def template_hash_of(of_pool: Json) -> str:
    return name_hash(template_ref_name(of_pool))
