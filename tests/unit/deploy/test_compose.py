"""compose.yaml is valid and runs only commands that exist, with the files it mounts.

There is no Docker engine here, so compose itself cannot run. These tests check the file against the
Compose Specification's JSON Schema, and check every command of the sandbus image with the real
`sandbus` argument parser.
"""

from __future__ import annotations

import json
import shlex
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest

from services.cli import build_parser
from services.cli.run import SERVICES
from tests.unit.deploy.manifests import (
    BASE,
    REPO,
    compose,
    compose_script,
    entrypoint,
    example_password_variables,
    final_stage_copies,
    interpolate,
    password_variable,
    provision_script,
    render,
)

SERVICES_DOC = compose()["services"]


def _built_from_our_dockerfile(service: dict[str, Any]) -> bool:
    build = service.get("build")
    return isinstance(build, dict) and build.get("dockerfile") == "deploy/Dockerfile"


SANDBUS_SERVICES = {
    name: service for name, service in SERVICES_DOC.items() if _built_from_our_dockerfile(service)
}


def test_compose_follows_the_compose_specification() -> None:
    pytest.importorskip("check_jsonschema", reason="the Compose schema comes with check-jsonschema")
    schema = json.loads(
        files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    )
    validator = jsonschema.validators.validator_for(schema)(schema)

    errors = [f"{list(error.path)}: {error.message}" for error in validator.iter_errors(compose())]

    assert errors == []


def test_depends_on_names_services_and_conditions_they_can_meet() -> None:
    for name, service in SERVICES_DOC.items():
        for target, condition in service.get("depends_on", {}).items():
            assert target in SERVICES_DOC, f"{name} depends on unknown {target}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES_DOC[target], f"{target} has no healthcheck"
            if condition["condition"] == "service_completed_successfully":
                assert SERVICES_DOC[target].get("restart") == "no", f"{target} never completes"


def test_every_mount_exists() -> None:
    declared = set(compose().get("volumes", {}))
    for name, service in SERVICES_DOC.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (REPO / source).is_file(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_every_sandbus_command_is_one_the_cli_accepts() -> None:
    assert entrypoint() == ["sandbus"]
    parser = build_parser()
    checked = 0
    for name, service in SANDBUS_SERVICES.items():
        if "entrypoint" in service or service.get("profiles"):
            # provision-bus runs Python (tested below); profiled workers wait for registration.
            continue
        command = service["command"]
        try:
            parser.parse_args(command)
        except SystemExit:
            pytest.fail(f"compose service {name}: `sandbus {shlex.join(command)}` is rejected")
        checked += 1
    assert checked >= 2


def test_profiled_workers_are_exactly_the_unregistered_ones() -> None:
    for name, service in SANDBUS_SERVICES.items():
        command = service.get("command") or []
        if command[:1] == ["run"]:
            assert name == command[1]
            assert bool(service.get("profiles")) == (command[1] not in SERVICES), name


def test_provisioning_is_the_same_code_as_in_kubernetes() -> None:
    script = compose_script(SERVICES_DOC["provision-bus"])

    assert script == provision_script(render(BASE))
    compile(script, "provision-bus", "exec")


def test_each_service_connects_to_nats_as_itself() -> None:
    passwords = {variable: f"pw-{variable}" for variable in example_password_variables()}
    checked = 0
    for name, service in SANDBUS_SERVICES.items():
        template = service.get("environment", {}).get("SANDBUS_NATS_URL")
        if template is None:
            continue
        url = urlsplit(interpolate(template, passwords))
        user = "provisioner" if name == "provision-bus" else name
        assert (url.username, url.password) == (user, passwords[password_variable(user)]), name
        assert (url.hostname, url.port) == ("nats", 4222), name
        assert "nats" in SERVICES_DOC
        with pytest.raises(KeyError):
            interpolate(template, {})  # compose refuses to start without the password
        checked += 1
    assert checked == len(SANDBUS_SERVICES) - 1  # all but the development cluster


def test_services_reach_the_development_cluster_by_its_service_name() -> None:
    """The development cluster writes the services' kubeconfig itself (``--advertise-host``
    with its service name) into its volume, which the services mount read-only: no
    kubeconfig is written by hand."""
    devcluster = build_parser().parse_args(SERVICES_DOC["devcluster"]["command"])
    assert devcluster.host == "0.0.0.0"
    assert devcluster.advertise_host == "devcluster"
    (volume,) = SERVICES_DOC["devcluster"]["volumes"]
    name, directory = volume.split(":")[:2]
    assert devcluster.kubeconfig.parent == Path(directory)
    checked = 0
    for service_name, service in SANDBUS_SERVICES.items():
        kubeconfig = service.get("environment", {}).get("KUBECONFIG")
        if kubeconfig is None:
            continue
        assert kubeconfig == str(devcluster.kubeconfig), service_name
        assert f"{name}:{directory}:ro" in service["volumes"], service_name
        checked += 1
    assert checked == len(SANDBUS_SERVICES) - 2  # all but the cluster and the provisioner


def test_the_development_cluster_finds_the_crds_in_the_image() -> None:
    devcluster = build_parser().parse_args(SERVICES_DOC["devcluster"]["command"])

    assert [str(path) for path in devcluster.crds] == [final_stage_copies()["deploy/crds"]]


def test_nats_reads_the_same_config_as_in_kubernetes() -> None:
    nats = SERVICES_DOC["nats"]
    command = nats["command"]
    config_path = command[command.index("--config") + 1]

    assert f"./deploy/base/nats/nats.conf:{config_path}:ro" in nats["volumes"]
    assert nats["image"].startswith("nats:2.15.1")
