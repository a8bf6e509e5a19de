"""The worker shell around a toy reconciler: decisions, scheduling, failures, events to keys."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from events.codec import ObservedState, decode_observed, encode_event, nats_subject
from events.envelope import ObjectKey
from events.types import Outcome, observed_event
from services.cli.history.rerun import rerun
from services.runtime.kube import KubeError
from services.runtime.reconcile import resting as resting_module
from services.runtime.reconcile import waking as waking_module
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import Observed
from tests.support.fakeapi import ScriptedApi
from tests.support.fakebus import FakeJetStream
from tests.support.samples import obj
from tests.unit.runtime.toys import NOW, POD, WIDGET, PodPerWidget, worker


async def test_a_reconcile_writes_and_records_a_valid_decision() -> None:
    js = FakeJetStream()
    w = worker(PodPerWidget(), ScriptedApi(), js)
    decision = await w.reconcile(WIDGET, ("uid:5:added",))
    assert decision.outcome == Outcome.APPLIED
    assert decision.requeue_after_seconds == 0
    assert [(a.verb, str(a.target), a.detail) for a in decision.actions] == [
        ("create", "Pod/ns/w", "make the pod")
    ]
    (recorded,) = js.decisions()
    assert recorded.data == decision
    assert recorded.time == NOW, "the decision's time is the planner's now"
    assert recorded.subject == "Widget/ns/w" and decision.triggers == ("uid:5:added",)
    assert decision.inputs_digest.startswith("sha256:")
    assert POD in w.cache, "read-your-writes: the created Pod is in the cache at once"

    second = await w.reconcile(WIDGET)
    assert second.outcome == Outcome.REQUEUED and second.requeue_after_seconds == 30
    assert WIDGET in w.queue.scheduled


async def test_the_same_inputs_and_time_give_the_same_decision_id() -> None:
    js = FakeJetStream()
    w = worker(PodPerWidget(), ScriptedApi(obj("Pod", "w")), js)
    w.cache.observe("added", obj("Pod", "w"))
    await w.reconcile(WIDGET)
    await w.reconcile(WIDGET)
    first, second = js.decisions()
    assert first.id == second.id


async def test_a_newer_version_of_an_object_read_gives_another_decision_id() -> None:
    # The digest names what was read by resourceVersion: a change the planner saw is a new id.
    js = FakeJetStream()
    w = worker(PodPerWidget(), ScriptedApi(obj("Pod", "w")), js)
    w.cache.observe("added", obj("Pod", "w", rv="1"))
    await w.reconcile(WIDGET)
    w.cache.observe("modified", obj("Pod", "w", rv="2"))
    await w.reconcile(WIDGET)
    first, second = js.decisions()
    assert first.id != second.id
    assert [v.resource_version for v in second.data.inputs.observed] == ["2", "1"]  # Pod, Widget


async def test_a_recorded_decision_reruns_from_the_objects_it_names() -> None:
    js = FakeJetStream()
    reconciler = PodPerWidget()
    w = worker(reconciler, ScriptedApi(obj("Pod", "w")), js)
    w.cache.observe("added", obj("Pod", "w"))
    await w.reconcile(WIDGET)
    (decision,) = js.decisions()
    index = {WIDGET: {"1": obj("Widget", "w")}, POD: {"1": obj("Pod", "w")}}

    again = rerun(decision, w.definition, index)
    assert (again.same, again.inputs_rebuilt, again.missing) == (True, True, ())

    without_pod = rerun(decision, w.definition, {WIDGET: index[WIDGET]})
    assert not without_pod.inputs_rebuilt, "the Pod the pass read is not on the log"
    assert without_pod.missing == ("Pod/ns/w@1",)
    assert not without_pod.same, "without its Pod the planner would create one"


async def test_a_planner_that_raises_is_recorded_and_backed_off() -> None:
    js = FakeJetStream()
    w = worker(PodPerWidget(explode=True), ScriptedApi(), js)
    decision = await w.reconcile(WIDGET)
    assert decision.outcome == Outcome.FAILED
    assert decision.error == "planner bug: RuntimeError('bug')"
    assert WIDGET in w.queue.scheduled


async def test_a_refused_write_is_retried_with_backoff_and_shown_to_the_next_pass() -> None:
    api = ScriptedApi()
    api.errors[("create", "w")] = KubeError(422, "Invalid", 'Pod "w" is invalid')
    reconciler = PodPerWidget()
    w = worker(reconciler, api)
    decision = await w.reconcile(WIDGET)
    assert decision.outcome == Outcome.FAILED
    assert decision.error == 'create Pod/ns/w: Invalid (422): Pod "w" is invalid'
    assert decision.actions[0].error is not None
    assert decision.requeue_after_seconds == 0.01
    del api.errors[("create", "w")]
    await w.reconcile(WIDGET)
    assert reconciler.seen_errors == [None, decision.error]
    assert w.queue.failures(WIDGET) == 0 and POD in w.cache


async def test_a_write_the_api_keeps_refusing_is_retried_slowly_a_conflict_is_not() -> None:
    """The pass after a refusal comes soon (it reports it on the object); once refused again,
    the key waits at least ``refused_backoff``. A Conflict or a throttled write passes: it
    keeps the ordinary backoff."""
    api = ScriptedApi()
    api.errors[("create", "w")] = KubeError(422, "Invalid", 'Pod "w" is invalid')
    w = worker(PodPerWidget(), api)
    w.settings = dataclasses.replace(w.settings, refused_backoff=7.0)
    delays = [(await w.reconcile(WIDGET)).requeue_after_seconds for _ in range(3)]
    assert delays == [0.01, 7.0, 7.0]
    api.errors[("create", "w")] = KubeError(403, "Forbidden", "pods is forbidden")
    assert (await w.reconcile(WIDGET)).requeue_after_seconds == 7.0
    for passing in (KubeError(409, "Conflict", "try again"), KubeError(429, "TooManyRequests")):
        w.queue.forget(WIDGET)
        api.errors[("create", "w")] = passing
        delays = [(await w.reconcile(WIDGET)).requeue_after_seconds for _ in range(3)]
        assert delays == [0.01, 0.02, 0.04], passing


async def test_a_failure_that_persists_is_said_to_the_planner_and_recorded() -> None:
    """A 500 is retried without alarm; once the key's passes have failed in a row for
    ``report_failures_after``, its planner is told (``Observed.failure_persists``), the decision
    records it, and a re-run rebuilds the same inputs. A pass that goes through ends it."""
    js = FakeJetStream()
    api = ScriptedApi()
    api.errors[("create", "w")] = KubeError(500, "InternalError", "etcd is unhappy")
    w = worker(PodPerWidget(), api, js)
    w.settings = dataclasses.replace(w.settings, report_failures_after=60.0)
    clock = [NOW]
    w.clock = lambda: clock[0]
    for seconds in (0, 30, 59, 60, 90):
        clock[0] = NOW + timedelta(seconds=seconds)
        await w.reconcile(WIDGET)
    persisted = [d.data.inputs.failure_persists for d in js.decisions()]
    assert persisted == [False, False, False, True, True]
    last = js.decisions()[-1]
    assert last.data.inputs.last_error is not None and "(500)" in last.data.inputs.last_error
    again = rerun(last, w.definition, {WIDGET: {"1": obj("Widget", "w")}})
    assert again.inputs_rebuilt and again.same

    del api.errors[("create", "w")]
    clock[0] = NOW + timedelta(seconds=120)
    assert (await w.reconcile(WIDGET)).error is None
    clock[0] = NOW + timedelta(seconds=200)
    assert not w.observed(WIDGET, clock[0]).failure_persists


async def test_a_planner_that_never_stops_writing_is_slowed_down() -> None:
    w = worker(PodPerWidget(always_write=True), ScriptedApi(obj("Widget", "w")))
    decisions = [await w.reconcile(WIDGET) for _ in range(4)]
    assert [d.requeue_after_seconds for d in decisions[:2]] == [0, 0]
    assert decisions[2].requeue_after_seconds == 0.01
    assert "passes in a row wrote something" in decisions[2].reason


async def test_losing_the_bus_loses_a_record_not_the_reconcile() -> None:
    w = worker(PodPerWidget(), ScriptedApi(), FakeJetStream(fail=True))
    decision = await w.reconcile(WIDGET)
    assert decision.outcome == Outcome.APPLIED and POD in w.cache
    assert w.decisions_published == 0


async def test_an_event_updates_the_cache_and_wakes_its_keys() -> None:
    w = worker(PodPerWidget(), ScriptedApi())
    event = observed_event("modified", obj("Pod", "w", rv="7"), time=NOW)
    w.take_event(event)
    assert w.cache.get(POD) is not None
    async with asyncio.timeout(1):
        key, triggers = await w.queue.get()
    assert key == WIDGET and triggers == (event.id,)


async def test_objects_a_worker_does_not_follow_are_not_cached_and_wake_nothing() -> None:
    """``follows``: only the Pods labelled ``ours`` are the worker's. Another Pod is not cached
    and wakes nothing; a followed Pod that loses the label leaves the cache, and that wakes
    the keys it concerned, as its deletion would."""
    w = worker(PodPerWidget(), ScriptedApi())
    w.definition = dataclasses.replace(
        w.definition, follows={"Pod": lambda pod: "ours" in (pod["metadata"].get("labels") or {})}
    )
    w.take_event(observed_event("added", obj("Pod", "w", rv="7"), time=NOW))
    assert w.cache.get(POD) is None and len(w.queue) == 0
    ours = obj("Pod", "w", rv="8")
    ours["metadata"]["labels"] = {"ours": "yes"}
    w.take_event(observed_event("modified", ours, time=NOW))
    assert w.cache.get(POD) is not None and len(w.queue) == 1
    w.take_event(observed_event("modified", obj("Pod", "w", rv="9"), time=NOW))
    assert w.cache.get(POD) is None, "it left what the worker follows"


async def test_an_event_of_an_object_the_worker_does_not_follow_is_turned_away_unread() -> None:
    """The feed asks before decoding an event: a change of a Pod the worker does not follow
    and does not hold is of no use to it. A followed Pod, one it holds (leaving what it
    follows is news), a deletion, another kind, and a payload that does not decode (the
    consumer dead-letters it) all go on."""
    toy = worker(PodPerWidget(), ScriptedApi())
    assert toy.feed.wanted is None, "a worker that follows every object reads every event"
    follows = {"Pod": lambda pod: "ours" in (pod["metadata"].get("labels") or {})}
    w = dataclasses.replace(toy, definition=dataclasses.replace(toy.definition, follows=follows))
    wanted = w.feed.wanted
    assert wanted is not None

    def sent(change: str, body: dict[str, Any]) -> tuple[str, bytes]:
        event = observed_event(change, body, time=NOW)  # type: ignore[arg-type]
        return nats_subject(event), encode_event(event)

    assert not wanted(*sent("added", obj("Pod", "w", rv="7")))
    ours = obj("Pod", "w", rv="8")
    ours["metadata"]["labels"] = {"ours": "yes"}
    assert wanted(*sent("modified", ours))
    w.take_event(observed_event("modified", ours, time=NOW))
    assert wanted(*sent("modified", obj("Pod", "w", rv="9"))), "it leaves what it follows"
    assert wanted(*sent("deleted", obj("Pod", "other", rv="9")))
    assert wanted(nats_subject(observed_event("added", obj("Pod", "w"), time=NOW)), b"\x00")
    assert wanted(*sent("added", obj("Widget", "w2"))), "a kind without a filter is not read"


def state_of(change: str, body: dict[str, Any]) -> ObservedState:
    """``body`` as the state table's read hands it to the worker."""
    state = decode_observed(encode_event(observed_event(change, body, time=NOW)))  # type: ignore[arg-type]
    assert state is not None
    return state


async def test_the_state_table_loads_what_the_worker_follows_and_wakes_nothing() -> None:
    """The state table's read hands the worker objects still as JSON: the same filter applies,
    nothing wakes (the load wakes every key once complete), and a followed Pod that the table
    shows no longer followed (a reload) leaves the cache."""
    w = worker(PodPerWidget(), ScriptedApi())
    w.definition = dataclasses.replace(
        w.definition, follows={"Pod": lambda pod: "ours" in (pod["metadata"].get("labels") or {})}
    )

    w.take_state(state_of("added", obj("Pod", "w", rv="7")))
    assert w.cache.get(POD) is None
    ours = obj("Pod", "w", rv="8")
    ours["metadata"]["labels"] = {"ours": "yes"}
    w.take_state(state_of("modified", ours))
    assert w.cache.get(POD) == ours and len(w.queue) == 0
    w.take_state(state_of("modified", obj("Pod", "w", rv="9")))
    assert w.cache.get(POD) is None, "it left what the worker follows"
    w.take_state(state_of("added", obj("Widget", "w2", rv="3")))
    assert w.cache.get(ObjectKey("Widget", "ns", "w2")) is not None and len(w.queue) == 0


async def test_workers_drain_the_queue() -> None:
    w = worker(PodPerWidget(), ScriptedApi())
    task = asyncio.create_task(w._work())
    try:
        w.queue.add(WIDGET)
        async with asyncio.timeout(2):
            await w.settled()
        assert POD in w.cache
    finally:
        w.queue.shutdown()
        async with asyncio.timeout(2):
            await task


async def test_events_of_the_first_load_wake_nothing_until_it_is_complete() -> None:
    """A key reconciled on a half-loaded cache could act on a world missing the objects not
    read yet (a pool counting members: over-creating); the load wakes every key afterwards."""
    w = worker(PodPerWidget(), ScriptedApi())
    w.feed.loaded.clear()
    w.take_event(observed_event("added", obj("Pod", "w", rv="7"), time=NOW))
    assert w.cache.get(POD) is not None and len(w.queue) == 0
    w._enqueue_everything()
    assert len(w.queue) == 1, "after the load, every key of a reconciled kind gets its pass"


async def test_the_echo_of_our_own_write_does_not_wake_the_key_that_wrote_it() -> None:
    """The watcher brings our write back as an event with the resourceVersion the write
    answered: nothing new for the key that planned with that answer; any later change wakes
    it as usual."""
    api = ScriptedApi()
    w = worker(PodPerWidget(), api)
    await w.reconcile(WIDGET)
    await drain(w)
    written = w.cache.get(POD)
    assert written is not None
    w.take_event(observed_event("added", written, time=NOW))
    assert len(w.queue) == 0, "our own create, echoed"
    changed = {**written, "metadata": {**written["metadata"], "resourceVersion": "999"}}
    w.take_event(observed_event("modified", changed, time=NOW))
    assert len(w.queue) == 1, "someone else's change wakes it"


async def test_a_key_that_keeps_expectations_is_woken_by_its_own_echo() -> None:
    """For a reconciler with expectations the echo is the news: it settles them."""
    reconciler = PodPerWidget()
    reconciler.expects = True
    w = worker(reconciler, ScriptedApi())
    await w.reconcile(WIDGET)
    await drain(w)
    written = w.cache.get(POD)
    assert written is not None
    w.take_event(observed_event("added", written, time=NOW))
    assert len(w.queue) == 1


async def drain(w: Worker) -> None:
    """Take out what the pass itself asked for (its requeue), leaving an empty queue."""
    while len(w.queue):
        key, _ = await w.queue.get()
        w.queue.done(key)


async def test_the_cache_rests_once_the_queue_stays_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a busy worker keeps unpacked goes once its queue has been idle for a while; a pass
    that comes back within that while finds its objects still unpacked."""
    monkeypatch.setattr(resting_module, "REST_AFTER", 0.1)
    w = worker(PodPerWidget(), ScriptedApi())
    kept = w.cache.get(WIDGET, keep=True)
    w._resting.soon()
    await asyncio.sleep(0.05)
    w.queue.add(WIDGET)  # busy again before the while is over
    await asyncio.sleep(0.1)
    assert w.cache.get(WIDGET, keep=True) is kept, "not rested while busy"
    await w.queue.get()
    w.queue.done(WIDGET)
    w._resting.soon()
    await asyncio.sleep(0.2)
    assert w.cache.get(WIDGET) is not kept and w.cache.get(WIDGET) == kept


async def test_what_the_state_table_loaded_is_packed_once_the_worker_rests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Objects of the state table's read are kept as JSON until the worker has nothing to do,
    then packed a slice at a time, and the C heap trimmed; a key that comes due meanwhile
    stops the packing, and the next rest goes on with it."""
    monkeypatch.setattr(resting_module, "REST_AFTER", 0.05)
    monkeypatch.setattr(resting_module, "PACK_SLICE", 2)
    trims: list[int] = []
    monkeypatch.setattr(resting_module, "_malloc_trim", lambda: trims.append)
    w = worker(PodPerWidget(), ScriptedApi())
    fresh = w.cache.loose  # what the bus delivered to set the worker up
    for index in range(5):
        pod = obj("Pod", f"p{index}", rv=str(10 + index))
        w.take_state(state_of("added", pod))
    assert w.cache.loose == fresh + 5
    w._resting.soon()
    await asyncio.sleep(0.1)
    assert w.cache.loose == 0
    assert trims == [0], "the memory freed is given back to the system once, when all is packed"
    w.take_state(state_of("added", obj("Pod", "q")))
    w.queue.add(WIDGET)
    w._resting.if_still_idle()
    assert w.cache.loose == 1, "not while a key is due"


@dataclass
class SlowToPlan(PodPerWidget):
    """Plans for ``seconds`` (a pool reading a thousand members)."""

    seconds: float = 0.0

    def observe(self, key: ObjectKey, observed: Observed) -> dict[str, Any]:
        time.sleep(self.seconds)
        return super().observe(key, observed)


def coalescing(reconciler: PodPerWidget) -> Worker:
    w = worker(reconciler, ScriptedApi(obj("Pod", "w")))
    w.definition = dataclasses.replace(w.definition, coalesce={"Widget": 0.01})
    w.cache.observe("added", obj("Pod", "w"))
    return w


async def test_a_coalesced_key_that_plans_long_waits_longer_for_its_next_pass() -> None:
    quick, slow = coalescing(SlowToPlan()), coalescing(SlowToPlan(seconds=0.05))
    for w in (quick, slow):
        await w.reconcile(WIDGET)
        w.take_event(observed_event("modified", obj("Pod", "w", rv="2"), time=NOW))
    quick_wait, slow_wait = quick.queue.due_in(WIDGET), slow.queue.due_in(WIDGET)
    assert quick_wait is not None and quick_wait <= 0.01, "a quick planner: the set window"
    assert slow_wait is not None and slow_wait >= 4 * 0.05 - 0.01, "four times its planning"
    for w in (quick, slow):
        w.queue.shutdown()


async def test_a_coalesced_key_woken_by_its_own_write_waits_only_for_the_rest_of_it() -> None:
    """A pool waits for the batch it created to show on the bus: the echo of its own write
    wakes it within :data:`ECHO_COALESCE`, whatever its window; another writer's change waits
    the window (adoptions by claims, gathered into one pass)."""
    reconciler = PodPerWidget()
    reconciler.expects = True
    w = worker(reconciler, ScriptedApi())
    w.definition = dataclasses.replace(w.definition, coalesce={"Widget": 10.0})
    await w.reconcile(WIDGET)
    await drain(w)
    written = w.cache.get(POD)
    assert written is not None
    w.take_event(observed_event("added", written, time=NOW))
    echo_wait = w.queue.due_in(WIDGET)
    assert echo_wait is not None and echo_wait <= waking_module.ECHO_COALESCE
    await asyncio.sleep(waking_module.ECHO_COALESCE + 0.02)
    await drain(w)
    changed = {**written, "metadata": {**written["metadata"], "resourceVersion": "999"}}
    w.take_event(observed_event("modified", changed, time=NOW))
    other_wait = w.queue.due_in(WIDGET)
    assert other_wait is not None and other_wait > 9.0, "someone else's change: the window"
    w.queue.shutdown()


async def test_a_gone_key_forgets_how_long_it_planned() -> None:
    w = coalescing(SlowToPlan(seconds=0.05))
    await w.reconcile(WIDGET)
    w.cache.observe("deleted", obj("Widget", "w"))
    await w.reconcile(WIDGET)  # sees it gone
    w.cache.observe("added", obj("Widget", "w", rv="3"))
    w.take_event(observed_event("modified", obj("Pod", "w", rv="4"), time=NOW))
    wait = w.queue.due_in(WIDGET)
    assert wait is not None and wait <= 0.01
    w.queue.shutdown()


async def scheduled_in_30_s(patience: float) -> Worker:
    """A Widget with its Pod, its next pass 30 s away (``has its pod``), and Pod changes
    that may wait ``patience`` seconds for a pass."""
    w = worker(PodPerWidget(), ScriptedApi())
    w.definition = dataclasses.replace(w.definition, patience={"Pod": lambda b, a: patience})
    await w.reconcile(WIDGET)  # creates the Pod
    await drain(w)
    written = w.cache.get(POD)
    assert written is not None
    w.take_event(observed_event("added", written, time=NOW))  # its echo: wakes nothing
    await w.reconcile(WIDGET)  # has its pod: back in 30 s
    due = w.queue.due_in(WIDGET)
    assert due is not None and due > 29
    return w


def changed_pod(w: Worker, change: str = "modified") -> Any:
    pod = w.cache.get(POD)
    assert pod is not None
    changed = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "999"}}
    return observed_event(change, changed, time=NOW)  # type: ignore[arg-type]


async def test_a_change_that_may_wait_joins_the_pass_already_scheduled() -> None:
    w = await scheduled_in_30_s(patience=60.0)
    event = changed_pod(w)
    w.take_event(event)
    assert len(w.queue) == 0, "no pass of its own"
    pod = w.cache.get(POD)
    assert pod is not None and pod["metadata"]["resourceVersion"] == "999", "cached for that pass"
    w.queue.add(WIDGET)  # the schedule fires
    async with asyncio.timeout(1):
        key, triggers = await w.queue.get()
    assert key == WIDGET and triggers == (event.id,)


@pytest.mark.parametrize(
    ("patience", "change"),
    [(10.0, "modified"), (0.0, "modified"), (60.0, "deleted")],
    ids=["the pass is further away", "it may not wait", "a deletion never waits"],
)
async def test_a_change_that_may_not_wait_so_long_wakes_its_key(
    patience: float, change: str
) -> None:
    w = await scheduled_in_30_s(patience)
    event = changed_pod(w, change)
    w.take_event(event)
    async with asyncio.timeout(1):
        key, triggers = await w.queue.get()
    assert key == WIDGET and triggers == (event.id,)


@pytest.mark.parametrize(
    ("unmoved", "change", "wakes"),
    [(True, "modified", False), (False, "modified", True), (True, "deleted", True)],
    ids=["moves nothing the planners read", "moves something", "a deletion always wakes"],
)
async def test_a_change_that_moves_nothing_the_planners_read_wakes_no_key(
    unmoved: bool, change: str, wakes: bool
) -> None:
    """The cache takes every change; one the definition calls unmoving wakes no key."""
    w = await scheduled_in_30_s(patience=0.0)
    w.definition = dataclasses.replace(w.definition, unmoved_by={"Pod": lambda b, a: unmoved})
    w.take_event(changed_pod(w, change))
    assert (len(w.queue) == 1) is wakes
    if change == "modified":
        pod = w.cache.get(POD)
        assert pod is not None and pod["metadata"]["resourceVersion"] == "999"
