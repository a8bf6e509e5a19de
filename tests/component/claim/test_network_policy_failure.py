"""A SandboxClaim whose template's NetworkPolicy the API server refuses says so, on the claim
(issue #32, docs/conditions.md §6, §7), against the real thing: the development cluster
refusing the sandbox worker's NetworkPolicy creates with 403 Forbidden (as an admission policy
would: the development cluster does not validate a policy's rules itself), a nats-server with
the bus, the watcher, the sandbox, pool and claim workers, all in this process, a real API
client and a real ``kubectl describe``.

The template's reconciler says why on the template (the annotation
``sandbus.io/network-policy-failure``, the API server's words); the claim of a pool made from
it carries ``NetworkPolicyFailure``/``NetworkPolicyNotApplied`` and one Warning Event of that
reason, while its Ready stays its Sandbox's. Once the API server lets the policy through, the
policy exists, the annotation goes, and so does the claim's condition.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.cluster.http.faults import FaultRule
from events.envelope import ObjectKey
from services.domain.agentsandbox.policy_failure import ANNOTATION_NETWORK_POLICY_FAILURE
from services.runtime.kube import KubeApi, KubeError
from services.sandbox.core.plan import CONTROLLER_NAME as SANDBOX_CONTROLLER
from tests.component.pool.harness import (
    WARM_POOL_VERSION,
    template_body,
    true_condition,
    warm_pool_body,
)
from tests.support.events import events_about, warned_and_described
from tests.support.kubectl import KUBECTL
from tests.support.samples import NS, Json
from tests.support.stack import (
    api_client,
    bounded,
    claim_worker_running,
    cluster_and_watcher,
    pool_worker_running,
    sandbox_worker_running,
)
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason=f"no kubectl at {KUBECTL}")

WITHIN = 30.0
TEMPLATE, POOL, CLAIM = "guarded", "guarded-pool", "guarded-claim"
POLICY = f"{TEMPLATE}-network-policy"
DENIED = 'admission webhook "policy.example.com" denied the request: egress to 0.0.0.0/0'


def policy_failure(claim: Json | None) -> Json | None:
    return true_condition(claim, "NetworkPolicyFailure")


async def test_a_claim_whose_template_policy_is_refused_says_so_until_it_is_written(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        sandbox_worker_running(cluster, js, bus, tmp_path),
        pool_worker_running(cluster, js, bus, tmp_path),
        claim_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        fault = cluster.faults.add(
            FaultRule(
                "error",
                verb="create",
                resource="networkpolicies",
                namespace=NS,
                field_manager=SANDBOX_CONTROLLER,
                code=403,
                message=DENIED,
            )
        )
        await kube.create(template_body(TEMPLATE, {"name": "main", "image": "python:3.12"}))
        await kube.create(warm_pool_body(POOL, TEMPLATE, 1))
        await kube.create(
            {
                "apiVersion": WARM_POOL_VERSION,
                "kind": "SandboxClaim",
                "metadata": {"name": CLAIM, "namespace": NS},
                "spec": {"warmPoolRef": {"name": POOL}},
            }
        )
        key = ObjectKey("SandboxClaim", NS, CLAIM)

        async def reported() -> Json | None:
            return policy_failure(await kube.get(key))

        found = await until(reported, within=WITHIN)
        said = f"the API server refuses NetworkPolicy {POLICY} (Forbidden, 403): {DENIED}"
        assert found["reason"] == "NetworkPolicyNotApplied"
        assert found["message"] == (
            f'SandboxTemplate "{TEMPLATE}" cannot have its NetworkPolicy: {said}. Its sandboxes '
            "run without the policy meanwhile; fix the template's spec.networkPolicy (or what "
            "refuses it)"
        )
        template = await kube.get(ObjectKey("SandboxTemplate", NS, TEMPLATE))
        assert template["metadata"]["annotations"][ANNOTATION_NETWORK_POLICY_FAILURE] == said

        await warned_and_described(
            kube,
            cluster,
            tmp_path,
            "SandboxClaim",
            CLAIM,
            condition="NetworkPolicyFailure",
            reason="NetworkPolicyNotApplied",
            message=found["message"],
            within=WITHIN,
        )

        # The API server lets the policy through: it is written, and the claim stops saying so.
        cluster.faults.remove(fault.id)

        async def cleared() -> Json | None:
            claim = await kube.get(key)
            try:
                await kube.get(ObjectKey("NetworkPolicy", NS, POLICY))
            except KubeError as error:
                assert error.status == 404, error
                return None
            return claim if policy_failure(claim) is None else None

        await until(cleared, within=WITHIN)
        template = await kube.get(ObjectKey("SandboxTemplate", NS, TEMPLATE))
        assert ANNOTATION_NETWORK_POLICY_FAILURE not in (
            template["metadata"].get("annotations") or {}
        )
        warnings = await events_about(
            kube, "SandboxClaim", CLAIM, reason="NetworkPolicyNotApplied", type="Warning"
        )
        assert len(warnings) == 1, "one Warning for the one appearance"
