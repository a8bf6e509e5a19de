"""The simulated nodes: their names and addresses, the Node objects registered for them, and the
view of them that the planners decide with.

Node ``i`` is ``<node_prefix><i>``, with the address ``172.18.0.<i+2>`` (like the nodes of a kind
cluster) and the pod CIDR ``10.244.<i>.0/24``; :func:`allocate_pod_ip` hands out the lowest free
address of that range, from ``.2`` up (``.1`` is the node's bridge, as with kindnet). A pod that
runs a real task executor (:mod:`.executor`) gets its address from a loopback range instead,
``127.N.<i>.0/24`` (``127.244`` unless the kubelet claimed another), allocated the same way and
from the same tally, so that the process can listen on exactly the pod's IP on this machine (any
127/8 address binds on Linux); such an address lies outside the node's podCIDR. Each node
is registered as a Node object whose status a real kubelet would report: Ready, no pressure, a
``pods`` capacity of ``max_pods`` (110, the kubelet's default ``--max-pods``), and machine,
system and boot ids derived from its name, so they are the same on every run.

:class:`ClusterView` is what a decision may know about other pods: how many hold each node and
which pod IPs are taken on it. The shell keeps that tally up to date per pod event and passes
only the nodes themselves when a decision does not need it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from api.objects import Json
from devtools.cluster.controllers.kubelet.config import KubeletConfig

__all__ = [
    "LOOPBACK_POD_NETWORK",
    "POD_NETWORK",
    "ClusterView",
    "NodeInfo",
    "allocate_pod_ip",
    "digest",
    "node_ip",
    "node_name",
    "node_object",
    "node_pod_cidr",
    "node_status",
    "nodes_for",
]


POD_NETWORK = "10.244"  # the first two octets of every node's pod CIDR, as with kind
LOOPBACK_POD_NETWORK = "127.244"  # for pods whose process runs here, unless another is claimed


@dataclass(frozen=True)
class NodeInfo:
    name: str
    index: int
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def ip(self) -> str:
        return node_ip(self.index)


@dataclass(frozen=True)
class ClusterView:
    """The part of the cluster the scheduler and IP allocator need."""

    nodes: tuple[NodeInfo, ...]
    pods_per_node: Mapping[str, int] = field(default_factory=dict)
    ips_in_use: Mapping[str, frozenset[str]] = field(default_factory=dict)
    max_pods: int = 110

    def node(self, name: str) -> NodeInfo | None:
        return next((node for node in self.nodes if node.name == name), None)


def node_name(config: KubeletConfig, index: int) -> str:
    return f"{config.node_prefix}{index}"


def node_ip(index: int) -> str:
    return f"172.18.0.{index + 2}"


def node_pod_cidr(index: int) -> str:
    return f"{POD_NETWORK}.{index}.0/24"


def allocate_pod_ip(
    node_index: int, in_use: frozenset[str], network: str = POD_NETWORK
) -> str | None:
    """The lowest free address of the node's /24 of ``network`` (the first two octets: the pod
    network, or a loopback one for pods whose process runs here); .1 is the node's bridge, as
    with kindnet."""
    for host in range(2, 255):
        candidate = f"{network}.{node_index}.{host}"
        if candidate not in in_use:
            return candidate
    return None


def nodes_for(config: KubeletConfig) -> tuple[NodeInfo, ...]:
    """The nodes the config asks for, labelled as a kubelet labels its own Node."""
    return tuple(
        NodeInfo(
            node_name(config, index),
            index,
            {
                "kubernetes.io/hostname": node_name(config, index),
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        )
        for index in range(config.nodes)
    )


def digest(*parts: object) -> str:
    """A stable hex id for the simulated things that have one (machines, images, containers)."""
    return hashlib.sha256(":".join(str(part) for part in parts).encode()).hexdigest()


def node_object(node: NodeInfo) -> Json:
    """The Node a kubelet registers for itself (its status follows through the subresource)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": dict(node.labels)},
        "spec": {"podCIDR": node_pod_cidr(node.index), "podCIDRs": [node_pod_cidr(node.index)]},
    }


def node_status(node: NodeInfo, *, max_pods: int, now: str) -> Json:
    """The status a healthy kubelet reports for its node at ``now``."""

    def condition(kind: str, status: str, reason: str, message: str) -> Json:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    resources = {
        "cpu": "8",
        "memory": "32Gi",
        "pods": str(max_pods),
        "ephemeral-storage": "100Gi",
    }
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": node.ip},
            {"type": "Hostname", "address": node.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "sandbus devcluster",
            "kernelVersion": "6.0.0",
            "containerRuntimeVersion": "containerd://simulated",
            "kubeletVersion": "v1.31.0",
            "kubeProxyVersion": "v1.31.0",
            "machineID": digest("machine", node.name)[:32],
            "systemUUID": digest("system", node.name)[:32],
            "bootID": digest("boot", node.name)[:32],
        },
    }
