"""The runtime beyond Kubernetes writes: registered action kinds, messages of further sources
acked by the plan, per-key memos kept ahead of the writes, expectations, and decisions that
record their inputs by reference."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import msgspec

from events.envelope import ObjectKey
from events.types import Outcome
from services.runtime.cache import ObjectCache
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import Ack, Create, Delete, Plan, plan_digest
from services.runtime.reconcile.executing import Executed, ExecutionContext
from services.runtime.reconcile.expectations import Expectations, answered, expect, settle
from services.runtime.reconcile.sources import Delivery, SourceMessage
from tests.support.fakeapi import ScriptedApi
from tests.support.fakebus import MemoJetStream
from tests.support.samples import obj
from tests.unit.runtime.toys import NOW, WIDGET, Scripted, make_worker


@dataclass(frozen=True)
class Stamp:
    """A worker's own action kind."""

    target: ObjectKey
    text: str
    why: str = ""
    step: str = ""
    verb = "stamp"


@dataclass(frozen=True)
class Unregistered:
    target: ObjectKey
    why: str = ""
    step: str = ""
    verb = "mystery"


@dataclass
class FakeHandle:
    acked: int = 0
    progressed: int = 0
    nacked: int = 0
    fail: bool = False

    async def ack_sync(self, timeout: float = 1.0) -> None:  # noqa: ASYNC109 (nats-py's)
        if self.fail:
            raise TimeoutError("no ack confirmation")
        self.acked += 1

    async def in_progress(self) -> None:
        self.progressed += 1

    async def nak(self) -> None:
        self.nacked += 1


# --- action kinds -----------------------------------------------------------------------


async def test_a_registered_action_runs_through_its_executor() -> None:
    stamped: list[str] = []

    async def stamp(action: Stamp, context: ExecutionContext) -> Executed:
        assert isinstance(context.cache, ObjectCache)
        stamped.append(action.text)
        return Executed(note="stamped")

    reconciler = Scripted(lambda _: Plan(actions=(Stamp(WIDGET, "hello", why="say it"),)))
    w = make_worker(reconciler, executors={Stamp: stamp})
    decision = await w.reconcile(WIDGET)
    assert stamped == ["hello"]
    assert decision.outcome == Outcome.APPLIED
    assert [(a.verb, str(a.target), a.detail) for a in decision.actions] == [
        ("stamp", "Widget/ns/w", "say it; stamped")
    ]


async def test_an_action_without_an_executor_fails_the_pass_and_stops_it() -> None:
    api = ScriptedApi()
    reconciler = Scripted(
        lambda _: Plan(actions=(Unregistered(WIDGET), Create(obj("Pod", "p"))), requeue_after=0)
    )
    decision = await make_worker(reconciler, api).reconcile(WIDGET)
    assert decision.outcome == Outcome.FAILED
    assert decision.error == "mystery Widget/ns/w: no executor is registered for Unregistered"
    assert len(decision.actions) == 1, "the create after it was not attempted"
    assert api.calls == []


async def test_an_executor_that_raises_anything_is_a_recorded_failure() -> None:
    async def broken(action: Stamp, context: ExecutionContext) -> Executed:
        raise ConnectionResetError("peer went away")

    w = make_worker(
        Scripted(lambda _: Plan(actions=(Stamp(WIDGET, "x"),))), executors={Stamp: broken}
    )
    decision = await w.reconcile(WIDGET)
    assert decision.outcome == Outcome.FAILED
    assert decision.error == "stamp Widget/ns/w: peer went away"
    assert WIDGET in w.queue.scheduled, "backed off, not escaped"


async def test_a_replica_that_stopped_leading_acts_no_more_and_keeps_no_memo() -> None:
    """Its memory is written ahead of the actions, and a new leader may read it already: a
    "queued" memo for an entry never queued kept a pool member off its queue for good (found
    by the chaos soak)."""
    api = ScriptedApi()
    js = MemoJetStream()
    plan = Plan(actions=(Create(obj("Pod", "p")),), memo={"queued": True})
    w = make_worker(Scripted(lambda _: plan), api, js)
    w.may_act = lambda: False
    decision = await w.reconcile(WIDGET)
    assert decision.error == "this replica does not lead any more"
    assert api.calls == []
    assert js.memos == []


# --- messages of further sources --------------------------------------------------------


def delivery(token: str, handle: FakeHandle, key: ObjectKey = WIDGET) -> Delivery:
    message = SourceMessage(source="queue", token=token, subject="q.w", data={"n": token})
    return Delivery(key, message, handle)


async def test_a_message_is_joined_to_its_key_and_acked_by_the_plan_after_the_writes() -> None:
    api = ScriptedApi()
    handle = FakeHandle()

    def plan(inputs: dict[str, Any]) -> Plan:
        acks = tuple(Ack("queue", token, WIDGET) for token in inputs["messages"])
        return Plan(actions=(Create(obj("Pod", "p")), *acks))

    reconciler = Scripted(plan)
    w = make_worker(reconciler, api)
    w.take_delivery(delivery("S:7", handle))
    key, triggers = await w.queue.get()
    assert key == WIDGET and triggers == ("S:7",)
    decision = await w.reconcile(WIDGET)
    assert [a.verb for a in decision.actions] == ["create", "ack"]
    assert handle.acked == 1 and w._room() == w.settings.max_held
    assert decision.inputs is not None
    assert [m.token for m in decision.inputs.messages] == ["S:7"]


async def test_a_failed_write_leaves_the_message_held_for_the_retry() -> None:
    api = ScriptedApi()
    api.errors[("create", "p")] = TimeoutError("slow")  # type: ignore[assignment]
    handle = FakeHandle()
    reconciler = Scripted(
        lambda inputs: Plan(
            actions=(
                Create(obj("Pod", "p")),
                *(Ack("queue", t, WIDGET) for t in inputs["messages"]),
            )
        )
    )
    w = make_worker(reconciler, api)
    w.take_delivery(delivery("S:7", handle))
    failed = await w.reconcile(WIDGET)
    assert failed.outcome == Outcome.FAILED and handle.acked == 0
    del api.errors[("create", "p")]
    await w.reconcile(WIDGET)
    assert handle.acked == 1
    assert [m.token for m in reconciler.given[1].messages] == ["S:7"], "held across the retry"


async def test_a_redelivery_while_held_replaces_the_handle_and_is_one_message() -> None:
    old, new = FakeHandle(), FakeHandle()
    reconciler = Scripted(
        lambda inputs: Plan(actions=tuple(Ack("queue", t, WIDGET) for t in inputs["messages"]))
    )
    w = make_worker(reconciler)
    w.take_delivery(delivery("S:7", old))
    w.take_delivery(delivery("S:7", new))
    await w.reconcile(WIDGET)
    assert (old.acked, new.acked) == (0, 1)


async def test_an_unconfirmed_ack_is_a_failure_and_the_message_stays() -> None:
    handle = FakeHandle(fail=True)
    reconciler = Scripted(
        lambda inputs: Plan(actions=tuple(Ack("queue", t, WIDGET) for t in inputs["messages"]))
    )
    w = make_worker(reconciler)
    w.take_delivery(delivery("S:7", handle))
    decision = await w.reconcile(WIDGET)
    assert decision.outcome == Outcome.FAILED
    assert w._room() == w.settings.max_held - 1


async def test_an_ack_of_a_message_not_held_is_a_failure() -> None:
    """A plan may only ack what this replica holds (another replica may have it now)."""
    reconciler = Scripted(lambda _: Plan(actions=(Ack("queue", "S:9", WIDGET),)))
    decision = await make_worker(reconciler).reconcile(WIDGET)
    assert decision.outcome == Outcome.FAILED
    assert decision.error == "ack Widget/ns/w: message S:9 of queue is not held here"


async def test_held_messages_are_kept_alive_and_handed_back_on_stop() -> None:
    handle = FakeHandle()
    w = make_worker(Scripted())
    w.take_delivery(delivery("S:7", handle))
    keeping = asyncio.create_task(w._held.keep_alive())
    await asyncio.sleep(0.05)
    keeping.cancel()
    await asyncio.gather(keeping, return_exceptions=True)
    assert handle.progressed >= 2
    await w._held.hand_back()
    assert handle.nacked == 1 and w._room() == w.settings.max_held


# --- memos --------------------------------------------------------------------------------


class Clock(msgspec.Struct, frozen=True):
    since: datetime


async def test_a_memo_is_written_ahead_and_handed_to_the_next_observe() -> None:
    js = MemoJetStream()
    reconciler = Scripted(lambda _: Plan(memo=Clock(NOW)))
    w = make_worker(reconciler, js=js)
    await w.reconcile(WIDGET)
    await w.reconcile(WIDGET)
    assert reconciler.given[0].memo is None
    assert reconciler.given[1].memo == {"since": "2026-03-01T12:00:00Z"}
    assert len(js.memos) == 1, "an unchanged memo is not written again"
    subject, payload = js.memos[0]
    assert subject == "sandbus.memo.toy.widget.ns.w"
    assert msgspec.json.decode(payload)["memo"] == {"since": "2026-03-01T12:00:00Z"}

    reconciler.plan_with = lambda _: Plan()
    await w.reconcile(WIDGET)
    assert js.memos[-1][1] == b"null", "a forgotten memo is a tombstone"


async def test_a_memo_the_bus_refuses_stops_the_writes_it_covers() -> None:
    api = ScriptedApi()
    reconciler = Scripted(lambda _: Plan(actions=(Create(obj("Pod", "p")),), memo={"n": 1}))
    decision = await make_worker(reconciler, api, MemoJetStream(refuse_memos=True)).reconcile(
        WIDGET
    )
    assert decision.outcome == Outcome.FAILED
    assert decision.error is not None and "keeping the memo" in decision.error
    assert api.calls == []


# --- decisions by reference ---------------------------------------------------------------


async def test_a_decision_names_what_observe_read_and_what_the_plan_decided() -> None:
    plan = Plan(actions=(Create(obj("Pod", "p"), why="one"),), requeue_after=5)
    w = make_worker(Scripted(lambda _: plan))
    w.cache.observe("added", obj("Pod", "other", rv="9"))
    decision = await w.reconcile(WIDGET)
    assert decision.inputs is not None
    observed = [(o.kind, o.name, o.resource_version) for o in decision.inputs.observed]
    assert observed == [("Widget", "w", "1")], "only what observe read, by version"
    assert decision.plan_digest == plan_digest(plan)


def test_the_plan_digest_ignores_prose_and_sees_every_decided_field() -> None:
    base = Plan(actions=(Create(obj("Pod", "p"), why="a"),), reason="x", requeue_after=1)
    assert plan_digest(base) == plan_digest(
        Plan(actions=(Create(obj("Pod", "p"), why="b"),), reason="y", requeue_after=1)
    )
    assert plan_digest(base) != plan_digest(Plan(actions=base.actions, requeue_after=2))
    assert plan_digest(base) != plan_digest(Plan(actions=(Create(obj("Pod", "q")),)))
    assert plan_digest(base) != plan_digest(
        Plan(actions=base.actions, requeue_after=1, memo={"m": 1})
    )


# --- expectations -------------------------------------------------------------------------


def child(
    name: str, *, uid: str, owner: str = "owner-uid", created: datetime = NOW
) -> dict[str, Any]:
    body = obj("Pod", name)
    body["metadata"]["uid"] = uid
    body["metadata"]["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "Widget"}]
    body["metadata"]["creationTimestamp"] = created.isoformat().replace("+00:00", "Z")
    return body


def generated(prefix: str = "w-") -> dict[str, Any]:
    body = obj("Pod", "")
    body["metadata"] = {
        "generateName": prefix,
        "namespace": "ns",
        "ownerReferences": [{"uid": "owner-uid", "controller": True, "kind": "Widget"}],
    }
    return body


def test_expectations_count_creates_until_the_bus_shows_them() -> None:
    creates = [Create(generated()), Create(generated())]
    expected = expect(None, "owner-uid", creates, NOW)
    assert expected is not None and expected.pending("Pod") == 2
    learned = answered(expected, [child("w-a", uid="a"), child("w-b", uid="b")], [])
    assert learned is not None and learned.pending_names("Pod") == {"w-a", "w-b"}
    bus = {ObjectKey("Pod", "ns", "w-a"): child("w-a", uid="a")}
    still = settle(learned, bus.get, NOW)
    assert still is not None and still.pending_names("Pod") == {"w-b"}
    bus[ObjectKey("Pod", "ns", "w-b")] = child("w-b", uid="b")
    assert settle(still, bus.get, NOW) is None


def test_a_generated_name_without_an_answer_waits_until_it_lapses() -> None:
    """Another owned object with the prefix may be anyone's: it settles nothing."""
    expected = expect(None, "owner-uid", [Create(generated()), Create(generated())], NOW)
    bus = {ObjectKey("Pod", "ns", "w-a"): child("w-a", uid="a")}
    still = settle(expected, bus.get, NOW + timedelta(minutes=4))
    assert still is not None and still.pending("Pod") == 2
    assert settle(expected, bus.get, NOW + timedelta(minutes=6)) is None


def test_a_named_create_without_an_answer_can_be_issued_again_as_one_entry() -> None:
    named = generated()
    named["metadata"] = {**named["metadata"], "name": "w-1"}
    del named["metadata"]["generateName"]
    expected = expect(None, "owner-uid", [Create(named)], NOW)
    assert expected is not None and expected.unanswered("Pod") == {"w-1"}
    again = expect(expected, "owner-uid", [Create(named)], NOW)
    assert again is not None and len(again.entries) == 1


def test_refused_creates_are_not_expected_and_expectations_lapse() -> None:
    expected = expect(None, "owner-uid", [Create(generated())], NOW)
    assert expected is not None
    assert answered(expected, [], [generated()]) is None
    assert settle(expected, {}.get, NOW + timedelta(minutes=6)) is None


def test_a_create_for_another_owner_is_not_ours_to_expect() -> None:
    foreign = generated()
    foreign["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    assert expect(None, "owner-uid", [Create(foreign)], NOW) is None


class NamingApi(ScriptedApi):
    """Gives generateName creates a name, as the API server does."""

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        named = copy.deepcopy(body)
        prefix = named["metadata"].pop("generateName", None)
        if prefix:
            named["metadata"]["name"] = f"{prefix}{len(self.store)}"
            named["metadata"]["uid"] = f"uid-{len(self.store)}"
        return await super().create(named)


async def test_the_worker_keeps_expectations_on_the_bus_with_the_answers() -> None:
    js = MemoJetStream()
    api = NamingApi()
    widget = obj("Widget", "w", rv="2")
    widget["metadata"]["uid"] = "owner-uid"
    reconciler = Scripted(lambda _: Plan(actions=(Create(generated()),)), expects=True)
    w = make_worker(reconciler, api, js)
    w.cache.observe("modified", widget)
    await w.reconcile(WIDGET)
    ahead, after = (msgspec.json.decode(payload) for _, payload in js.memos)
    assert ahead["expectations"]["entries"][0].get("uid") is None, "written before the create"
    assert after["expectations"]["entries"][0]["uid"], "and again with the answer"
    await w.reconcile(WIDGET)
    pending = reconciler.given[1].expectations
    assert isinstance(pending, Expectations) and pending.pending("Pod") == 1


async def test_a_delete_that_surely_did_not_happen_is_not_expected() -> None:
    """A delete the API refused (its resourceVersion precondition failed: a claim adopted the
    member meanwhile), or one never sent after an earlier action failed, will not show on the
    bus: expecting it would count the member as terminating for the whole ttl (found by the
    chaos soak: a warm pool one member over its replicas for five minutes)."""
    js = MemoJetStream()
    api = NamingApi(obj("Pod", "refused", rv="3"), obj("Pod", "after", rv="4"))
    api.errors[("delete", "refused")] = KubeError(409, "Conflict", "the object has been modified")
    widget = obj("Widget", "w", rv="2")
    widget["metadata"]["uid"] = "owner-uid"
    deletes = (
        Delete(ObjectKey("Pod", "default", "refused"), uid="uid-refused", resource_version="3"),
        Delete(ObjectKey("Pod", "default", "after"), uid="uid-after"),
    )
    reconciler = Scripted(lambda _: Plan(actions=deletes), expects=True)
    w = make_worker(reconciler, api, js)
    w.cache.observe("modified", widget)
    await w.reconcile(WIDGET)
    ahead, after = (msgspec.json.decode(payload) for _, payload in js.memos)
    assert len(ahead["expectations"]["entries"]) == 2, "both written ahead of the deletes"
    assert after is None, "neither happened: nothing is left to expect, so nothing is kept"
