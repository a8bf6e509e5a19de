"""Issue #29: the snapshot formats upstream added later (docs/opensandbox.md §4.4). sandbus's
worker commits ``rootfs-v1`` (or no format) as before and says so in ``status.format``; it
refuses ``qemu-v1`` and ``kata-vmstate-v1`` with ``IncompatibleSnapshotFormat``, and a
``rootfs-v1`` snapshot whose status already holds a VM checkpoint with
``InvalidCheckpointContract``; neither refusal creates a Job or touches the VM fields."""

from __future__ import annotations

import pytest

from api.objects import Json
from services.snapshot.core.formats import (
    COMMITTED_FORMAT,
    format_refusal,
    requested_format,
)
from services.snapshot.core.plan import SnapshotSettings
from tests.unit.snapshot.world import (
    NAME,
    batch_sandbox,
    commit_pod,
    committing,
    conditions_of,
    creates,
    digests_message,
    job,
    plan,
    pod,
    snapshot,
    status_patch,
)

VM_FORMATS = ["qemu-v1", "kata-vmstate-v1"]
VIRTUAL_MACHINE: Json = {"digest": "sha256:0f1e", "size": 1048576, "compatibility": {"x": "y"}}
KATA_STATE: Json = {"snapshotName": "kata-snap-1", "restorePlanSecretName": "kata-plan-1"}


def sandbox_and_pod() -> tuple[Json, Json]:
    sandbox = batch_sandbox()
    return sandbox, pod(f"{NAME}-0", owner=sandbox)


# -- rootfs-v1 --------------------------------------------------------------------------------


@pytest.mark.parametrize("snapshot_format", [None, "rootfs-v1"])
def test_rootfs_or_no_format_is_committed_and_says_rootfs(snapshot_format: str | None) -> None:
    result = plan(snapshot(snapshot_format=snapshot_format), *sandbox_and_pod())
    assert [b["kind"] for b in creates(result)] == ["Job", "Event"]
    status = status_patch(result) or {}
    assert status["phase"] == "Committing"
    assert status["format"] == "rootfs-v1"


def test_a_rootfs_snapshot_keeps_its_format_through_the_commit() -> None:
    """The issue's "done when": spec.format rootfs-v1 → status.format rootfs-v1 at Succeed."""
    done = job(state="succeeded")
    result = plan(
        snapshot(snapshot_format="rootfs-v1", status={**committing(), "format": "rootfs-v1"}),
        batch_sandbox(),
        done,
        commit_pod(done, message=digests_message(("main", "main:x", "sha256:1"))),
    )
    status = status_patch(result) or {}
    assert status["phase"] == "Succeed"
    assert status["format"] == "rootfs-v1"


def test_a_commit_that_fails_still_names_the_format_it_tried() -> None:
    result = plan(snapshot(snapshot_format="rootfs-v1", status=committing()), job(state="failed"))
    status = status_patch(result) or {}
    assert status["phase"] == "Failed"
    assert status["format"] == "rootfs-v1"


def test_a_failure_before_the_commit_clears_a_format_an_earlier_attempt_wrote() -> None:
    """A Committing snapshot whose Job went and whose sandbox went too: nothing is committed,
    so no format is claimed (the merge patch's null removes it)."""
    result = plan(snapshot(status={**committing(), "format": "rootfs-v1"}))
    status = status_patch(result) or {}
    assert status["phase"] == "Failed"
    assert status["format"] is None


# -- formats sandbus cannot commit ------------------------------------------------------------


@pytest.mark.parametrize("snapshot_format", VM_FORMATS)
def test_a_vm_format_fails_incompatible_without_a_job(snapshot_format: str) -> None:
    result = plan(snapshot(snapshot_format=snapshot_format), *sandbox_and_pod())
    assert creates(result) == []
    status = status_patch(result) or {}
    assert status["phase"] == "Failed"
    ((state, reason, message),) = conditions_of(status).values()
    assert (state, reason) == ("True", "IncompatibleSnapshotFormat")
    assert f"spec.format {snapshot_format}" in message
    assert "commits only rootfs-v1" in message
    assert "spec.format rootfs-v1" in message  # what to do


@pytest.mark.parametrize("snapshot_format", VM_FORMATS)
def test_the_format_is_refused_before_the_configuration_is_looked_at(
    snapshot_format: str,
) -> None:
    """No registry configured would fail it too; the format is what the user must change."""
    result = plan(
        snapshot(snapshot_format=snapshot_format),
        *sandbox_and_pod(),
        settings=SnapshotSettings(registry=""),
    )
    _, reason, _ = conditions_of(status_patch(result))["Failed"]
    assert reason == "IncompatibleSnapshotFormat"


def test_a_pause_snapshot_in_a_vm_format_is_refused_too() -> None:
    sandbox = batch_sandbox()
    result = plan(snapshot(snapshot_format="qemu-v1", owner=sandbox), *sandbox_and_pod())
    assert creates(result) == []
    _, reason, _ = conditions_of(status_patch(result))["Failed"]
    assert reason == "IncompatibleSnapshotFormat"


@pytest.mark.parametrize("snapshot_format", VM_FORMATS)
def test_a_vm_state_in_status_is_left_alone(snapshot_format: str) -> None:
    """The status write is a merge patch that names neither VM field, so what another writer
    put there stays (and a terminal snapshot is not written again)."""
    status: Json = {"virtualMachine": VIRTUAL_MACHINE, "kataVMState": KATA_STATE}
    result = plan(snapshot(snapshot_format=snapshot_format, status=status), *sandbox_and_pod())
    written = status_patch(result) or {}
    assert "virtualMachine" not in written and "kataVMState" not in written
    refused = {**status, **written, "phase": "Failed"}
    again = plan(snapshot(snapshot_format=snapshot_format, status=refused), *sandbox_and_pod())
    assert status_patch(again) is None


# -- a contract that contradicts itself ---------------------------------------------------------


@pytest.mark.parametrize(
    ("snapshot_format", "vm_status"),
    [
        (None, {"virtualMachine": VIRTUAL_MACHINE}),
        ("rootfs-v1", {"kataVMState": KATA_STATE}),
        ("rootfs-v1", {"virtualMachine": VIRTUAL_MACHINE, "kataVMState": KATA_STATE}),
    ],
)
def test_a_rootfs_snapshot_holding_a_vm_checkpoint_is_an_invalid_contract(
    snapshot_format: str | None, vm_status: Json
) -> None:
    result = plan(snapshot(snapshot_format=snapshot_format, status=vm_status), *sandbox_and_pod())
    assert creates(result) == []
    written = status_patch(result) or {}
    assert written["phase"] == "Failed"
    state, reason, message = conditions_of(written)["Failed"]
    assert (state, reason) == ("True", "InvalidCheckpointContract")
    for name in vm_status:
        assert f"status.{name}" in message
    assert "Create a new SandboxSnapshot" in message


def test_a_null_vm_field_is_no_checkpoint() -> None:
    status: Json = {"virtualMachine": None}
    assert format_refusal(snapshot(status=status)) is None


# -- the pure helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_format", "expected"),
    [(None, "rootfs-v1"), ("", "rootfs-v1"), ("rootfs-v1", "rootfs-v1"), ("qemu-v1", "qemu-v1")],
)
def test_the_requested_format_defaults_to_rootfs(spec_format: str | None, expected: str) -> None:
    body = snapshot()
    if spec_format is not None:
        body["spec"]["format"] = spec_format
    assert requested_format(body) == expected


def test_the_committed_format_is_upstreams_rootfs_name() -> None:
    assert COMMITTED_FORMAT == "rootfs-v1"


def test_an_unknown_format_read_from_an_old_store_is_refused_too() -> None:
    """The CRD's enum refuses it on write; an object stored before the enum is still refused
    rather than committed as something it did not ask for."""
    refusal = format_refusal(snapshot(snapshot_format="firecracker-v9"))
    assert refusal is not None
    assert refusal.reason == "IncompatibleSnapshotFormat"
    assert "firecracker-v9" in refusal.message
