"""A claim whose Sandbox cannot be configured says so with upstream's terminal reason
``InvalidConfiguration`` (v1.0.4), so that the SDK stops waiting at once: forwarded from a
Sandbox the sandbox worker marked, or the claim's own when the Sandbox it would create is one
the CRD refuses (a name longer than 63 characters with ``spec.service: true``)."""

from __future__ import annotations

import pytest

from api.agents import REASON_INVALID_CONFIGURATION
from api.objects import Json
from services.claim.core.plan import plan_claim
from services.runtime.reconcile.actions import Plan
from tests.unit.claim.world import (
    CLAIM,
    NOW,
    claim,
    cold,
    condition,
    observe,
    pool,
    ready_of,
    sandbox_creates,
    status_written,
    template,
)

LONG = "c" * 64
INVALID = condition(
    status="False",
    reason=REASON_INVALID_CONFIGURATION,
    message="spec.podTemplate.spec.containers is empty: a Pod needs at least one container",
)


def plan_of(*objects: Json, name: str = CLAIM) -> Plan:
    return plan_claim(observe(*objects, name=name), NOW)


def test_the_reason_is_one_the_sdk_gives_up_on() -> None:
    constants = pytest.importorskip("k8s_agent_sandbox.constants")
    assert REASON_INVALID_CONFIGURATION in constants.TERMINAL_CLAIM_READY_REASONS


def test_a_sandbox_that_cannot_be_configured_is_forwarded() -> None:
    mine = cold(claim(), conditions=[INVALID])
    plan = plan_of(claim(), pool(), template(), mine)
    ready = ready_of(status_written(plan))
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", REASON_INVALID_CONFIGURATION)
    assert ready["message"] == INVALID["message"]
    assert plan.error is None and plan.requeue_after is None


def test_a_claim_that_forwarded_the_old_reason_takes_the_new_one() -> None:
    """A claim an older sandbus left with ``InvalidSpec`` forwards the Sandbox's new reason
    once the sandbox worker has rewritten it (that change of Ready wakes the claim)."""
    old = condition(status="False", reason="InvalidSpec", message=INVALID["message"])
    with_old = claim(status={"conditions": [old], "sandbox": {"name": CLAIM}})
    plan = plan_of(with_old, pool(), template(), cold(with_old, conditions=[INVALID]))
    ready = ready_of(status_written(plan))
    assert ready is not None and ready["reason"] == REASON_INVALID_CONFIGURATION


@pytest.mark.parametrize("service", [True, False, None], ids=["service", "no service", "unset"])
def test_a_cold_sandbox_the_crd_would_refuse_is_not_attempted(service: bool | None) -> None:
    tpl = template() if service is None else template(service=service)
    plan = plan_of(claim(LONG), pool(), tpl, name=LONG)
    ready = ready_of(status_written(plan))
    assert ready is not None
    if service:
        assert sandbox_creates(plan) == []
        assert (ready["status"], ready["reason"]) == ("False", REASON_INVALID_CONFIGURATION)
        assert "at most 63 characters" in ready["message"]
        assert LONG in ready["message"] and "use a shorter claim name" in ready["message"]
        assert plan.error is None and plan.requeue_after is None, "terminal: no retry"
    else:
        assert [body["metadata"]["name"] for body in sandbox_creates(plan)] == [LONG]
        assert ready["reason"] != REASON_INVALID_CONFIGURATION


def test_a_name_of_63_characters_is_fine() -> None:
    name = "c" * 63
    plan = plan_of(claim(name), pool(), template(service=True), name=name)
    assert [body["metadata"]["name"] for body in sandbox_creates(plan)] == [name]
