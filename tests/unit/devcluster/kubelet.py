"""The simulated kubelet's planner run without a server, for the tests of its decisions: a
kubelet configuration and a cluster of two nodes, a Pod to start, and :class:`Driver`, which
plays the API server's part (binding sets nodeName, a status write merge-patches ``status``)
and advances a fake clock to each requested wake-up, so a whole pod lifecycle runs in
microseconds."""

from __future__ import annotations

from typing import Any

from devtools.cluster.apirules.patching.json_patches import merge_patch
from devtools.cluster.controllers.kubelet.actions import (
    BindPod,
    DeletePod,
    Instant,
    PatchStatus,
)
from devtools.cluster.controllers.kubelet.config import (
    KubeletConfig,
)
from devtools.cluster.controllers.kubelet.executor import ExecutorState
from devtools.cluster.controllers.kubelet.nodes import ClusterView, NodeInfo
from devtools.cluster.controllers.kubelet.stages import StageMemory, observe_stage, plan_pod

CONFIG = KubeletConfig(nodes=2)


NODES = (
    NodeInfo(
        "devcluster-node-0", 0, {"kubernetes.io/hostname": "devcluster-node-0", "disk": "ssd"}
    ),
    NodeInfo("devcluster-node-1", 1, {"kubernetes.io/hostname": "devcluster-node-1"}),
)


VIEW = ClusterView(NODES)


def make_pod(
    name: str = "p", *, annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    spec.setdefault("containers", [{"name": "app", "image": "nginx:1.25"}])
    spec.setdefault("restartPolicy", "Always")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


class Driver:
    """Plays the API server and the clock around plan_pod."""

    def __init__(
        self, pod: dict[str, Any], config: KubeletConfig = CONFIG, view: ClusterView = VIEW
    ) -> None:
        self.pod = pod
        self.config = config
        self.view = view
        self.clock = 100.0
        self.memory: StageMemory | None = None
        self.rv = 1
        self.deleted = False
        self.writes: list[Any] = []
        self.executor: ExecutorState | None = None  # what the shell saw of a task executor

    def at(self) -> Instant:
        return Instant(self.clock, f"2024-01-01T00:00:{int(self.clock) % 60:02d}Z")

    def step(self) -> list[Any]:
        """Plan once; apply the actions; if nothing to do now, advance to the wake-up."""
        decision = plan_pod(
            self.pod, self.memory, self.at(), self.config, self.view, executor=self.executor
        )
        self.memory = decision.memory
        for action in decision.actions:
            self.apply(action)
        if not decision.actions and decision.wake_after is not None:
            self.clock += decision.wake_after
        return list(decision.actions)

    def apply(self, action: Any) -> None:
        self.writes.append(action)
        self.rv += 1
        if isinstance(action, BindPod):
            self.pod["spec"]["nodeName"] = action.node
        elif isinstance(action, PatchStatus):
            assert action.resource_version == self.pod["metadata"]["resourceVersion"]
            self.pod = merge_patch(self.pod, {"status": action.status})
        elif isinstance(action, DeletePod):
            self.deleted = True
        self.pod["metadata"]["resourceVersion"] = str(self.rv)

    def run_until(self, predicate: Any, limit: int = 50) -> None:
        for _ in range(limit):
            if predicate(self.pod):
                return
            self.step()
        raise AssertionError(f"never reached the state; stage {observe_stage(self.pod, VIEW)}")

    def stage(self) -> str:
        return observe_stage(self.pod, self.view)
