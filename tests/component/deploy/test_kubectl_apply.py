"""The deployment and the examples, applied by the real kubectl to the development cluster as an
operator and a new user apply them to a real cluster.

``kubectl apply --dry-run=server`` sends every object through the server's write path (decoding,
defaulting, validation, the rules of its kind) and persists nothing. The development cluster
stands in for the API server. It serves the kinds deploy/ renders, but for ServiceAccounts,
RBAC, Deployments, StatefulSets and PodDisruptionBudgets it only stores and validates them (no
controller acts on them, no authorizer reads the RBAC). The Kubernetes schemas themselves are
checked by tests/unit/deploy/test_schemas.py.

The order is the README's (deploy/README.md, "Install on Kubernetes"). The CRDs go first, dry-run
and then for real. Then come the namespace and the NATS passwords' Secret, then the whole
deployment, dry-run, with server-side apply as the README says and with client-side apply.
examples/ is applied whole, as a new user would: dry-run, then for real, then once more (an
unchanged re-apply). That last step is what failed while examples/ held objects as read back:
their resourceVersion is a precondition, so the second object of a name was refused with a
Conflict.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from tests.support.kubectl import KUBECTL, Kubectl
from tests.unit.api.manifests import EXAMPLES_DIR, example_files, load_documents
from tests.unit.deploy.manifests import (
    CRDS,
    DEPLOY,
    NAMESPACE,
    NATS_SECRET,
    Doc,
    example_password_variables,
    render,
)

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason=f"no kubectl at {KUBECTL}")

DRY_RUN = " (server dry run)"
SET_BY_THE_SERVER = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields")


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    # Nothing installed, not even sandbus's CRDs: the test installs them as a user would.
    settings = SimulationSettings(kubelet=False, garbage_collector=False)
    async with DevCluster(
        port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings
    ) as running:
        yield running


@pytest.fixture
def kubectl(cluster: DevCluster, tmp_path: Path) -> Kubectl:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    home = tmp_path / "home"
    home.mkdir()
    return Kubectl(kubeconfig, tmp_path / "kube-cache", home)


def shown(doc: Doc) -> str:
    """How kubectl names an object in its output: ``deployment.apps/sandbus-watcher``."""
    group = doc["apiVersion"].rpartition("/")[0]
    resource = doc["kind"].lower() + (f".{group}" if group else "")
    return f"{resource}/{doc['metadata']['name']}"


def outcomes(out: str) -> dict[str, str]:
    """kubectl apply's lines, ``NAME OUTCOME[ (server dry run)]``, as name → outcome."""
    found = {}
    for line in out.splitlines():
        name, _, outcome = line.partition(" ")
        found[name] = outcome
    return found


async def install_crds(kubectl: Kubectl) -> None:
    await kubectl.ok("apply", "--server-side", "-f", str(CRDS))
    await kubectl.ok(
        "wait", "--for=condition=Established", "customresourcedefinitions", "--all", "--timeout=20s"
    )


async def test_the_crds_dry_run_and_then_install(kubectl: Kubectl) -> None:
    crds = [doc for path in sorted(CRDS.glob("*.yaml")) for doc in load_documents(path)]

    dry = await kubectl.ok("apply", "--server-side", "--dry-run=server", "-f", str(CRDS))

    assert outcomes(dry) == {shown(crd): "serverside-applied" + DRY_RUN for crd in crds}
    assert await kubectl.ok("get", "customresourcedefinitions", "-o", "name") == ""
    await install_crds(kubectl)
    listed = await kubectl.ok("get", "customresourcedefinitions", "-o", "name")
    assert sorted(listed.split()) == sorted(shown(crd) for crd in crds)


@pytest.mark.parametrize("side", ["--server-side", "--server-side=false"])
async def test_the_deployment_applies_as_the_readme_says(
    kubectl: Kubectl, tmp_path: Path, side: str
) -> None:
    await install_crds(kubectl)
    # Step 2 of the README: the namespace and the passwords, which nothing in deploy/ carries.
    passwords = tmp_path / "nats-users.env"
    passwords.write_text(
        "".join(f"{key}=p{secrets.token_hex(12)}\n" for key in example_password_variables())
    )
    await kubectl.ok("create", "namespace", NAMESPACE)
    await kubectl.ok(
        "-n", NAMESPACE, "create", "secret", "generic", NATS_SECRET, f"--from-env-file={passwords}"
    )
    rendered = render(DEPLOY)

    out = await kubectl.ok("apply", side, "--dry-run=server", "-k", str(DEPLOY))

    applied = outcomes(out)
    assert set(applied) == {shown(doc) for doc in rendered}
    assert all(outcome.endswith(DRY_RUN) for outcome in applied.values()), out
    # Nothing was written: only what the steps before created is there.
    assert await kubectl.ok("get", "deployments,statefulsets,services", "-n", NAMESPACE) == ""


def test_no_example_carries_what_only_the_server_sets() -> None:
    # A resourceVersion is a precondition (Conflict once the object changed); status is not
    # the user's to write; the others are ignored or refused on create.
    for path in example_files():
        if not path.is_relative_to(EXAMPLES_DIR):
            continue  # the observed objects, which are not applied
        for doc in load_documents(path):
            where = f"{path.relative_to(EXAMPLES_DIR)}: {doc['kind']} {doc['metadata']['name']}"
            assert "status" not in doc, where
            assert not set(SET_BY_THE_SERVER) & set(doc["metadata"]), where


async def test_examples_apply_whole_for_a_new_user(kubectl: Kubectl) -> None:
    await install_crds(kubectl)
    examples = [
        doc for path in sorted(EXAMPLES_DIR.rglob("*.yaml")) for doc in load_documents(path)
    ]
    names = {shown(doc) for doc in examples}
    assert len(names) == len(examples), "two examples of one name: the second would change it"

    dry = await kubectl.ok("apply", "-R", "-f", str(EXAMPLES_DIR), "--dry-run=server")
    assert outcomes(dry) == dict.fromkeys(names, "created" + DRY_RUN)
    assert outcomes(await kubectl.ok("apply", "-R", "-f", str(EXAMPLES_DIR))) == dict.fromkeys(
        names, "created"
    )
    again = await kubectl.ok("apply", "-R", "-f", str(EXAMPLES_DIR))
    assert outcomes(again) == dict.fromkeys(names, "unchanged")
    assert yaml.safe_load(await kubectl.ok("get", "sandboxes", "-o", "yaml"))["items"]
