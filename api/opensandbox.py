"""The OpenSandbox API (``sandbox.opensandbox.io/v1alpha1``): Pool, BatchSandbox and
SandboxSnapshot, plus the annotations, labels and finalizers its controllers agree on.

The types mirror the upstream CRDs (``kubernetes/config/crd/bases`` of alibaba/OpenSandbox, as
docs/opensandbox.md §1 records them) field for field, because the lifecycle server and the SDKs
write these objects and read their status: a field we dropped would be pruned by the API server,
and a validation we added or missed would reject, or accept, what upstream does not. A field's
Python default is also its CRD default (see :mod:`api.meta`).

Where the upstream code stops short of what the OpenSandbox documentation promises
(``docs/opensandbox.md``), the types carry the documented shape so that the
controllers can build it:

* a ``PoolAllocationPending`` condition type on a BatchSandbox waiting for a Pool (reason
  ``PoolCapacityExhausted`` at poolMax, as later upstream versions spell it; ``PoolNotFound``
  when its ``poolRef`` names no Pool);
* ``preStart`` / ``postStop`` lifecycle hooks on a process task (:class:`ProcessLifecycle`),
  shaped as later upstream versions spell them, and ``status.taskLastErrorMessage`` to report a
  failing hook, also as later upstream versions spell it.

Deliberate differences from the upstream CRDs, each harmless to a well-formed manifest:

* ``spec`` is required at the top level. Upstream accepts an object with no spec, which its own
  controller then dereferences (BatchSandbox ``replicas``) or ignores (Pool); rejecting it at the
  API is the only useful answer.
* ``spec.replicas`` carries ``default: 1`` but is not listed as required. With a default the two
  are the same to an API server, which defaults before it validates.
* The schemaless fields (``template``, ``taskTemplate``, ``shardPatches``, ``shardTaskPatches``)
  say ``type: object`` (or an array of objects) where upstream gives no type at all, so a scalar
  in their place is refused instead of failing later in the controller.
* ``capacitySpec`` carries two validation rules upstream's lacks: ``bufferMin ≤ bufferMax`` and
  ``poolMin ≤ poolMax``. Upstream accepts inverted bounds and quietly runs at poolMax; a Pool
  stored before the rules existed is refused by the pool worker with a condition instead.
* A Pool's status has ``conditions`` (sandbus's own types, :data:`PoolConditionType`), which
  upstream's lacks: a Pool that cannot make its Pods says why there.

The schemaless ``taskTemplate`` stays a free-form :data:`~api.meta.Embedded` on the resource, so
that the API server keeps whatever a newer client writes there; a controller reads it through
:class:`TaskTemplateSpec` (``msgspec.convert``).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec

from api.meta import (
    DateTime,
    Embedded,
    Int32,
    Int64,
    IntOrString,
    KindInfo,
    PrinterColumn,
    Resource,
    Spec,
    cel,
    list_map,
)

__all__ = [
    "ANNOTATION_ALLOC_RELEASE",
    "ANNOTATION_ALLOC_RELEASED",
    "ANNOTATION_ALLOC_STATUS",
    "ANNOTATION_ENDPOINTS",
    "ANNOTATION_RESTART_CONFIG",
    "ANNOTATION_RESTART_RECORD",
    "CAPACITY_ORDERED",
    "FINALIZER_POOL_ALLOCATION",
    "FINALIZER_SNAPSHOT_CLEANUP",
    "FINALIZER_TASK_CLEANUP",
    "GROUP",
    "LABEL_BATCH_SANDBOX_NAME",
    "LABEL_EVICT",
    "LABEL_EVICTION_HANDLER",
    "LABEL_POD_INDEX",
    "LABEL_POOL_NAME",
    "LABEL_POOL_REVISION",
    "LABEL_PRIVILEGED_NODE_ACCESS",
    "LABEL_SANDBOX_SNAPSHOT_NAME",
    "LEGACY_POOL_ANNOTATION_ALLOC_GENERATION",
    "LEGACY_POOL_ANNOTATION_ALLOC_STATUS",
    "POOL_REF_AUTO_ASSIGN",
    "SERVER_LABEL_SANDBOX_ID",
    "SERVER_LABEL_SNAPSHOT_ID",
    "SERVER_LABEL_SNAPSHOT_SCOPE",
    "SERVER_LABEL_SOURCE_SANDBOX_ID",
    "SNAPSHOT_FORMAT_ROOTFS",
    "VERSION",
    "AllocationRecord",
    "BatchSandbox",
    "BatchSandboxCondition",
    "BatchSandboxConditionType",
    "BatchSandboxPhase",
    "BatchSandboxSpec",
    "BatchSandboxStatus",
    "CapacitySpec",
    "ConditionStatus",
    "ContainerSnapshot",
    "ExecAction",
    "ExecMode",
    "KataVMState",
    "LifecycleHandler",
    "Pool",
    "PoolCondition",
    "PoolConditionType",
    "PoolSpec",
    "PoolStatus",
    "ProcessLifecycle",
    "ProcessTask",
    "RecycleStrategy",
    "RecycleStrategyType",
    "RestartConfig",
    "RestartRecord",
    "SandboxSnapshot",
    "SandboxSnapshotCondition",
    "SandboxSnapshotConditionType",
    "SandboxSnapshotPhase",
    "SandboxSnapshotSpec",
    "SandboxSnapshotStatus",
    "ScaleStrategy",
    "SnapshotFormat",
    "TaskResourcePolicy",
    "TaskSpec",
    "TaskTemplateSpec",
    "UpdateStrategy",
]

GROUP: Final = "sandbox.opensandbox.io"
VERSION: Final = "v1alpha1"

NonNegativeInt32 = Annotated[Int32, msgspec.Meta(ge=0)]

ConditionStatus = Literal["True", "False"]
"""OpenSandbox conditions are not metav1.Condition: their status has no ``Unknown``."""

# --- Pool ----------------------------------------------------------------------------------------


class CapacitySpec(Spec, kw_only=True):
    """Sizes of the pool: bufferMin..bufferMax idle Ready pods are kept, and the pool holds
    poolMin..poolMax pods in all. A minimum above its maximum is refused (:data:`CAPACITY_ORDERED`;
    upstream checks nothing). bufferMax above poolMax is allowed: poolMax wins."""

    buffer_max: NonNegativeInt32
    buffer_min: NonNegativeInt32
    pool_max: NonNegativeInt32
    pool_min: NonNegativeInt32


class ScaleStrategy(Spec, kw_only=True):
    """How fast the pool grows."""

    max_unavailable: IntOrString | None = None
    """Pods allowed not-ready during scale-up; a count or a percentage. Absent means 25%."""


class UpdateStrategy(Spec, kw_only=True):
    """How idle pods move to a changed template (they are recreated)."""

    max_unavailable: IntOrString | None = None
    """Budget for recreating outdated idle pods; a count or a percentage. Absent means 25%."""


RecycleStrategyType = Literal["Delete", "Restart", "Noop"]


class RecycleStrategy(Spec, kw_only=True):
    """What happens to a pod its sandbox gives back: Delete (replace it), Restart (restart its
    containers in place) or Noop (reuse it as it is). An absent strategy also means Delete."""

    type: RecycleStrategyType = "Delete"


CAPACITY_ORDERED: Final = cel(
    "self.bufferMin <= self.bufferMax",
    "bufferMin must not be greater than bufferMax",
    ("self.poolMin <= self.poolMax", "poolMin must not be greater than poolMax"),
)
"""The rules on ``capacitySpec`` that upstream's CRD lacks (a deliberate difference, module doc)."""


class PoolSpec(Spec, kw_only=True):
    """Desired state of a Pool: the warm pods' template and how many to keep."""

    template: Embedded | None = None
    """The warm pods' PodTemplateSpec. Not required by the CRD, yet no pod is created without it."""
    capacity_spec: Annotated[CapacitySpec, CAPACITY_ORDERED]
    scale_strategy: ScaleStrategy | None = None
    update_strategy: UpdateStrategy | None = None
    recycle_strategy: RecycleStrategy | None = None


PoolConditionType = Literal[
    # sandbus's, with Kubernetes's ReplicaSet name: the API server refuses the Pool's Pods
    # (reason FailedCreate, the API's message).
    "ReplicaFailure",
    # sandbus's: a spec the pool worker cannot honour (inverted capacity bounds, no template).
    "InvalidSpec",
]
"""Upstream's Pool has no conditions; these exist only while True, as OpenSandbox's do."""


class PoolCondition(Spec, kw_only=True):
    """A condition of a Pool; it exists only while its status is True."""

    type: PoolConditionType
    status: ConditionStatus
    reason: str | None = None
    message: str | None = None
    last_transition_time: DateTime | None = None


class PoolStatus(Spec, kw_only=True):
    """Observed state of a Pool. Every count and the revision are required: a status write
    carries all of them."""

    observed_generation: Int64 | None = None
    revision: str
    """The current template revision: 16 hex characters (SHA-256 prefix of the Go JSON)."""
    total: Int32
    allocated: Int32
    available: Int32
    updated: Int32 | None = None
    conditions: Annotated[list[PoolCondition], list_map("type")] | None = None
    """sandbus's: why the Pool cannot make progress, while it cannot (docs/conditions.md)."""


class Pool(Resource, kw_only=True):
    """A set of pre-warmed pods that BatchSandboxes with ``poolRef`` allocate from."""

    KIND = KindInfo(
        group=GROUP,
        version=VERSION,
        kind="Pool",
        plural="pools",
        singular="pool",
        printer_columns=(
            PrinterColumn(
                name="TOTAL",
                type="integer",
                json_path=".status.total",
                description="Pods in the pool that are not terminating.",
            ),
            PrinterColumn(
                name="ALLOCATED",
                type="integer",
                json_path=".status.allocated",
                description="Pods allocated to sandboxes.",
            ),
            PrinterColumn(
                name="AVAILABLE",
                type="integer",
                json_path=".status.available",
                description="Idle Ready pods that can be allocated now.",
            ),
            PrinterColumn(
                name="UPDATED",
                type="integer",
                json_path=".status.updated",
                description="Pods at the current template revision.",
            ),
            PrinterColumn(name="AGE", type="date", json_path=".metadata.creationTimestamp"),
        ),
    )

    spec: PoolSpec
    status: PoolStatus | None = None


# --- BatchSandbox --------------------------------------------------------------------------------

TaskResourcePolicy = Literal["Retain", "Release"]
"""The values of ``taskResourcePolicyWhenCompleted``; the CRD itself enforces no enum."""

BatchSandboxPhase = Literal["Pending", "Succeed", "Pausing", "Paused", "Resuming", "Failed"]

BatchSandboxConditionType = Literal[
    "Ready",
    "Progressing",
    "Paused",
    "PauseFailed",
    "ResumeFailed",
    "PodFailed",
    # Upstream's since #1581 (reason PoolCapacityExhausted): the sandbox waits for Pods from
    # its Pool. sandbus also gives it reason PoolNotFound when the Pool does not exist.
    "PoolAllocationPending",
    # What sandbus wrote for a full Pool before it took upstream's name: accepted on read so
    # that an object carrying it stays valid; never written, and the next status write of the
    # sandbox removes it.
    "PoolCapacityExhausted",
    # Proposed upstream (the pool auto-assign proposal), absent from its code: no Pool fits a
    # sandbox with poolRef "*".
    "PoolAssignFailed",
    # sandbus's: an allocation annotation of the sandbox is malformed, or asks to release a
    # Pod the sandbox does not hold; the Pool leaves it alone until it is fixed.
    "AllocationRefused",
    # sandbus's, as the Pool's: neither a template nor a poolRef (reason NoTemplate), so there
    # is nothing to make its Pods from.
    "InvalidSpec",
]


class BatchSandboxSpec(Spec, kw_only=True):
    """Desired state of a BatchSandbox: how many sandboxes, where their pods come from (a
    template or a Pool), the task each runs, and when they expire."""

    replicas: NonNegativeInt32 = 1
    pool_ref: str | None = None
    """Absent or ``""``: non-pooled; ``"*"``: pick a Pool (auto-assign); else a Pool's name."""
    template: Embedded | None = None
    """PodTemplateSpec of the non-pooled pods. Go clients write ``template: null``, which the API
    server prunes."""
    shard_patches: list[Embedded] | None = None
    """Per-index strategic merge patches over the generated Pod."""
    expire_time: DateTime | None = None
    """Absolute deletion time; a time in the past deletes the sandbox at once."""
    task_template: Embedded | None = None
    """A :class:`TaskTemplateSpec`, kept schemaless as upstream does."""
    shard_task_patches: list[Embedded] | None = None
    """Per-index merge patches over ``taskTemplate``."""
    task_resource_policy_when_completed: str = "Retain"
    """A :data:`TaskResourcePolicy`: ``Retain`` keeps a finished task's pod, ``Release`` returns
    it. A plain string because the CRD has no enum."""
    pause: bool | None = None
    """``true`` requests a pause, ``false`` a resume, absent does nothing. Never cleared by the
    controller."""


class BatchSandboxCondition(Spec, kw_only=True):
    """A condition of a BatchSandbox; it exists only while its status is True."""

    type: BatchSandboxConditionType
    status: ConditionStatus
    reason: str | None = None
    message: str | None = None
    last_transition_time: DateTime | None = None


class BatchSandboxStatus(Spec, kw_only=True):
    """Observed state of a BatchSandbox. The pod and task counters are required: a status write
    carries all eight of them."""

    observed_generation: Int64 | None = None
    replicas: Int32
    """Pods the controller lists for this sandbox."""
    allocated: Int32
    """Pods that are scheduled or have an IP (not "allocated from the pool")."""
    ready: Int32
    task_running: Int32
    task_succeed: Int32
    task_failed: Int32
    task_unknown: Int32
    task_pending: Int32
    """Tasks not yet assigned to a pod."""
    task_last_error_message: str | None = None
    """The latest task failure, lifecycle hook failures included."""
    phase: BatchSandboxPhase | None = None
    pause_observed_generation: Int64 | None = None
    """The generation whose pause/resume intent the controller last acknowledged."""
    conditions: Annotated[list[BatchSandboxCondition], list_map("type")] | None = None


class BatchSandbox(Resource, kw_only=True):
    """One or many identical sandboxes (pods), created directly or allocated from a Pool."""

    KIND = KindInfo(
        group=GROUP,
        version=VERSION,
        kind="BatchSandbox",
        plural="batchsandboxes",
        singular="batchsandbox",
        short_names=("bsbx",),
        printer_columns=(
            PrinterColumn(
                name="DESIRED",
                type="integer",
                json_path=".spec.replicas",
                description="Sandboxes requested.",
            ),
            PrinterColumn(
                name="TOTAL",
                type="integer",
                json_path=".status.replicas",
                description="Pods the sandbox has.",
            ),
            PrinterColumn(
                name="ALLOCATED",
                type="integer",
                json_path=".status.allocated",
                description="Pods that are scheduled or have an IP.",
            ),
            # Spelled "Ready", not "READY", exactly as upstream prints it.
            PrinterColumn(
                name="Ready",
                type="integer",
                json_path=".status.ready",
                description="Pods that are Running and Ready.",
            ),
            PrinterColumn(
                name="TASK_RUNNING",
                type="integer",
                json_path=".status.taskRunning",
                priority=1,
                description="Tasks running.",
            ),
            PrinterColumn(
                name="TASK_SUCCEED",
                type="integer",
                json_path=".status.taskSucceed",
                priority=1,
                description="Tasks that exited 0.",
            ),
            PrinterColumn(
                name="TASK_FAILED",
                type="integer",
                json_path=".status.taskFailed",
                priority=1,
                description="Tasks that failed.",
            ),
            PrinterColumn(
                name="TASK_UNKNOWN",
                type="integer",
                json_path=".status.taskUnknown",
                priority=1,
                description="Tasks whose state could not be read.",
            ),
            PrinterColumn(
                name="EXPIRE",
                type="string",
                json_path=".spec.expireTime",
                description="When the sandbox is deleted.",
            ),
            PrinterColumn(name="AGE", type="date", json_path=".metadata.creationTimestamp"),
        ),
    )

    spec: BatchSandboxSpec
    status: BatchSandboxStatus | None = None


# --- The task template: the typed view of BatchSandbox.spec.taskTemplate ------------------------

ExecMode = Literal["Local", "Remote"]
"""``Local``: in the task-executor container; ``Remote``: in the main container (nsenter)."""


class ExecAction(Spec, kw_only=True):
    """A command run in a container."""

    command: list[str]


class LifecycleHandler(Spec, kw_only=True):
    """One lifecycle hook of a process task."""

    exec: ExecAction | None = None
    exec_mode: ExecMode | None = None
    """Where the hook runs; absent means ``Local``."""
    timeout_seconds: int | None = None
    """The hook is killed after this long and its operation fails; absent or 0: no limit."""


class ProcessLifecycle(Spec, kw_only=True):
    """Hooks around a process task (docs/opensandbox.md §5.1)."""

    pre_start: LifecycleHandler | None = None
    """Runs before the process; if it fails or times out, the process never starts."""
    post_stop: LifecycleHandler | None = None
    """Runs after every terminal outcome, including the stop that deletion causes."""


class ProcessTask(Spec, kw_only=True):
    """A process the task executor starts in the sandbox."""

    command: list[str]
    args: list[str] | None = None
    env: list[dict[str, Any]] | None = None
    """corev1.EnvVar objects (``name``, ``value`` or ``valueFrom``)."""
    working_dir: str | None = None
    exec_mode: ExecMode | None = None
    lifecycle: ProcessLifecycle | None = None


class TaskSpec(Spec, kw_only=True):
    """What one task runs, and for how long at most."""

    process: ProcessTask | None = None
    """Without a process the task is a container task, which no executor implements."""
    timeout_seconds: int | None = None
    """Always taken from the base template, never from a shard patch."""


class TaskTemplateSpec(Spec, kw_only=True):
    """``spec.taskTemplate`` of a BatchSandbox: the task every sandbox runs once it has a pod."""

    spec: TaskSpec = msgspec.field(default_factory=TaskSpec)


# --- SandboxSnapshot -----------------------------------------------------------------------------

SandboxSnapshotPhase = Literal["Pending", "Committing", "Succeed", "Failed"]
SandboxSnapshotConditionType = Literal["Ready", "Failed", "CommitJobFailure"]
"""``CommitJobFailure`` is sandbus's: the API server refuses the commit Job (or its creates
keep failing); there only while it lasts, reason ``FailedCreateJob`` (upstream's Event)."""


SnapshotFormat = Literal["rootfs-v1", "qemu-v1", "kata-vmstate-v1"]
"""What a snapshot captures, as later upstream versions spell it: ``rootfs-v1`` the containers'
root filesystems committed to images (the image-committer's commit, and the only one before
formats existed); ``qemu-v1`` a QEMU guest's VM state (memory, vCPUs, devices) beside its rootfs;
``kata-vmstate-v1`` a Kata Containers VM's state. sandbus commits ``rootfs-v1`` only and refuses
the others with ``IncompatibleSnapshotFormat`` (docs/opensandbox.md §4.4)."""

SNAPSHOT_FORMAT_ROOTFS: Final = "rootfs-v1"
"""The format of a snapshot that names none: the root-filesystem commit."""


class SandboxSnapshotSpec(Spec, kw_only=True):
    """Desired state of a SandboxSnapshot: which sandbox to snapshot, and in which format."""

    sandbox_name: str
    """The BatchSandbox to snapshot, in the same namespace. Registry and credentials come from
    the controller's configuration, not from the object."""
    format: SnapshotFormat | None = None
    """What to capture; none means ``rootfs-v1``, what every controller did before formats
    existed. The CRD gives no default, so an object written without it stays without it."""


class ContainerSnapshot(Spec, kw_only=True):
    """The image one container was committed to."""

    container_name: str
    image_uri: str
    image_digest: str | None = None


_PRESERVE_UNKNOWN: Final = msgspec.Meta(
    extra_json_schema={"x-kubernetes-preserve-unknown-fields": True}
)
"""On an object node whose known fields are typed: keep the fields a newer writer adds."""


class KataVMState(Spec, kw_only=True):
    """``status.kataVMState``: where a Kata VM state snapshot is kept. The two fields are
    upstream's; the CRD keeps any other field a newer controller writes beside them."""

    snapshot_name: str | None = None
    """The name of the Kata VM state snapshot."""
    restore_plan_secret_name: str | None = None
    """The Secret that holds the plan to restore it."""


class SandboxSnapshotCondition(Spec, kw_only=True):
    """A condition of a SandboxSnapshot: Ready once committed, Failed with the reason if not."""

    type: SandboxSnapshotConditionType
    status: ConditionStatus
    reason: str | None = None
    message: str | None = None
    last_transition_time: DateTime | None = None


class SandboxSnapshotStatus(Spec, kw_only=True):
    """Observed state of a SandboxSnapshot: its phase, the source pod, and the committed images."""

    observed_generation: Int64 | None = None
    phase: SandboxSnapshotPhase | None = None
    containers: list[ContainerSnapshot] | None = None
    """Image URIs from Pending on, digests once Succeed."""
    conditions: Annotated[list[SandboxSnapshotCondition], list_map("type")] | None = None
    source_pod_name: str | None = None
    source_node_name: str | None = None
    format: SnapshotFormat | None = None
    """The format the images were committed in, from Committing on (sandbus: always
    ``rootfs-v1``)."""
    virtual_machine: Embedded | None = None
    """A ``qemu-v1`` snapshot's VM state image (upstream: its digest, size and compatibility).
    Its inner fields are not known here, so the CRD keeps the object as written, unpruned;
    sandbus never writes it."""
    kata_vm_state: Annotated[KataVMState | None, _PRESERVE_UNKNOWN] = msgspec.field(
        default=None, name="kataVMState"
    )
    """A ``kata-vmstate-v1`` snapshot's Kata VM state; sandbus never writes it."""


class SandboxSnapshot(Resource, kw_only=True):
    """Committed images of every container of one BatchSandbox's pod: the basis of pause/resume."""

    KIND = KindInfo(
        group=GROUP,
        version=VERSION,
        kind="SandboxSnapshot",
        plural="sandboxsnapshots",
        singular="sandboxsnapshot",
        short_names=("sbxsnap",),
        printer_columns=(
            PrinterColumn(name="PHASE", type="string", json_path=".status.phase"),
            PrinterColumn(name="SANDBOX", type="string", json_path=".spec.sandboxName"),
            PrinterColumn(name="AGE", type="date", json_path=".metadata.creationTimestamp"),
        ),
    )

    spec: SandboxSnapshotSpec
    status: SandboxSnapshotStatus | None = None


# --- Annotations, labels and finalizers (docs/opensandbox.md §1.5) -------------------------------

ANNOTATION_ALLOC_STATUS: Final = "sandbox.opensandbox.io/alloc-status"
"""On a pooled BatchSandbox: an :class:`AllocationRecord` of every pod ever allocated to it, in
index order. Only ever grows."""

ANNOTATION_ALLOC_RELEASE: Final = "sandbox.opensandbox.io/alloc-release"
"""On a BatchSandbox: an :class:`AllocationRecord` *requesting* the pool to take these pods back."""

ANNOTATION_ALLOC_RELEASED: Final = "sandbox.opensandbox.io/alloc-released"
"""On a BatchSandbox: an :class:`AllocationRecord` of pods whose recycle has *completed*."""

ANNOTATION_ENDPOINTS: Final = "sandbox.opensandbox.io/endpoints"
"""On a BatchSandbox: a JSON array of pod IPs in index order, ``""`` for a pod with no IP."""

LABEL_POOL_NAME: Final = "sandbox.opensandbox.io/pool-name"
"""On a pool's pods: the Pool's name."""

LABEL_POOL_REVISION: Final = "sandbox.opensandbox.io/pool-revision"
"""On a pool's pods: the template revision (16 hex) the pod was created from."""

LABEL_POD_INDEX: Final = "batch-sandbox.sandbox.opensandbox.io/pod-index"
"""On a non-pooled pod: its decimal index in the BatchSandbox."""

LABEL_BATCH_SANDBOX_NAME: Final = "batch-sandbox.sandbox.opensandbox.io/name"
"""On a non-pooled pod: its BatchSandbox's name."""

LABEL_EVICT: Final = "pool.opensandbox.io/evict"
"""On a pool pod, by its mere presence (any value): remove this pod if it is idle."""

LABEL_EVICTION_HANDLER: Final = "pool.opensandbox.io/eviction-handler"
"""On a Pool: selects the eviction handler; only the default one exists."""

ANNOTATION_RESTART_CONFIG: Final = "sandbox.opensandbox.io/restart-config"
"""On a Pool: JSON settings of the Restart recycler (blacklist, retryInterval, maxRetries,
restartCommand)."""

ANNOTATION_RESTART_RECORD: Final = "sandbox.opensandbox.io/restart-record"
"""On a pool pod: JSON progress of an in-place restart (id, startTime, containers, lastRetryTime,
retryCount)."""

LABEL_SANDBOX_SNAPSHOT_NAME: Final = "sandbox.opensandbox.io/sandbox-snapshot-name"
"""On a commit or unpause Job: the SandboxSnapshot it serves."""

LABEL_PRIVILEGED_NODE_ACCESS: Final = "sandbox.opensandbox.io/privileged-node-access"
"""``"true"`` on a commit Job, which mounts the node's containerd socket."""

FINALIZER_TASK_CLEANUP: Final = "batch-sandbox.sandbox.opensandbox.io/task-cleanup"
"""On a BatchSandbox with a taskTemplate: its tasks are stopped before it goes."""

FINALIZER_POOL_ALLOCATION: Final = "pool.sandbox.opensandbox.io/pool-allocation"
"""On a pooled BatchSandbox: its pods are given back to the Pool before it goes."""

FINALIZER_SNAPSHOT_CLEANUP: Final = "sandboxsnapshot.sandbox.opensandbox.io/cleanup"
"""On a SandboxSnapshot: its Jobs are deleted before it goes (registry images are kept)."""

LEGACY_POOL_ANNOTATION_ALLOC_STATUS: Final = "pool.opensandbox.io/alloc-status"
LEGACY_POOL_ANNOTATION_ALLOC_GENERATION: Final = "pool.opensandbox.io/alloc-generation"
"""Where older controllers kept the allocation (on the Pool); found on old clusters, ignored."""

POOL_REF_AUTO_ASSIGN: Final = "*"
"""``spec.poolRef`` value asking the controller to choose a Pool."""

# Labels the lifecycle server puts on the objects it creates (docs/opensandbox.md §8).
SERVER_LABEL_SANDBOX_ID: Final = "opensandbox.io/id"
SERVER_LABEL_SNAPSHOT_ID: Final = "opensandbox.io/snapshot-id"
SERVER_LABEL_SOURCE_SANDBOX_ID: Final = "opensandbox.io/source-sandbox-id"
SERVER_LABEL_SNAPSHOT_SCOPE: Final = "opensandbox.io/snapshot-scope"


class AllocationRecord(msgspec.Struct, kw_only=True):
    """The JSON value of the three ``alloc-*`` annotations: ``{"pods": [...]}``.

    Every reader (the BatchSandbox and Snapshot controllers, recovery, the upstream e2e tests)
    parses exactly this shape, so it is always encoded with the key, even when the list is empty.
    """

    pods: list[str] = msgspec.field(default_factory=list)


class RestartConfig(Spec, kw_only=True):
    """The JSON value of :data:`ANNOTATION_RESTART_CONFIG` on a Pool. Every field is optional, and
    one that is absent or unusable falls back to its default: no blacklist, ``retryInterval``
    ``"30s"``, ``maxRetries`` 3, ``restartCommand`` ``["kill", "1"]``."""

    blacklist: list[str] | None = None
    """Containers never restarted."""
    retry_interval: str | None = None
    """A Go duration (``"30s"``, ``"1m30s"``): the least time between two attempts."""
    max_retries: int | None = None
    restart_command: list[str] | None = None
    """Executed in every restarted container; the kubelet restarts it when PID 1 exits."""


class RestartRecord(Spec, kw_only=True):
    """The JSON value of :data:`ANNOTATION_RESTART_RECORD` on a pool pod: the progress of one
    in-place restart, which survives controller restarts because it lives on the pod."""

    id: str
    """The sandbox the pod was released by; a record for another sandbox starts over."""
    start_time: str
    containers: dict[str, str]
    """Container name to its containerID before the restart; a new ID means it restarted."""
    last_retry_time: str | None = None
    retry_count: int = 0
