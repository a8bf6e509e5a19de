"""kube-scheduler's part: bind a pending Pod to a node with room, or say why none fits.

The scheduler serves Pods whose ``schedulerName`` is ``default-scheduler`` (or unset); a Pod
naming another scheduler is left alone, as it would be by a cluster without that scheduler. Of
the nodes whose labels satisfy ``spec.nodeSelector`` and that hold fewer than ``max_pods``
Pods, :func:`choose_node` takes the least loaded (ties: the lowest index), so a burst of Pods
spreads evenly over the nodes. Binding goes through the ``pods/binding`` subresource.

When no node fits, or the Pod is given the ``unschedulable`` failure mode, the Pod gets
PodScheduled=False with reason Unschedulable and kube-scheduler's FitError message ("0/3 nodes
are available: 3 Too many pods. preemption: ..."), once. The shell remembers which Pods are
unschedulable (:func:`is_unschedulable`) and tries them again whenever a Pod leaves a node, as
kube-scheduler moves them back to its active queue when the cluster changes.

The counts come from :class:`~.nodes.ClusterView`, which the shell tallies per pod event,
bindings it has made but the cache does not show yet included.
"""

from __future__ import annotations

from api.objects import Json
from devtools.cluster.controllers.kubelet.actions import BindPod, PatchStatus
from devtools.cluster.controllers.kubelet.nodes import ClusterView, NodeInfo
from devtools.cluster.controllers.kubelet.statuses import condition

__all__ = ["DEFAULT_SCHEDULER", "choose_node", "is_unschedulable", "schedule"]


DEFAULT_SCHEDULER = "default-scheduler"


def schedule(
    pod: Json, view: ClusterView, *, injected: bool, now: str
) -> BindPod | PatchStatus | None:
    """Bind ``pod`` to the node :func:`choose_node` picks, or mark it Unschedulable (always, if
    the failure is ``injected``); None when it already says it is unschedulable."""
    node = None if injected else choose_node(pod, view)
    if node is not None:
        return BindPod(node.name)
    old = (pod.get("status") or {}).get("conditions") or []
    scheduled = next((c for c in old if c.get("type") == "PodScheduled"), None)
    if scheduled is not None and scheduled.get("reason") == "Unschedulable":
        return None
    unschedulable = condition(
        old,
        "PodScheduled",
        "False",
        now,
        "Unschedulable",
        _unschedulable_message(pod, view, injected=injected),
    )
    others = [c for c in old if c.get("type") != "PodScheduled"]
    resource_version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
    return PatchStatus({"conditions": [unschedulable, *others]}, resource_version)


def _selected_nodes(pod: Json, view: ClusterView) -> list[NodeInfo]:
    wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
    return [node for node in view.nodes if all(node.labels.get(k) == v for k, v in wanted.items())]


def choose_node(pod: Json, view: ClusterView) -> NodeInfo | None:
    """Least-loaded node with room whose labels satisfy ``spec.nodeSelector`` (ties: lowest
    index)."""
    fitting = [
        node
        for node in _selected_nodes(pod, view)
        if view.pods_per_node.get(node.name, 0) < view.max_pods
    ]
    if not fitting:
        return None
    return min(fitting, key=lambda node: (view.pods_per_node.get(node.name, 0), node.index))


def is_unschedulable(pod: Json) -> bool:
    """Not bound, and the scheduler said why (PodScheduled=False, Unschedulable)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def _unschedulable_message(pod: Json, view: ClusterView, injected: bool) -> str:
    """kube-scheduler's FitError message: a count per reason, reasons sorted, then the
    preemption verdict in the same form."""
    count = len(view.nodes)
    full = 0 if injected else len(_selected_nodes(pod, view))  # selected, so room was missing
    reasons: dict[str, int] = {}
    preemption: dict[str, int] = {}
    if full:
        reasons["Too many pods"] = full
        preemption["No preemption victims found for incoming pod"] = full
    if count - full:
        if injected:
            reasons["node(s) were unschedulable"] = count - full
        else:
            reasons["node(s) didn't match Pod's node affinity/selector"] = count - full
        preemption["Preemption is not helpful for scheduling"] = count - full

    def tally(counts: dict[str, int]) -> str:
        return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))

    return (
        f"0/{count} nodes are available: {tally(reasons)}. "
        f"preemption: 0/{count} nodes are available: {tally(preemption)}."
    )
