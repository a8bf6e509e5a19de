"""The legacy per-claim NetworkPolicy (docs/agent-sandbox.md §3.3 step 2, upstream's
cleanupLegacyNetworkPolicy): older controllers made ``<claim>-network-policy`` per claim; the
claim worker deletes it on any pass, when the claim controls it, and leaves alone a policy of
that name that someone else made."""

from __future__ import annotations

from api.objects import Json
from services.claim.core.plan import plan_claim
from services.runtime.reconcile.actions import Delete
from tests.unit.claim.world import (
    CLAIM,
    CLAIM_UID,
    NOW,
    NS,
    actions_of,
    claim,
    claim_reference,
    observe,
    pool,
    reason_in,
    status_written,
    template,
)


def policy(*, owners: list[Json] | None = None) -> Json:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{CLAIM}-network-policy",
            "namespace": NS,
            "uid": "uid-np",
            "resourceVersion": "4",
            "ownerReferences": owners if owners is not None else [claim_reference(claim())],
        },
        "spec": {"podSelector": {}},
    }


def deleted_policies(*objects: Json) -> list[Delete]:
    plan = plan_claim(observe(*objects), NOW)
    return [a for a in actions_of(plan, Delete) if a.target.kind == "NetworkPolicy"]


def test_deprecated_per_claim_policy_is_deleted() -> None:
    """TestSandboxClaimReconcile "deprecated per-claim NP deleted": with its uid as the
    precondition, so a successor of the same name is never removed by mistake."""
    [delete] = deleted_policies(claim(), pool(), template(), policy())
    assert (delete.target.name, delete.uid) == (f"{CLAIM}-network-policy", "uid-np")


def test_it_is_deleted_even_while_the_template_is_missing() -> None:
    """…"template missing → TemplateNotFound, no crash, legacy per-claim NP still deleted"."""
    plan = plan_claim(observe(claim(), pool(), policy()), NOW)
    assert reason_in(status_written(plan)) == "TemplateNotFound"
    assert [a.target.kind for a in actions_of(plan, Delete)] == ["NetworkPolicy"]


def test_a_users_policy_with_the_reserved_name_is_preserved() -> None:
    """…"user NP with reserved name preserved": no controller, or another claim's uid."""
    other = {**claim_reference(claim()), "uid": f"not-{CLAIM_UID}"}
    assert deleted_policies(claim(), pool(), template(), policy(owners=[])) == []
    assert deleted_policies(claim(), pool(), template(), policy(owners=[other])) == []
