"""RBAC: the watcher only reads; workers write what upstream controllers write, never watch.

The watcher and the active-passive workers also hold a Lease each, in their own namespace. That
each role grants exactly what its service asks for is checked against recorded requests in
tests/component/deploy/test_rbac_requests.py; the rule evaluation it relies on is tested here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from api.kinds import ALL_KINDS
from services.runtime.reconcile.serving import lease_settings
from services.watcher.config import WatcherConfig
from tests.unit.deploy.manifests import (
    BASE,
    CRDS,
    DEPLOY,
    NAMESPACE,
    Access,
    Doc,
    allowed,
    authorizes,
    bound_rules,
    enable_components,
    env_of,
    of_kind,
    rbac_subjects,
    render,
    render_uncached,
    service_container,
)

WORKERS = ("sandbox", "pool", "claim", "snapshot")
LEADING_WORKERS = ("sandbox", "pool", "snapshot")
"""Active-passive through a Lease (serve_worker with replicas="leader"); claim runs on every
replica. pool and snapshot are not registered yet, but their Lease rights are in base already."""
READ = ("list", "watch")
"""The watcher lists and watches; it never gets one object."""
BUILTIN_WATCHED = (
    ("", "pods"),
    ("", "services"),
    ("", "persistentvolumeclaims"),
    ("batch", "jobs"),
)


def _cluster_role(service: str) -> dict:
    return of_kind(render(BASE), "ClusterRole")[f"sandbus-{service}"]


def _crd_resources() -> set[tuple[str, str]]:
    """(group, plural) of every CRD, and of its status and scale subresources where it has them."""
    resources = set()
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        resources |= {(group, plural), (group, f"{plural}/finalizers")}
        for version in crd["spec"]["versions"]:
            resources |= {(group, f"{plural}/{sub}") for sub in version.get("subresources", {})}
    return resources


def test_every_service_account_is_bound_to_its_own_cluster_role() -> None:
    docs = render(BASE)
    bound = rbac_subjects(docs)
    accounts = of_kind(docs, "ServiceAccount")

    for service in ("watcher", *WORKERS):
        assert f"sandbus-{service}" in accounts
        assert f"sandbus-{service}" in bound[f"sandbus-{service}"]
    for binding in [
        *of_kind(docs, "ClusterRoleBinding").values(),
        *of_kind(docs, "RoleBinding").values(),
    ]:
        for subject in binding["subjects"]:
            assert subject["namespace"] == NAMESPACE


def test_the_watcher_may_list_and_watch_everything_it_publishes() -> None:
    role = _cluster_role("watcher")

    for kind in ALL_KINDS:
        for verb in READ:
            assert allowed(role, kind.KIND.group, kind.KIND.plural, verb), (kind.KIND.kind, verb)
    for group, resource in BUILTIN_WATCHED:
        for verb in READ:
            assert allowed(role, group, resource, verb), (resource, verb)


def test_the_watcher_writes_nothing_but_its_lease() -> None:
    for rule in _cluster_role("watcher")["rules"]:
        assert set(rule["verbs"]) <= set(READ), rule
    assert "sandbus-watcher-leader-election" in rbac_subjects(render(BASE))["sandbus-watcher"]


def _lease_name(service: str) -> str:
    """The Lease the service elects its leader on, by default."""
    if service == "watcher":
        return WatcherConfig.from_env({}).lease_name
    return lease_settings(service, {}).name


def _lease_verbs(role: Doc) -> dict[str, frozenset[str] | None]:
    """verb → the Lease names the Role limits it to (None: any Lease)."""
    verbs: dict[str, frozenset[str] | None] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == ["coordination.k8s.io"], rule
        assert rule["resources"] == ["leases"], rule
        names = rule.get("resourceNames")
        for verb in rule["verbs"]:
            assert verb not in verbs, f"{verb} in two rules"
            verbs[verb] = frozenset(names) if names else None
    return verbs


@pytest.mark.parametrize("service", ["watcher", *LEADING_WORKERS])
def test_a_leading_service_may_write_its_own_lease_and_no_other(service: str) -> None:
    # Every write is a PUT with the resourceVersion read (update, not patch). get and update name
    # the service's own Lease, so that no service can take over another's leadership; create
    # cannot be limited to a name by RBAC.
    docs = render(BASE)
    role = of_kind(docs, "Role")[f"sandbus-{service}-leader-election"]
    lease = frozenset({_lease_name(service)})

    assert role["metadata"]["namespace"] == NAMESPACE
    assert _lease_verbs(role) == {"get": lease, "update": lease, "create": None}
    assert f"sandbus-{service}-leader-election" in rbac_subjects(docs)[f"sandbus-{service}"]


def test_the_claim_worker_runs_on_every_replica_and_holds_no_lease() -> None:
    assert rbac_subjects(render(BASE))["sandbus-claim"] == {"sandbus-claim"}


@pytest.mark.parametrize("service", WORKERS)
def test_workers_never_list_or_watch_kubernetes(service: str) -> None:
    # Only the watcher lists and watches; workers learn the world from the bus
    # (docs/architecture.md).
    for rule in _cluster_role(service)["rules"]:
        assert not {"list", "watch"} & set(rule["verbs"]), rule


@pytest.mark.parametrize("service", ["watcher", *WORKERS])
def test_no_wildcards_and_no_secrets(service: str) -> None:
    for rule in _cluster_role(service)["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
        assert "secrets" not in rule["resources"], rule


@pytest.mark.parametrize("service", ["watcher", *WORKERS])
def test_every_custom_resource_named_exists(service: str) -> None:
    ours = {kind.KIND.group for kind in ALL_KINDS}
    known = _crd_resources()
    for rule in _cluster_role(service)["rules"]:
        for group in set(rule["apiGroups"]) & ours:
            for resource in rule["resources"]:
                assert (group, resource) in known, f"{service}: {group}/{resource} is no resource"


def test_the_sandbox_worker_can_do_what_the_sandbox_controller_does() -> None:
    role = _cluster_role("sandbox")
    for group, resource, verbs in (
        ("agents.x-k8s.io", "sandboxes", ("get", "patch", "delete")),
        ("agents.x-k8s.io", "sandboxes/status", ("patch",)),
        ("extensions.agents.x-k8s.io", "sandboxtemplates", ("get", "patch")),
        ("", "pods", ("create", "get", "patch", "delete")),
        ("", "services", ("create", "get", "patch", "update", "delete")),
        ("", "persistentvolumeclaims", ("create", "get", "patch", "delete")),
        ("networking.k8s.io", "networkpolicies", ("create", "get", "update", "delete")),
        ("events.k8s.io", "events", ("create", "get")),
    ):
        for verb in verbs:
            assert allowed(role, group, resource, verb), (resource, verb)


def test_warm_pool_members_are_created_by_pool_and_adopted_by_claim() -> None:
    pool, claim = _cluster_role("pool"), _cluster_role("claim")

    assert allowed(pool, "agents.x-k8s.io", "sandboxes", "create")
    assert allowed(pool, "extensions.agents.x-k8s.io", "sandboxwarmpools/status", "patch")
    assert allowed(pool, "", "pods", "create")  # OpenSandbox Pool members are Pods
    assert allowed(claim, "agents.x-k8s.io", "sandboxes", "patch")  # adoption
    assert allowed(claim, "extensions.agents.x-k8s.io", "sandboxclaims", "patch")
    assert not allowed(claim, "extensions.agents.x-k8s.io", "sandboxwarmpools", "update")


def test_snapshots_commit_through_jobs() -> None:
    role = _cluster_role("snapshot")
    for verb in ("create", "get", "delete"):
        assert allowed(role, "batch", "jobs", verb)
    assert allowed(role, "sandbox.opensandbox.io", "sandboxsnapshots/status", "patch")
    assert allowed(role, "sandbox.opensandbox.io", "sandboxsnapshots/finalizers", "update")


def test_the_watcher_looks_for_its_lease_where_its_role_allows_it() -> None:
    docs = render(BASE)
    watcher = of_kind(docs, "Deployment")["sandbus-watcher"]
    (container,) = watcher["spec"]["template"]["spec"]["containers"]
    namespace_from = env_of(container)["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"]
    pod_namespace = watcher["metadata"]["namespace"]

    config = WatcherConfig.from_env({"POD_NAMESPACE": pod_namespace})

    assert namespace_from == "metadata.namespace"
    role = of_kind(docs, "Role")["sandbus-watcher-leader-election"]
    assert config.lease_namespace == role["metadata"]["namespace"] == pod_namespace
    assert {config.lease_name} == _lease_verbs(role)["update"]


def _worker_deployment(worker: str, tmp_path: Path) -> Doc:
    """The worker's Deployment: from base, or from its component when base does not have it."""
    deployments = of_kind(render(BASE), "Deployment")
    if f"sandbus-{worker}" in deployments:
        return deployments[f"sandbus-{worker}"]
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    enable_components(copy, [worker])
    return of_kind(render_uncached(copy / "base"), "Deployment")[f"sandbus-{worker}"]


@pytest.mark.parametrize("worker", LEADING_WORKERS)
def test_a_leading_worker_looks_for_its_lease_where_its_role_allows_it(
    worker: str, tmp_path: Path
) -> None:
    deployment = _worker_deployment(worker, tmp_path)
    env = env_of(service_container(deployment))
    pod_namespace = deployment["metadata"]["namespace"]
    # What the downward API gives the container, for a Pod of this Deployment.
    downward = {"metadata.namespace": pod_namespace, "metadata.name": f"sandbus-{worker}-abc12"}
    environment = {
        name: downward[env[name]["valueFrom"]["fieldRef"]["fieldPath"]]
        for name in ("POD_NAMESPACE", "SANDBUS_IDENTITY")
    }

    settings = lease_settings(worker, environment)

    assert environment == {
        "POD_NAMESPACE": pod_namespace,
        "SANDBUS_IDENTITY": f"sandbus-{worker}-abc12",
    }
    role = of_kind(render(BASE), "Role")[f"sandbus-{worker}-leader-election"]
    assert settings.namespace == role["metadata"]["namespace"] == pod_namespace
    assert {settings.name} == _lease_verbs(role)["update"]
    assert settings.identity == f"sandbus-{worker}-abc12"  # the Pod's name, not host and pid


# --- the RBAC authorizer the recorded requests are checked with --------------------------------


def _binding(kind: str, role_kind: str, role: str, account: str, namespace: str | None) -> Doc:
    metadata = {"name": f"{role}-binding"} | ({"namespace": namespace} if namespace else {})
    return {
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
    }


RULES_DOCS: list[Doc] = [
    {
        "kind": "ClusterRole",
        "metadata": {"name": "everywhere"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["*/exec"], "verbs": ["create"]},
        ],
    },
    {
        "kind": "Role",
        "metadata": {"name": "lease", "namespace": NAMESPACE},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["mine"],
                "verbs": ["get", "create"],
            }
        ],
    },
    _binding("ClusterRoleBinding", "ClusterRole", "everywhere", "a", None),
    _binding("RoleBinding", "Role", "lease", "a", NAMESPACE),
]


def test_a_cluster_role_binding_allows_in_every_namespace_and_a_role_binding_in_its_own() -> None:
    rules = bound_rules(RULES_DOCS, "a")

    assert authorizes(rules, Access("get", "", "pods", "default", "p"))
    assert authorizes(rules, Access("get", "coordination.k8s.io", "leases", NAMESPACE, "mine"))
    assert not authorizes(rules, Access("get", "coordination.k8s.io", "leases", "default", "mine"))
    assert bound_rules(RULES_DOCS, "b") == []


def test_resource_names_never_allow_a_create_and_only_the_names_given() -> None:
    rules = bound_rules(RULES_DOCS, "a")

    # A create names its object in the body, not the URL: the authorizer sees no name.
    assert not authorizes(rules, Access("create", "coordination.k8s.io", "leases", NAMESPACE))
    assert not authorizes(rules, Access("get", "coordination.k8s.io", "leases", NAMESPACE, "x"))


def test_a_subresource_is_only_allowed_by_its_own_name_or_a_wildcard_resource() -> None:
    rules = bound_rules(RULES_DOCS, "a")

    assert not authorizes(rules, Access("get", "", "pods/status", "default", "p"))
    assert authorizes(rules, Access("create", "", "pods/exec", "default", "p"))
    assert not authorizes(rules, Access("get", "", "pods/exec", "default", "p"))
