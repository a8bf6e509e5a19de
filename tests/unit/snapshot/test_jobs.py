"""The commit Job a snapshot's first pass creates (services/snapshot/core/jobs.py,
docs/opensandbox.md §4.3, §9.22) and the image names it commits to (services/snapshot/core/
images.py, §4.2, §9.21): upstream's TestBuildCommitJob_* and
TestHandlePending_PublicSnapshotUsesSnapshotIDTag, then the tags of the pause snapshot and of
any other name, read off the Job and the status the pass writes."""

from __future__ import annotations

import hashlib

import pytest

from api.objects import Json
from api.opensandbox import LABEL_PRIVILEGED_NODE_ACCESS, LABEL_SANDBOX_SNAPSHOT_NAME
from services.snapshot.core.jobs import CommitterSettings, commit_job, commit_target
from services.snapshot.core.plan import SnapshotSettings
from tests.unit.snapshot.world import (
    COMMITTER,
    NAME,
    NODE,
    NS,
    REGISTRY,
    SNAP,
    SNAP_UID,
    batch_sandbox,
    commit_container,
    created_job,
    plan,
    pod,
    snapshot,
    status_patch,
    template,
)

CONFIGURED = SnapshotSettings(
    registry=REGISTRY,
    committer=CommitterSettings(
        image="registry.example.com/tools/image-committer:v0.3",
        push_secret="registry-push",
        registry_insecure=True,
        containerd_socket="/run/k3s/containerd/containerd.sock",
        commit_timeout=900.0,
    ),
)


def the_job(settings: SnapshotSettings = CONFIGURED, snap: Json | None = None) -> Json:
    """The commit Job of a new snapshot of the template-mode sandbox ``bs``."""
    sandbox = batch_sandbox()
    snap = snap if snap is not None else snapshot()
    name = snap["metadata"]["name"]
    result = plan(snap, sandbox, pod(f"{NAME}-0", owner=sandbox), settings=settings, name=name)
    return created_job(result, f"{name}-commit")


def uris(snap: Json, sandbox: Json) -> list[str]:
    """The image URIs a new snapshot's pass commits to, as the Job and the status say them."""
    name = snap["metadata"]["name"]
    result = plan(snap, sandbox, pod(f"{NAME}-0", owner=sandbox), name=name)
    args = commit_container(created_job(result, f"{name}-commit"))["args"]
    status = status_patch(result)
    assert status is not None
    from_status = [c["imageUri"] for c in status["containers"]]
    assert [arg.split(":", 1)[1] for arg in args[2:]] == from_status
    return from_status


# -- the Job --------------------------------------------------------------------------------


def test_the_commit_job_has_a_bounded_backoff() -> None:
    """TestBuildCommitJob_SetsBoundedBackoffLimit (:450): named ``<snap>-commit``, three
    retries, kept 300 s after it ends, and the deadline the settings give."""
    body = the_job()
    assert body["apiVersion"] == "batch/v1" and body["kind"] == "Job"
    assert body["metadata"]["name"] == f"{SNAP}-commit"
    assert body["metadata"]["namespace"] == NS
    spec = body["spec"]
    assert spec["backoffLimit"] == 3
    assert spec["ttlSecondsAfterFinished"] == 300
    assert spec["activeDeadlineSeconds"] == 900
    assert the_job(SnapshotSettings(registry=REGISTRY))["spec"]["activeDeadlineSeconds"] == 600


def test_the_commit_job_runs_the_committer_directly_with_isolated_args() -> None:
    """TestBuildCommitJob_ExecutesImageCommitterDirectlyWithIsolatedArgs (:478): the
    committer is the command itself (no shell), each ``<container>:<uri>`` its own argv
    entry, on the source Pod's node; root without privilege escalation and with every
    capability dropped; the insecure-registry variable when configured."""
    body = the_job()
    pod_spec = body["spec"]["template"]["spec"]
    assert pod_spec["nodeName"] == NODE, "the scheduler is bypassed: the committer needs the node"
    assert pod_spec["restartPolicy"] == "Never"
    container = commit_container(body)
    assert container["name"] == "commit"
    assert container["image"] == "registry.example.com/tools/image-committer:v0.3"
    assert container["command"] == [COMMITTER]
    tag = "snap-" + hashlib.sha256(SNAP.encode()).hexdigest()[:32]
    assert container["args"] == [
        f"{NAME}-0",
        NS,
        f"main:{REGISTRY}/{NAME}-main:{tag}",
        f"sidecar:{REGISTRY}/{NAME}-sidecar:{tag}",
    ]
    assert container["securityContext"] == {
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "CONTAINERD_SOCKET": "/var/run/containerd/containerd.sock",
        "SNAPSHOT_REGISTRY_INSECURE": "true",
    }


def test_shell_metacharacters_stay_in_one_argv_entry() -> None:
    """TestBuildCommitJob_ExecutesImageCommitterDirectlyWithIsolatedArgs, the hostile case: a
    container name or URI with ``;``, spaces or ``$( )`` is one argument, never read by a
    shell."""
    body = commit_job(
        snapshot(),
        "bs-0",
        NODE,
        [("a;rm -rf /", "reg.example.com/x:$(reboot)"), ("b && c", "r/y:`id` | sh")],
        CommitterSettings(),
    )
    container = commit_container(body)
    assert container["command"] == [COMMITTER]
    assert container["args"] == [
        "bs-0",
        NS,
        "a;rm -rf /:reg.example.com/x:$(reboot)",
        "b && c:r/y:`id` | sh",
    ]
    assert commit_target(body) == (
        "bs-0",
        NODE,
        [("a;rm -rf /", "reg.example.com/x:$(reboot)"), ("b && c", "r/y:`id` | sh")],
    ), "read back as written, the URI's own colons kept"


def test_the_containerd_socket_of_the_node_is_mounted() -> None:
    """§4.3: the node's socket (``--containerd-socket-path``) at the path the committer
    uses."""
    body = the_job()
    pod_spec = body["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    assert volumes["containerd-socket"]["hostPath"] == {
        "path": "/run/k3s/containerd/containerd.sock"
    }
    mounts = {m["name"]: m for m in commit_container(body)["volumeMounts"]}
    assert mounts["containerd-socket"]["mountPath"] == "/var/run/containerd/containerd.sock"


def test_the_push_secret_is_mounted_when_configured() -> None:
    """§4.3: key ``.dockerconfigjson`` of the push secret as ``config.json`` in
    /var/run/opensandbox/registry, read-only."""
    body = the_job()
    volumes = {v["name"]: v for v in body["spec"]["template"]["spec"]["volumes"]}
    assert volumes["registry-auth"] == {
        "name": "registry-auth",
        "secret": {
            "secretName": "registry-push",
            "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
        },
    }
    mounts = {m["name"]: m for m in commit_container(body)["volumeMounts"]}
    assert mounts["registry-auth"] == {
        "name": "registry-auth",
        "mountPath": "/var/run/opensandbox/registry",
        "readOnly": True,
    }


def test_without_the_options_neither_secret_nor_insecure_variable() -> None:
    """TestBuildCommitJob_ExecutesImageCommitterDirectlyWithIsolatedArgs, the default flags: no
    ``SNAPSHOT_REGISTRY_INSECURE`` and no registry secret unless configured; upstream's
    default committer image."""
    body = the_job(SnapshotSettings(registry=REGISTRY))
    container = commit_container(body)
    assert [e["name"] for e in container["env"]] == ["CONTAINERD_SOCKET"]
    assert [m["name"] for m in container["volumeMounts"]] == ["containerd-socket"]
    assert [v["name"] for v in body["spec"]["template"]["spec"]["volumes"]] == ["containerd-socket"]
    assert container["image"] == "image-committer:dev"


def test_the_job_is_labelled_and_controlled_by_the_snapshot() -> None:
    """§4.3: the snapshot-name and privileged-node-access labels, a controller reference to
    the snapshot (so the Job goes with it); the Job's Pods carry the snapshot's name too
    (sandbus: it is how the worker follows them)."""
    body = the_job()
    assert body["metadata"]["labels"] == {
        LABEL_SANDBOX_SNAPSHOT_NAME: SNAP,
        LABEL_PRIVILEGED_NODE_ACCESS: "true",
    }
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "sandbox.opensandbox.io/v1alpha1",
            "kind": "SandboxSnapshot",
            "name": SNAP,
            "uid": SNAP_UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert body["spec"]["template"]["metadata"]["labels"] == {LABEL_SANDBOX_SNAPSHOT_NAME: SNAP}


# -- the image names ------------------------------------------------------------------------


def test_a_public_snapshot_is_tagged_with_its_id() -> None:
    """TestHandlePending_PublicSnapshotUsesSnapshotIDTag (:385): ``osb-snap-<32 hex>`` →
    ``snap-<that hex>``, so the lifecycle server finds the images by the snapshot's id."""
    hex_id = "0123456789abcdef0123456789abcdef"
    assert uris(snapshot(f"osb-snap-{hex_id}"), batch_sandbox()) == [
        f"{REGISTRY}/{NAME}-main:snap-{hex_id}",
        f"{REGISTRY}/{NAME}-sidecar:snap-{hex_id}",
    ]


def test_a_pause_snapshot_is_tagged_with_the_sandbox_generation() -> None:
    """§4.2, §9.21: a snapshot the BatchSandbox controls → ``snap-gen<generation>``, so a
    later pause of the same sandbox does not overwrite these images."""
    sandbox = batch_sandbox(generation=4)
    pause = snapshot(f"{NAME}-pause", owner=sandbox)
    assert uris(pause, sandbox) == [
        f"{REGISTRY}/{NAME}-main:snap-gen4",
        f"{REGISTRY}/{NAME}-sidecar:snap-gen4",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "nightly",
        "osb-snap-0123456789ABCDEF0123456789ABCDEF",
        "osb-snap-0123456789abcdef0123456789abcde",
        "osb-snap-0123456789abcdef0123456789abcdef0",
        "my-osb-snap-0123456789abcdef0123456789abcdef",
    ],
)
def test_any_other_snapshot_is_tagged_by_the_hash_of_its_name(name: str) -> None:
    """§4.2: ``snap-`` and the first 32 hex digits of sha256(name), whatever the name (an
    almost-public one too): a valid tag, the same on every retry."""
    tag = "snap-" + hashlib.sha256(name.encode()).hexdigest()[:32]
    assert uris(snapshot(name), batch_sandbox()) == [
        f"{REGISTRY}/{NAME}-main:{tag}",
        f"{REGISTRY}/{NAME}-sidecar:{tag}",
    ]


def test_only_a_controlling_batch_sandbox_makes_a_pause_snapshot() -> None:
    """§9.21: an ownerReference of kind BatchSandbox that is not the controller, or a
    controller of another kind, or a BatchSandbox of another API group, does not give the
    generation tag."""
    sandbox = batch_sandbox(generation=4, template_spec=template("main"))
    tag = "snap-" + hashlib.sha256(b"owned").hexdigest()[:32]
    owned = snapshot("owned")
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "sandbox.opensandbox.io/v1alpha1",
            "kind": "BatchSandbox",
            "name": NAME,
            "uid": "uid-bs",
            "controller": False,
        }
    ]
    assert uris(owned, sandbox) == [f"{REGISTRY}/{NAME}-main:{tag}"]
    for controller in (
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u", "controller": True},
        {
            "apiVersion": "sandbox.opensandbox.io/v1alpha1",
            "kind": "Pool",
            "name": "pool-a",
            "uid": "uid-pool-a",
            "controller": True,
        },
        {
            "apiVersion": "example.com/v1",
            "kind": "BatchSandbox",
            "name": NAME,
            "uid": "uid-bs",
            "controller": True,
        },
    ):
        owned["metadata"]["ownerReferences"] = [controller]
        assert uris(owned, sandbox) == [f"{REGISTRY}/{NAME}-main:{tag}"], controller


def test_a_registry_with_a_trailing_slash_makes_no_double_slash() -> None:
    """sandbus: ``SANDBUS_SNAPSHOT_REGISTRY`` written with a trailing ``/`` (or with a port)
    still gives ``<registry>/<bs>-<container>:<tag>``."""
    sandbox = batch_sandbox(template_spec=template("main"))
    result = plan(
        snapshot("nightly"),
        sandbox,
        pod(f"{NAME}-0", owner=sandbox),
        settings=SnapshotSettings(registry="localhost:5000/snaps/"),
        name="nightly",
    )
    tag = "snap-" + hashlib.sha256(b"nightly").hexdigest()[:32]
    status = status_patch(result)
    assert status is not None
    assert status["containers"][0]["imageUri"] == f"localhost:5000/snaps/{NAME}-main:{tag}"
