"""Patch semantics of the development cluster (docs/devcluster.md §2 row 9), as pure functions.

Each case states the behaviour a client of a real API server sees: what a PATCH of each content
type does to an object, which bodies are 400 and which are 422, and how server-side apply records
and enforces field ownership.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.patching.errors import ApplyConflict, PatchError
from api.patching.strategic import strategic_merge_patch
from devtools.cluster.apirules.patching.apply import server_side_apply
from devtools.cluster.apirules.patching.fields import (
    changed_fields,
    field_paths,
    fields_v1,
    leaf_values,
    parse_fields_v1,
)
from devtools.cluster.apirules.patching.json_patches import json_patch, merge_patch
from devtools.cluster.apirules.patching.managed import record_update

T0 = "2024-05-01T10:00:00Z"
T1 = "2024-05-01T10:05:00Z"

# JSON-shaped values for property tests.
_scalars = st.one_of(
    st.booleans(), st.integers(-1000, 1000), st.text(max_size=5), st.just("x"), st.just("y")
)
_keys = st.sampled_from(["a", "b", "c", "d", "spec", "x"])
json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(_keys, children, max_size=3)
    ),
    max_leaves=10,
)
json_objects = st.dictionaries(_keys, json_values, max_size=4)
merge_patches = st.recursive(
    st.one_of(_scalars, st.none()),
    lambda children: st.dictionaries(_keys, children, max_size=3),
    max_leaves=8,
)


# ----------------------------------------------------------------------------- merge patch


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        # RFC 7386 appendix A.
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        # Lists are replaced whole, never merged: a patch cannot append a container.
        (
            {"spec": {"containers": [{"name": "a"}]}},
            {"spec": {"containers": [{"name": "b"}]}},
            {"spec": {"containers": [{"name": "b"}]}},
        ),
    ],
)
def test_merge_patch_follows_rfc_7386(target: Any, patch: Any, expected: Any) -> None:
    assert merge_patch(target, patch) == expected


def test_merge_patch_with_a_null_body_is_a_bad_request() -> None:
    with pytest.raises(PatchError) as caught:
        merge_patch({"a": 1}, None)
    assert (caught.value.code, caught.value.reason) == (400, "BadRequest")


@pytest.mark.parametrize("body", [[1, 2], "text", 3])
def test_merge_patch_that_leaves_no_object_is_invalid(body: Any) -> None:
    with pytest.raises(PatchError) as caught:
        merge_patch({"a": 1}, body)
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")
    assert "cannot unmarshal" in caught.value.message


@settings(max_examples=100, deadline=None)
@given(target=json_objects, patch=st.dictionaries(_keys, merge_patches, max_size=4))
def test_merge_patch_is_idempotent_and_never_mutates(target: Any, patch: Any) -> None:
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once
    assert (target, patch) == (target_before, patch_before)


# ----------------------------------------------------------------------------- JSON patch


def test_json_patch_applies_operations_in_order() -> None:
    target = {"metadata": {"name": "w"}, "spec": {"size": 1, "tags": ["a"]}}
    ops = [
        {"op": "test", "path": "/spec/size", "value": 1},
        {"op": "replace", "path": "/spec/size", "value": 2},
        {"op": "add", "path": "/spec/tags/-", "value": "b"},
        {"op": "add", "path": "/metadata/labels", "value": {"app": "x"}},
        {"op": "remove", "path": "/spec/tags/0"},
        {"op": "copy", "from": "/spec/size", "path": "/spec/copy"},
        {"op": "move", "from": "/spec/copy", "path": "/spec/moved"},
    ]
    assert json_patch(target, ops) == {
        "metadata": {"name": "w", "labels": {"app": "x"}},
        "spec": {"size": 2, "tags": ["b"], "moved": 2},
    }
    assert target == {"metadata": {"name": "w"}, "spec": {"size": 1, "tags": ["a"]}}


def test_json_patch_body_that_is_an_object_is_the_exact_go_400() -> None:
    """What kubernetes_asyncio's default content type produces for a dict body."""
    with pytest.raises(PatchError) as caught:
        json_patch({"a": 1}, {"spec": {"size": 2}})
    assert caught.value.code == 400
    assert caught.value.reason == "BadRequest"
    assert (
        caught.value.message
        == "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
    )


def test_json_patch_with_an_operation_that_is_not_an_object_is_a_400() -> None:
    with pytest.raises(PatchError) as caught:
        json_patch({"a": 1}, ["add"])
    assert caught.value.code == 400
    assert "jsonpatch.Operation" in caught.value.message


def test_json_patch_null_body_changes_nothing() -> None:
    assert json_patch({"a": 1}, None) == {"a": 1}


@pytest.mark.parametrize(
    ("ops", "fragment"),
    [
        ([{"op": "test", "path": "/spec/size", "value": 9}], "testing value /spec/size failed"),
        ([{"op": "remove", "path": "/spec/missing"}], "operation 0 (remove /spec/missing)"),
        ([{"op": "replace", "path": "/spec/missing", "value": 1}], "replace /spec/missing"),
        ([{"op": "add", "path": "/nope/deeper", "value": 1}], "add /nope/deeper"),
        ([{"op": "frobnicate", "path": "/spec"}], "frobnicate"),
        ([{"path": "/spec"}], "op"),
        (
            [{"op": "test", "path": "/spec/size", "value": 1}, {"op": "remove", "path": "/x"}],
            "operation 1",
        ),
    ],
)
def test_json_patch_failing_operation_is_422_naming_the_operation(
    ops: list[dict[str, Any]], fragment: str
) -> None:
    with pytest.raises(PatchError) as caught:
        json_patch({"spec": {"size": 1}}, ops)
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")
    assert caught.value.message.startswith(
        "the server rejected our request due to an error in our request"
    )
    assert fragment in caught.value.message


def test_json_patch_replacing_the_root_with_a_list_is_invalid() -> None:
    with pytest.raises(PatchError) as caught:
        json_patch({"a": 1}, [{"op": "replace", "path": "", "value": [1]}])
    assert caught.value.code == 422


def test_json_patch_with_too_many_operations_is_refused() -> None:
    ops = [{"op": "test", "path": "/a", "value": 1}] * 10001
    with pytest.raises(PatchError) as caught:
        json_patch({"a": 1}, ops)
    assert (caught.value.code, caught.value.reason) == (413, "RequestEntityTooLarge")


@settings(max_examples=100, deadline=None)
@given(target=st.dictionaries(_keys, json_values, min_size=1, max_size=4), value=json_values)
def test_json_patch_replace_then_test_round_trips(target: dict[str, Any], value: Any) -> None:
    key = next(iter(target))
    ops = [
        {"op": "replace", "path": f"/{key}", "value": value},
        {"op": "test", "path": f"/{key}", "value": value},
    ]
    result = json_patch(target, ops)
    assert result[key] == value
    assert {k: v for k, v in result.items() if k != key} == {
        k: v for k, v in target.items() if k != key
    }


# ----------------------------------------------------------------------------- strategic merge


def _pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def test_smp_merges_containers_by_name_and_env_by_name() -> None:
    live = _pod(
        containers=[
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "side:1"},
        ]
    )
    patch = {
        "spec": {
            "containers": [
                {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}]},
                {"name": "new", "image": "new:1"},
            ]
        }
    }
    result = strategic_merge_patch(live, patch)
    assert result["spec"]["containers"] == [
        {
            "name": "app",
            "image": "app:2",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        },
        {"name": "side", "image": "side:1"},
        {"name": "new", "image": "new:1"},
    ]
    assert live["spec"]["containers"][0]["image"] == "app:1"


def test_smp_merges_container_ports_by_container_port_and_service_ports_by_port() -> None:
    pod = _pod(containers=[{"name": "c", "ports": [{"containerPort": 80, "name": "http"}]}])
    patched = strategic_merge_patch(
        pod,
        {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "web"}]}]}},
    )
    assert patched["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "name": "web"}]
    service = {"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}
    patched = strategic_merge_patch(service, {"spec": {"ports": [{"port": 443}]}})
    assert patched["spec"]["ports"] == [{"port": 80, "targetPort": 8080}, {"port": 443}]


def test_smp_merges_conditions_by_type_and_owner_references_by_uid() -> None:
    live = {
        "metadata": {"ownerReferences": [{"uid": "u1", "name": "a"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    patch = {
        "metadata": {"ownerReferences": [{"uid": "u2", "name": "b"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"},
            ]
        },
    }
    result = strategic_merge_patch(live, patch)
    assert [ref["uid"] for ref in result["metadata"]["ownerReferences"]] == ["u1", "u2"]
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_smp_merges_finalizers_as_a_set_and_replaces_tolerations() -> None:
    live = {
        "metadata": {"finalizers": ["a", "b"]},
        "spec": {"tolerations": [{"key": "k1"}]},
    }
    patch = {"metadata": {"finalizers": ["b", "c"]}, "spec": {"tolerations": [{"key": "k2"}]}}
    result = strategic_merge_patch(live, patch)
    assert result["metadata"]["finalizers"] == ["a", "b", "c"]
    assert result["spec"]["tolerations"] == [{"key": "k2"}]


def test_smp_patch_delete_removes_a_list_element_by_key() -> None:
    live = _pod(containers=[{"name": "a"}, {"name": "b"}])
    patch = {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}
    assert strategic_merge_patch(live, patch)["spec"]["containers"] == [{"name": "b"}]


def test_smp_patch_replace_in_a_list_replaces_the_whole_list() -> None:
    live = _pod(containers=[{"name": "a"}, {"name": "b"}])
    patch = {"spec": {"containers": [{"$patch": "replace"}, {"name": "c", "image": None}]}}
    assert strategic_merge_patch(live, patch)["spec"]["containers"] == [{"name": "c"}]


def test_smp_patch_replace_and_delete_on_maps() -> None:
    live = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}}
    replaced = strategic_merge_patch(
        live, {"metadata": {"labels": {"$patch": "replace", "c": "3"}}}
    )
    assert replaced["metadata"]["labels"] == {"c": "3"}
    deleted = strategic_merge_patch(live, {"spec": {"$patch": "delete"}})
    assert "spec" not in deleted


def test_smp_null_deletes_a_key() -> None:
    live = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    assert strategic_merge_patch(live, {"metadata": {"labels": {"a": None}}}) == {
        "metadata": {"labels": {"b": "2"}}
    }


def test_smp_delete_from_primitive_list() -> None:
    live = {"metadata": {"finalizers": ["a", "b", "c"]}}
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}
    assert strategic_merge_patch(live, patch)["metadata"]["finalizers"] == ["a", "c"]


def test_smp_set_element_order_reorders_named_elements() -> None:
    live = _pod(containers=[{"name": "a"}, {"name": "b"}, {"name": "c"}])
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
            "containers": [{"name": "a", "image": "x"}],
        }
    }
    names = [c["name"] for c in strategic_merge_patch(live, patch)["spec"]["containers"]]
    assert names == ["c", "b", "a"]


def test_smp_retain_keys_drops_unlisted_fields() -> None:
    live = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
    patch = {
        "spec": {
            "volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"p": 1}}]
        }
    }
    assert strategic_merge_patch(live, patch)["spec"]["volumes"] == [
        {"name": "v", "hostPath": {"p": 1}}
    ]


def test_smp_list_element_without_its_merge_key_is_an_error() -> None:
    with pytest.raises(PatchError) as caught:
        strategic_merge_patch(_pod(containers=[]), {"spec": {"containers": [{"image": "x"}]}})
    assert caught.value.code == 500
    assert "does not contain declared merge key: name" in caught.value.message


def test_smp_body_that_is_not_an_object_is_a_bad_request() -> None:
    with pytest.raises(PatchError) as caught:
        strategic_merge_patch({}, [{"op": "add"}])
    assert caught.value.code == 400
    assert "cannot unmarshal array" in caught.value.message


def test_smp_unknown_patch_directive_is_a_bad_request() -> None:
    with pytest.raises(PatchError) as caught:
        strategic_merge_patch({"spec": {}}, {"spec": {"$patch": "explode"}})
    assert caught.value.code == 400


@settings(max_examples=100, deadline=None)
@given(target=json_objects, patch=st.dictionaries(_keys, merge_patches, max_size=4))
def test_smp_without_lists_or_directives_equals_merge_patch(target: Any, patch: Any) -> None:
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    result = strategic_merge_patch(target, patch)
    assert result == merge_patch(target, patch)
    assert (target, patch) == (target_before, patch_before)


# ----------------------------------------------------------------------------- server-side apply


def _deployment(replicas: int = 1, **extra: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"replicas": replicas},
    }
    obj.update(extra)
    return obj


def _entries(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (entry["manager"], entry["operation"]): entry
        for entry in obj["metadata"].get("managedFields", [])
    }


def test_apply_creates_and_records_ownership_in_fields_v1() -> None:
    applied = _deployment(3)
    applied["metadata"]["labels"] = {"app": "web"}
    result = server_side_apply(None, applied, manager="kubectl", force=False, now=T0)
    assert result["spec"] == {"replicas": 3}
    (entry,) = result["metadata"]["managedFields"]
    assert entry == {
        "manager": "kubectl",
        "operation": "Apply",
        "apiVersion": "apps/v1",
        "time": T0,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}}},
    }


def test_repeating_the_same_apply_changes_nothing_not_even_the_time() -> None:
    first = server_side_apply(None, _deployment(2), manager="m", force=False, now=T0)
    again = server_side_apply(first, _deployment(2), manager="m", force=False, now=T1)
    assert again == first


def test_apply_after_an_edit_conflicts_like_kubectl() -> None:
    created = server_side_apply(None, _deployment(1), manager="kubectl", force=False, now=T0)
    edited = copy.deepcopy(created)
    edited["spec"]["replicas"] = 5
    edited = record_update(created, edited, manager="kubectl-edit", now=T1)
    with pytest.raises(ApplyConflict) as caught:
        server_side_apply(edited, _deployment(1), manager="kubectl", force=False, now=T1)
    assert caught.value.causes == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "kubectl-edit" using apps/v1',
            "field": ".spec.replicas",
        }
    ]
    assert caught.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1: .spec.replicas'
    )


def test_forced_apply_takes_ownership() -> None:
    created = record_update(None, _deployment(1), manager="creator", now=T0)
    forced = server_side_apply(created, _deployment(4), manager="mine", force=True, now=T1)
    assert forced["spec"]["replicas"] == 4
    entries = _entries(forced)
    assert entries[("mine", "Apply")]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert ("creator", "Update") not in entries  # it owned only replicas, so its entry is gone
    # Now the creator's update would simply take it back: updates never conflict.
    taken_back = record_update(
        forced, {**forced, "spec": {"replicas": 2}}, manager="creator", now=T1
    )
    assert _entries(taken_back)[("creator", "Update")]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert ("mine", "Apply") not in _entries(taken_back)


def test_applying_the_same_value_another_manager_owns_shares_ownership() -> None:
    first = server_side_apply(None, _deployment(2), manager="a", force=False, now=T0)
    shared = server_side_apply(first, _deployment(2), manager="b", force=False, now=T1)
    entries = _entries(shared)
    assert entries[("a", "Apply")]["fieldsV1"] == entries[("b", "Apply")]["fieldsV1"]
    # b stops applying replicas: a still owns it, so the value stays.
    applied = _deployment()
    del applied["spec"]
    after = server_side_apply(shared, applied, manager="b", force=False, now=T1)
    assert after["spec"]["replicas"] == 2


def test_fields_a_manager_stops_applying_are_removed() -> None:
    applied = _deployment(2)
    applied["metadata"]["labels"] = {"a": "1", "b": "2"}
    first = server_side_apply(None, applied, manager="m", force=False, now=T0)
    applied["metadata"]["labels"] = {"a": "1"}
    second = server_side_apply(first, applied, manager="m", force=False, now=T1)
    assert second["metadata"]["labels"] == {"a": "1"}
    applied["metadata"].pop("labels")
    third = server_side_apply(second, applied, manager="m", force=False, now=T1)
    assert "labels" not in third["metadata"]


def test_keyed_list_items_are_owned_separately() -> None:
    def with_containers(*names: str) -> dict[str, Any]:
        return _deployment(
            1,
            spec={"template": {"spec": {"containers": [{"name": n, "image": n} for n in names]}}},
        )

    first = server_side_apply(None, with_containers("app"), manager="a", force=False, now=T0)
    both = server_side_apply(first, with_containers("side"), manager="b", force=False, now=T0)
    names = [c["name"] for c in both["spec"]["template"]["spec"]["containers"]]
    assert names == ["app", "side"]
    fields = _entries(both)[("b", "Apply")]["fieldsV1"]
    assert fields["f:spec"]["f:template"]["f:spec"]["f:containers"] == {
        'k:{"name":"side"}': {".": {}, "f:image": {}, "f:name": {}}
    }
    # a drops its container: only a's item goes, b's stays.
    after = server_side_apply(both, with_containers(), manager="a", force=False, now=T1)
    assert [c["name"] for c in after["spec"]["template"]["spec"]["containers"]] == ["side"]


def test_conflicts_inside_keyed_lists_name_the_item() -> None:
    spec = {"template": {"spec": {"containers": [{"name": "app", "image": "v1"}]}}}
    first = server_side_apply(None, _deployment(spec=spec), manager="a", force=False, now=T0)
    changed = copy.deepcopy(spec)
    changed["template"]["spec"]["containers"][0]["image"] = "v2"
    with pytest.raises(ApplyConflict) as caught:
        server_side_apply(first, _deployment(spec=changed), manager="b", force=False, now=T1)
    assert caught.value.causes[0]["field"] == '.spec.template.spec.containers[name="app"].image'
    assert caught.value.causes[0]["message"] == 'conflict with "a"'


def test_several_conflicts_are_listed_per_manager() -> None:
    live = _deployment(1)
    live["metadata"]["labels"] = {"x": "1"}
    live = record_update(None, live, manager="creator", now=T0)
    applied = _deployment(2)
    applied["metadata"]["labels"] = {"x": "2"}
    with pytest.raises(ApplyConflict) as caught:
        server_side_apply(live, applied, manager="m", force=False, now=T1)
    assert caught.value.message == (
        'Apply failed with 2 conflicts: conflicts with "creator" using apps/v1:\n'
        "- .metadata.labels.x\n- .spec.replicas"
    )
    assert len(caught.value.causes) == 2


def test_finalizers_are_a_set_owned_per_value() -> None:
    a = _deployment()
    a["metadata"]["finalizers"] = ["x.io/a"]
    first = server_side_apply(None, a, manager="a", force=False, now=T0)
    b = _deployment()
    b["metadata"]["finalizers"] = ["x.io/b"]
    both = server_side_apply(first, b, manager="b", force=False, now=T0)
    assert both["metadata"]["finalizers"] == ["x.io/a", "x.io/b"]
    b["metadata"]["finalizers"] = []
    after = server_side_apply(both, b, manager="b", force=False, now=T1)
    assert after["metadata"]["finalizers"] == ["x.io/a"]


def test_object_without_managed_fields_belongs_to_before_first_apply() -> None:
    live = _deployment(1)
    with pytest.raises(ApplyConflict) as caught:
        server_side_apply(live, _deployment(3), manager="m", force=False, now=T0)
    assert caught.value.causes[0]["message"] == 'conflict with "before-first-apply" using apps/v1'


def test_ignored_fields_are_neither_merged_nor_owned() -> None:
    applied = _deployment(1, status={"replicas": 9})
    result = server_side_apply(
        None, applied, manager="m", force=False, now=T0, ignore_fields=("status",)
    )
    assert "status" not in result
    assert "f:status" not in result["metadata"]["managedFields"][0]["fieldsV1"]


def test_apply_never_mutates_its_inputs() -> None:
    live = record_update(None, _deployment(1), manager="c", now=T0)
    applied = _deployment(2)
    live_before, applied_before = copy.deepcopy(live), copy.deepcopy(applied)
    server_side_apply(live, applied, manager="m", force=True, now=T1)
    assert (live, applied) == (live_before, applied_before)


# ----------------------------------------------------------------------------- record_update


def test_create_gives_the_creator_every_field() -> None:
    created = record_update(None, _deployment(1), manager="kubectl-create", now=T0)
    assert _entries(created)[("kubectl-create", "Update")]["fieldsV1"] == {
        "f:spec": {"f:replicas": {}}
    }


def test_update_that_changes_nothing_keeps_managed_fields_byte_identical() -> None:
    created = record_update(None, _deployment(1), manager="c", now=T0)
    same = record_update(created, copy.deepcopy(created), manager="other", now=T1)
    assert json.dumps(same, sort_keys=True) == json.dumps(created, sort_keys=True)


def test_removed_fields_leave_every_entry() -> None:
    live = _deployment(1)
    live["metadata"]["labels"] = {"a": "1"}
    created = record_update(None, live, manager="c", now=T0)
    without = copy.deepcopy(created)
    del without["metadata"]["labels"]
    updated = record_update(created, without, manager="editor", now=T1)
    assert _entries(updated)[("c", "Update")]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert ("editor", "Update") not in _entries(updated)


def test_status_writes_are_recorded_with_their_subresource() -> None:
    live = record_update(None, _deployment(1), manager="c", now=T0)
    with_status = {**live, "status": {"readyReplicas": 1}}
    updated = record_update(live, with_status, manager="ctl", now=T1, subresource="status")
    entry = _entries(updated)[("ctl", "Update")]
    assert entry["subresource"] == "status"
    assert entry["fieldsV1"] == {"f:status": {"f:readyReplicas": {}}}


def test_managed_fields_reset_with_an_empty_entry() -> None:
    live = record_update(None, _deployment(1), manager="c", now=T0)
    reset = copy.deepcopy(live)
    reset["metadata"]["managedFields"] = [{}]
    assert "managedFields" not in record_update(live, reset, manager="x", now=T1)["metadata"]


@settings(max_examples=100, deadline=None)
@given(obj=json_objects)
def test_fields_v1_round_trips(obj: dict[str, Any]) -> None:
    paths = field_paths(obj)
    assert parse_fields_v1(json.loads(json.dumps(fields_v1(paths)))) == paths


_containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "b", "c"])},
        optional={
            "image": st.text(max_size=3),
            "env": st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["X", "Y"]), "value": st.text(max_size=2)}
                ),
                max_size=2,
                unique_by=lambda e: e["name"],
            ),
        },
    ),
    max_size=3,
    unique_by=lambda c: c["name"],
)


@settings(max_examples=100, deadline=None)
@given(
    containers=_containers,
    finalizers=st.lists(st.sampled_from(["f/a", "f/b", "f/c"]), unique=True, max_size=3),
)
def test_fields_v1_round_trips_keyed_lists_and_sets(
    containers: list[dict[str, Any]], finalizers: list[str]
) -> None:
    obj = {"metadata": {"finalizers": finalizers}, "spec": {"containers": containers}}
    paths = field_paths(obj)
    assert parse_fields_v1(json.loads(json.dumps(fields_v1(paths)))) == paths


@settings(max_examples=100, deadline=None)
@given(first=_containers, second=_containers)
def test_reapplying_a_smaller_config_leaves_exactly_that_config(
    first: list[dict[str, Any]], second: list[dict[str, Any]]
) -> None:
    """With one manager, apply is declarative: the result is what was applied last, in order."""
    live = server_side_apply(
        None, _deployment(spec={"containers": first}), manager="m", force=False, now=T0
    )
    after = server_side_apply(
        live, _deployment(spec={"containers": second}), manager="m", force=False, now=T1
    )

    assert after["spec"].get("containers", []) == second


@settings(max_examples=100, deadline=None)
@given(theirs=_containers, first=_containers, second=_containers)
def test_an_apply_never_takes_away_what_another_manager_set(
    theirs: list[dict[str, Any]], first: list[dict[str, Any]], second: list[dict[str, Any]]
) -> None:
    """Without force, a manager either gets a conflict or leaves the other's fields intact."""
    live = server_side_apply(
        None, _deployment(spec={"containers": theirs}), manager="b", force=False, now=T0
    )
    try:
        for mine in (first, second):
            live = server_side_apply(
                live, _deployment(spec={"containers": mine}), manager="m", force=False, now=T1
            )
    except ApplyConflict:
        return
    result = {c["name"]: c for c in live["spec"].get("containers", [])}
    for container in theirs:
        for key, value in container.items():
            if key != "env":
                assert result[container["name"]][key] == value
        for variable in container.get("env", []):
            assert variable in result[container["name"]]["env"]


def test_apply_to_a_subresource_is_recorded_with_it() -> None:
    live = record_update(None, _deployment(1), manager="c", now=T0)
    applied = _deployment(1, status={"readyReplicas": 1})
    del applied["spec"]
    result = server_side_apply(
        live, applied, manager="ctl", force=False, now=T1, subresource="status"
    )
    entry = _entries(result)[("ctl", "Apply")]
    assert entry["subresource"] == "status"
    assert entry["fieldsV1"] == {"f:status": {"f:readyReplicas": {}}}
    assert result["status"] == {"readyReplicas": 1}


# ----------------------------------------------------------------------------- changed fields

# Objects with the lists the field paths walk by key (containers by name, conditions by type),
# as sets (finalizers), and atomically (anything else), so every branch of the walk is drawn.
_containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "b", "c"])}, optional={"image": _scalars, "x": json_values}
    ),
    max_size=3,
    unique_by=lambda container: container["name"],
)
_conditions = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["Ready", "PodScheduled"])}, optional={"status": _scalars}
    ),
    max_size=2,
    unique_by=lambda condition: condition["type"],
)
kube_objects = st.fixed_dictionaries(
    {"apiVersion": st.just("v1"), "kind": st.just("Pod")},
    optional={
        "metadata": st.fixed_dictionaries(
            {"name": st.just("p")},
            optional={
                "labels": st.dictionaries(_keys, st.one_of(_scalars, st.none()), max_size=3),
                "finalizers": st.lists(st.sampled_from(["f1", "f2"]), unique=True),
                "resourceVersion": st.sampled_from(["1", "2"]),
            },
        ),
        "spec": st.fixed_dictionaries(
            {}, optional={"containers": _containers, "nodeName": _scalars, "x": json_values}
        ),
        "status": st.fixed_dictionaries(
            {}, optional={"conditions": _conditions, "phase": _scalars}
        ),
        "x": json_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.none(), kube_objects), kube_objects)
def test_changed_fields_are_what_comparing_every_leaf_finds(
    old: dict[str, Any] | None, new: dict[str, Any]
) -> None:
    """The walk that skips equal parts finds exactly the fields that comparing the two objects'
    every leaf finds: what a write added or changed, and what it removed."""
    before = leaf_values(old) if old else {}
    after = leaf_values(new)
    assert changed_fields(old, new) == (
        {path for path, value in after.items() if path not in before or before[path] != value},
        before.keys() - after.keys(),
    )
