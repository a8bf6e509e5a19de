"""``sandbus explain --rerun``: a Sandbox's recorded decisions made again by today's planner,
from the event log alone (the decisions name their inputs by resourceVersion)."""

from __future__ import annotations

import dataclasses
import io
from datetime import datetime

from events.envelope import ObjectRef
from services.cli.history.commands import ExplainOptions, explain
from services.runtime.reconcile.actions import Plan
from services.runtime.worker_api import WorkerDefinition
from services.sandbox.core.observation import SandboxObservation
from services.sandbox.core.plan import plan_sandbox
from services.sandbox.worker import sandbox_reconciler, sandbox_worker
from tests.support.samples import NS, condition, sandbox_body
from tests.support.stack import Stack
from tests.support.waiting import until

TARGET = ObjectRef(kind="Sandbox", namespace=NS, name="rr")


def forgetful_plan(inputs: SandboxObservation, now: datetime) -> Plan:
    """Today's planner with a regression: it never creates the Pod."""
    plan = plan_sandbox(inputs, now)
    kept = tuple(action for action in plan.actions if action.target.kind != "Pod")
    return dataclasses.replace(plan, actions=kept)


FORGETFUL = dataclasses.replace(sandbox_reconciler(), plan=forgetful_plan)


async def rerun(stack: Stack, definition: WorkerDefinition) -> tuple[int, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    options = ExplainOptions(
        nats_url=stack.nc.connected_url.geturl() if stack.nc.connected_url else "",
        stream=stack.bus.event_log_stream,
        target=TARGET,
        rerun=True,
        definitions=lambda worker: definition,
    )
    code = await explain(options, out=out, err=err)
    assert not err.getvalue(), err.getvalue()
    return code, out.getvalue().splitlines()


async def test_an_unchanged_planner_makes_every_recorded_decision_again(stack: Stack) -> None:
    await stack.create(sandbox_body("rr"))

    async def ready() -> bool:
        return condition(await stack.get("Sandbox", "rr")) == ("True", "DependenciesReady")

    await until(ready)

    async def all_rebuilt() -> list[str] | None:
        # The worker also read its own writes' answers; the watcher publishes those shortly.
        code, lines = await rerun(stack, sandbox_worker())
        return lines if code == 0 and not any("note:" in line for line in lines) else None

    lines = await until(all_rebuilt)
    assert len(lines) >= 2, "at least the pass that created the Pod and the one that saw it Ready"
    assert all(line.endswith(": same decision") for line in lines), lines

    changed = dataclasses.replace(
        sandbox_worker(), reconcilers=(FORGETFUL, *sandbox_worker().reconcilers[1:])
    )
    code, lines = await rerun(stack, changed)
    assert code == 3
    different = [i for i, line in enumerate(lines) if line.endswith("DIFFERENT decision")]
    assert different, lines
    shown = lines[different[0] + 1 : different[0] + 3]
    assert shown[0].startswith("    recorded: ") and "create Pod/default/rr" in shown[0]
    assert shown[1].startswith("    now:      ") and "Pod/default/rr" not in shown[1]
