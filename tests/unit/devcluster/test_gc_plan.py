"""The garbage collector's decisions (docs/devcluster.md §2 row 19), on hand-built object graphs."""

from __future__ import annotations

from typing import Any

from devtools.cluster.controllers.gc import (
    DeleteObject,
    GraphNode,
    RemoveFinalizer,
    ResourceInfo,
    StripOwnerReferences,
    graph_node,
    owner_index,
    plan_gc,
)

WIDGETS = ResourceInfo("example.com", "v1", "widgets", "Widget", namespaced=True)
PODS = ResourceInfo("", "v1", "pods", "Pod", namespaced=True)
NODES = ResourceInfo("", "v1", "nodes", "Node", namespaced=False)
KINDS = {("example.com", "Widget"), ("", "Pod"), ("", "Node")}


def obj(
    resource: ResourceInfo,
    name: str,
    *,
    namespace: str = "ns",
    owners: list[dict[str, Any]] | None = None,
    finalizers: list[str] | None = None,
    deleting: bool = False,
) -> GraphNode:
    metadata: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "ownerReferences": owners or [],
        "finalizers": finalizers or [],
    }
    if resource.namespaced:
        metadata["namespace"] = namespace
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return graph_node({"metadata": metadata}, resource)


def ref(owner: GraphNode, *, block: bool | None = None, **override: Any) -> dict[str, Any]:
    api_version = f"{owner.group}/v1" if owner.group else "v1"
    reference = {
        "apiVersion": api_version,
        "kind": owner.kind,
        "name": owner.name,
        "uid": owner.uid,
    }
    if block is not None:
        reference["blockOwnerDeletion"] = block
    reference.update(override)
    return reference


def graph(*nodes: GraphNode) -> dict[str, GraphNode]:
    return {node.uid: node for node in nodes}


def test_objects_with_live_owners_are_kept() -> None:
    owner = obj(WIDGETS, "w")
    pod = obj(PODS, "p", owners=[ref(owner)])
    assert plan_gc(graph(owner, pod), KINDS) == []


def test_dependent_of_a_vanished_owner_is_deleted_in_the_background() -> None:
    owner = obj(WIDGETS, "w")
    pod = obj(PODS, "p", owners=[ref(owner)])
    (action,) = plan_gc(graph(pod), KINDS)
    assert isinstance(action, DeleteObject)
    assert (action.node.uid, action.propagation) == ("uid-p", "Background")
    assert action.verify_absent == (ref(owner),)


def test_dependent_with_one_live_owner_only_loses_the_dead_reference() -> None:
    alive, dead = obj(WIDGETS, "alive"), obj(WIDGETS, "dead")
    pod = obj(PODS, "p", owners=[ref(alive), ref(dead)])
    (action,) = plan_gc(graph(alive, pod), KINDS)
    assert isinstance(action, StripOwnerReferences)
    assert action.owner_uids == {"uid-dead"}


def test_owner_in_another_namespace_counts_as_absent() -> None:
    owner = obj(WIDGETS, "w", namespace="elsewhere")
    pod = obj(PODS, "p", namespace="ns", owners=[ref(owner)])
    (action,) = plan_gc(graph(owner, pod), KINDS)
    assert isinstance(action, DeleteObject)


def test_cluster_scoped_owner_of_a_namespaced_dependent_is_fine() -> None:
    node = obj(NODES, "n1")
    pod = obj(PODS, "p", owners=[ref(node)])
    assert plan_gc(graph(node, pod), KINDS) == []


def test_reference_matching_uid_but_not_name_or_kind_is_dangling() -> None:
    owner = obj(WIDGETS, "w")
    wrong_name = obj(PODS, "a", owners=[ref(owner, name="other")])
    wrong_kind = obj(PODS, "b", owners=[ref(owner, kind="Gadget", apiVersion="v1")])
    wrong_group = obj(PODS, "c", owners=[ref(owner, apiVersion="other.io/v1")])
    planned = plan_gc(graph(owner, wrong_name, wrong_kind, wrong_group), KINDS | {("", "Gadget")})
    deleted = {a.node.name for a in planned if isinstance(a, DeleteObject)}
    # b's kind is known (core Gadget) so it is dangling; c's group is unknown, so it is left alone.
    assert deleted == {"a", "b"}


def test_reference_to_an_unknown_kind_leaves_the_object_alone() -> None:
    pod = obj(
        PODS,
        "p",
        owners=[{"apiVersion": "nowhere.io/v1", "kind": "Thing", "name": "t", "uid": "u"}],
    )
    assert plan_gc(graph(pod), KINDS) == []


def test_objects_already_being_deleted_are_not_deleted_again() -> None:
    pod = obj(PODS, "p", owners=[ref(obj(WIDGETS, "gone"))], deleting=True)
    assert plan_gc(graph(pod), KINDS) == []


def test_dependent_carrying_finalizers_is_deleted_with_the_matching_policy() -> None:
    gone = obj(WIDGETS, "gone")
    orphaning = obj(WIDGETS, "a", owners=[ref(gone)], finalizers=["orphan"])
    foreground = obj(WIDGETS, "b", owners=[ref(gone)], finalizers=["foregroundDeletion"])
    policies = {
        a.node.name: a.propagation
        for a in plan_gc(graph(orphaning, foreground), KINDS)
        if isinstance(a, DeleteObject)
    }
    assert policies == {"a": "Orphan", "b": "Foreground"}


# ----------------------------------------------------------------------------- foreground


def test_foreground_owner_gets_its_dependents_deleted_and_waits_for_blocking_ones() -> None:
    owner = obj(WIDGETS, "w", finalizers=["foregroundDeletion"], deleting=True)
    blocking = obj(PODS, "blocking", owners=[ref(owner, block=True)])
    loose = obj(PODS, "loose", owners=[ref(owner, block=False)])
    actions = plan_gc(graph(owner, blocking, loose), KINDS)
    deleted = {a.node.name: a.propagation for a in actions if isinstance(a, DeleteObject)}
    assert deleted == {"blocking": "Background", "loose": "Background"}
    assert not any(isinstance(a, RemoveFinalizer) for a in actions)


def test_foreground_owner_is_released_once_no_blocking_dependent_remains() -> None:
    owner = obj(WIDGETS, "w", finalizers=["foregroundDeletion", "other"], deleting=True)
    loose = obj(PODS, "loose", owners=[ref(owner)], deleting=True)
    actions = plan_gc(graph(owner, loose), KINDS)
    assert actions == [RemoveFinalizer(owner, "foregroundDeletion")]


def test_blocking_dependent_still_terminating_keeps_the_owner_waiting() -> None:
    owner = obj(WIDGETS, "w", finalizers=["foregroundDeletion"], deleting=True)
    pod = obj(PODS, "p", owners=[ref(owner, block=True)], deleting=True)
    assert plan_gc(graph(owner, pod), KINDS) == []


def test_foreground_propagates_to_dependents_that_have_dependents() -> None:
    owner = obj(WIDGETS, "top", finalizers=["foregroundDeletion"], deleting=True)
    middle = obj(WIDGETS, "middle", owners=[ref(owner, block=True)])
    leaf = obj(PODS, "leaf", owners=[ref(middle, block=True)])
    actions = plan_gc(graph(owner, middle, leaf), KINDS)
    assert [(a.node.name, a.propagation) for a in actions if isinstance(a, DeleteObject)] == [
        ("middle", "Foreground")
    ]


def test_dependent_with_another_live_owner_is_released_not_deleted() -> None:
    leaving = obj(WIDGETS, "leaving", finalizers=["foregroundDeletion"], deleting=True)
    staying = obj(WIDGETS, "staying")
    pod = obj(PODS, "p", owners=[ref(leaving, block=True), ref(staying)])
    actions = plan_gc(graph(leaving, staying, pod), KINDS)
    assert actions == [StripOwnerReferences(pod, frozenset({"uid-leaving"}), ())]


# ----------------------------------------------------------------------------- orphan


def test_orphan_strips_references_then_drops_the_finalizer() -> None:
    owner = obj(WIDGETS, "w", finalizers=["orphan"], deleting=True)
    pod = obj(PODS, "p", owners=[ref(owner, block=True)])
    actions = plan_gc(graph(owner, pod), KINDS)
    assert actions == [StripOwnerReferences(pod, frozenset({"uid-w"}))]
    released = obj(PODS, "p")
    assert plan_gc(graph(owner, released), KINDS) == [RemoveFinalizer(owner, "orphan")]


def test_owner_being_orphaned_still_protects_its_dependents() -> None:
    owner = obj(WIDGETS, "w", finalizers=["orphan"], deleting=True)
    pod = obj(PODS, "p", owners=[ref(owner)])
    assert not any(isinstance(a, DeleteObject) for a in plan_gc(graph(owner, pod), KINDS))


def test_a_focused_pass_plans_for_its_nodes_alone_and_as_a_whole_pass_would() -> None:
    # The shell plans for what changed and its neighbours; each node's writes are the same as
    # a pass over the whole graph would make for it.
    owner = obj(WIDGETS, "w", finalizers=["foregroundDeletion"], deleting=True)
    blocking = obj(PODS, "blocking", owners=[ref(owner, block=True)])
    orphan_a, orphan_b = (obj(PODS, n, owners=[ref(obj(WIDGETS, "gone"))]) for n in "ab")
    whole = graph(owner, blocking, orphan_a, orphan_b)
    everything = plan_gc(whole, KINDS)
    assert len(everything) == 3
    owned = owner_index(whole)
    assert owned == {"uid-w": {"uid-blocking": None}, "uid-gone": {"uid-a": None, "uid-b": None}}
    for uid in whole:
        focused = plan_gc(whole, KINDS, [uid], owned)
        assert focused == [a for a in everything if a.node.uid == uid], uid
    assert plan_gc(whole, KINDS, ["uid-a", "uid-nowhere"], owned) == [
        a for a in everything if a.node.uid == "uid-a"
    ]


def test_graph_node_reads_metadata() -> None:
    node = graph_node(
        {
            "metadata": {
                "name": "x",
                "namespace": "ns",
                "uid": "u",
                "resourceVersion": "3",
                "finalizers": ["a"],
                "deletionTimestamp": "t",
                "ownerReferences": [{"uid": "o"}, "junk"],
            }
        },
        PODS,
    )
    assert (node.uid, node.namespace, node.deleting, node.finalizers) == ("u", "ns", True, ("a",))
    assert node.owner_references == ({"uid": "o"},)
    assert PODS.object_path("ns", "x") == "/api/v1/namespaces/ns/pods/x"
    assert WIDGETS.collection_path() == "/apis/example.com/v1/widgets"
    assert NODES.object_path("", "n") == "/api/v1/nodes/n"
