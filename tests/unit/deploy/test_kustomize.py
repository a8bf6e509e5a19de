"""The kustomizations render, and what they render is what a cluster should be given."""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath

import pytest
import yaml

from tests.unit.deploy.manifests import (
    BASE,
    CRDS,
    DEPLOY,
    NAMESPACE,
    NATS_CLIENT_SERVICE,
    NATS_SECRET,
    components,
    enable_components,
    env_of,
    final_stage,
    nats_conf_value,
    nats_users,
    of_kind,
    password_variable,
    render,
    render_uncached,
    service_container,
    service_of,
    services_deployed,
)

CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}


def test_base_renders_objects_that_all_have_identity() -> None:
    docs = render(BASE)

    assert docs
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), doc


def test_every_namespaced_object_of_base_is_in_sandbus_system() -> None:
    for doc in render(BASE):
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], doc["metadata"]["name"]
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]
    assert list(of_kind(render(BASE), "Namespace")) == [NAMESPACE]


def test_nothing_secret_is_committed() -> None:
    # The passwords come from a Secret the operator creates; the base must not carry one with
    # placeholder values that would work.
    for directory in (BASE, DEPLOY):
        assert not of_kind(render(directory), "Secret")


def test_deploy_root_adds_every_generated_crd_to_base() -> None:
    docs = render(DEPLOY)
    crds = of_kind(docs, "CustomResourceDefinition")
    on_disk = {
        doc["metadata"]["name"]: doc
        for path in sorted(CRDS.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    }

    assert crds == on_disk, "list every file of deploy/crds in deploy/kustomization.yaml"
    rest = [doc for doc in docs if doc["kind"] != "CustomResourceDefinition"]
    assert rest == list(render(BASE))


def test_nats_runs_with_the_config_and_the_password_secret() -> None:
    docs = render(BASE)
    (statefulset,) = of_kind(docs, "StatefulSet").values()
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config_maps = of_kind(docs, "ConfigMap")
    (config_name,) = [name for name in config_maps if name.startswith("sandbus-nats-config")]

    assert container["args"][:2] == ["--config", "/etc/nats/nats.conf"]
    assert {"secretRef": {"name": NATS_SECRET}} in container["envFrom"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_name
    assert "nats.conf" in config_maps[config_name]["data"]
    store = container["args"][container["args"].index("--store_dir") + 1]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert mounts[store] == "data"
    # The root filesystem is read-only: the pid file (for the preStop signal) needs a volume.
    assert str(PurePosixPath(nats_conf_value("pid_file")).parent) in mounts
    assert [claim["metadata"]["name"] for claim in statefulset["spec"]["volumeClaimTemplates"]] == [
        "data"
    ]


def test_the_client_service_selects_the_nats_pods() -> None:
    docs = render(BASE)
    (statefulset,) = of_kind(docs, "StatefulSet").values()
    services = of_kind(docs, "Service")
    labels = statefulset["spec"]["template"]["metadata"]["labels"]

    for service in services.values():
        assert service["spec"]["selector"].items() <= labels.items()
    assert statefulset["spec"]["serviceName"] in services
    assert services[statefulset["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"
    assert {port["port"] for port in services[NATS_CLIENT_SERVICE]["spec"]["ports"]} == {4222}


@pytest.mark.parametrize("component", [None, *components()])
def test_every_service_deployment_is_locked_down(component: str | None, tmp_path: Path) -> None:
    if component is None:
        deployments = of_kind(render(BASE), "Deployment")
    else:
        copy = tmp_path / "deploy"
        shutil.copytree(DEPLOY, copy)
        enable_components(copy, [component])
        deployments = {
            name: doc
            for name, doc in of_kind(render_uncached(copy / "base"), "Deployment").items()
            if name == f"sandbus-{component}"
        }
        assert deployments, f"components/{component} adds no Deployment sandbus-{component}"
    image_uid = int(
        next(arguments for keyword, arguments in final_stage() if keyword == "USER").split(":")[0]
    )
    for name, deployment in deployments.items():
        service = service_of(deployment)
        pod = deployment["spec"]["template"]["spec"]
        container = service_container(deployment)

        assert name == f"sandbus-{service}"
        assert deployment["metadata"]["namespace"] == NAMESPACE
        assert pod["serviceAccountName"] == f"sandbus-{service}"
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == image_uid
        assert pod["terminationGracePeriodSeconds"] > 0
        for each in [*pod.get("initContainers", []), *pod["containers"]]:
            # The base's image transformer reached it (a component outside base would miss it).
            assert each["image"].startswith("sandbus:"), each["image"]
            assert each["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }
            resources = each["resources"]
            assert {"cpu", "memory"} <= resources["requests"].keys()
            assert {"cpu", "memory"} <= resources["limits"].keys()
        env = env_of(container)
        secret = env["SANDBUS_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert secret == {"name": NATS_SECRET, "key": password_variable(service)}
        assert env["SANDBUS_NATS_URL"]["value"] == (
            f"nats://{service}:$(SANDBUS_NATS_PASSWORD)@{NATS_CLIENT_SERVICE}:4222"
        )
        assert service in nats_users()


@pytest.mark.parametrize("service", ["watcher", "sandbox"])
def test_an_active_passive_service_runs_two_replicas_and_survives_a_drain(service: str) -> None:
    # One leads through its Lease, the other stands by; a rollout or a drain never leaves none.
    docs = render(BASE)
    deployment = services_deployed(docs)[service]
    budgets = of_kind(docs, "PodDisruptionBudget")

    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert any(
        budget["spec"]["selector"]["matchLabels"] == selector
        and budget["spec"]["minAvailable"] == 1
        for budget in budgets.values()
    )


def test_only_the_watchers_init_container_has_the_provisioner_password() -> None:
    for deployment in of_kind(render(BASE), "Deployment").values():
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"]:
            keys = {
                entry["valueFrom"]["secretKeyRef"]["key"]
                for entry in container.get("env", [])
                if "secretKeyRef" in entry.get("valueFrom", {})
            }
            assert password_variable("provisioner") not in keys
            assert "envFrom" not in container
        for init in pod.get("initContainers", []):
            assert env_of(init)["SANDBUS_NATS_URL"]["value"].startswith("nats://provisioner:")


def test_enabling_every_component_renders_one_deployment_each(tmp_path: Path) -> None:
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    enable_components(copy, components())

    deployed = services_deployed(render_uncached(copy / "base"))

    assert set(components()) <= set(deployed)
    assert set(deployed) == set(services_deployed(render(BASE))) | set(components())
