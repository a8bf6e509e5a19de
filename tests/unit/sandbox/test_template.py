"""The SandboxTemplate controller: its ref-hash label and its NetworkPolicy
(docs/agent-sandbox.md §3.1)."""

from __future__ import annotations

import copy
from typing import Any

from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan, Replace
from services.sandbox.core.observation import TemplateObservation
from services.sandbox.core.template import plan_template, same_spec, secure_default_rules
from tests.support.plans import actions_of
from tests.unit.sandbox.samples import NOW

HASH = name_hash("python")
TEMPLATE_UID = "tmpl-uid"
NP = ObjectKey("NetworkPolicy", "default", "python-network-policy")


def template(labelled: bool = True, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": "python",
        "namespace": "default",
        "uid": TEMPLATE_UID,
        "resourceVersion": "5",
    }
    if labelled:
        metadata["labels"] = {LABEL_SANDBOX_TEMPLATE_REF_HASH: HASH}
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": metadata,
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "b"}]}}, **spec},
    }


def policy(spec: dict[str, Any], *, owner_uid: str | None = TEMPLATE_UID) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": NP.name,
        "namespace": "default",
        "uid": "np-uid",
        "resourceVersion": "7",
    }
    if owner_uid is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxTemplate",
                "name": "python",
                "uid": owner_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": spec,
    }


def plan(tmpl: dict[str, Any] | None, np: dict[str, Any] | None = None) -> Plan:
    return plan_template(
        TemplateObservation(namespace="default", name="python", template=tmpl, network_policy=np),
        NOW,
    )


def created_spec(result: Plan) -> dict[str, Any]:
    creates = [a for a in actions_of(result) if isinstance(a, Create)]
    assert len(creates) == 1, result.actions
    spec: dict[str, Any] = creates[0].body["spec"]
    return spec


def test_default_secure_network_policy() -> None:
    """Upstream TestSandboxTemplateReconcileNetworkPolicy "default secure NP": selects the
    template's Pods by ref hash; ingress only from the router; egress to public addresses only
    (cluster DNS blocked); controlled by the template."""
    result = plan(template())
    spec = created_spec(result)
    assert spec["podSelector"] == {"matchLabels": {LABEL_SANDBOX_TEMPLATE_REF_HASH: HASH}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [
        {
            "from": [
                {
                    "podSelector": {"matchLabels": {"app": "sandbox-router"}},
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}
                    },
                }
            ]
        }
    ]
    peers = spec["egress"][0]["to"]
    assert peers[0]["ipBlock"] == {
        "cidr": "0.0.0.0/0",
        "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"],
    }
    assert peers[1]["ipBlock"] == {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}
    body = next(a.body for a in actions_of(result) if isinstance(a, Create))
    assert body["metadata"]["ownerReferences"][0]["uid"] == TEMPLATE_UID
    assert body["metadata"]["ownerReferences"][0]["controller"] is True


def test_custom_network_policy() -> None:
    """Upstream TestSandboxTemplateReconcileNetworkPolicy "custom NP": the template's rules,
    with the controller's pod selector and policy types."""
    rules: dict[str, Any] = {"ingress": [{"from": [{"podSelector": {}}]}], "egress": []}
    spec = created_spec(plan(template(networkPolicy=rules)))
    assert spec["ingress"] == rules["ingress"]
    assert spec["egress"] == []
    assert spec["policyTypes"] == ["Ingress", "Egress"]


def test_unmanaged_creates_nothing() -> None:
    """Upstream TestSandboxTemplateReconcileNetworkPolicy "Unmanaged → none"."""
    assert plan(template(networkPolicyManagement="Unmanaged")).actions == ()


def test_switching_to_unmanaged_deletes_the_templates_policy() -> None:
    """Upstream TestSandboxTemplateReconcileNetworkPolicy "switch to Unmanaged deletes"."""
    ingress, _ = secure_default_rules()
    result = plan(template(networkPolicyManagement="Unmanaged"), policy({"ingress": ingress}))
    assert result.actions == (Delete(NP, uid="np-uid", why="networkPolicyManagement is Unmanaged"),)


def test_a_spec_change_updates_the_policy() -> None:
    """Upstream TestSandboxTemplateReconcileNetworkPolicy "spec change updates": a full Update
    carrying the resourceVersion it was read at."""
    existing = policy(created_spec(plan(template())))
    rules = {"ingress": [{"ports": [{"port": 8080}]}]}
    result = plan(template(networkPolicy=rules), existing)
    replaces = [a for a in actions_of(result) if isinstance(a, Replace)]
    assert len(replaces) == 1
    assert replaces[0].body["metadata"]["resourceVersion"] == "7"
    assert replaces[0].on_conflict == "refresh", "someone wrote it meanwhile: read it again"
    assert replaces[0].body["spec"]["ingress"] == rules["ingress"]


def test_a_policy_in_step_is_left_alone_despite_server_defaults() -> None:
    """Semantic comparison: the protocol the API server defaults on a port, and empty lists,
    are no drift (otherwise every pass would rewrite the policy)."""
    rules = {"ingress": [{"ports": [{"port": 8080}]}]}
    desired = created_spec(plan(template(networkPolicy=rules)))
    stored = copy.deepcopy(desired)
    stored["ingress"][0]["ports"][0]["protocol"] = "TCP"
    stored["egress"] = []
    assert same_spec(stored, desired)
    assert plan(template(networkPolicy=rules), policy(stored)).actions == ()


def test_an_unowned_policy_is_never_deleted_or_updated() -> None:
    """Upstream TestSandboxTemplateReconcile_Vulnerability: a NetworkPolicy of that name made by
    someone else is neither deleted (Unmanaged) nor updated (Managed); Managed is an error."""
    foreign = policy({"podSelector": {}}, owner_uid=None)
    unmanaged = plan(template(networkPolicyManagement="Unmanaged"), foreign)
    assert unmanaged.actions == () and unmanaged.error is None
    managed = plan(template(), foreign)
    assert managed.actions == ()
    assert managed.error is not None and "not controlled by" in managed.error
    other = policy({"podSelector": {}}, owner_uid="another-template")
    assert plan(template(networkPolicyManagement="Unmanaged"), other).actions == ()
    assert plan(template(), other).actions == ()


def test_the_template_gets_its_ref_hash_label() -> None:
    """§3.1 step 1: the template is merge-patched with its ref-hash label when it lacks it."""
    result = plan(template(labelled=False, networkPolicyManagement="Unmanaged"))
    assert result.actions == (
        Patch(
            ObjectKey("SandboxTemplate", "default", "python"),
            {"metadata": {"labels": {LABEL_SANDBOX_TEMPLATE_REF_HASH: HASH}}},
            why="label the template with its ref hash",
        ),
    )


def test_a_deleting_template_gets_no_policy() -> None:
    """§3.1 step 2: a template being deleted gets no NetworkPolicy work (GC removes it)."""
    deleting = template()
    deleting["metadata"]["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    assert plan(deleting).actions == ()
    assert plan(None).actions == ()


def test_template_ref_hash() -> None:
    """Upstream TestSandboxTemplateRefHash: 8 hex characters, deterministic, distinct."""
    values = {name: name_hash(name) for name in ("sandbox-name", "other-template", "")}
    assert all(len(v) == 8 and int(v, 16) >= 0 for v in values.values())
    assert len(set(values.values())) == 3
    assert name_hash("sandbox-name") == values["sandbox-name"]
