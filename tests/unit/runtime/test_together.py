"""``Together``: a group of actions carried out at the same time (upstream's slow-start batches,
whose creates run in parallel), each with its own outcome, the plan going on after the group
only if all of them succeeded."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from events.envelope import ObjectKey
from events.types import Outcome
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Create, Plan, Together, plan_digest
from services.runtime.reconcile.executing import (
    ActionFailed,
    Executed,
    Execution,
    ExecutionContext,
    Executor,
    execute,
)
from tests.support.fakeapi import ScriptedApi
from tests.support.samples import obj
from tests.unit.runtime.toys import WIDGET, Scripted, make_worker


@dataclass(frozen=True)
class Step:
    """A toy action: ``name`` is what it does; ``fail`` makes it fail."""

    name: str
    fail: bool = False
    why: str = ""
    step: str = ""
    verb = "step"

    @property
    def target(self) -> ObjectKey:
        return ObjectKey("Widget", "ns", self.name)


@dataclass
class Recorder:
    """An executor that records what started and finished. With ``meet`` set, each action
    waits until all ``meet`` actions have started: only actions that run at the same time get
    past that."""

    meet: int = 0
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    everyone: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, action: Step, context: ExecutionContext) -> Executed:
        self.started.append(action.name)
        if len(self.started) >= self.meet:
            self.everyone.set()
        await self.everyone.wait()
        if action.fail:
            raise ActionFailed(f"{action.name} refused")
        self.finished.append(action.name)
        return Executed(note=f"did {action.name}")


async def run(plan: Plan, recorder: Recorder, within: float = 2.0) -> Execution:
    executors: dict[type, Executor] = {Step: recorder}
    context = ExecutionContext(ScriptedApi(), ObjectCache())  # type: ignore[arg-type]
    return await asyncio.wait_for(execute(plan, executors, context), within)


async def test_a_groups_actions_run_at_the_same_time() -> None:
    """Each action waits until all three have started: in sequence the first would wait for
    ever (and the two seconds run out)."""
    recorder = Recorder(meet=3)
    plan = Plan(actions=(Together((Step("a"), Step("b"), Step("c"))),))
    execution = await run(plan, recorder)
    assert sorted(recorder.started) == ["a", "b", "c"]
    assert sorted(recorder.finished) == ["a", "b", "c"]
    assert execution.error is None


async def test_actions_outside_a_group_run_one_after_another() -> None:
    """The contrast: the same wait, without a group, never gets past the first action."""
    recorder = Recorder(meet=2)
    plan = Plan(actions=(Step("a"), Step("b")))
    with pytest.raises(TimeoutError):
        await run(plan, recorder, within=0.2)
    assert recorder.started == ["a"]


async def test_a_failure_in_a_group_stops_the_plan_after_the_group() -> None:
    """The rest of the group still runs (it was issued at the same time); the next group and
    the actions after it are not attempted."""
    recorder = Recorder()
    plan = Plan(
        actions=(
            Step("first"),
            Together((Step("ok-1"), Step("bad", fail=True), Step("ok-2"))),
            Together((Step("later-1"), Step("later-2"))),
            Step("last"),
        )
    )
    execution = await run(plan, recorder)
    assert recorder.started == ["first", "ok-1", "bad", "ok-2"]
    assert execution.error == "step Widget/ns/bad: bad refused"
    outcomes = [(o.target.name, o.error) for o in execution.outcomes]
    assert outcomes == [
        ("first", None),
        ("ok-1", None),
        ("bad", "bad refused"),
        ("ok-2", None),
    ]


async def test_each_action_of_a_group_has_its_own_outcome_in_the_decision() -> None:
    api = ScriptedApi()
    api.errors[("create", "q")] = TimeoutError("slow")  # type: ignore[assignment]
    plan = Plan(
        actions=(
            Together(
                (
                    Create(obj("Pod", "p"), why="one"),
                    Create(obj("Pod", "q"), why="two"),
                    Create(obj("Pod", "r"), why="three"),
                ),
                why="a batch of 3",
            ),
            Create(obj("Pod", "s"), why="after"),
        )
    )
    decision = await make_worker(Scripted(lambda _: plan), api).reconcile(WIDGET)
    assert decision.outcome == Outcome.FAILED
    assert [(a.verb, a.target.name, a.detail, a.error) for a in decision.actions] == [
        ("create", "p", "one", None),
        ("create", "q", "two", "slow"),
        ("create", "r", "three", None),
    ], "one outcome per member, none for the group, none for what came after"
    assert sorted(name for _, name in api.calls) == ["p", "q", "r"]


async def test_a_stale_answer_in_a_group_stops_the_plan_after_the_group() -> None:
    """AlreadyExists in a group: the plan was made on stale state; the group finishes, nothing
    after it runs, and the key is reconciled again at once."""
    api = ScriptedApi(obj("Pod", "q"))
    plan = Plan(
        actions=(
            Together((Create(obj("Pod", "p")), Create(obj("Pod", "q")))),
            Create(obj("Pod", "s")),
        )
    )
    decision = await make_worker(Scripted(lambda _: plan), api).reconcile(WIDGET)
    assert decision.error is None and decision.requeue_after_seconds == 0.0
    assert [a.target.name for a in decision.actions] == ["p", "q"]
    assert ("create", "s") not in api.calls


def test_the_plan_digest_sees_a_groups_members() -> None:
    def digest(*actions: object) -> str:
        return plan_digest(Plan(actions=actions))  # type: ignore[arg-type]

    a, b, c = Step("a"), Step("b"), Step("c")
    assert digest(Together((a, b))) == digest(Together((a, b), why="other words"))
    assert digest(Together((a, b))) != digest(Together((a, c)))
    assert digest(Together((a, b))) != digest(Together((a, b, c)))
    assert digest(Together((a, b))) != digest(Together((a, Step("b", fail=True))))
    assert digest(Together((a, b))) != digest(a, b), "together is not one after another"
