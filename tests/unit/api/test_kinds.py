"""The registry of the seven kinds and its lookups."""

from __future__ import annotations

import pytest

from api import agents, opensandbox
from api.kinds import ALL_KINDS, kind_for, kind_for_resource
from api.meta import Resource


def test_all_seven_kinds_are_listed_once() -> None:
    assert {kind.__name__ for kind in ALL_KINDS} == {
        "Sandbox",
        "SandboxTemplate",
        "SandboxClaim",
        "SandboxWarmPool",
        "Pool",
        "BatchSandbox",
        "SandboxSnapshot",
    }
    assert len(ALL_KINDS) == 7
    assert len({kind.KIND.crd_name for kind in ALL_KINDS}) == 7


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda kind: kind.__name__)
def test_every_kind_is_found_by_api_version_and_kind_and_by_rest_path(
    kind: type[Resource],
) -> None:
    info = kind.KIND

    assert kind_for(info.api_version, info.kind) is kind
    assert kind_for_resource(info.group, info.version, info.plural) is kind


def test_lookups_of_what_we_do_not_serve_return_none() -> None:
    assert kind_for("agents.x-k8s.io/v1alpha1", "Sandbox") is None
    assert kind_for("v1", "Pod") is None
    assert kind_for_resource("agents.x-k8s.io", "v1beta1", "sandbox") is None


def test_groups_and_versions() -> None:
    assert agents.Sandbox.KIND.api_version == "agents.x-k8s.io/v1beta1"
    assert agents.SandboxClaim.KIND.api_version == "extensions.agents.x-k8s.io/v1beta1"
    assert opensandbox.Pool.KIND.api_version == "sandbox.opensandbox.io/v1alpha1"
