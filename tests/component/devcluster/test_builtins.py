"""Row 22 (Pods) of docs/devcluster.md §2 and the other built-in kinds' server rules."""

from __future__ import annotations

import base64
import ipaddress

import aiohttp
from kubernetes_asyncio import client as k8s

from tests.component.devcluster.samples import failure, pod


async def test_pod_server_defaults(core: k8s.CoreV1Api) -> None:
    """Row 22 (SetDefaults_Pod + admission): restartPolicy, grace period, dnsPolicy, scheduler,
    service account, image pull policy, tolerations; status Pending with a qosClass."""
    created = await core.create_namespaced_pod(
        "default",
        pod(
            "p",
            containers=[
                {"name": "a", "image": "nginx"},
                {"name": "b", "image": "nginx:1.25"},
            ],
        ),
    )
    spec = created.spec
    assert spec.restart_policy == "Always"
    assert spec.termination_grace_period_seconds == 30
    assert spec.dns_policy == "ClusterFirst"
    assert spec.scheduler_name == "default-scheduler"
    assert spec.service_account_name == "default"
    assert [c.image_pull_policy for c in spec.containers] == ["Always", "IfNotPresent"]
    assert {t.key for t in spec.tolerations} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    assert created.status.phase == "Pending"
    assert created.status.qos_class == "BestEffort"


async def test_pod_qos_class(core: k8s.CoreV1Api) -> None:
    """Row 22: Guaranteed when limits equal requests for cpu and memory, else Burstable."""
    resources = {"limits": {"cpu": "1", "memory": "1Gi"}}
    guaranteed = await core.create_namespaced_pod(
        "default", pod("g", containers=[{"name": "a", "image": "x:1", "resources": resources}])
    )
    assert guaranteed.status.qos_class == "Guaranteed"
    burstable = await core.create_namespaced_pod(
        "default",
        pod(
            "b", containers=[{"name": "a", "image": "x:1", "resources": {"requests": {"cpu": "1"}}}]
        ),
    )
    assert burstable.status.qos_class == "Burstable"


async def test_pod_spec_is_immutable_except_images(core: k8s.CoreV1Api) -> None:
    """Row 22 (ValidatePodUpdate): an image may change; anything else is 422 "pod updates may
    not change fields other than ..."."""
    await core.create_namespaced_pod("default", pod("p"))
    changed = await core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "app", "image": "nginx:1.26"}]}}
    )
    assert changed.spec.containers[0].image == "nginx:1.26"
    status, error = await failure(
        core.patch_namespaced_pod("p", "default", {"spec": {"restartPolicy": "Never"}})
    )
    assert status == 422
    assert error["details"]["causes"][0]["field"] == "spec"
    assert error["message"].startswith(
        'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than '
        "`spec.containers[*].image`"
    )


async def test_pod_validation(core: k8s.CoreV1Api) -> None:
    """Row 22: containers are required; names are DNS labels."""
    body = pod("p", containers=[])
    status, error = await failure(core.create_namespaced_pod("default", body))
    assert status == 422
    assert error["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
    ]


async def test_pod_status_endpoint_keeps_the_spec(core: k8s.CoreV1Api) -> None:
    """Row 22 (pod status strategy): pods/status changes status (and labels), never spec."""
    await core.create_namespaced_pod("default", pod("p"))
    updated = await core.patch_namespaced_pod_status(
        "p",
        "default",
        {"status": {"phase": "Running"}, "spec": {"restartPolicy": "Never"}},
    )
    assert updated.status.phase == "Running"
    assert updated.spec.restart_policy == "Always"


async def test_pod_binding_sets_the_node_once(http: aiohttp.ClientSession) -> None:
    """Row 22 (pods/binding): Binding sets spec.nodeName and PodScheduled; a second is 409."""
    await http.post("/api/v1/namespaces/default/pods", json=pod("p"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    async with http.post("/api/v1/namespaces/default/pods/p/binding", json=binding) as response:
        assert response.status == 201
        assert (await response.json())["status"] == "Success"
    async with http.get("/api/v1/namespaces/default/pods/p") as response:
        bound = await response.json()
    assert bound["spec"]["nodeName"] == "node-1"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    async with http.post("/api/v1/namespaces/default/pods/p/binding", json=binding) as response:
        assert response.status == 409
        assert (await response.json())["message"] == (
            'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to '
            'node "node-1"'
        )


async def test_service_gets_a_cluster_ip_unless_headless(core: k8s.CoreV1Api) -> None:
    """Services get a clusterIP from 10.96.0.0/12 unless clusterIP: None; ports default to TCP
    and targetPort = port."""
    port = {"port": 80}
    normal = await core.create_namespaced_service(
        "default", {"metadata": {"name": "web"}, "spec": {"ports": [port], "selector": {"a": "b"}}}
    )
    ip = normal.spec.cluster_ip
    assert ipaddress.ip_address(ip) in ipaddress.ip_network("10.96.0.0/12")
    assert normal.spec.cluster_ips == [ip]
    assert normal.spec.type == "ClusterIP"
    assert normal.spec.ports[0].protocol == "TCP"
    assert normal.spec.ports[0].target_port == 80
    headless = await core.create_namespaced_service(
        "default", {"metadata": {"name": "db"}, "spec": {"clusterIP": "None", "ports": [port]}}
    )
    assert headless.spec.cluster_ip == "None"
    kubernetes = await core.read_namespaced_service("kubernetes", "default")
    assert kubernetes.spec.cluster_ip == "10.96.0.1"


async def test_service_cluster_ip_is_immutable(core: k8s.CoreV1Api) -> None:
    """Services: spec.clusterIP may not change once set."""
    created = await core.create_namespaced_service(
        "default", {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    )
    other = "10.96.0.2" if created.spec.cluster_ip != "10.96.0.2" else "10.96.0.3"
    status, error = await failure(
        core.patch_namespaced_service("web", "default", {"spec": {"clusterIP": other}})
    )
    assert status == 422
    assert error["details"]["causes"][0]["message"].endswith("may not change once set")


async def test_job_defaults(http: aiohttp.ClientSession) -> None:
    """batch/v1 Job defaults: completions/parallelism 1, backoffLimit 6, a generated selector
    and template labels; generation 1; restartPolicy must be Never or OnFailure."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            }
        },
    }
    async with http.post("/apis/batch/v1/namespaces/default/jobs", json=job) as response:
        assert response.status == 201
        created = await response.json()
    spec = created["spec"]
    uid = created["metadata"]["uid"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"]["job-name"] == "j"
    assert created["metadata"]["generation"] == 1
    job["metadata"]["name"] = "bad"
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    async with http.post("/apis/batch/v1/namespaces/default/jobs", json=job) as response:
        assert response.status == 422


async def test_secret_string_data_folds_into_data(core: k8s.CoreV1Api) -> None:
    """Secrets: stringData is merged into base64 data on write; type defaults to Opaque."""
    created = await core.create_namespaced_secret(
        "default", {"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}}
    )
    assert created.type == "Opaque"
    assert base64.b64decode(created.data["password"]) == b"hunter2"
    assert created.string_data is None


async def test_configmap_immutable(core: k8s.CoreV1Api) -> None:
    """ConfigMaps with immutable: true refuse data changes."""
    await core.create_namespaced_config_map(
        "default", {"metadata": {"name": "c"}, "data": {"k": "v"}, "immutable": True}
    )
    status, error = await failure(
        core.patch_namespaced_config_map("c", "default", {"data": {"k": "w"}})
    )
    assert status == 422
    assert error["details"]["causes"][0]["field"] == "data"


async def test_events_are_one_resource_in_two_versions(http: aiohttp.ClientSession) -> None:
    """core/v1 and events.k8s.io/v1 Events share storage, with the renamed fields converted."""
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started",
        "message": "hello",
        "type": "Normal",
    }
    async with http.post("/api/v1/namespaces/default/events", json=event) as response:
        assert response.status == 201
    async with http.get("/apis/events.k8s.io/v1/namespaces/default/events/e1") as response:
        seen = await response.json()
    assert seen["apiVersion"] == "events.k8s.io/v1"
    assert seen["note"] == "hello"
    assert seen["regarding"] == {"kind": "Pod", "name": "p", "namespace": "default"}


async def test_leases_and_network_policies(http: aiohttp.ClientSession) -> None:
    """coordination.k8s.io Leases and networking.k8s.io NetworkPolicies are served."""
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
    }
    async with http.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", json=lease) as r:
        assert r.status == 201
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "n"},
        "spec": {"podSelector": {}, "egress": [{}]},
    }
    async with http.post(
        "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies", json=policy
    ) as r:
        assert r.status == 201
        created = await r.json()
    assert created["spec"]["policyTypes"] == ["Ingress", "Egress"]
