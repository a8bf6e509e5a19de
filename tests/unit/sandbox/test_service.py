"""A Sandbox's headless Service and its ports (docs/agent-sandbox.md §2.3 to §2.5)."""

from __future__ import annotations

from typing import Any

import pytest

from api.keys import ANNOTATION_POD_NAME, LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH, name_hash
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Create, Delete, Patch, Replace
from services.sandbox.core.headless import ServicePlan, plan_service, service_ports
from services.sandbox.core.plan import plan_sandbox, read_sandbox
from tests.unit.sandbox.samples import (
    NOW,
    FakeCluster,
    observation,
    owned_pod,
    owner_ref,
    sandbox,
    service,
    status_written,
)

HASH = name_hash("sb")
SELECTOR = {LABEL_SANDBOX_NAME_HASH: HASH}


def ports_of(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> Any:
    sb = sandbox(containers=containers)
    if init is not None:
        sb["spec"]["podTemplate"]["spec"]["initContainers"] = init
    return service_ports(read_sandbox(sb).spec)


def container(*ports: dict[str, Any], name: str = "app") -> dict[str, Any]:
    return {"name": name, "image": "x", "ports": list(ports)}


def plan(sb: dict[str, Any], existing: dict[str, Any] | None) -> ServicePlan:
    return plan_service(read_sandbox(sb), existing, HASH)


def test_no_container_ports_means_no_service_ports() -> None:
    """Upstream TestServicePortsForSandboxReturnsNilWithoutContainerPorts."""
    assert ports_of([{"name": "app", "image": "x"}]) is None
    assert ports_of([container({"containerPort": 0})]) is None


def test_ports_are_unique_sorted_and_named() -> None:
    """Upstream TestReconcileService "sorted unique" and "first duplicate name wins": one port
    per (port, protocol), sorted by port then protocol, the first explicit name kept."""
    found = ports_of(
        [
            container({"containerPort": 8080}, {"containerPort": 53, "protocol": "UDP"}),
            container(
                {"containerPort": 8080, "name": "http"},
                {"containerPort": 53, "name": "dns"},
                {"containerPort": 53, "protocol": "UDP", "name": "dns-udp"},
                name="b",
            ),
        ]
    )
    assert found == [
        {"name": "dns", "protocol": "TCP", "port": 53, "targetPort": 53},
        {"name": "dns-udp", "protocol": "UDP", "port": 53, "targetPort": 53},
        {"name": "http", "protocol": "TCP", "port": 8080, "targetPort": 8080},
    ]


def test_the_first_explicit_name_wins_and_names_stay_unique() -> None:
    """Upstream TestReconcileService "first duplicate name wins": a name already taken by an
    earlier port is not reused; that port gets a generated name."""
    found = ports_of(
        [container({"containerPort": 80, "name": "web"}, {"containerPort": 81, "name": "web"})]
    )
    assert [p["name"] for p in found] == ["web", "p-81-tcp"]


def test_generated_names_avoid_explicit_names() -> None:
    """Upstream TestReconcileService "generated name avoids explicit names"."""
    found = ports_of(
        [container({"containerPort": 80}, {"containerPort": 8080, "name": "p-80-tcp"})]
    )
    assert [p["name"] for p in found] == ["p-80-tcp-2", "p-80-tcp"]


def test_native_sidecar_ports_count_and_plain_init_containers_do_not() -> None:
    """Upstream TestReconcileService "native sidecar ports"."""
    found = ports_of(
        [container({"containerPort": 80})],
        init=[
            {**container({"containerPort": 9090}, name="sidecar"), "restartPolicy": "Always"},
            container({"containerPort": 7070}, name="setup"),
        ],
    )
    assert [p["port"] for p in found] == [80, 9090]


def test_creates_a_headless_service_when_asked() -> None:
    """Upstream TestReconcileService "creates headless Service when true" (plain, with ports)."""
    created = plan(sandbox(service=True), None)
    assert [type(a) for a in created.actions] == [Create]
    body = created.actions[0].body  # type: ignore[union-attr]
    assert body["metadata"]["name"] == "sb"
    assert body["metadata"]["labels"] == SELECTOR
    assert body["metadata"]["ownerReferences"] == [owner_ref()]
    assert body["spec"] == {"clusterIP": "None", "selector": SELECTOR}
    with_ports = plan(sandbox(service=True, containers=[container({"containerPort": 80})]), None)
    assert with_ports.actions[0].body["spec"]["ports"] == [  # type: ignore[union-attr]
        {"name": "p-80-tcp", "protocol": "TCP", "port": 80, "targetPort": 80}
    ]


def test_uses_an_owned_service_as_it_is() -> None:
    """Upstream TestReconcileService "uses owned Service"."""
    owned = service(owner=owner_ref())
    result = plan(sandbox(service=True), owned)
    assert result.actions == () and result.service is owned


def test_repairs_selector_label_and_port_drift() -> None:
    """Upstream TestReconcileService "repairs selector+label drift" and "port drift"."""
    drifted = service(
        owner=owner_ref(),
        labels={"x": "y"},
        selector={"app": "other"},
        ports=[{"name": "old", "protocol": "TCP", "port": 1, "targetPort": 1}],
    )
    sb = sandbox(service=True, containers=[container({"containerPort": 80, "name": "web"})])
    result = plan(sb, drifted)
    assert len(result.actions) == 1 and isinstance(result.actions[0], Patch)
    assert result.actions[0].patch == {
        "metadata": {"labels": SELECTOR},
        "spec": {
            "selector": {"app": None, **SELECTOR},
            "ports": [{"name": "web", "protocol": "TCP", "port": 80, "targetPort": 80}],
        },
    }


def test_preserves_unmanaged_port_fields() -> None:
    """Upstream TestReconcileService "preserves unmanaged port fields": ports equal in name,
    protocol, port and targetPort are left alone, whatever else the server added."""
    sb = sandbox(service=True, containers=[container({"containerPort": 80, "name": "web"})])
    existing = service(
        owner=owner_ref(),
        ports=[
            {"name": "web", "protocol": "TCP", "port": 80, "targetPort": 80, "appProtocol": "http"}
        ],
    )
    assert plan(sb, existing).actions == ()


def test_refuses_a_service_owned_by_another_controller() -> None:
    """Upstream TestReconcileService "refuses Service owned by another"."""
    foreign = service(owner=owner_ref(uid="x", name="rs", kind="ReplicaSet"))
    result = plan(sandbox(service=True), foreign)
    assert result.actions == () and result.service is None
    assert result.error == 'service "sb" is owned by ReplicaSet/rs (UID: x), not by sandbox "sb"'


@pytest.mark.parametrize(
    ("labels", "ports", "selector"),
    [
        ({LABEL_ADOPTABLE: "true"}, [{"name": "x", "port": 1}], {"app": "wrong"}),
        ({LABEL_SANDBOX_NAME_HASH: HASH}, None, SELECTOR),
    ],
    ids=["adoptable, wrong selector, stale ports", "legacy tracking label"],
)
def test_adopts_an_unowned_service(
    labels: dict[str, str], ports: list[dict[str, Any]] | None, selector: dict[str, str]
) -> None:
    """Upstream TestReconcileService "adopts unowned" rows: a full Update that sets the
    controller reference, overwrites the selector, clears ports when there are none, and
    carries the resourceVersion it was read at."""
    existing = service(labels=labels, ports=ports, selector=selector)
    result = plan(sandbox(service=True), existing)
    assert len(result.actions) == 1 and isinstance(result.actions[0], Replace)
    body = result.actions[0].body
    assert body["metadata"]["ownerReferences"] == [owner_ref()]
    assert body["metadata"]["labels"][LABEL_SANDBOX_NAME_HASH] == HASH
    assert body["metadata"]["resourceVersion"] == "30"
    assert result.actions[0].on_conflict == "refresh"
    assert body["spec"]["selector"] == SELECTOR
    assert "ports" not in body["spec"]


def test_refuses_to_adopt_a_service_with_a_cluster_ip() -> None:
    """Upstream TestReconcileService "refuses non-headless ClusterIP" (clusterIP is immutable)."""
    existing = service(labels={LABEL_ADOPTABLE: "true"}, cluster_ip="10.96.0.7")
    result = plan(sandbox(service=True), existing)
    assert result.actions == ()
    assert result.error == (
        'cannot adopt service "sb": ClusterIP is "10.96.0.7" (expected "None", field is immutable)'
    )


def test_refuses_an_unowned_service_without_the_authorisation_label() -> None:
    """Upstream TestReconcileService "refuses unowned without authorization label"."""
    result = plan(sandbox(service=True), service(labels={}))
    assert result.actions == ()
    assert result.error is not None and result.error.startswith('cannot adopt unowned service "sb"')


def test_unset_service_creates_nothing_keeps_owned_ignores_unowned() -> None:
    """Upstream TestReconcileService nil rows: no create; an owned Service kept and its label
    and selector reconciled (not its ports); an unowned one ignored and not adopted."""
    assert plan(sandbox(), None) == ServicePlan()
    owned = service(owner=owner_ref(), selector={"app": "x"}, ports=[{"name": "a", "port": 1}])
    kept = plan(sandbox(containers=[container({"containerPort": 80})]), owned)
    assert kept.service is owned
    assert [a.patch for a in kept.actions] == [  # type: ignore[union-attr]
        {"spec": {"selector": {"app": None, **SELECTOR}}}
    ]
    ignored = plan(sandbox(), service(labels={LABEL_ADOPTABLE: "true"}))
    assert ignored == ServicePlan()


def test_false_deletes_the_owned_service_and_ignores_an_unowned_one() -> None:
    """Upstream TestReconcileService false rows."""
    owned = plan(sandbox(service=False), service(owner=owner_ref()))
    assert owned.actions == (
        Delete(
            ObjectKey("Service", "default", "sb"), uid="svc-uid-sb", why="spec.service is false"
        ),
    )
    assert owned.service is None
    assert plan(sandbox(service=False), service()).actions == ()


@pytest.mark.parametrize("domain", ["cluster.local", "corp.example"])
def test_service_fqdn_uses_the_cluster_domain(domain: str) -> None:
    """Upstream TestSetServiceStatusCustomDomain: ``<svc>.<ns>.svc.<cluster domain>``."""
    obs = observation(
        sandbox(service=True, annotations={ANNOTATION_POD_NAME: "sb"}),
        pods=(owned_pod(),),
        svc=service(owner=owner_ref()),
        cluster_domain=domain,
    )
    written = status_written(plan_sandbox(obs, NOW))
    assert written is not None
    assert (written["service"], written["serviceFQDN"]) == ("sb", f"sb.default.svc.{domain}")


def test_disabling_the_service_clears_its_status_fields() -> None:
    """§2.5: service false deletes the owned Service and clears status.service/serviceFQDN."""
    cluster = FakeCluster().add(
        sandbox(
            service=False,
            status={"service": "sb", "serviceFQDN": "sb.default.svc.cluster.local"},
        ),
        owned_pod(),
        service(owner=owner_ref()),
    )
    cluster.converge()
    assert cluster.get("Service", "sb") is None
    status = cluster.get("Sandbox", "sb")["status"]  # type: ignore[index]
    assert "service" not in status and "serviceFQDN" not in status
