"""``plan_template``: one reconcile of one SandboxTemplate, as a pure function
(docs/agent-sandbox.md §3.1; upstream ``SandboxTemplateReconciler``).

1. The template carries ``agents.x-k8s.io/sandbox-template-ref-hash = NameHash(name)``, the
   label that pool- and claim-made Sandboxes (and their Pods) carry too; it is merge-patched
   on when missing or wrong.
2. A template being deleted gets nothing more: the garbage collector removes its
   NetworkPolicy through the owner reference.
3. The shared NetworkPolicy is ``<template>-network-policy`` in the template's namespace.
   ``networkPolicyManagement: Unmanaged``: it is deleted if, and only if, this template
   controls it; a NetworkPolicy of that name that someone else made is never touched.
4. ``Managed`` (the default): the desired spec selects the template's Pods by the ref-hash
   label, with policy types Ingress and Egress, and either the template's own rules or the
   secure default: ingress only from ``app=sandbox-router`` Pods in the namespace named
   ``agent-sandbox-system``; egress to the public internet only (all of IPv4 except
   10/8, 172.16/12, 192.168/16 and link-local 169.254/16, which also blocks the cluster DNS;
   all of IPv6 except fc00::/7 and fe80::/10).
5. A NetworkPolicy of that name that the template does not control is an error (retried with
   backoff; nothing is overwritten). One it controls is updated with a full Update when its
   spec differs semantically (after the defaults the API server applies), conditional on the
   resourceVersion it was read at: a 409 Conflict (someone wrote it meanwhile) reads it again
   and plans anew. A missing one is created, controlled by the template.
6. sandbus's (issue #32): while the policy cannot be written, the template says why in the
   annotation ``sandbus.io/network-policy-failure``
   (:mod:`services.domain.agentsandbox.policy_failure`), written before the write is tried
   again: the API server's words for a create or update of the policy that it refused in the
   previous pass, or that keeps failing (``failure_persists``), or the error of step 5. It is
   removed by the pass whose write of the policy goes through (right after it: the echo of our
   own write wakes nobody), or that finds the policy as desired (or Unmanaged). The claims of
   its pools report it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from api.agents import EXTENSIONS_GROUP, VERSION, SandboxTemplate
from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash
from api.objects import Json, controller_reference, is_deleting, labels_of, uid_of
from events.envelope import ObjectKey
from services.domain.agentsandbox.policy_failure import (
    ANNOTATION_NETWORK_POLICY_FAILURE,
    network_policy_failure,
)
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Plan, Replace
from services.runtime.reconcile.failures import reportable
from services.sandbox.core.objects import Ownership, ownership
from services.sandbox.core.observation import TemplateObservation, network_policy_name

__all__ = [
    "desired_network_policy_spec",
    "plan_template",
    "same_spec",
    "secure_default_rules",
]

ROUTER_NAMESPACE = "agent-sandbox-system"


def secure_default_rules() -> tuple[list[Json], list[Json]]:
    """The ingress and egress rules of the secure default."""
    ingress = [
        {
            "from": [
                {
                    "podSelector": {"matchLabels": {"app": "sandbox-router"}},
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": ROUTER_NAMESPACE}
                    },
                }
            ]
        }
    ]
    egress = [
        {
            "to": [
                {
                    "ipBlock": {
                        "cidr": "0.0.0.0/0",
                        "except": [
                            "10.0.0.0/8",
                            "172.16.0.0/12",
                            "192.168.0.0/16",
                            "169.254.0.0/16",
                        ],
                    }
                },
                {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}},
            ]
        }
    ]
    return ingress, egress


def desired_network_policy_spec(template: SandboxTemplate) -> Json:
    spec: Json = {
        "podSelector": {
            "matchLabels": {
                LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(template.metadata.name or "")
            }
        },
        "policyTypes": ["Ingress", "Egress"],
    }
    custom = template.spec.network_policy
    if custom is None:
        spec["ingress"], spec["egress"] = secure_default_rules()
    else:
        if custom.ingress is not None:
            spec["ingress"] = copy.deepcopy(custom.ingress)
        if custom.egress is not None:
            spec["egress"] = copy.deepcopy(custom.egress)
    return spec


def _semantic(value: Any) -> Any:
    """Empty lists, maps and nulls read as absent (apimachinery's semantic equality)."""
    if isinstance(value, Mapping):
        kept = {key: _semantic(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (None, [], {})}
    if isinstance(value, list):
        return [_semantic(item) for item in value]
    return value


def _with_port_defaults(spec: Any) -> Any:
    """``spec`` with the default the API server gives a rule's port: protocol TCP."""
    spec = copy.deepcopy(spec) if isinstance(spec, Mapping) else {}
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction) or ():
            for port in (rule.get("ports") if isinstance(rule, dict) else None) or ():
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
    return spec


def same_spec(existing: Any, desired: Json) -> bool:
    """Whether a stored NetworkPolicy spec already says what ``desired`` says."""
    return bool(_semantic(_with_port_defaults(existing)) == _semantic(_with_port_defaults(desired)))


def plan_template(observation: TemplateObservation, now: datetime) -> Plan:
    del now  # the template controller does nothing by the clock
    if observation.template is None:
        return Plan(reason="the SandboxTemplate is gone; its NetworkPolicy goes with it")
    try:
        template = msgspec.convert(observation.template, SandboxTemplate)
    except msgspec.ValidationError as error:
        return Plan(
            reason="the object does not read as a SandboxTemplate",
            error=f"cannot read the SandboxTemplate: {error}",
        )
    name = template.metadata.name or ""
    namespace = template.metadata.namespace or ""
    key = ObjectKey("SandboxTemplate", namespace, name)
    actions: list[Action] = []
    ref_hash = name_hash(name)
    if labels_of(observation.template).get(LABEL_SANDBOX_TEMPLATE_REF_HASH) != ref_hash:
        actions.append(
            Patch(
                key,
                {"metadata": {"labels": {LABEL_SANDBOX_TEMPLATE_REF_HASH: ref_hash}}},
                why="label the template with its ref hash",
            )
        )
    if template.metadata.deletion_timestamp:
        return Plan(actions=tuple(actions), reason="the SandboxTemplate is being deleted")

    policy_name = network_policy_name(name)
    policy_key = ObjectKey("NetworkPolicy", namespace, policy_name)
    policy = observation.network_policy
    uid = template.metadata.uid or ""
    owner = ownership(policy, uid) if policy is not None else None

    if template.spec.network_policy_management == "Unmanaged":
        _say(observation, key, actions, None)
        if policy is not None and owner is Ownership.OWNED and not is_deleting(policy):
            actions.append(
                Delete(policy_key, uid=uid_of(policy), why="networkPolicyManagement is Unmanaged")
            )
            return Plan(tuple(actions), reason="Unmanaged: deleting the template's NetworkPolicy")
        reason = (
            f"Unmanaged: NetworkPolicy {policy_name} is not the template's and is left alone"
            if policy is not None and owner is not Ownership.OWNED
            else "Unmanaged: no NetworkPolicy to manage"
        )
        return Plan(tuple(actions), reason=reason)
    failed = _failed_write(observation, policy_key)

    desired = desired_network_policy_spec(template)
    if policy is None:
        body: Json = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {
                "name": policy_name,
                "namespace": namespace,
                "ownerReferences": [
                    controller_reference(
                        f"{EXTENSIONS_GROUP}/{VERSION}", "SandboxTemplate", name, uid
                    )
                ],
            },
            "spec": desired,
        }
        _say(observation, key, actions, failed, writes=True)
        actions.append(Create(body, why="create the template's NetworkPolicy"))
        _unsay(observation, key, actions, failed)
        return Plan(tuple(actions), reason="Managed: creating the shared NetworkPolicy")
    if owner is not Ownership.OWNED:
        foreign = (
            f'NetworkPolicy "{policy_name}" already exists and is not controlled by '
            f'SandboxTemplate "{name}"; delete or rename it to let the template manage it'
        )
        _say(observation, key, actions, foreign, writes=True)
        return Plan(
            tuple(actions),
            reason="Managed, but the NetworkPolicy of that name belongs to someone else",
            error=foreign,
        )
    if same_spec(policy.get("spec"), desired):
        _say(observation, key, actions, None)
        return Plan(tuple(actions), reason="Managed: the NetworkPolicy is as desired")
    _say(observation, key, actions, failed, writes=True)
    updated = copy.deepcopy(policy)
    updated["spec"] = desired
    actions.append(Replace(updated, why="the template's rules changed", on_conflict="refresh"))
    _unsay(observation, key, actions, failed)
    return Plan(tuple(actions), reason="Managed: updating the drifted NetworkPolicy")


def _failed_write(observation: TemplateObservation, policy: ObjectKey) -> str | None:
    """The API server's words for the previous pass's write of the template's NetworkPolicy, if
    it refused it, or if it keeps failing (None: neither)."""
    failed = reportable(observation.last_error, persists=observation.failure_persists)
    if failed is None or failed.target != policy or failed.verb not in ("create", "update"):
        return None
    answer = f" ({failed.reason}, {failed.code})" if failed.code is not None else ""
    if failed.refused:
        return f"the API server refuses NetworkPolicy {policy.name}{answer}: {failed.anonymous()}"
    return f"writing NetworkPolicy {policy.name} keeps failing{answer}: {failed.anonymous()}"


def _say(
    observation: TemplateObservation,
    key: ObjectKey,
    actions: list[Action],
    failure: str | None,
    *,
    writes: bool = False,
) -> None:
    """Put the template's ``network-policy-failure`` annotation right before the pass writes
    the policy (module doc, step 6): ``failure`` when there is one; without one, removed when
    the pass has no write of the policy to make (it is as desired, or not ours to manage), kept
    while one is under way (:func:`_unsay` removes it once that goes through)."""
    current = network_policy_failure(observation.template)
    wanted = failure if failure is not None else (current if writes else None)
    if wanted != current:
        actions.append(_annotate(key, wanted))


def _unsay(
    observation: TemplateObservation, key: ObjectKey, actions: list[Action], failure: str | None
) -> None:
    """After the policy's write: the annotation goes, if it is there (the runtime stops the pass
    at a write that fails, and this one is not made)."""
    if failure is not None or network_policy_failure(observation.template) is not None:
        actions.append(_annotate(key, None))


def _annotate(key: ObjectKey, failure: str | None) -> Patch:
    return Patch(
        key,
        {"metadata": {"annotations": {ANNOTATION_NETWORK_POLICY_FAILURE: failure}}},
        why=f"say why its NetworkPolicy is not written: {failure}"
        if failure is not None
        else "its NetworkPolicy is written",
    )
