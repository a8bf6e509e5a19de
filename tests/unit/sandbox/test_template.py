"""The SandboxTemplate controller: its ref-hash label and its NetworkPolicy
(docs/agent-sandbox.md §3.1)."""

from __future__ import annotations

import copy
from typing import Any

from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash
from events.envelope import ObjectKey
from services.domain.agentsandbox.policy_failure import ANNOTATION_NETWORK_POLICY_FAILURE
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


def plan(
    tmpl: dict[str, Any] | None,
    np: dict[str, Any] | None = None,
    *,
    last_error: str | None = None,
    failure_persists: bool = False,
) -> Plan:
    return plan_template(
        TemplateObservation(
            namespace="default",
            name="python",
            template=tmpl,
            network_policy=np,
            last_error=last_error,
            failure_persists=failure_persists,
        ),
        NOW,
    )


def with_failure(tmpl: dict[str, Any], said: str) -> dict[str, Any]:
    """The template as it is once it carries the failure annotation ``said``."""
    tmpl = copy.deepcopy(tmpl)
    tmpl["metadata"]["annotations"] = {ANNOTATION_NETWORK_POLICY_FAILURE: said}
    return tmpl


def said(result: Plan) -> list[str | None]:
    """What the plan writes in the failure annotation of the template, in order (None: its
    removal); any write of it before the policy's write comes first."""
    values: list[str | None] = []
    for action in actions_of(result):
        if isinstance(action, Patch) and "annotations" in action.patch["metadata"]:
            values.append(
                action.patch["metadata"]["annotations"][ANNOTATION_NETWORK_POLICY_FAILURE]
            )
    return values


def kinds(result: Plan) -> list[str]:
    return [type(a).__name__ for a in actions_of(result)]


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
    assert managed.error is not None and "not controlled by" in managed.error
    assert said(managed) == [managed.error], "sandbus: and the template says so"
    assert plan(with_failure(template(), managed.error), foreign).actions == ()
    other = policy({"podSelector": {}}, owner_uid="another-template")
    assert plan(template(networkPolicyManagement="Unmanaged"), other).actions == ()
    assert plan(with_failure(template(), managed.error), other).actions == ()


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


REFUSED = (
    f"create {NP}: Invalid (422): NetworkPolicy.networking.k8s.io "
    '"python-network-policy" is invalid: spec.egress[0].to[0].ipBlock.cidr: Invalid value: '
    '"10.0.0.0/33": must be a valid CIDR'
)


def test_a_policy_the_api_refuses_is_said_on_the_template_until_it_is_written() -> None:
    """sandbus (issue #32): the previous pass's create was refused; the template says so in
    the API server's words, before the create is tried again, and the annotation goes right
    after a create that goes through (the runtime stops the pass at one that fails), or when
    a pass finds the policy as desired."""
    rules = {"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}
    refused = plan(template(networkPolicy=rules), last_error=REFUSED)
    message = (
        "the API server refuses NetworkPolicy python-network-policy (Invalid, 422): "
        "NetworkPolicy.networking.k8s.io is invalid: spec.egress[0].to[0].ipBlock.cidr: "
        'Invalid value: "10.0.0.0/33": must be a valid CIDR'
    )
    assert kinds(refused) == ["Patch", "Create", "Patch"]
    assert said(refused) == [message, None]

    stored = with_failure(template(networkPolicy=rules), message)
    again = plan(stored, last_error=REFUSED)
    assert kinds(again) == ["Create", "Patch"] and said(again) == [None], "said already"
    quiet = plan(stored)
    assert kinds(quiet) == ["Create", "Patch"] and said(quiet) == [None]

    fixed = with_failure(template(networkPolicy={"egress": []}), message)
    done = plan(fixed, policy(created_spec(plan(template(networkPolicy={"egress": []})))))
    assert said(done) == [None] and kinds(done) == ["Patch"]
    assert said(plan(template(), policy(created_spec(plan(template()))))) == []


def test_a_policy_write_that_keeps_failing_is_said_once_it_persists() -> None:
    broken = f"create {NP}: InternalError (500): Internal error occurred: etcd is unhappy"
    assert said(plan(template(), last_error=broken)) == []
    assert said(plan(template(), last_error=broken, failure_persists=True)) == [
        "writing NetworkPolicy python-network-policy keeps failing (InternalError, 500): "
        "Internal error occurred: etcd is unhappy",
        None,
    ]
    drifted = policy({"podSelector": {}})
    update = f"update {NP}: Forbidden (403): networkpolicies is forbidden: denied by policy"
    result = plan(template(), drifted, last_error=update)
    assert kinds(result) == ["Patch", "Replace", "Patch"]
    assert said(result) == [
        "the API server refuses NetworkPolicy python-network-policy (Forbidden, 403): "
        "networkpolicies is forbidden: denied by policy",
        None,
    ]
    unmanaged = with_failure(template(networkPolicyManagement="Unmanaged"), "x")
    assert said(plan(unmanaged)) == [None], "nothing to write: nothing wrong"
