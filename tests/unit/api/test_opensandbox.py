"""The OpenSandbox types against docs/opensandbox.md §1: the example manifests decode and encode
back unchanged, defaults and validation are the upstream CRDs', and the CRD metadata is right."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
import yaml

from api import opensandbox as osb
from api.meta import Resource
from devtools.cluster.apirules.structural import StructuralSchema
from tests.unit.api.manifests import CRD_DIR, OBSERVED_DIR, load_documents

EXAMPLES = Path(__file__).parents[3] / "examples" / "opensandbox"
KINDS: dict[str, type[Resource]] = {
    "Pool": osb.Pool,
    "BatchSandbox": osb.BatchSandbox,
    "SandboxSnapshot": osb.SandboxSnapshot,
}


def load_examples() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, yaml.safe_load(path.read_text())) for path in sorted(EXAMPLES.glob("*.yaml"))
    ]


def example(name: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return manifest


def decode(manifest: dict[str, Any]) -> Resource:
    return msgspec.convert(manifest, KINDS[manifest["kind"]])


# Status as the controllers write it: every field of every status struct appears at least once.
OBSERVED_STATUS: dict[str, dict[str, Any]] = {
    "pool.yaml": {
        "observedGeneration": 3,
        "revision": "9f86d081884c7d65",
        "total": 9,
        "allocated": 3,
        "available": 5,
        "updated": 9,
        "conditions": [
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": "the API server refuses the Pool's Pods (Invalid, 422): Pod is "
                "invalid: spec.containers[0].image: Required value",
                "lastTransitionTime": "2026-07-01T10:00:01Z",
            },
        ],
    },
    "batchsandbox-pooled.yaml": {
        "observedGeneration": 1,
        "replicas": 3,
        "allocated": 2,
        "ready": 2,
        "taskRunning": 1,
        "taskSucceed": 0,
        "taskFailed": 1,
        "taskUnknown": 0,
        "taskPending": 1,
        "taskLastErrorMessage": "preStart hook timed out after 120s",
        "phase": "Succeed",
        "pauseObservedGeneration": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "PodsReady",
                "message": "Sandbox is running",
                "lastTransitionTime": "2026-07-01T10:00:02Z",
            },
            {
                "type": "PoolAllocationPending",
                "status": "True",
                "reason": "PoolCapacityExhausted",
                "message": "Pool python-pool is at poolMax (20) with 0 free Pods; waiting for 1 "
                "more",
                "lastTransitionTime": "2026-07-01T10:00:01Z",
            },
        ],
    },
    "sandboxsnapshot.yaml": {
        "observedGeneration": 1,
        "phase": "Succeed",
        "format": "rootfs-v1",
        "sourcePodName": "notebook-ada-0",
        "sourceNodeName": "node-a3",
        "containers": [
            {
                "containerName": "sandbox",
                "imageUri": "registry.example.com/snapshots/notebook-ada-sandbox:"
                "snap-3f9c2a7e5b1d4c6a8e0f2b4d6a8c0e1f",
                "imageDigest": "sha256:4b825dc642cb6eb9a060e54bf8d69288fbee4904",
            }
        ],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "SnapshotReady",
                "message": "Snapshot is ready",
                "lastTransitionTime": "2026-07-01T10:05:00Z",
            }
        ],
    },
}


def observed(name: str) -> dict[str, Any]:
    return {**example(name), "status": OBSERVED_STATUS[name]}


def observed_fixtures() -> list[dict[str, Any]]:
    """The OpenSandbox objects under tests/fixtures/observed (as the API server serves them)."""
    return [
        document
        for path in sorted(OBSERVED_DIR.glob("*.yaml"))
        for document in load_documents(path)
        if document["kind"] in KINDS and document["apiVersion"].startswith(f"{osb.GROUP}/")
    ]


# --- The examples ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "manifest"), load_examples())
def test_every_example_round_trips_without_losing_a_field(
    name: str, manifest: dict[str, Any]
) -> None:
    assert msgspec.to_builtins(decode(manifest)) == manifest, name


@pytest.mark.parametrize("name", sorted(OBSERVED_STATUS))
def test_observed_status_round_trips_without_losing_a_field(name: str) -> None:
    manifest = observed(name)
    assert msgspec.to_builtins(decode(manifest)) == manifest


@pytest.mark.parametrize(("name", "manifest"), load_examples())
def test_task_templates_in_examples_read_as_typed_tasks(
    name: str, manifest: dict[str, Any]
) -> None:
    # Shard task patches are partial (a patch may leave out the command), so only whole
    # templates are read this way; a controller reads a patched template after merging.
    template = manifest["spec"].get("taskTemplate")
    if template is not None:
        typed = msgspec.convert(template, osb.TaskTemplateSpec)
        assert msgspec.to_builtins(typed) == template, name


def present_fields(t: mi.Type, data: Any, seen: set[tuple[str, str]]) -> None:
    """Record (struct, field) for every field that ``data`` sets, walking ``t`` alongside it."""
    if isinstance(t, mi.Metadata):
        present_fields(t.type, data, seen)
    elif isinstance(t, mi.UnionType):
        for member in t.types:
            present_fields(member, data, seen)
    elif isinstance(t, mi.ListType) and isinstance(data, list):
        for item in data:
            present_fields(t.item_type, item, seen)
    elif isinstance(t, mi.StructType) and isinstance(data, dict):
        for field in t.fields:
            if field.encode_name in data:
                seen.add((t.cls.__name__, field.name))
                present_fields(field.type, data[field.encode_name], seen)


def all_fields(t: mi.Type, into: set[tuple[str, str]]) -> set[tuple[str, str]]:
    if isinstance(t, mi.Metadata):
        all_fields(t.type, into)
    elif isinstance(t, mi.UnionType):
        for member in t.types:
            all_fields(member, into)
    elif isinstance(t, mi.ListType):
        all_fields(t.item_type, into)
    elif isinstance(t, mi.StructType):
        for field in t.fields:
            if (t.cls.__name__, field.name) not in into:
                into.add((t.cls.__name__, field.name))
                all_fields(field.type, into)
    return into


def test_examples_and_observed_status_together_set_every_field() -> None:
    # So that the round-trip tests above cover the whole API, not just the fields someone
    # happened to write down.
    seen: set[tuple[str, str]] = set()
    manifests = [manifest for _, manifest in load_examples()]
    manifests += [observed(name) for name in OBSERVED_STATUS]
    manifests += observed_fixtures()
    for manifest in manifests:
        kind = KINDS[manifest["kind"]]
        present_fields(mi.type_info(kind), manifest, seen)
        if "taskTemplate" in manifest["spec"]:
            present_fields(
                mi.type_info(osb.TaskTemplateSpec), manifest["spec"]["taskTemplate"], seen
            )
    expected: set[tuple[str, str]] = set()
    roots: list[type[msgspec.Struct]] = [*KINDS.values(), osb.TaskTemplateSpec]
    for root in roots:
        all_fields(mi.type_info(root), expected)
    envelope = {"ObjectMeta", "OwnerReference"}
    missing = {(cls, field) for cls, field in expected - seen if cls not in envelope}
    assert not missing


def test_examples_are_one_of_each_kind_at_least() -> None:
    assert {manifest["kind"] for _, manifest in load_examples()} == set(KINDS)


# --- Defaults -------------------------------------------------------------------------------------


def test_batch_sandbox_defaults_are_the_crd_defaults() -> None:
    sandbox = msgspec.convert(
        {"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "BatchSandbox", "spec": {}},
        osb.BatchSandbox,
    )
    assert sandbox.spec.replicas == 1
    assert sandbox.spec.task_resource_policy_when_completed == "Retain"
    assert sandbox.spec.pool_ref is None
    assert sandbox.spec.pause is None
    assert sandbox.status is None


def test_recycle_strategy_type_defaults_to_delete() -> None:
    strategy = msgspec.convert({}, osb.RecycleStrategy)
    assert strategy.type == "Delete"


def test_pool_strategies_are_absent_unless_written() -> None:
    # Absent strategies mean "Delete" and "25%" to the controller; the API must not invent them,
    # or a Pool read back from the server would differ from the one applied.
    pool = decode(example("pool.yaml"))
    assert isinstance(pool, osb.Pool)
    bare = osb.PoolSpec(capacity_spec=pool.spec.capacity_spec)
    assert msgspec.to_builtins(bare) == {
        "capacitySpec": {"bufferMax": 6, "bufferMin": 2, "poolMax": 20, "poolMin": 4}
    }


def test_encoding_omits_fields_left_at_their_default() -> None:
    assert msgspec.to_builtins(osb.BatchSandboxSpec()) == {}
    assert msgspec.to_builtins(osb.BatchSandboxSpec(replicas=0)) == {"replicas": 0}


def test_a_new_object_encodes_its_api_version_and_kind() -> None:
    snapshot = osb.SandboxSnapshot(spec=osb.SandboxSnapshotSpec(sandbox_name="notebook-ada"))
    encoded = msgspec.to_builtins(snapshot)
    assert encoded["apiVersion"] == "sandbox.opensandbox.io/v1alpha1"
    assert encoded["kind"] == "SandboxSnapshot"
    assert encoded["spec"] == {"sandboxName": "notebook-ada"}


# --- Validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "spec", "where"),
    [
        (osb.BatchSandbox, {"replicas": -1}, "$.spec.replicas"),
        (osb.BatchSandbox, {"pause": "yes"}, "$.spec.pause"),
        (osb.BatchSandbox, {"template": "httpd"}, "$.spec.template"),
        (osb.Pool, {"capacitySpec": {"bufferMax": 1, "bufferMin": 0, "poolMax": 1}}, "poolMin"),
        (
            osb.Pool,
            {"capacitySpec": {"bufferMax": 1, "bufferMin": 0, "poolMax": 1, "poolMin": -1}},
            "$.spec.capacitySpec.poolMin",
        ),
        (
            osb.Pool,
            {
                "capacitySpec": {"bufferMax": 1, "bufferMin": 0, "poolMax": 1, "poolMin": 0},
                "recycleStrategy": {"type": "Recreate"},
            },
            "$.spec.recycleStrategy.type",
        ),
        (
            osb.Pool,
            {
                "capacitySpec": {"bufferMax": 1, "bufferMin": 0, "poolMax": 1, "poolMin": 0},
                "scaleStrategy": {"maxUnavailable": 2.5},
            },
            "$.spec.scaleStrategy.maxUnavailable",
        ),
        (osb.Pool, {}, "capacitySpec"),
        (osb.SandboxSnapshot, {}, "sandboxName"),
    ],
)
def test_invalid_specs_are_rejected_where_the_crd_rejects_them(
    kind: type[Resource], spec: dict[str, Any], where: str
) -> None:
    with pytest.raises(msgspec.ValidationError) as raised:
        msgspec.convert({"spec": spec}, kind)
    assert where in str(raised.value)


def test_a_status_without_all_eight_counters_is_rejected() -> None:
    # The CRD lists them as required: a status write that drops one fails at the API server.
    status = dict(OBSERVED_STATUS["batchsandbox-pooled.yaml"])
    del status["taskPending"]
    with pytest.raises(msgspec.ValidationError, match="taskPending"):
        msgspec.convert(status, osb.BatchSandboxStatus)


def test_pool_status_requires_its_revision() -> None:
    status = dict(OBSERVED_STATUS["pool.yaml"])
    del status["revision"]
    with pytest.raises(msgspec.ValidationError, match="revision"):
        msgspec.convert(status, osb.PoolStatus)


@pytest.mark.parametrize(
    ("condition_type", "status", "where"),
    [
        ("Bogus", "True", "type"),
        ("Ready", "Unknown", "status"),
    ],
)
def test_batch_sandbox_conditions_take_only_their_enums(
    condition_type: str, status: str, where: str
) -> None:
    with pytest.raises(msgspec.ValidationError, match=where):
        msgspec.convert({"type": condition_type, "status": status}, osb.BatchSandboxCondition)


def test_snapshot_conditions_are_ready_or_failed_only() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"type": "PodFailed", "status": "True"}, osb.SandboxSnapshotCondition)


def test_a_condition_needs_only_type_and_status() -> None:
    condition = msgspec.convert(
        {"type": "PoolAllocationPending", "status": "True"}, osb.BatchSandboxCondition
    )
    assert condition.reason is None
    assert condition.last_transition_time is None


def test_the_former_exhaustion_type_is_still_read() -> None:
    """PoolCapacityExhausted, the type sandbus wrote before it took upstream's
    PoolAllocationPending, stays valid, so an object that carries it is read (and written
    again without it, tests/unit/claim/batch/test_plan.py)."""
    condition = msgspec.convert(
        {"type": "PoolCapacityExhausted", "status": "True", "reason": "PoolAtMax"},
        osb.BatchSandboxCondition,
    )
    assert condition.type == "PoolCapacityExhausted"


@pytest.mark.parametrize("value", [0, 5, "25%", "100%"])
def test_max_unavailable_is_a_count_or_a_percentage(value: int | str) -> None:
    assert msgspec.convert({"maxUnavailable": value}, osb.ScaleStrategy).max_unavailable == value
    assert msgspec.convert({"maxUnavailable": value}, osb.UpdateStrategy).max_unavailable == value


def test_task_resource_policy_accepts_any_string_like_the_crd() -> None:
    # The CRD has no enum here; an unknown value is the controller's to judge, not the API's.
    spec = msgspec.convert({"taskResourcePolicyWhenCompleted": "Keep"}, osb.BatchSandboxSpec)
    assert spec.task_resource_policy_when_completed == "Keep"


def test_a_hook_without_a_command_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="command"):
        msgspec.convert(
            {"spec": {"process": {"command": ["true"], "lifecycle": {"preStart": {"exec": {}}}}}},
            osb.TaskTemplateSpec,
        )


# --- Schema metadata the CRD generator reads ------------------------------------------------------


def schema_of(kind: type[Resource]) -> dict[str, Any]:
    schema: dict[str, Any] = msgspec.json.schema(kind)
    return schema


def properties(schema: dict[str, Any], struct: str) -> dict[str, Any]:
    props: dict[str, Any] = schema["$defs"][struct]["properties"]
    return props


def non_null(node: dict[str, Any]) -> dict[str, Any]:
    """The ``T`` of ``T | None``."""
    options = [option for option in node.get("anyOf", [node]) if option != {"type": "null"}]
    assert len(options) == 1
    option: dict[str, Any] = options[0]
    return option


def test_schema_carries_the_spec_defaults_and_minimums() -> None:
    pool = schema_of(osb.Pool)
    capacity = properties(pool, "CapacitySpec")
    for field in ("bufferMax", "bufferMin", "poolMax", "poolMin"):
        assert capacity[field] == {"type": "integer", "format": "int32", "minimum": 0}
    assert set(pool["$defs"]["CapacitySpec"]["required"]) == {
        "bufferMax",
        "bufferMin",
        "poolMax",
        "poolMin",
    }
    assert pool["$defs"]["PoolSpec"]["required"] == ["capacitySpec"]
    assert properties(pool, "RecycleStrategy")["type"]["default"] == "Delete"
    assert set(pool["$defs"]["PoolStatus"]["required"]) == {
        "revision",
        "total",
        "allocated",
        "available",
    }

    batch = schema_of(osb.BatchSandbox)
    spec = properties(batch, "BatchSandboxSpec")
    assert spec["replicas"] == {"type": "integer", "format": "int32", "minimum": 0, "default": 1}
    assert spec["taskResourcePolicyWhenCompleted"] == {"type": "string", "default": "Retain"}
    assert non_null(spec["expireTime"])["format"] == "date-time"
    assert set(batch["$defs"]["BatchSandboxStatus"]["required"]) == {
        "replicas",
        "allocated",
        "ready",
        "taskRunning",
        "taskSucceed",
        "taskFailed",
        "taskUnknown",
        "taskPending",
    }


def test_schemaless_fields_preserve_unknown_fields() -> None:
    batch = properties(schema_of(osb.BatchSandbox), "BatchSandboxSpec")
    for field in ("template", "taskTemplate"):
        assert non_null(batch[field])["x-kubernetes-preserve-unknown-fields"] is True
    for field in ("shardPatches", "shardTaskPatches"):
        items = non_null(batch[field])["items"]
        assert items["x-kubernetes-preserve-unknown-fields"] is True
    pool = properties(schema_of(osb.Pool), "PoolSpec")
    assert non_null(pool["template"])["x-kubernetes-preserve-unknown-fields"] is True


def test_inverted_capacity_bounds_are_refused_by_rules_upstream_lacks() -> None:
    """Issue #32: bufferMin above bufferMax, or poolMin above poolMax, is refused by the CRD
    (upstream's checks nothing, docs/opensandbox.md §1.3); bufferMax above poolMax is not
    (poolMax wins, as upstream's envtest expects)."""
    capacity = non_null(properties(schema_of(osb.Pool), "PoolSpec")["capacitySpec"])
    assert capacity["x-kubernetes-validations"] == [
        {
            "message": "bufferMin must not be greater than bufferMax",
            "rule": "self.bufferMin <= self.bufferMax",
        },
        {
            "message": "poolMin must not be greater than poolMax",
            "rule": "self.poolMin <= self.poolMax",
        },
    ]


def test_max_unavailable_is_int_or_string_in_the_schema() -> None:
    pool = schema_of(osb.Pool)
    for strategy in ("ScaleStrategy", "UpdateStrategy"):
        node = non_null(properties(pool, strategy)["maxUnavailable"])
        assert node["x-kubernetes-int-or-string"] is True


@pytest.mark.parametrize(
    ("kind", "status_struct"),
    [
        (osb.BatchSandbox, "BatchSandboxStatus"),
        (osb.SandboxSnapshot, "SandboxSnapshotStatus"),
        (osb.Pool, "PoolStatus"),
    ],
)
def test_conditions_are_a_list_map_keyed_by_type(kind: type[Resource], status_struct: str) -> None:
    conditions = non_null(properties(schema_of(kind), status_struct)["conditions"])
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_condition_type_enums_match_the_crd_plus_the_documented_exhaustion() -> None:
    """Upstream's six and its later PoolAllocationPending, plus what sandbus reports where
    upstream is silent: the proposal's PoolAssignFailed and AllocationRefused, and InvalidSpec
    (neither template nor poolRef); and the PoolCapacityExhausted it wrote before, still read.
    A Pool's are sandbus's own, and so is a snapshot's CommitJobFailure (issue #32)."""
    batch = schema_of(osb.BatchSandbox)
    condition = properties(batch, "BatchSandboxCondition")
    assert sorted(condition["type"]["enum"]) == sorted(
        [
            "Ready",
            "Progressing",
            "Paused",
            "PauseFailed",
            "ResumeFailed",
            "PodFailed",
            "PoolAllocationPending",
            "PoolCapacityExhausted",
            "PoolAssignFailed",
            "AllocationRefused",
            "InvalidSpec",
        ]
    )
    pool_condition = properties(schema_of(osb.Pool), "PoolCondition")
    assert sorted(pool_condition["type"]["enum"]) == ["InvalidSpec", "ReplicaFailure"]
    assert sorted(condition["status"]["enum"]) == ["False", "True"]
    assert sorted(batch["$defs"]["BatchSandboxCondition"]["required"]) == ["status", "type"]
    phase = non_null(properties(batch, "BatchSandboxStatus")["phase"])
    assert sorted(phase["enum"]) == sorted(
        ["Pending", "Succeed", "Pausing", "Paused", "Resuming", "Failed"]
    )

    snapshot = schema_of(osb.SandboxSnapshot)
    assert sorted(properties(snapshot, "SandboxSnapshotCondition")["type"]["enum"]) == [
        "CommitJobFailure",
        "Failed",
        "Ready",
    ]
    phase = non_null(properties(snapshot, "SandboxSnapshotStatus")["phase"])
    assert sorted(phase["enum"]) == sorted(["Pending", "Committing", "Succeed", "Failed"])
    assert set(snapshot["$defs"]["ContainerSnapshot"]["required"]) == {
        "containerName",
        "imageUri",
    }


# --- Kind metadata --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "plural", "singular", "short_names", "columns"),
    [
        (
            osb.BatchSandbox,
            "batchsandboxes",
            "batchsandbox",
            ("bsbx",),
            [
                ("DESIRED", ".spec.replicas", 0),
                ("TOTAL", ".status.replicas", 0),
                ("ALLOCATED", ".status.allocated", 0),
                ("Ready", ".status.ready", 0),
                ("TASK_RUNNING", ".status.taskRunning", 1),
                ("TASK_SUCCEED", ".status.taskSucceed", 1),
                ("TASK_FAILED", ".status.taskFailed", 1),
                ("TASK_UNKNOWN", ".status.taskUnknown", 1),
                ("EXPIRE", ".spec.expireTime", 0),
                ("AGE", ".metadata.creationTimestamp", 0),
            ],
        ),
        (
            osb.Pool,
            "pools",
            "pool",
            (),
            [
                ("TOTAL", ".status.total", 0),
                ("ALLOCATED", ".status.allocated", 0),
                ("AVAILABLE", ".status.available", 0),
                ("UPDATED", ".status.updated", 0),
                ("AGE", ".metadata.creationTimestamp", 0),
            ],
        ),
        (
            osb.SandboxSnapshot,
            "sandboxsnapshots",
            "sandboxsnapshot",
            ("sbxsnap",),
            [
                ("PHASE", ".status.phase", 0),
                ("SANDBOX", ".spec.sandboxName", 0),
                ("AGE", ".metadata.creationTimestamp", 0),
            ],
        ),
    ],
)
def test_kind_info_matches_the_upstream_crd(
    kind: type[Resource],
    plural: str,
    singular: str,
    short_names: tuple[str, ...],
    columns: list[tuple[str, str, int]],
) -> None:
    info = kind.KIND
    assert info.crd_name == f"{plural}.sandbox.opensandbox.io"
    assert info.api_version == "sandbox.opensandbox.io/v1alpha1"
    assert (info.plural, info.singular, info.short_names) == (plural, singular, short_names)
    assert info.status_subresource is True
    assert info.scale is None
    assert [(c.name, c.json_path, c.priority) for c in info.printer_columns] == columns


def test_printer_column_types_match_the_fields_they_show() -> None:
    for kind in KINDS.values():
        for column in kind.KIND.printer_columns:
            if column.name == "AGE":
                assert column.type == "date"
            elif column.name in {"EXPIRE", "PHASE", "SANDBOX"}:
                assert column.type == "string"
            else:
                assert column.type == "integer", column.name


# --- Annotation payloads --------------------------------------------------------------------------


def test_allocation_record_always_carries_its_pods_key() -> None:
    # Recovery in the Go controller parses {"pods":[...]}; an empty record must keep the key.
    assert msgspec.json.encode(osb.AllocationRecord()) == b'{"pods":[]}'
    record = msgspec.json.decode(
        b'{"pods":["python-pool-x7k2p","python-pool-9qz4d"]}', type=osb.AllocationRecord
    )
    assert record.pods == ["python-pool-x7k2p", "python-pool-9qz4d"]


def test_the_example_restart_config_reads_as_a_restart_config() -> None:
    annotations = example("pool.yaml")["metadata"]["annotations"]
    config = msgspec.json.decode(annotations[osb.ANNOTATION_RESTART_CONFIG], type=osb.RestartConfig)
    assert config.retry_interval == "30s"
    assert config.max_retries == 3
    assert config.blacklist == ["log-shipper"]
    assert config.restart_command == ["kill", "1"]


def test_restart_record_round_trips_as_the_go_controller_writes_it() -> None:
    raw = (
        b'{"id":"eval-run-42","startTime":"2026-07-01T10:00:00Z",'
        b'"containers":{"sandbox":"containerd://4f1c"},'
        b'"lastRetryTime":"2026-07-01T10:00:00Z","retryCount":1}'
    )
    record = msgspec.json.decode(raw, type=osb.RestartRecord)
    assert msgspec.json.encode(record) == raw
    fresh = osb.RestartRecord(id="s", start_time="2026-07-01T10:00:00Z", containers={})
    assert (
        msgspec.json.encode(fresh)
        == b'{"id":"s","startTime":"2026-07-01T10:00:00Z","containers":{}}'
    )


def test_key_constants_are_the_upstream_strings() -> None:
    # A typo makes the Go controller's objects invisible to ours (and ours to the lifecycle server).
    assert osb.ANNOTATION_ALLOC_STATUS == "sandbox.opensandbox.io/alloc-status"
    assert osb.ANNOTATION_ALLOC_RELEASE == "sandbox.opensandbox.io/alloc-release"
    assert osb.ANNOTATION_ALLOC_RELEASED == "sandbox.opensandbox.io/alloc-released"
    assert osb.ANNOTATION_ENDPOINTS == "sandbox.opensandbox.io/endpoints"
    assert osb.LABEL_POD_INDEX == "batch-sandbox.sandbox.opensandbox.io/pod-index"
    assert osb.FINALIZER_POOL_ALLOCATION == "pool.sandbox.opensandbox.io/pool-allocation"
    assert osb.FINALIZER_TASK_CLEANUP == "batch-sandbox.sandbox.opensandbox.io/task-cleanup"
    assert osb.FINALIZER_SNAPSHOT_CLEANUP == "sandboxsnapshot.sandbox.opensandbox.io/cleanup"


# --- SandboxSnapshot formats (issue #29) ----------------------------------------------------------


def snapshot_crd_schema() -> StructuralSchema:
    (crd,) = load_documents(CRD_DIR / "sandbox.opensandbox.io_sandboxsnapshots.yaml")
    return StructuralSchema.from_crd(crd)


def test_snapshot_format_takes_upstreams_three_values_in_spec_and_status() -> None:
    snapshot = schema_of(osb.SandboxSnapshot)
    for struct in ("SandboxSnapshotSpec", "SandboxSnapshotStatus"):
        node = non_null(properties(snapshot, struct)["format"])
        assert sorted(node["enum"]) == sorted(["rootfs-v1", "qemu-v1", "kata-vmstate-v1"])
    assert "format" not in snapshot["$defs"]["SandboxSnapshotSpec"].get("required", [])
    assert "default" not in non_null(properties(snapshot, "SandboxSnapshotSpec")["format"])
    assert osb.SNAPSHOT_FORMAT_ROOTFS == "rootfs-v1"


def test_snapshot_vm_fields_have_upstreams_wire_names_and_keep_unknown_fields() -> None:
    (crd,) = load_documents(CRD_DIR / "sandbox.opensandbox.io_sandboxsnapshots.yaml")
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    props = status["properties"]
    assert props["virtualMachine"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert props["format"]["enum"] == ["rootfs-v1", "qemu-v1", "kata-vmstate-v1"]
    kata = props["kataVMState"]
    assert kata["type"] == "object"
    assert kata["x-kubernetes-preserve-unknown-fields"] is True
    assert kata["properties"] == {
        "snapshotName": {"type": "string"},
        "restorePlanSecretName": {"type": "string"},
    }


def test_a_manifest_setting_the_new_fields_keeps_them_through_the_crd() -> None:
    """The issue: the CRD pruned spec.format and the VM fields. Now nothing is pruned, not even
    fields of the VM objects that upstream adds later."""
    manifest: dict[str, Any] = {
        "apiVersion": f"{osb.GROUP}/{osb.VERSION}",
        "kind": "SandboxSnapshot",
        "metadata": {"name": "vm", "namespace": "default"},
        "spec": {"sandboxName": "notebook-ada", "format": "qemu-v1"},
        "status": {
            "format": "qemu-v1",
            "virtualMachine": {"digest": "sha256:ab", "size": 42, "anything": {"deep": [1]}},
            "kataVMState": {"snapshotName": "s", "restorePlanSecretName": "p", "later": "x"},
        },
    }
    admission = snapshot_crd_schema().admit(manifest)
    assert admission.causes == []
    assert admission.unknown_fields == []
    assert admission.object["spec"] == manifest["spec"]
    assert admission.object["status"] == manifest["status"]


def test_a_format_upstream_does_not_know_is_refused_by_the_crd() -> None:
    manifest: dict[str, Any] = {
        "apiVersion": f"{osb.GROUP}/{osb.VERSION}",
        "kind": "SandboxSnapshot",
        "metadata": {"name": "vm", "namespace": "default"},
        "spec": {"sandboxName": "notebook-ada", "format": "firecracker-v1"},
    }
    assert snapshot_crd_schema().admit(manifest).causes != []
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(manifest, osb.SandboxSnapshot)


def test_the_vm_fixtures_round_trip_through_the_type() -> None:
    fixtures = [doc for doc in observed_fixtures() if doc["kind"] == "SandboxSnapshot"]
    assert {doc["spec"]["format"] for doc in fixtures} >= {"qemu-v1", "kata-vmstate-v1"}
    for manifest in fixtures:
        assert msgspec.to_builtins(decode(manifest)) == manifest
