"""The development cluster driven by a real ``kubectl`` binary, as a user drives a real cluster.

kubectl is the strictest client we have: it does discovery, reads OpenAPI to decide how to
validate, computes three-way patches, sends server-side apply, follows ``continue`` tokens,
waits on watches and prints the server's Status bodies through its own error formatting. Each
test runs one or more kubectl commands against an in-process :class:`DevCluster` and asserts
the exit code and the exact text a user would read, and names the row of
docs/devcluster.md §2 it checks.

How kubectl runs here (:class:`tests.support.kubectl.Kubectl`): as an asyncio subprocess (the
server runs on the test's own loop, so the test must not block it), with a kubeconfig the
cluster wrote, a per-test ``--cache-dir`` (discovery caches are keyed by host:port, and ports
are reused) and an environment without the user's KUBECONFIG, proxies or home directory. The
cluster runs its garbage collector (the deletion tests wait for it) but no kubelet, so Pods stay
Pending and unscheduled; latency is zero.

Where kubectl shows the development cluster behaving differently from a real API server, the
test states what the real one does and is marked ``xfail(strict=True)`` with the difference in
its reason, so that it starts failing (and must be unmarked) the day the difference is fixed.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.objects import Json
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from tests.support.kubectl import KUBECTL, LINE_TIMEOUT, Kubectl
from tests.support.waiting import until

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
OBSERVED = REPO / "tests" / "fixtures" / "observed"
SANDBOX_EXAMPLE = EXAMPLES / "agents" / "sandbox.yaml"
POOL_EXAMPLE = EXAMPLES / "agents" / "sandboxwarmpool.yaml"

SANDBOX = "sandbox.agents.x-k8s.io"
POOL = "sandboxwarmpool.extensions.agents.x-k8s.io"
HOLD = "example.com/hold"
RELEASE = '[{"op":"remove","path":"/metadata/finalizers"}]'

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason=f"no kubectl at {KUBECTL}")


@pytest.fixture
async def devcluster() -> AsyncIterator[DevCluster]:
    settings = SimulationSettings(
        kubelet=False, options={"garbage_collector": {"delay": 0.01, "rediscovery_interval": 0.5}}
    )
    async with DevCluster(port=0, latency=LatencyModel.zero(), simulation=settings) as running:
        yield running


@pytest.fixture
def kubectl(devcluster: DevCluster, tmp_path: Path) -> Kubectl:
    kubeconfig = devcluster.write_kubeconfig(tmp_path / "kubeconfig")
    home = tmp_path / "home"
    home.mkdir()
    return Kubectl(kubeconfig, tmp_path / "kube-cache", home)


# -- manifests ------------------------------------------------------------------------------


def write(tmp_path: Path, name: str, document: Json | str) -> str:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    return str(path)


class _PlainLoader(yaml.SafeLoader):
    """Keeps timestamps as the strings the manifests hold (the API speaks RFC 3339 strings)."""


_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def example(path: Path) -> Json:
    document: Json = yaml.load(path.read_text(), Loader=_PlainLoader)
    return document


def pool(name: str = "python-pool", replicas: int = 3, **metadata: Any) -> Json:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, **metadata},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": "python"}},
    }


def sandbox(name: str, labels: dict[str, str] | None = None, **metadata: Any) -> Json:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name, "labels": labels or {}, **metadata},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }


def configmap(name: str, **metadata: Any) -> Json:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **metadata}}


def as_stdin(*documents: Json) -> str:
    return yaml.safe_dump_all(documents)


def table(text: str) -> list[dict[str, str]]:
    """Rows of a kubectl table, cut at the header's column starts (cells may be empty)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0]
    columns = [(m.group(), m.start()) for m in re.finditer(r"\S+", header)]
    rows = []
    for line in lines[1:]:
        row = {}
        for index, (name, start) in enumerate(columns):
            end = columns[index + 1][1] if index + 1 < len(columns) else None
            row[name] = line[start:end].strip()
        rows.append(row)
    return rows


# -- apply ----------------------------------------------------------------------------------


async def test_apply_creates_then_reports_unchanged_then_configured(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """Row 7 (create), then kubectl's three-way diff against what the server returned (with
    defaults and server-set fields, a re-apply is ``unchanged`` and writes nothing), and row 10
    (a label change leaves generation alone, a spec change bumps it)."""
    assert await kubectl.ok("apply", "-f", str(SANDBOX_EXAMPLE)) == (
        f"{SANDBOX}/notebook-alice created\n"
    )
    created = await kubectl.json("get", "sandbox", "notebook-alice")

    assert await kubectl.ok("apply", "-f", str(SANDBOX_EXAMPLE)) == (
        f"{SANDBOX}/notebook-alice unchanged\n"
    )
    again = await kubectl.json("get", "sandbox", "notebook-alice")
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    relabelled = example(SANDBOX_EXAMPLE)
    relabelled["metadata"]["labels"]["team"] = "ml"
    path = write(tmp_path, "relabelled.yaml", relabelled)
    assert await kubectl.ok("apply", "-f", path) == f"{SANDBOX}/notebook-alice configured\n"
    after_label = await kubectl.json("get", "sandbox", "notebook-alice")
    assert after_label["metadata"]["labels"] == {"team": "ml"}
    assert int(after_label["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )
    assert after_label["metadata"]["generation"] == 1

    relabelled["spec"]["operatingMode"] = "Suspended"
    path = write(tmp_path, "suspended.yaml", relabelled)
    assert await kubectl.ok("apply", "-f", path) == f"{SANDBOX}/notebook-alice configured\n"
    after_spec = await kubectl.json("get", "sandbox", "notebook-alice")
    assert after_spec["spec"]["operatingMode"] == "Suspended"
    assert after_spec["metadata"]["generation"] == 2


async def test_apply_every_example_directory(kubectl: Kubectl) -> None:
    """Row 20 (the structural schemas of our seven CRDs accept the published examples) and
    row 7 (one ``created`` line per object, in file order)."""
    agents = await kubectl.ok("apply", "-f", str(EXAMPLES / "agents"))
    assert agents.splitlines() == [
        f"{SANDBOX}/notebook-alice created",
        "sandboxclaim.extensions.agents.x-k8s.io/session-42 created",
        "sandboxtemplate.extensions.agents.x-k8s.io/python created",
        f"{POOL}/python-pool created",
    ]
    opensandbox = await kubectl.ok("apply", "-f", str(EXAMPLES / "opensandbox"))
    assert [line.rsplit(" ", 1)[1] for line in opensandbox.splitlines()] == ["created"] * 6
    assert sorted(line.split("/")[0] for line in opensandbox.splitlines()) == [
        "batchsandbox.sandbox.opensandbox.io",
        "batchsandbox.sandbox.opensandbox.io",
        "batchsandbox.sandbox.opensandbox.io",
        "batchsandbox.sandbox.opensandbox.io",
        "pool.sandbox.opensandbox.io",
        "sandboxsnapshot.sandbox.opensandbox.io",
    ]


async def test_apply_of_a_read_back_object_is_refused_by_its_stale_resource_version(
    kubectl: Kubectl,
) -> None:
    """Row 9 (a resourceVersion inside a patch body is a precondition: 409 Conflict) and row 13
    (the exact Conflict message): applying an object as read back (tests/fixtures/observed)
    onto a live object fails."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))
    observed = OBSERVED / "sandboxwarmpool-status.yaml"

    result = await kubectl("apply", "-f", str(observed))

    assert result.code == 1
    assert result.err.startswith("Error from server (Conflict): error when applying patch:")
    assert result.err.endswith(
        f'error when patching "{observed}": Operation cannot be fulfilled on '
        'sandboxwarmpools.extensions.agents.x-k8s.io "python-pool": the object has been '
        "modified; please apply your changes to the latest version and try again\n"
    )


async def test_apply_dry_run_server_persists_nothing(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    """Row 24 (dryRun=All runs the pipeline and persists nothing: no object, no new
    resourceVersion) and row 13 (a get afterwards is NotFound)."""
    before = devcluster.store.resource_version

    out = await kubectl.ok("apply", "--dry-run=server", "-f", str(POOL_EXAMPLE))

    assert out == f"{POOL}/python-pool created (server dry run)\n"
    assert devcluster.store.resource_version == before
    missing = await kubectl("get", "swp", "python-pool")
    assert (missing.code, missing.err) == (
        1,
        'Error from server (NotFound): sandboxwarmpools.extensions.agents.x-k8s.io "python-pool"'
        " not found\n",
    )


async def test_apply_dry_run_server_on_an_existing_object_changes_nothing(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """Row 24 on the update path: ``configured (server dry run)`` and the live object keeps its
    spec and resourceVersion."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))
    before = await kubectl.json("get", "swp", "python-pool")
    path = write(tmp_path, "five.yaml", {**example(POOL_EXAMPLE), "spec": pool(replicas=5)["spec"]})

    out = await kubectl.ok("apply", "--dry-run=server", "-f", path)

    assert out == f"{POOL}/python-pool configured (server dry run)\n"
    after = await kubectl.json("get", "swp", "python-pool")
    assert after["spec"]["replicas"] == 3
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_apply_dry_run_server_reports_validation_errors(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """Row 24 (dry run includes validation) with row 20 (schema bounds) and row 13 (422
    Invalid naming the field)."""
    path = write(tmp_path, "negative.yaml", pool(replicas=-1))

    result = await kubectl("apply", "--dry-run=server", "-f", path)

    assert result.code == 1
    assert result.out == ""
    assert result.err == (
        'The SandboxWarmPool "python-pool" is invalid: spec.replicas: Invalid value: -1: '
        "spec.replicas in body should be greater than or equal to 0\n"
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(
            {"shutdownPolicy": "Sometimes"},
            'spec.shutdownPolicy: Unsupported value: "Sometimes": supported values: "Delete", '
            '"Retain"',
            id="enum",
        ),
        pytest.param({"podTemplate": None}, "spec.podTemplate: Required value", id="required"),
    ],
)
async def test_apply_of_an_invalid_manifest_names_the_field(
    kubectl: Kubectl, tmp_path: Path, edit: Json, message: str
) -> None:
    """Row 20 (CRD structural-schema validation) and row 13 (422 Invalid with causes that
    name the field; kubectl prints several as ``* field: ...`` lines). Both errors block the
    CRD's validation rules (row 29), which the real server says with one more cause."""
    document = example(SANDBOX_EXAMPLE)
    document["spec"].update(edit)
    document["spec"] = {key: value for key, value in document["spec"].items() if value is not None}
    path = write(tmp_path, "invalid.yaml", document)

    result = await kubectl("apply", "-f", path)

    assert (result.code, result.out) == (1, "")
    assert result.err == (
        'The Sandbox "notebook-alice" is invalid: \n'
        f"* {message}\n"
        '* <nil>: Invalid value: "null": some validation rules were not checked because the '
        "object was invalid; correct the existing errors to complete validation\n"
    )
    assert (await kubectl("get", "sandbox", "notebook-alice")).code == 1


async def test_apply_rejects_an_unknown_field_strictly(kubectl: Kubectl, tmp_path: Path) -> None:
    """Row 20 (unknown fields): kubectl asks for ``fieldValidation=Strict`` because the
    OpenAPI says PATCH accepts it, and the server answers 400 naming the field."""
    document = example(SANDBOX_EXAMPLE)
    document["spec"]["bogusField"] = 1
    path = write(tmp_path, "unknown-field.yaml", document)

    result = await kubectl("apply", "-f", path)

    assert result.code == 1
    assert result.err == (
        f'Error from server (BadRequest): error when creating "{path}": strict decoding error: '
        'unknown field "spec.bogusField"\n'
    )


async def test_apply_into_a_missing_namespace(kubectl: Kubectl, tmp_path: Path) -> None:
    """Row 21 (a namespaced create needs an existing namespace: 404
    ``namespaces "x" not found``)."""
    path = write(tmp_path, "elsewhere.yaml", pool(namespace="team-b"))

    result = await kubectl("apply", "-f", path)

    assert result.code == 1
    assert result.err == (
        f'Error from server (NotFound): error when creating "{path}": namespaces "team-b" not '
        "found\n"
    )


# -- server-side apply ----------------------------------------------------------------------


async def test_apply_server_side_creates_and_records_the_manager(kubectl: Kubectl) -> None:
    """Row 9 (apply-patch+yaml creates the object when absent, fieldManager recorded in
    managedFields with operation Apply); reapplying the same manifest is a no-op write."""
    out = await kubectl.ok("apply", "--server-side", "-f", str(POOL_EXAMPLE))
    assert out == f"{POOL}/python-pool serverside-applied\n"
    first = await kubectl.json("get", "swp", "python-pool", "--show-managed-fields")
    managers = [(f["manager"], f["operation"]) for f in first["metadata"]["managedFields"]]
    assert managers == [("kubectl", "Apply")]
    assert first["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:replicas"] == {}

    out = await kubectl.ok("apply", "--server-side", "-f", str(POOL_EXAMPLE))
    assert out == f"{POOL}/python-pool serverside-applied\n"
    second = await kubectl.json("get", "swp", "python-pool")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


async def test_apply_server_side_conflict_between_managers_then_force(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """Row 9 (SSA: a second manager changing an owned field gets 409 with a
    FieldManagerConflict cause; ``force=true`` takes the field over)."""
    await kubectl.ok("apply", "--server-side", "-f", str(POOL_EXAMPLE))
    five = example(POOL_EXAMPLE)
    five["spec"]["replicas"] = 5
    path = write(tmp_path, "five.yaml", five)

    conflict = await kubectl("apply", "--server-side", "--field-manager=autoscaler", "-f", path)

    assert conflict.code == 1
    assert conflict.err.startswith(
        'error: Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas\n'
        "Please review the fields above--they currently have other managers."
    )
    assert "--force-conflicts" in conflict.err
    assert (await kubectl.json("get", "swp", "python-pool"))["spec"]["replicas"] == 3

    forced = await kubectl.ok(
        "apply", "--server-side", "--field-manager=autoscaler", "--force-conflicts", "-f", path
    )

    assert forced == f"{POOL}/python-pool serverside-applied\n"
    after = await kubectl.json("get", "swp", "python-pool", "--show-managed-fields")
    assert after["spec"]["replicas"] == 5
    owners = {
        entry["manager"]: entry["fieldsV1"]["f:spec"]
        for entry in after["metadata"]["managedFields"]
    }
    assert "f:replicas" in owners["autoscaler"]
    assert "f:replicas" not in owners["kubectl"]


# -- get ------------------------------------------------------------------------------------


async def test_get_output_formats(kubectl: Kubectl) -> None:
    """Row 7 (server-set uid, creationTimestamp in whole seconds with Z, resourceVersion,
    generation 1, status dropped), and kubectl's -o name / json / yaml over one object and a
    list."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))

    assert await kubectl.ok("get", "swp", "-o", "name") == f"{POOL}/python-pool\n"
    assert await kubectl.ok("get", "swp", "python-pool", "-o", "name") == f"{POOL}/python-pool\n"

    one = await kubectl.json("get", "swp", "python-pool")
    metadata = one["metadata"]
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", metadata["uid"]
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", metadata["creationTimestamp"])
    assert metadata["resourceVersion"].isdigit()
    assert metadata["generation"] == 1
    assert (metadata["name"], metadata["namespace"]) == ("python-pool", "default")
    assert one["spec"] == {
        "replicas": 3,
        "sandboxTemplateRef": {"name": "python"},
        "updateStrategy": {"type": "Recreate"},
    }
    assert "status" not in one

    as_yaml = yaml.safe_load(await kubectl.ok("get", "swp", "python-pool", "-o", "yaml"))
    assert as_yaml == one

    listed = await kubectl.json("get", "swp")
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert listed["items"] == [one]


async def test_get_with_label_selectors(kubectl: Kubectl) -> None:
    """Row 14 (label selectors: equality, set-based, existence; ``!=`` and ``notin`` also match
    objects without the key)."""
    await kubectl.ok(
        "apply",
        "-f",
        "-",
        stdin=as_stdin(
            sandbox("a", {"team": "research", "tier": "gpu"}),
            sandbox("b", {"team": "ml"}),
            sandbox("c"),
        ),
    )

    async def names(selector: str) -> list[str]:
        out = await kubectl.ok("get", "sandboxes", "-l", selector, "-o", "name")
        return [line.removeprefix(f"{SANDBOX}/") for line in out.splitlines()]

    assert await names("team=research") == ["a"]
    assert await names("team!=research") == ["b", "c"]
    assert await names("team in (research,ml)") == ["a", "b"]
    assert await names("team notin (ml)") == ["a", "c"]
    assert await names("team") == ["a", "b"]
    assert await names("!team") == ["c"]
    assert await names("team=research,tier=gpu") == ["a"]
    nothing = await kubectl("get", "sandboxes", "-l", "team=nobody")
    assert (nothing.code, nothing.out, nothing.err) == (
        0,
        "",
        "No resources found in default namespace.\n",
    )


async def test_get_with_a_malformed_label_selector(kubectl: Kubectl) -> None:
    """Row 14 (a selector syntax error is 400 BadRequest)."""
    result = await kubectl("get", "sandboxes", "-l", "team in (ml")

    assert result.code == 1
    assert result.err.startswith(
        'Error from server (BadRequest): Unable to find "agents.x-k8s.io/v1beta1, '
        'Resource=sandboxes" that match label selector "team in (ml", field selector "": '
    )


async def test_get_with_field_selectors(kubectl: Kubectl) -> None:
    """Row 14 (field selectors on CRs: metadata.name and metadata.namespace; anything else is
    400 ``field label not supported``)."""
    await kubectl.ok("apply", "-f", "-", stdin=as_stdin(sandbox("a"), sandbox("b")))

    out = await kubectl.ok("get", "sandboxes", "--field-selector", "metadata.name=b", "-o", "name")
    assert out == f"{SANDBOX}/b\n"
    out = await kubectl.ok(
        "get", "sandboxes", "-A", "--field-selector", "metadata.namespace=default", "-o", "name"
    )
    assert out == f"{SANDBOX}/a\n{SANDBOX}/b\n"

    result = await kubectl("get", "sandboxes", "--field-selector", "spec.x=y")
    assert (result.code, result.err) == (
        1,
        'Error from server (BadRequest): Unable to find "agents.x-k8s.io/v1beta1, '
        'Resource=sandboxes" that match label selector "", field selector "spec.x=y": field '
        "label not supported: spec.x\n",
    )


async def test_get_follows_continue_tokens(kubectl: Kubectl) -> None:
    """Row 16 (pagination: ``limit`` and ``continue``; kubectl's --chunk-size walks the pages
    and sees every object exactly once)."""
    await kubectl.ok("apply", "-f", "-", stdin=as_stdin(*(configmap(f"cm-{i}") for i in range(5))))

    result = await kubectl("get", "configmaps", "--chunk-size=2", "-o", "name", "-v=6")

    assert result.code == 0
    assert result.out.splitlines() == [f"configmap/cm-{i}" for i in range(5)]
    pages = re.findall(r'verb="GET" url="[^"]*/configmaps\?[^"]*limit=2[^"]*"', result.err)
    assert len(pages) == 3
    assert sum("continue=" in page for page in pages) == 2


async def test_get_of_a_missing_object(kubectl: Kubectl) -> None:
    """Row 13 (404 NotFound with the message ``<plural>.<group> "name" not found``)."""
    result = await kubectl("get", "sandboxes", "x")

    assert (result.code, result.out) == (1, "")
    assert result.err == 'Error from server (NotFound): sandboxes.agents.x-k8s.io "x" not found\n'


async def test_get_of_an_unknown_resource_type(kubectl: Kubectl) -> None:
    """Row 23 (discovery lists what is served, so kubectl can tell an unknown type itself)."""
    result = await kubectl("get", "frobs")

    assert (result.code, result.out) == (1, "")
    assert result.err == 'error: the server doesn\'t have a resource type "frobs"\n'


async def test_get_prints_the_sandbox_printer_columns(kubectl: Kubectl) -> None:
    """Row 25 (Table output for ``kubectl get``): a real server renders the CRD's
    additionalPrinterColumns, so users see READY and REASON for sandboxes."""
    await kubectl.ok("apply", "-f", "-", stdin=as_stdin(sandbox("a")))
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "DependenciesReady",
                    "message": "Pod is Ready",
                    "lastTransitionTime": "2030-06-30T10:00:00Z",
                }
            ]
        }
    }
    await kubectl.ok(
        "patch", "sandbox", "a", "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )

    out = await kubectl.ok("get", "sandboxes")

    assert out.splitlines()[0].split() == ["NAME", "READY", "REASON", "AGE"]
    [row] = table(out)
    assert (row["NAME"], row["READY"], row["REASON"]) == ("a", "True", "DependenciesReady")
    assert re.fullmatch(r"\d+s", row["AGE"])


async def test_get_prints_the_warm_pool_printer_columns(kubectl: Kubectl) -> None:
    """Row 25 (Table output): READY and DESIRED for sandboxwarmpools."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))
    status = {"status": {"replicas": 3, "readyReplicas": 2}}
    await kubectl.ok(
        "patch",
        "swp",
        "python-pool",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )

    out = await kubectl.ok("get", "swp")

    assert out.splitlines()[0].split() == ["NAME", "READY", "DESIRED", "AGE"]
    [row] = table(out)
    assert (row["NAME"], row["READY"], row["DESIRED"]) == ("python-pool", "2", "3")


async def test_get_prints_the_pod_columns(kubectl: Kubectl) -> None:
    """Row 25 (Table output) for a built-in kind: NAME READY STATUS RESTARTS AGE."""
    await kubectl.ok("run", "web", "--image=nginx:1.27")

    out = await kubectl.ok("get", "pods")

    assert out.splitlines()[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    [row] = table(out)
    assert (row["NAME"], row["READY"], row["STATUS"], row["RESTARTS"]) == (
        "web",
        "0/1",
        "Pending",
        "0",
    )


# -- get -w ---------------------------------------------------------------------------------

WATCH_EVENTS = "-o=jsonpath={.type} {.object.metadata.name} {.object.spec.replicas}{'\\n'}"


async def test_get_watch_sees_added_then_modified(kubectl: Kubectl) -> None:
    """Rows 2 and 3 (a watch without a resourceVersion starts with a synthetic ADDED per
    object, then delivers each later change as MODIFIED, one JSON document per line)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))

    async with kubectl.streaming("get", "swp", "-w", "--output-watch-events", WATCH_EVENTS) as w:
        assert await w.next() == "ADDED python-pool 3"
        await kubectl.ok(
            "patch", "swp", "python-pool", "--type=merge", "-p", '{"spec":{"replicas":4}}'
        )
        assert await w.next() == "MODIFIED python-pool 4"
        await kubectl.ok("apply", "-f", "-", stdin=as_stdin(pool("second", replicas=1)))
        assert await w.next() == "ADDED second 1"
        await kubectl.ok("delete", "swp", "second")
        assert await w.next() == "DELETED second 1"


async def test_get_watch_with_a_selector_sees_objects_leave_and_enter(kubectl: Kubectl) -> None:
    """Row 3 (with a selector, an object that stops matching arrives as DELETED and one that
    starts matching as ADDED)."""
    await kubectl.ok("apply", "-f", "-", stdin=as_stdin(sandbox("a", {"team": "research"})))
    events = "-o=jsonpath={.type} {.object.metadata.name} {.object.metadata.labels.team}{'\\n'}"

    async with kubectl.streaming(
        "get", "sandboxes", "-l", "team=research", "-w", "--output-watch-events", events
    ) as w:
        assert await w.next() == "ADDED a research"
        await kubectl.ok("label", "sandbox", "a", "team=ml", "--overwrite")
        assert await w.next() == "DELETED a research"
        await kubectl.ok("label", "sandbox", "a", "team=research", "--overwrite")
        assert await w.next() == "ADDED a research"


async def kubectl_is_watching(cluster: DevCluster, resource: str) -> None:
    """Wait until the server holds a watch on ``resource`` opened by kubectl."""
    await until(
        lambda: any(
            watch.info.resource == resource and watch.info.user_agent.startswith("kubectl/")
            for watch in cluster.watches.active()
        ),
        within=LINE_TIMEOUT,
        interval=0.02,
        what=f"kubectl to watch {resource}",
    )


async def test_get_watch_only_skips_the_initial_state(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    """Row 2 (a watch from the list's resourceVersion delivers only later changes, with no
    synthetic ADDED for what already exists)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))

    async with kubectl.streaming(
        "get", "swp", "--watch-only", "--output-watch-events", WATCH_EVENTS
    ) as w:
        await kubectl_is_watching(devcluster, "sandboxwarmpools")
        await kubectl.ok("scale", "swp", "python-pool", "--replicas=7")
        assert await w.next() == "MODIFIED python-pool 7"


# -- patch ----------------------------------------------------------------------------------


async def test_patch_merge(kubectl: Kubectl) -> None:
    """Row 9 (merge-patch+json is RFC 7386) and row 1 (a patch that changes nothing bumps no
    resourceVersion; kubectl reports ``patched (no change)``)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))
    patch = '{"spec":{"replicas":2,"updateStrategy":null}}'

    assert await kubectl.ok("patch", "swp", "python-pool", "--type=merge", "-p", patch) == (
        f"{POOL}/python-pool patched\n"
    )
    patched = await kubectl.json("get", "swp", "python-pool")
    assert patched["spec"] == {"replicas": 2, "sandboxTemplateRef": {"name": "python"}}

    assert await kubectl.ok("patch", "swp", "python-pool", "--type=merge", "-p", patch) == (
        f"{POOL}/python-pool patched (no change)\n"
    )
    again = await kubectl.json("get", "swp", "python-pool")
    assert again["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


async def test_patch_json(kubectl: Kubectl) -> None:
    """Row 9 (json-patch+json is RFC 6902; a failing ``test`` op is 422 and changes nothing;
    a body that is not an array is 400 with Go's unmarshal message)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))

    ops = json.dumps(
        [
            {"op": "test", "path": "/spec/replicas", "value": 3},
            {"op": "replace", "path": "/spec/replicas", "value": 4},
        ]
    )
    out = await kubectl.ok("patch", "swp", "python-pool", "--type=json", "-p", ops)
    assert out == f"{POOL}/python-pool patched\n"
    assert (await kubectl.json("get", "swp", "python-pool"))["spec"]["replicas"] == 4

    failing = await kubectl("patch", "swp", "python-pool", "--type=json", "-p", ops)
    assert failing.code == 1
    assert failing.err.startswith("The request is invalid")
    assert (await kubectl.json("get", "swp", "python-pool"))["spec"]["replicas"] == 4

    not_a_list = await kubectl("patch", "swp", "python-pool", "--type=json", "-p", '{"a":1}')
    assert (not_a_list.code, not_a_list.err) == (
        1,
        "Error from server (BadRequest): json: cannot unmarshal object into Go value of type "
        "jsonpatch.Patch\n",
    )


async def test_patch_strategic_merges_pod_containers_by_name(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """Row 9 (strategic-merge-patch+json on a built-in kind: ``containers`` merged by name, so
    the sidecar survives a patch that names only the app container)."""
    web = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx:1.25"},
                {"name": "sidecar", "image": "busybox:1.36", "command": ["sleep", "3600"]},
            ]
        },
    }
    await kubectl.ok("apply", "-f", write(tmp_path, "pod.yaml", web))
    patch = '{"spec":{"containers":[{"name":"app","image":"nginx:1.27"}]}}'

    assert await kubectl.ok("patch", "pod", "web", "-p", patch) == "pod/web patched\n"

    images = await kubectl.ok(
        "get", "pod", "web", "-o", "jsonpath={range .spec.containers[*]}{.name}={.image} {end}"
    )
    assert images == "app=nginx:1.27 sidecar=busybox:1.36 "


async def test_patch_strategic_on_a_custom_resource_is_unsupported(kubectl: Kubectl) -> None:
    """Row 9 (strategic merge on a CR is 415 UnsupportedMediaType with the accepted types)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))

    result = await kubectl("patch", "swp", "python-pool", "-p", '{"spec":{"replicas":2}}')

    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "error: application/strategic-merge-patch+json is not supported by "
        "extensions.agents.x-k8s.io/v1beta1, Kind=SandboxWarmPool: the body of the request was "
        "in an unknown format - accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/apply-patch+yaml\n"
    )


async def test_patch_status_subresource_ignores_spec(kubectl: Kubectl) -> None:
    """Row 11 (a write to /status replaces only .status; the spec in it is ignored) and row 10
    (/status writes never bump generation)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))
    patch = '{"spec":{"replicas":9},"status":{"replicas":3,"readyReplicas":1,"selector":"x=y"}}'

    out = await kubectl.ok(
        "patch", "swp", "python-pool", "--subresource=status", "--type=merge", "-p", patch
    )

    assert out == f"{POOL}/python-pool patched\n"
    after = await kubectl.json("get", "swp", "python-pool")
    assert after["spec"]["replicas"] == 3
    assert after["status"] == {"replicas": 3, "readyReplicas": 1, "selector": "x=y"}
    assert after["metadata"]["generation"] == 1


# -- delete ---------------------------------------------------------------------------------


async def test_delete_a_custom_resource(kubectl: Kubectl) -> None:
    """Row 12 (DELETE without finalizers removes the object at once) and row 13 (a second
    delete is NotFound; --ignore-not-found makes it quiet)."""
    await kubectl.ok("apply", "-f", str(SANDBOX_EXAMPLE))

    assert await kubectl.ok("delete", "sandbox", "notebook-alice") == (
        f'{SANDBOX} "notebook-alice" deleted from default namespace\n'
    )

    again = await kubectl("delete", "sandbox", "notebook-alice")
    assert (again.code, again.err) == (
        1,
        'Error from server (NotFound): sandboxes.agents.x-k8s.io "notebook-alice" not found\n',
    )
    quiet = await kubectl("delete", "sandbox", "notebook-alice", "--ignore-not-found")
    assert (quiet.code, quiet.out, quiet.err) == (0, "", "")


async def test_delete_waits_for_finalizers(kubectl: Kubectl) -> None:
    """Row 12 (DELETE on an object with finalizers only sets deletionTimestamp; the object goes
    when the last finalizer is removed, which ``kubectl wait --for=delete`` sees)."""
    held = sandbox("held", finalizers=[HOLD])
    await kubectl.ok("apply", "-f", "-", stdin=as_stdin(held))

    out = await kubectl.ok("delete", "sandbox", "held", "--wait=false")

    assert out == f'{SANDBOX} "held" deleted from default namespace\n'
    terminating = await kubectl.json("get", "sandbox", "held")
    assert "deletionTimestamp" in terminating["metadata"]
    assert terminating["metadata"]["finalizers"] == [HOLD]

    await kubectl.ok("patch", "sandbox", "held", "--type=json", "-p", RELEASE)
    await wait_for_deletion(kubectl, f"{SANDBOX}/held")


async def wait_for_deletion(kubectl: Kubectl, *objects: str) -> None:
    """``kubectl wait --for=delete``: succeeds once every object is gone (it prints ``condition
    met`` only for those it saw before they went), then each is confirmed NotFound."""
    out = await kubectl.ok("wait", "--for=delete", *objects, "--timeout=10s")
    assert set(out.splitlines()) <= {f"{name} condition met" for name in objects}
    for name in objects:
        result = await kubectl("get", name)
        assert result.code == 1 and "(NotFound)" in result.err, result


def owned_by(owner: Json) -> list[Json]:
    return [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


async def sandbox_with_pod_and_service(kubectl: Kubectl, *, hold_pod: bool = False) -> None:
    """A Sandbox ``owner`` and what a sandbox controller makes for it: a Pod and a Service,
    both owned by it (controller, blockOwnerDeletion). ``hold_pod`` puts a finalizer on the
    Pod, so that its deletion waits until the test removes it."""
    await kubectl.ok("apply", "-f", "-", stdin=as_stdin(sandbox("owner")))
    owner = await kubectl.json("get", "sandbox", "owner")
    pod_metadata: Json = {"name": "owner", "ownerReferences": owned_by(owner)}
    if hold_pod:
        pod_metadata["finalizers"] = [HOLD]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_metadata,
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "owner", "ownerReferences": owned_by(owner)},
        "spec": {"clusterIP": "None", "selector": {"app": "owner"}},
    }
    out = await kubectl.ok("apply", "-f", "-", stdin=as_stdin(pod, service))
    assert out == "pod/owner created\nservice/owner created\n"


async def test_delete_background_lets_the_collector_remove_pod_and_service(
    kubectl: Kubectl,
) -> None:
    """Row 19 (background propagation, the default: the owner goes at once; the garbage
    collector then deletes the dependents whose owners are all gone, matched by uid)."""
    await sandbox_with_pod_and_service(kubectl)

    out = await kubectl.ok("delete", "sandbox", "owner")

    assert out == f'{SANDBOX} "owner" deleted from default namespace\n'
    await wait_for_deletion(kubectl, "pod/owner", "service/owner")


async def test_delete_foreground_waits_for_blocking_dependents(kubectl: Kubectl) -> None:
    """Row 19 (foreground: the owner gets deletionTimestamp and the ``foregroundDeletion``
    finalizer, its dependents are deleted, and the owner goes only once its blocking
    dependents are gone; here the Pod is held by a finalizer until the test releases it)."""
    await sandbox_with_pod_and_service(kubectl, hold_pod=True)

    out = await kubectl.ok("delete", "sandbox", "owner", "--cascade=foreground", "--wait=false")
    assert out == f'{SANDBOX} "owner" deleted from default namespace\n'

    await wait_for_deletion(kubectl, "service/owner")
    held = await kubectl.json("get", "pod", "owner")
    assert "deletionTimestamp" in held["metadata"]
    owner = await kubectl.json("get", "sandbox", "owner")
    assert owner["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert "deletionTimestamp" in owner["metadata"]

    await kubectl.ok("patch", "pod", "owner", "--type=json", "-p", RELEASE)
    await wait_for_deletion(kubectl, f"{SANDBOX}/owner", "pod/owner")


async def test_delete_foreground_and_wait_returns_when_the_collector_is_done(
    kubectl: Kubectl,
) -> None:
    """Row 19 (foreground, as a user types it: ``kubectl delete --cascade=foreground`` blocks
    until the collector has removed the Pod and Service and then the Sandbox)."""
    await sandbox_with_pod_and_service(kubectl)

    out = await kubectl.ok("delete", "sandbox", "owner", "--cascade=foreground")

    assert out == f'{SANDBOX} "owner" deleted from default namespace\n'
    for name in (f"{SANDBOX}/owner", "pod/owner", "service/owner"):
        assert (await kubectl("get", name)).code == 1, name


async def test_delete_orphan_keeps_dependents_without_owner_references(kubectl: Kubectl) -> None:
    """Row 19 (orphan: the collector strips the ownerReferences from the dependents, then
    removes the ``orphan`` finalizer and the owner)."""
    await sandbox_with_pod_and_service(kubectl)

    out = await kubectl.ok("delete", "sandbox", "owner", "--cascade=orphan")

    assert out == f'{SANDBOX} "owner" deleted from default namespace\n'
    assert (await kubectl("get", "sandbox", "owner")).code == 1
    for kind in ("pod", "service"):
        dependent = await kubectl.json("get", kind, "owner")
        assert "ownerReferences" not in dependent["metadata"], kind
        assert "deletionTimestamp" not in dependent["metadata"], kind


# -- scale ----------------------------------------------------------------------------------


async def test_scale_a_warm_pool_through_the_scale_subresource(kubectl: Kubectl) -> None:
    """Row 18 (the scale subresource: autoscaling/v1 Scale mapped through specReplicasPath,
    statusReplicasPath and labelSelectorPath; a write through it bumps generation)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))
    status = '{"status":{"replicas":3,"selector":"agents.x-k8s.io/warm-pool-sandbox=1f6e2d3c"}}'
    await kubectl.ok(
        "patch", "swp", "python-pool", "--subresource=status", "--type=merge", "-p", status
    )

    out = await kubectl.ok("scale", "swp", "python-pool", "--replicas=5")

    assert out == f"{POOL}/python-pool scaled\n"
    pool_after = await kubectl.json("get", "swp", "python-pool")
    assert pool_after["spec"]["replicas"] == 5
    assert pool_after["metadata"]["generation"] == 2
    scale = json.loads(
        await kubectl.ok(
            "get",
            "--raw",
            "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxwarmpools/"
            "python-pool/scale",
        )
    )
    assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
    assert scale["spec"] == {"replicas": 5}
    assert scale["status"] == {
        "replicas": 3,
        "selector": "agents.x-k8s.io/warm-pool-sandbox=1f6e2d3c",
    }
    assert scale["metadata"]["resourceVersion"] == pool_after["metadata"]["resourceVersion"]


async def test_writes_through_subresources_are_recorded_in_managed_fields(
    kubectl: Kubectl,
) -> None:
    """Row 18 and row 11 with row 25 (managedFields): a write through /scale or /status is
    recorded under its manager (kubectl scale sends no fieldManager, so the user agent's
    ``kubectl``) with ``subresource`` naming the subresource."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))
    await kubectl.ok("scale", "swp", "python-pool", "--replicas=4")
    await kubectl.ok(
        "patch",
        "swp",
        "python-pool",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"replicas":4}}',
    )

    pool_after = await kubectl.json("get", "swp", "python-pool", "--show-managed-fields")

    entries = {
        (entry["manager"], entry.get("subresource", "")): entry["fieldsV1"]
        for entry in pool_after["metadata"]["managedFields"]
    }
    assert entries[("kubectl", "scale")] == {"f:spec": {"f:replicas": {}}}
    assert entries[("kubectl-patch", "status")] == {"f:status": {"f:replicas": {}}}


async def test_scale_with_a_stale_current_replicas_precondition(kubectl: Kubectl) -> None:
    """Row 18 (the Scale read returns spec.replicas, which kubectl's --current-replicas
    checks before writing)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))

    result = await kubectl("scale", "swp", "python-pool", "--replicas=5", "--current-replicas=2")

    assert (result.code, result.err) == (1, "error: Expected replicas to be 2, was 3\n")
    assert (await kubectl.json("get", "swp", "python-pool"))["spec"]["replicas"] == 3


async def test_scale_a_kind_without_a_scale_subresource(kubectl: Kubectl) -> None:
    """Row 18 / row 13: a Sandbox has no scale subresource. The real apiextensions-apiserver
    answers any subresource a CRD does not declare with ``NewNotFound(groupResource, name)``
    (crdHandler.ServeHTTP, ``default:`` case), so kubectl prints the object as not found."""
    await kubectl.ok("apply", "-f", str(SANDBOX_EXAMPLE))

    result = await kubectl("scale", "sandbox", "notebook-alice", "--replicas=0")

    assert result.code == 1
    assert result.err == (
        'Error from server (NotFound): sandboxes.agents.x-k8s.io "notebook-alice" not found\n'
    )


# -- discovery ------------------------------------------------------------------------------


async def test_api_resources_lists_our_kinds(kubectl: Kubectl) -> None:
    """Row 23 (discovery: /apis/G/V lists each resource with its short names, scope, kind and
    verbs; subresources are not listed as resources)."""
    out = await kubectl.ok("api-resources", "-o", "wide")

    rows = {(row["NAME"], row["APIVERSION"]): row for row in table(out)}
    verbs = "create,delete,deletecollection,get,list,patch,update,watch"
    expected = {
        ("sandboxes", "agents.x-k8s.io/v1beta1"): ("sandbox", "Sandbox"),
        ("sandboxclaims", "extensions.agents.x-k8s.io/v1beta1"): ("sandboxclaim", "SandboxClaim"),
        ("sandboxtemplates", "extensions.agents.x-k8s.io/v1beta1"): (
            "sandboxtemplate",
            "SandboxTemplate",
        ),
        ("sandboxwarmpools", "extensions.agents.x-k8s.io/v1beta1"): ("swp", "SandboxWarmPool"),
        ("batchsandboxes", "sandbox.opensandbox.io/v1alpha1"): ("bsbx", "BatchSandbox"),
        ("pools", "sandbox.opensandbox.io/v1alpha1"): ("", "Pool"),
        ("sandboxsnapshots", "sandbox.opensandbox.io/v1alpha1"): ("sbxsnap", "SandboxSnapshot"),
    }
    for key, (short_names, kind) in expected.items():
        row = rows[key]
        assert (row["SHORTNAMES"], row["NAMESPACED"], row["KIND"], row["VERBS"]) == (
            short_names,
            "true",
            kind,
            verbs,
        ), key
    assert not any("/" in name for name, _ in rows)

    cluster_scoped = await kubectl.ok("api-resources", "--namespaced=false", "-o", "name")
    assert {"namespaces", "customresourcedefinitions.apiextensions.k8s.io"} <= set(
        cluster_scoped.split()
    )
    assert "sandboxes.agents.x-k8s.io" not in cluster_scoped.split()


async def test_short_names_resolve(kubectl: Kubectl) -> None:
    """Row 23 (kubectl resolves the CRD short names from discovery)."""
    await kubectl.ok("apply", "-f", str(POOL_EXAMPLE))

    assert await kubectl.ok("get", "swp", "-o", "name") == f"{POOL}/python-pool\n"
    assert await kubectl.ok("get", "sandboxwarmpool", "-o", "name") == f"{POOL}/python-pool\n"
    assert (
        await kubectl.ok("get", "sandboxwarmpools.extensions.agents.x-k8s.io", "-o", "name")
        == f"{POOL}/python-pool\n"
    )


async def test_explain_a_custom_resource(kubectl: Kubectl) -> None:
    """Row 23 (OpenAPI v3 per group/version, carrying each CRD's structural schema): ``kubectl
    explain`` documents the kind and its fields, required ones marked."""
    result = await kubectl("explain", "swp")

    assert result.code == 0, result
    assert result.out.startswith(
        "GROUP:      extensions.agents.x-k8s.io\n"
        "KIND:       SandboxWarmPool\n"
        "VERSION:    v1beta1\n\n"
        "DESCRIPTION:\n"
        "    A pool of pre-provisioned sandboxes from one template, waiting to be\n"
        "    claimed.\n"
    )
    assert "  spec\t<Object> -required-\n    The desired state of a SandboxWarmPool.\n" in (
        result.out
    )
    field = await kubectl.ok("explain", "swp.spec.replicas")
    assert "FIELD: replicas <integer>\n" in field


async def test_explain_shows_object_meta_for_a_custom_resource(kubectl: Kubectl) -> None:
    """Row 23 (OpenAPI): ``metadata`` of a custom resource is documented as ObjectMeta."""
    out = await kubectl.ok("explain", "swp")

    assert "  metadata\t<ObjectMeta>\n    Standard object's metadata." in out


async def test_apply_of_an_unknown_kind(kubectl: Kubectl, tmp_path: Path) -> None:
    """Row 23 (discovery has no mapping for the kind): kubectl reports the missing mapping and
    hints at installing the CRD."""
    path = write(
        tmp_path,
        "frob.yaml",
        {"apiVersion": "example.com/v1", "kind": "Frob", "metadata": {"name": "x"}},
    )

    result = await kubectl("apply", "-f", path)

    assert result.code == 1
    assert result.err == (
        f'error: resource mapping not found for name: "x" namespace: "" from "{path}": no matches '
        'for kind "Frob" in version "example.com/v1"\nensure CRDs are installed first\n'
    )


async def test_apply_of_an_unknown_kind_without_client_validation(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """Row 23: with client-side validation off, the missing mapping is reported as on a real
    server (discovery has no such kind)."""
    path = write(
        tmp_path,
        "frob.yaml",
        {"apiVersion": "example.com/v1", "kind": "Frob", "metadata": {"name": "x"}},
    )

    result = await kubectl("apply", "--validate=false", "-f", path)

    assert result.code == 1
    assert result.err == (
        f'error: resource mapping not found for name: "x" namespace: "" from "{path}": no matches '
        'for kind "Frob" in version "example.com/v1"\nensure CRDs are installed first\n'
    )


# -- namespaces -----------------------------------------------------------------------------


async def test_create_namespace(kubectl: Kubectl) -> None:
    """Row 21 (namespaces) through ``kubectl create namespace``, whose typed client sends the
    body as Kubernetes protobuf (a real server accepts it; client-go never falls back to
    JSON for it)."""
    out = await kubectl.ok("create", "namespace", "team-a")

    assert out == "namespace/team-a created\n"
    namespace = await kubectl.json("get", "namespace", "team-a")
    assert namespace["status"] == {"phase": "Active"}


async def test_create_configmap_and_secret_imperatively(kubectl: Kubectl) -> None:
    """Row 7 (create) for the other typed-client (protobuf) creates a user types: ``create
    configmap --from-literal`` and ``create secret generic`` (data base64-encoded, type
    Opaque)."""
    assert await kubectl.ok(
        "create", "configmap", "settings", "--from-literal=a=b", "--from-literal=c=d"
    ) == ("configmap/settings created\n")
    assert await kubectl.ok(
        "create", "secret", "generic", "creds", "--from-literal=user=alice"
    ) == ("secret/creds created\n")

    settings = await kubectl.json("get", "configmap", "settings")
    assert settings["data"] == {"a": "b", "c": "d"}
    creds = await kubectl.json("get", "secret", "creds")
    assert (creds["data"], creds["type"]) == ({"user": "YWxpY2U="}, "Opaque")


async def test_namespace_lifecycle_from_a_manifest(kubectl: Kubectl, tmp_path: Path) -> None:
    """Row 21 (namespaces: create, then objects in it, a duplicate is AlreadyExists, and
    deleting the namespace removes its contents before the namespace itself goes)."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    path = write(tmp_path, "namespace.yaml", namespace)

    assert await kubectl.ok("create", "-f", path) == "namespace/team-a created\n"
    duplicate = await kubectl("create", "-f", path)
    assert (duplicate.code, duplicate.err) == (
        1,
        f'Error from server (AlreadyExists): error when creating "{path}": namespaces "team-a" '
        "already exists\n",
    )
    assert (await kubectl.json("get", "namespace", "team-a"))["status"] == {"phase": "Active"}
    await kubectl.ok("apply", "-f", "-", stdin=as_stdin(pool(namespace="team-a")))
    listed = await kubectl.ok("get", "swp", "-n", "team-a", "-o", "name")
    assert listed == f"{POOL}/python-pool\n"

    assert await kubectl.ok("delete", "namespace", "team-a") == 'namespace "team-a" deleted\n'

    assert (await kubectl("get", "namespace", "team-a")).code == 1
    gone = await kubectl("get", "swp", "-n", "team-a", "-o", "name")
    assert (gone.code, gone.out) == (0, "")
