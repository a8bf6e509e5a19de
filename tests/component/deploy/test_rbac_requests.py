"""Each service's ClusterRole and Roles grant what its code asks of the API server, and no more.

The rights are derived from requests: the five services run as ``sandbus run`` runs them (their
``serve(settings)``, in-process as ``sandbus up`` runs them), each with its own ServiceAccount's
token, against the development cluster, and :mod:`.recording` writes down every authorization
each request of theirs needs. One small scenario drives them through what the deployment is for.
A warm pool fills, one claim adopts its member and another, with env, starts cold, and a
Sandbox stands alone with a Service, a PVC and its template's NetworkPolicy. The template's
rules change and then stop being managed, the Sandbox drops its Service and expires, the claims
expire (Retain, Delete) and the pool scales to nothing. An OpenSandbox Pool fills. A BatchSandbox
takes a pooled Pod and gives it back, which the Restart recycler restarts in place (pods/exec),
and the Pool then scales to nothing. Another BatchSandbox has its own Pod, is paused (the
snapshot worker's commit Job) and resumed, and expires. It takes a few seconds.

Then, for each service, against the RBAC objects of the rendered deploy/base, bound as its
Deployment's ServiceAccount is bound:

* every recorded access is allowed, in its namespace and with its name, as the RBAC authorizer
  decides. Anything else fails the test: on a real cluster that request is Forbidden;
* every right granted but never asked for is in :data:`UNEXERCISED`, with the code path that
  needs it although the scenario does not reach it. A right that is neither used nor listed
  is an excess grant: remove it from deploy/base/rbac/<service>.yaml, or list it with its
  reason. An entry the scenario happens to reach in one run is fine: the list holds what the
  scenario does not reliably reach, not what it never could.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from api.objects import Json
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings, WatchSettings
from devtools.natsd import NatsServer
from events.envelope import ObjectKey
from services.cli.run import SERVICES, load_service
from services.runtime.kube import KubeApi, KubeError
from services.runtime.settings import Settings
from tests.component.deploy.recording import RequestRecorder, write_account_kubeconfig
from tests.support.samples import is_ready
from tests.support.stack import FAST_KUBELET, api_client
from tests.support.waiting import until
from tests.unit.deploy.manifests import (
    BASE,
    NAMESPACE,
    authorizes,
    bound_rules,
    granted,
    render,
)

NS = "default"
ACCOUNTS = {service: f"sandbus-{service}" for service in SERVICES}
REGISTRY = "registry.rbac.local/snapshots"
ALLOC_STATUS = "sandbox.opensandbox.io/alloc-status"

CORE, EVENTS, AGENTS = "", "events.k8s.io", "agents.x-k8s.io"
EXTENSIONS, OSB = "extensions.agents.x-k8s.io", "sandbox.opensandbox.io"

_EVENT_READ_BACK = (
    "the read back after an Event's create answered AlreadyExists "
    "(services/runtime/reconcile/executing.py): an Event is named from the pass's clock, so a "
    "pass planned again makes the same one"
)
UNEXERCISED: dict[str, dict[tuple[str, str, str], str]] = {
    "watcher": {},
    "sandbox": {
        (EVENTS, "events", "create"): (
            "the Warning MultiplePods, when a Sandbox finds more than one Pod of its own "
            "(services/sandbox/core/plan.py)"
        ),
        (EVENTS, "events", "get"): _EVENT_READ_BACK,
        (CORE, "persistentvolumeclaims", "patch"): (
            "adopting an orphan PVC of a volume claim template (services/sandbox/core/volumes.py)"
        ),
        (CORE, "persistentvolumeclaims", "delete"): (
            "the same adoption: a change of an object's ownerReferences needs delete on it where "
            "the OwnerReferencesPermissionEnforcement admission plugin is on (the worker never "
            "deletes a PVC: the garbage collector does, with its Sandbox)"
        ),
        (CORE, "services", "patch"): (
            "repairing a Service that drifted from the Sandbox's "
            "(services/sandbox/core/headless.py)"
        ),
        (CORE, "services", "update"): (
            "adopting an unowned Service of the Sandbox's name, a full update (headless.py)"
        ),
        (AGENTS, "sandboxes", "patch"): (
            "the agents.x-k8s.io/pod-name annotation when the Pod is not named like its Sandbox "
            "(a Pod adopted under another name, or forgotten: services/sandbox/core/pods.py), "
            "and the trace context when tracing is on (plan.py)"
        ),
    },
    "pool": {
        (EVENTS, "events", "create"): (
            "WarmPoolNotProgressing while members cannot be scheduled, and WarmPoolProgressing "
            "when they can again (services/pool/core/plan.py)"
        ),
        (EVENTS, "events", "get"): _EVENT_READ_BACK,
        (AGENTS, "sandboxes", "patch"): (
            "adopting an orphan member of the warm pool and labelling it warm, patches carrying "
            "its resourceVersion (services/pool/core/plan.py)"
        ),
    },
    "claim": {
        ("networking.k8s.io", "networkpolicies", "delete"): (
            "the legacy per-claim NetworkPolicy of older controllers, deleted when the claim "
            "controls it (services/claim/core/plan.py, plan_claim)"
        ),
    },
    "snapshot": {},
}
"""Service → (apiGroup, resource, verb) granted to it that the scenario does not reliably ask for
→ the code path that needs it."""


# --- the scenario --------------------------------------------------------------------------

PAST = "2020-01-01T00:00:00Z"
STEP_BOUND = 20.0
"""Seconds each step may take (the whole scenario takes a few)."""


def template_body() -> Json:
    return {
        "apiVersion": f"{EXTENSIONS}/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "rbac", "namespace": NS},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
            # The template's NetworkPolicy is the sandbox worker's to write.
            "networkPolicyManagement": "Managed",
            "networkPolicy": {"egress": [{"ports": [{"protocol": "UDP", "port": 53}]}]},
            # So that a claim with env may use it: it starts cold.
            "envVarsInjectionPolicy": "Allowed",
        },
    }


def warm_pool_body() -> Json:
    return {
        "apiVersion": f"{EXTENSIONS}/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "rbac", "namespace": NS},
        "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "rbac"}},
    }


def claim_body(name: str, **spec: Any) -> Json:
    return {
        "apiVersion": f"{EXTENSIONS}/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"warmPoolRef": {"name": "rbac"}, **spec},
    }


def sandbox_body() -> Json:
    return {
        "apiVersion": f"{AGENTS}/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "alone", "namespace": NS},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
            "service": True,
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "scratch"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }


def pool_body() -> Json:
    return {
        "apiVersion": f"{OSB}/v1alpha1",
        "kind": "Pool",
        "metadata": {
            "name": "rbac",
            "namespace": NS,
            # What the Restart recycler runs in a returned Pod (the development cluster's
            # runtime ends PID 1 on `kill 1`, and its kubelet starts the container again). The
            # buffer has room for that Pod, so that it is restarted, not scaled in.
            "annotations": {
                "sandbox.opensandbox.io/restart-config": (
                    '{"retryInterval":"1s","maxRetries":3,"restartCommand":["kill","1"]}'
                )
            },
        },
        "spec": {
            "template": {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}},
            "capacitySpec": {"bufferMin": 1, "bufferMax": 2, "poolMin": 1, "poolMax": 2},
            "scaleStrategy": {"maxUnavailable": "100%"},
            "recycleStrategy": {"type": "Restart"},
        },
    }


def batch_body(name: str, *, pooled: bool) -> Json:
    spec: Json = {"replicas": 1}
    if pooled:
        spec["poolRef"] = "rbac"
    else:
        spec["template"] = {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}}
    return {
        "apiVersion": f"{OSB}/v1alpha1",
        "kind": "BatchSandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


class World:
    """The test's view of the cluster, through its own client (not recorded)."""

    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube

    async def get(self, kind: str, name: str) -> Json | None:
        try:
            return await self.kube.get(ObjectKey(kind, NS, name))
        except KubeError as error:
            if error.not_found:
                return None
            raise

    async def patch(self, kind: str, name: str, patch: Json) -> None:
        await self.kube.patch(ObjectKey(kind, NS, name), patch)

    async def delete(self, kind: str, name: str) -> None:
        await self.kube.delete(ObjectKey(kind, NS, name))

    async def until(self, what: str, check: Callable[[], Awaitable[bool]]) -> None:
        await until(check, within=STEP_BOUND, what=what)

    async def ready(self, kind: str, name: str) -> bool:
        return is_ready(await self.get(kind, name))

    async def gone(self, kind: str, name: str) -> bool:
        return await self.get(kind, name) is None

    async def status(self, kind: str, name: str, field: str) -> Any:
        return (((await self.get(kind, name)) or {}).get("status") or {}).get(field)

    async def allocated(self, name: str) -> list[str]:
        found = await self.get("BatchSandbox", name)
        text = ((found or {}).get("metadata", {}).get("annotations") or {}).get(ALLOC_STATUS)
        return list(json.loads(text)["pods"]) if text else []

    async def restarted(self, pod: str) -> bool:
        found = await self.get("Pod", pod)
        statuses = ((found or {}).get("status") or {}).get("containerStatuses") or ()
        return any(int(status.get("restartCount") or 0) > 0 for status in statuses)

    async def no_sandboxes(self) -> bool:
        return not await self.kube.list("Sandbox", NS)

    async def egress(self, policy: str) -> list[Json]:
        found = await self.get("NetworkPolicy", policy)
        return list(((found or {}).get("spec") or {}).get("egress") or ())


async def agent_sandbox(world: World) -> None:
    """A warm pool fills; a claim adopts its member and one with env starts cold; a Sandbox
    stands alone; the template's rules change and then go; then everything expires or goes."""
    await world.kube.create(template_body())
    await world.kube.create(warm_pool_body())
    await world.kube.create(sandbox_body())
    await world.until(
        "the warm pool is full",
        lambda: _equals(world.status("SandboxWarmPool", "rbac", "readyReplicas"), 1),
    )
    await world.kube.create(claim_body("warm"))
    await world.kube.create(claim_body("cold", env=[{"name": "MODE", "value": "cold"}]))
    for name in ("warm", "cold"):
        await world.until(f"claim {name} is Ready", lambda n=name: world.ready("SandboxClaim", n))
    await world.until("Sandbox alone is Ready", lambda: world.ready("Sandbox", "alone"))

    # The template's rules change (the policy is replaced), then it stops managing it.
    (policy,) = [p["metadata"]["name"] for p in await world.kube.list("NetworkPolicy", NS)]
    rules = [{"ports": [{"protocol": "TCP", "port": 443}]}]
    await world.patch("SandboxTemplate", "rbac", {"spec": {"networkPolicy": {"egress": rules}}})
    await world.until(
        "the NetworkPolicy follows", lambda: _equals(world.egress(policy), rules, loosely=True)
    )
    await world.patch("SandboxTemplate", "rbac", {"spec": {"networkPolicyManagement": "Unmanaged"}})
    await world.until("the NetworkPolicy goes", lambda: world.gone("NetworkPolicy", policy))

    # A Sandbox drops its Service, then expires with shutdownPolicy Delete.
    await world.patch("Sandbox", "alone", {"spec": {"service": False}})
    await world.until("the Service goes", lambda: world.gone("Service", "alone"))
    await world.patch(
        "Sandbox", "alone", {"spec": {"shutdownTime": PAST, "shutdownPolicy": "Delete"}}
    )
    await world.until("the expired Sandbox deletes itself", lambda: world.gone("Sandbox", "alone"))

    # Claims expire: Retain deletes the claim's Sandbox, Delete the claim.
    warm = await world.get("SandboxClaim", "warm")
    bound = (((warm or {}).get("status") or {}).get("sandbox") or {}).get("name")
    assert bound, warm
    lifecycle = {"shutdownTime": PAST}
    await world.patch(
        "SandboxClaim", "warm", {"spec": {"lifecycle": {**lifecycle, "shutdownPolicy": "Retain"}}}
    )
    await world.until("the retained claim's Sandbox goes", lambda: world.gone("Sandbox", bound))
    await world.patch(
        "SandboxClaim", "cold", {"spec": {"lifecycle": {**lifecycle, "shutdownPolicy": "Delete"}}}
    )
    await world.until(
        "the expired claim deletes itself", lambda: world.gone("SandboxClaim", "cold")
    )

    # The warm pool scales to nothing, which deletes its member.
    await world.patch("SandboxWarmPool", "rbac", {"spec": {"replicas": 0}})
    await world.until("no Sandbox is left", world.no_sandboxes)
    for kind in ("SandboxClaim", "SandboxWarmPool", "SandboxTemplate"):
        name = "warm" if kind == "SandboxClaim" else "rbac"
        await world.delete(kind, name)
        await world.until(f"{kind} {name} goes", lambda k=kind, n=name: world.gone(k, n))


async def opensandbox(world: World) -> None:
    """A Pool fills; a BatchSandbox takes a pooled Pod and gives it back to be restarted in
    place, and the Pool scales to nothing; another has its own Pod, is paused and resumed, and
    expires."""
    await world.kube.create(pool_body())
    await world.kube.create(batch_body("pooled", pooled=True))
    await world.kube.create(batch_body("own", pooled=False))
    for name in ("pooled", "own"):
        await world.until(
            f"BatchSandbox {name} runs",
            lambda n=name: _equals(world.status("BatchSandbox", n, "phase"), "Succeed"),
        )
    (held,) = await world.allocated("pooled")

    # Pause commits the Pod through the snapshot worker's Job; resume brings it back.
    for pause, phase in ((True, "Paused"), (False, "Succeed")):
        await world.patch("BatchSandbox", "own", {"spec": {"pause": pause}})
        await world.until(
            f"BatchSandbox own is {phase}",
            lambda p=phase: _equals(world.status("BatchSandbox", "own", "phase"), p),
        )

    # The pooled Pod goes back to its Pool, which restarts it in place (pods/exec).
    await world.delete("BatchSandbox", "pooled")
    await world.until(f"Pod {held} is restarted in place", lambda: world.restarted(held))
    # The Pool scales to nothing, which deletes its idle Pods.
    nothing = {"bufferMin": 0, "bufferMax": 0, "poolMin": 0, "poolMax": 0}
    await world.patch("Pool", "rbac", {"spec": {"capacitySpec": nothing}})
    await world.until(
        "the Pool scales in", lambda: _equals(world.status("Pool", "rbac", "total"), 0)
    )
    await world.patch("BatchSandbox", "own", {"spec": {"expireTime": PAST}})
    await world.until("the expired BatchSandbox goes", lambda: world.gone("BatchSandbox", "own"))
    await world.delete("Pool", "rbac")
    await world.until("the Pool goes", lambda: world.gone("Pool", "rbac"))


async def _equals(value: Awaitable[Any], wanted: Any, *, loosely: bool = False) -> bool:
    found = await value
    if loosely and isinstance(found, list) and isinstance(wanted, list):
        # The API server adds defaults (a port's protocol is there already).
        return len(found) == len(wanted) and all(
            dict(w).items() <= dict(f).items() for f, w in zip(found, wanted, strict=True)
        )
    return bool(found == wanted)


# --- running the services ------------------------------------------------------------------


@pytest.fixture
def service_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the Deployments give each Pod that matters here: the namespace of their Leases
    # (where the Roles are), and the snapshot worker's registry.
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("SANDBUS_SNAPSHOT_REGISTRY", REGISTRY)
    monkeypatch.delenv("SANDBUS_METRICS_ADDRESS", raising=False)


@contextlib.asynccontextmanager
async def services_running(
    cluster: DevCluster, nats_url: str, tmp_path: Path
) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    tasks: dict[str, asyncio.Task[None]] = {}
    for service, account in ACCOUNTS.items():
        kubeconfig = write_account_kubeconfig(
            tmp_path / f"kubeconfig-{service}", cluster.url, account
        )
        settings = Settings(nats_url=nats_url, kubeconfig=str(kubeconfig))
        tasks[service] = asyncio.create_task(load_service(service)(settings), name=service)
    try:
        yield tasks
    finally:
        for task in tasks.values():
            task.cancel()
        async with asyncio.timeout(20):
            await asyncio.gather(*tasks.values(), return_exceptions=True)


@pytest.mark.timeout(60)
async def test_each_service_is_granted_exactly_what_it_asks_for(
    tmp_path: Path, service_environment: None
) -> None:
    recorder = RequestRecorder(ACCOUNTS.values())
    simulation = SimulationSettings(
        nodes=2,
        pod_ready_delay=0.05,
        options={"kubelet": {**FAST_KUBELET, "job_delay": 0.1}},
    )
    cluster = DevCluster(
        port=0,
        latency=LatencyModel.zero(),
        simulation=simulation,
        watch=WatchSettings(bookmark_interval=1.0, bookmark_before_deadline=0.3, idle_check=0.05),
    )
    recorder.install(cluster)
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        cluster,
        api_client(cluster, tmp_path, "admin") as client,
    ):
        kube = KubeApi(client, field_manager="rbac-test")
        await k8s.CoreV1Api(client).create_namespace({"metadata": {"name": NAMESPACE}})
        async with services_running(cluster, nats_server.url, tmp_path) as tasks:
            world = World(kube)
            await agent_sandbox(world)
            await opensandbox(world)
            for service, task in tasks.items():
                assert not task.done(), f"{service} stopped: {task}"

    docs = render(BASE)
    denied: list[str] = []
    excess: list[str] = []
    for service, account in ACCOUNTS.items():
        rules = bound_rules(docs, account)
        recorded = recorder.of(account)
        denied += sorted(
            {
                f"{service}: {r.access} ({r.check.why} of {r.request})"
                for r in recorded
                if not authorizes(rules, r.access)
            }
        )
        unused = granted(rules) - {r.access.permission for r in recorded}
        excess += [
            f"{service}: {permission}" for permission in sorted(unused - set(UNEXERCISED[service]))
        ]
    assert recorder.elsewhere == [], "requests to paths that are no resource"
    assert denied == [], "requests the RBAC of deploy/base forbids:\n" + "\n".join(denied)
    assert excess == [], (
        "rights granted but never used (remove them, or list them in UNEXERCISED with the code "
        "path that needs them):\n" + "\n".join(excess)
    )


def test_every_right_listed_as_unexercised_is_granted() -> None:
    # A stale entry would hide nothing, but it would claim a need the role no longer has.
    docs = render(BASE)
    assert set(UNEXERCISED) == set(ACCOUNTS)
    for service, rights in UNEXERCISED.items():
        assert set(rights) <= granted(bound_rules(docs, ACCOUNTS[service])), service
