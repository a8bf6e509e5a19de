"""The scheduler's view (pods and IPs per node) is kept up to date per pod event instead of being
recounted from the pod cache for every decision. Whatever the events, it equals the recount: the
cached pods holding a node (their own or a reserved one) and not finished, their IPs, plus the
IPs reserved but not yet visible."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.objects import Json
from devtools.cluster.controllers.informer import NamespacedName, namespaced_name
from devtools.cluster.controllers.kubelet.actions import BindPod
from devtools.cluster.controllers.kubelet.config import KubeletConfig
from devtools.cluster.controllers.kubelet.nodes import ClusterView
from devtools.cluster.controllers.kubelet.shell import Kubelet

NODES = ("n0", "n1")


class FakeInformer:
    """The informer's contract: the cache is updated, then the handler sees the change."""

    def __init__(self, kubelet: Kubelet) -> None:
        self.cache: dict[NamespacedName, Json] = {}
        self.kubelet = kubelet

    def get(self, key: NamespacedName) -> Json | None:
        return self.cache.get(key)

    def put(self, pod: Json) -> None:
        key = namespaced_name(pod)
        old = self.cache.get(key)
        self.cache[key] = pod
        self.kubelet._on_pod("ADDED" if old is None else "MODIFIED", pod, old)

    def delete(self, key: NamespacedName) -> None:
        old = self.cache.pop(key, None)
        if old is not None:
            self.kubelet._on_pod("DELETED", old, old)


def recount(kubelet: Kubelet, cache: dict[NamespacedName, Json]) -> ClusterView:
    counts: dict[str, int] = {}
    ips: dict[str, set[str]] = {}
    for pod in cache.values():
        uid = pod["metadata"]["uid"]
        node = pod["spec"].get("nodeName") or kubelet._reserved_nodes.get(uid)
        if not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        counts[node] = counts.get(node, 0) + 1
        if pod["status"].get("podIP"):
            ips.setdefault(node, set()).add(pod["status"]["podIP"])
    for node, ip in kubelet._reserved_ips.values():
        ips.setdefault(node, set()).add(ip)
    return ClusterView(kubelet.nodes, counts, {n: frozenset(v) for n, v in ips.items()})


pod_state = st.fixed_dictionaries(
    {
        "name": st.sampled_from(("a", "b", "c")),
        "incarnation": st.sampled_from((1, 2)),  # a name comes back with a new uid
        "node": st.sampled_from(("", *NODES)),
        "ip": st.sampled_from(("", "10.0.0.1", "10.0.0.2")),
        "phase": st.sampled_from(("Pending", "Running", "Succeeded")),
    }
)
step = st.one_of(
    st.tuples(st.just("put"), pod_state),
    st.tuples(st.just("delete"), st.sampled_from(("a", "b", "c"))),
    st.tuples(st.just("bind"), st.sampled_from(("a", "b", "c")), st.sampled_from(NODES)),
    st.tuples(st.just("reserve-ip"), st.sampled_from(("a", "b", "c")), st.just("10.0.0.3")),
)


def _pod(state: Json) -> Json:
    spec = {"nodeName": state["node"]} if state["node"] else {}
    status: Json = {"phase": state["phase"]}
    if state["ip"]:
        status["podIP"] = state["ip"]
    return {
        "metadata": {
            "name": state["name"],
            "namespace": "default",
            "uid": f"{state['name']}-{state['incarnation']}",
        },
        "spec": spec,
        "status": status,
    }


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(step, max_size=30))
def test_the_tally_always_equals_a_recount_of_the_cache(steps: list[tuple[Any, ...]]) -> None:
    kubelet = Kubelet("http://127.0.0.1:1", KubeletConfig(nodes=len(NODES)))
    informer = FakeInformer(kubelet)
    kubelet._pods = informer  # type: ignore[assignment]
    for action, *args in steps:
        if action == "put":
            informer.put(_pod(args[0]))
        elif action == "delete":
            informer.delete(("default", args[0]))
        else:
            cached = informer.get(("default", args[0]))
            if cached is None:
                continue
            if action == "bind":
                kubelet._reserve(cached, BindPod(args[1]))
            else:
                node = cached["spec"].get("nodeName") or NODES[0]
                kubelet._reserved_ips[cached["metadata"]["uid"]] = (node, args[1])
        assert kubelet.cluster_view() == recount(kubelet, informer.cache)
