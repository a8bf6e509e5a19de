"""Which snapshot formats the snapshot worker commits, and why it refuses the others
(docs/opensandbox.md §4.4).

Upstream's SandboxSnapshot later gained ``spec.format``: ``rootfs-v1`` (the containers' root
filesystems, committed by the image-committer), ``qemu-v1`` (a QEMU guest's memory, vCPU and
device state, taken over QMP, beside its rootfs) and ``kata-vmstate-v1`` (a Kata Containers VM's
state). sandbus's runtime is the image-committer's commit alone, so:

- no format, or ``rootfs-v1``: committed as always, and ``status.format`` says ``rootfs-v1``;
- ``qemu-v1`` or ``kata-vmstate-v1``: Failed ``IncompatibleSnapshotFormat``, upstream's reason
  for a format the controller cannot produce, with a message that says what to do instead;
- a ``rootfs-v1`` snapshot whose status already holds a VM's state (``virtualMachine`` or
  ``kataVMState``, which only a VM checkpoint writes): Failed ``InvalidCheckpointContract``,
  upstream's reason for a checkpoint whose description contradicts itself. Committing it would
  leave one object describing two different checkpoints, and a restore could take either.

The status fields a VM checkpoint writes are never touched: a status write of the worker is a
merge patch that names neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from api.opensandbox import SNAPSHOT_FORMAT_ROOTFS

__all__ = [
    "COMMITTED_FORMAT",
    "INCOMPATIBLE_FORMAT",
    "INVALID_CONTRACT",
    "FormatRefusal",
    "format_refusal",
    "requested_format",
]

COMMITTED_FORMAT: Final = SNAPSHOT_FORMAT_ROOTFS
"""The one format the worker commits (and writes to ``status.format``)."""
INCOMPATIBLE_FORMAT: Final = "IncompatibleSnapshotFormat"
INVALID_CONTRACT: Final = "InvalidCheckpointContract"

_VM_STATE_FIELDS: Final = ("virtualMachine", "kataVMState")
"""Status fields that only a VM checkpoint writes."""

_WHAT_THEY_NEED: Final = {
    "qemu-v1": "a QEMU guest's memory, vCPU and device state (taken over QMP)",
    "kata-vmstate-v1": "a Kata Containers VM's state",
}


@dataclass(frozen=True)
class FormatRefusal:
    reason: str
    message: str


def requested_format(snapshot: Mapping[str, Any]) -> str:
    """``spec.format``, or ``rootfs-v1`` when the snapshot names none."""
    return str((snapshot.get("spec") or {}).get("format") or SNAPSHOT_FORMAT_ROOTFS)


def format_refusal(snapshot: Mapping[str, Any]) -> FormatRefusal | None:
    """Why this snapshot cannot be committed as its format asks; ``None`` if it can."""
    wanted = requested_format(snapshot)
    if wanted != COMMITTED_FORMAT:
        captures = _WHAT_THEY_NEED.get(wanted, "a state other than the root filesystems")
        return FormatRefusal(
            INCOMPATIBLE_FORMAT,
            f"spec.format {wanted} needs {captures}; sandbus's runtime commits only "
            f"{COMMITTED_FORMAT} (each container's root filesystem to an image). Create the "
            f"snapshot again with spec.format {COMMITTED_FORMAT} (or none), or use a controller "
            f"that takes {wanted} snapshots",
        )
    status = snapshot.get("status") or {}
    present = [name for name in _VM_STATE_FIELDS if status.get(name) is not None]
    if present:
        fields = " and ".join(f"status.{name}" for name in present)
        return FormatRefusal(
            INVALID_CONTRACT,
            f"spec.format is {wanted}, yet {fields} "
            f"{'describe' if len(present) > 1 else 'describes'} a VM checkpoint that a "
            f"{wanted} commit does not make; one snapshot cannot hold both. Create a new "
            "SandboxSnapshot for the root-filesystem commit, and leave this one's status to "
            "the controller that took the VM checkpoint",
        )
    return None
