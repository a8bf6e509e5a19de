"""The deployment runs exactly the services `sandbus run` knows: no crash-loop, nothing left out.

The rule is :func:`coverage_problems`. The first tests hold it to its meaning with made-up
registries, because today's registry only shows one moment. The last test applies it to the real
registry and the real files. It stays green as services are added, as long as each arrives with its
Deployment, RBAC and NATS user.
"""

from __future__ import annotations

from typing import Any

from services.cli.run import SERVICES
from tests.unit.deploy.manifests import (
    BASE,
    components,
    compose,
    coverage_problems,
    nats_users,
    rbac_subjects,
    render,
    services_deployed,
)

WORKERS = {"sandbox", "pool", "claim", "snapshot"}
ALL = {"watcher", *WORKERS}


def _problems(**overrides: Any) -> list[str]:
    arguments: dict[str, Any] = {
        "registered": {"watcher", "sandbox"},
        "deployed_in_base": {"watcher", "sandbox"},
        "with_component": {"pool", "claim", "snapshot"},
        "with_rbac": ALL,
        "with_nats_user": ALL | {"provisioner", "reader"},
        "started_by_compose": {"watcher", "sandbox"},
    }
    arguments.update(overrides)
    return coverage_problems(**arguments)


def test_a_consistent_deployment_has_no_problems() -> None:
    assert _problems() == []


def test_a_deployment_of_an_unregistered_service_is_a_problem() -> None:
    assert _problems(registered={"watcher"}) == [
        "deploy/base runs `sandbus run sandbox`, which is not registered",
        "compose.yaml starts `sandbus run sandbox` by default, which is not registered",
    ]


def test_a_registered_service_left_in_its_component_is_a_problem() -> None:
    problems = _problems(registered={"watcher", "sandbox", "pool"})

    assert problems == [
        "pool is registered but has no Deployment in deploy/base "
        "(enable ../components/pool in deploy/base)",
        "pool is registered but compose.yaml does not start it by default",
    ]


def test_a_registered_service_needs_rbac_and_a_nats_user() -> None:
    problems = _problems(with_rbac=ALL - {"sandbox"}, with_nats_user={"watcher"})

    assert "sandbox is registered but has no ServiceAccount with a ClusterRole" in problems
    assert "sandbox is registered but nats.conf has no user sandbox" in problems


def test_rbac_for_a_service_that_is_deployed_nowhere_is_a_problem() -> None:
    assert _problems(with_component={"pool", "claim"}) == [
        "snapshot has RBAC but neither a Deployment in base nor a component"
    ]


def _started_by_compose() -> set[str]:
    started = set()
    for service in compose()["services"].values():
        command = service.get("command") or []
        if command[:1] == ["run"] and not service.get("profiles"):
            started.add(command[1])
    return started


def test_the_real_deployment_matches_the_service_registry() -> None:
    docs = render(BASE)
    accounts_with_roles = {
        account.removeprefix("sandbus-")
        for account, roles in rbac_subjects(docs).items()
        if account in roles  # its own ClusterRole, named like the account
    }

    problems = coverage_problems(
        registered=SERVICES,
        deployed_in_base=services_deployed(docs),
        with_component=components(),
        with_rbac=accounts_with_roles,
        with_nats_user=nats_users(),
        started_by_compose=_started_by_compose(),
    )

    assert problems == []
