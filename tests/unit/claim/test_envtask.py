"""Beyond upstream, opt-in (services/claim/core/envtask.py): a claim's ``env`` delivered to a warm
sandbox as a task of its executor, for a template that names its workload's command. Without
the opt-in, upstream's rule stands: ``env`` forces a cold start."""

from __future__ import annotations

import json
from datetime import timedelta

from msgspec.structs import replace

from services.claim.core.batch.tasks import SyncTasks, TaskReport
from services.claim.core.envtask import ANNOTATION_CLAIM_ENV_TASK, env_task_command
from services.claim.core.metrics import ClaimMemo
from services.claim.core.plan import plan_claim
from services.domain.agentsandbox.warmqueue import Take
from services.runtime.reconcile.actions import Plan
from tests.unit.claim.world import (
    CLAIM,
    IP,
    NOW,
    actions_of,
    claim,
    entry,
    member,
    observe,
    owned_by,
    pool,
    reason_in,
    sandbox_creates,
    status_written,
    template,
)

COMMAND = ["/bin/sh", "-c", "exec agent"]
ENV = [
    {"name": "TOKEN", "value": "s3cret"},
    {"name": "MODE", "value": "fast", "containerName": "test-container"},
]


def opted_in(policy: str = "Allowed", command: object = COMMAND) -> dict[str, object]:
    body = template(envVarsInjectionPolicy=policy)
    body["metadata"]["annotations"] = {ANNOTATION_CLAIM_ENV_TASK: json.dumps(command)}
    return body


def held_task(name: str = f"{CLAIM}-env", age: float = 0.0) -> TaskReport:
    return TaskReport(
        pod="warm-1",
        ip=IP,
        at=NOW - timedelta(seconds=age),
        reachable=True,
        tasks=({"name": name, "processStatus": {"running": {"startedAt": "x"}}},),
    )


def test_the_opt_in_is_an_annotated_template_that_allows_env() -> None:
    """The command is a JSON array of strings, and the template's policy must let claims set
    variables; anything else is no opt-in (upstream's cold start, or its refusal)."""
    assert env_task_command(opted_in()) == COMMAND
    assert env_task_command(opted_in("Overrides")) == COMMAND
    assert env_task_command(opted_in("Disallowed")) is None
    assert env_task_command(opted_in(command="sh -c agent")) is None
    assert env_task_command(opted_in(command=[])) is None
    assert env_task_command(template(envVarsInjectionPolicy="Allowed")) is None


def test_without_the_opt_in_env_still_forces_a_cold_start() -> None:
    """Upstream's "env bypasses warm candidate": no Take, a cold Sandbox."""
    plan = plan_claim(
        observe(claim(env=ENV), pool(), template(envVarsInjectionPolicy="Allowed")), NOW
    )
    assert actions_of(plan, Take) == []
    assert len(sandbox_creates(plan)) == 1


def test_with_the_opt_in_a_claim_with_env_takes_from_the_warm_queue() -> None:
    plan = plan_claim(observe(claim(env=ENV), pool(), opted_in()), NOW)
    assert len(actions_of(plan, Take)) == 1


def test_adoption_hands_the_env_to_the_executor_before_ready() -> None:
    """The adoption pass sends the task (the claim's variables, without containerName) to the
    sandbox's pod IP; the claim is not Ready until the executor holds it."""
    warm = member("warm-1", of_template=opted_in())
    plan = plan_claim(observe(claim(env=ENV), pool(), opted_in(), warm, offers=[entry(warm)]), NOW)
    [sync] = actions_of(plan, SyncTasks)
    assert (sync.pod, sync.ip) == ("warm-1", IP)
    assert sync.desired == (
        {
            "name": f"{CLAIM}-env",
            "process": {
                "command": COMMAND,
                "env": [{"name": "TOKEN", "value": "s3cret"}, {"name": "MODE", "value": "fast"}],
            },
        },
    )
    assert reason_in(status_written(plan)) == "DeliveringEnv"


def bound(plan_memo: ClaimMemo | None = None, report: TaskReport | None = None) -> Plan:
    the_claim = claim(
        env=ENV,
        annotations={"agents.x-k8s.io/sandbox-name": "warm-1"},
        status={"sandbox": {"name": "warm-1"}},
    )
    adopted = owned_by(member("warm-1", of_template=opted_in()), the_claim)
    observed = observe(the_claim, pool(), opted_in(), adopted)
    observed = replace(
        observed, memo=plan_memo, reports={"warm-1": report} if report is not None else {}
    )
    return plan_claim(observed, NOW)


def test_the_claim_is_ready_once_its_executor_holds_the_task() -> None:
    plan = bound(report=held_task())
    assert actions_of(plan, SyncTasks) == []
    assert reason_in(status_written(plan)) != "DeliveringEnv"
    assert plan.memo is not None and plan.memo.env_delivered


def test_a_delivered_env_is_not_sent_again() -> None:
    """The memo, on the bus, says it was delivered: a restarted worker does not start the
    workload a second time."""
    plan = bound(plan_memo=ClaimMemo(env_delivered=True))
    assert actions_of(plan, SyncTasks) == []
    assert plan.memo is not None and plan.memo.env_delivered


def test_an_executor_that_does_not_answer_is_tried_again_and_said() -> None:
    silent = TaskReport(
        pod="warm-1", ip=IP, at=NOW - timedelta(seconds=1), reachable=False, error="refused"
    )
    plan = bound(report=silent)
    assert len(actions_of(plan, SyncTasks)) == 1
    status = status_written(plan)
    assert reason_in(status) == "DeliveringEnv"
    assert plan.requeue_after is not None and plan.requeue_after <= 0.5
