"""Which keys a change wakes, and the name hash the keys are found by."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from api.keys import name_hash
from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.sandbox.worker import wakes
from tests.unit.sandbox.samples import owned_pod, owner_ref, pod, pvc, sandbox, service


def woken(kind: str, obj: dict[str, Any], *known: dict[str, Any]) -> list[ObjectKey]:
    cache = ObjectCache()
    for item in known:
        cache.observe("added", item)
    return list(wakes(kind, obj, cache))


SB = ObjectKey("Sandbox", "default", "sb")


def test_a_sandbox_wakes_itself() -> None:
    assert woken("Sandbox", sandbox()) == [SB]


def test_children_wake_the_sandbox_that_controls_them() -> None:
    assert woken("Pod", owned_pod("warm-3")) == [SB]
    assert woken("Service", service(owner=owner_ref())) == [SB]
    assert woken("PersistentVolumeClaim", pvc("data-sb", owner=owner_ref())) == [SB]


def test_an_unowned_pod_wakes_the_sandbox_it_is_named_after_if_there_is_one() -> None:
    assert woken("Pod", pod(), sandbox()) == [SB]
    assert woken("Pod", pod("stranger")) == []


def test_a_pod_of_another_controller_wakes_no_sandbox_by_owner() -> None:
    foreign = pod("x", owner=owner_ref(uid="u", name="rs", kind="ReplicaSet"))
    assert woken("Pod", foreign) == []


def test_network_policies_wake_their_template() -> None:
    np = {
        "kind": "NetworkPolicy",
        "metadata": {"name": "python-network-policy", "namespace": "default"},
    }
    assert woken("NetworkPolicy", np) == [ObjectKey("SandboxTemplate", "default", "python")]
    np["metadata"]["ownerReferences"] = [  # type: ignore[index]
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxTemplate",
            "name": "python",
            "uid": "u",
            "controller": True,
        }
    ]
    assert woken("NetworkPolicy", np) == [ObjectKey("SandboxTemplate", "default", "python")]


def fnv1a_32(text: str) -> int:
    """An independent FNV-1a: the offset basis and prime from the FNV specification."""
    value = 2166136261
    for byte in text.encode():
        value ^= byte
        value = (value * 16777619) % 2**32
    return value


def test_name_hash_known_answers() -> None:
    """Upstream TestNameHash_Correctness, fixed part: FNV-1a 32 as ``%08x``."""
    assert name_hash("") == "811c9dc5"
    assert name_hash("a") == "e40c292c"
    assert name_hash("foobar") == "bf9cf968"


@given(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True))
def test_name_hash_of_dns_labels(label: str) -> None:
    """Upstream TestNameHash_Correctness, random part: any DNS label hashes to 8 lower-case hex
    digits, zero-padded, equal to FNV-1a."""
    hashed = name_hash(label)
    assert len(hashed) == 8 and hashed == hashed.lower()
    assert int(hashed, 16) == fnv1a_32(label)
