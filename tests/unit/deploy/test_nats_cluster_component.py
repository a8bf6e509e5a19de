"""deploy/components/nats-cluster: the replicated bus, rendered with kubectl's kustomize and its
configuration checked by the real nats-server (``-t``, which parses and starts nothing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from devtools.natsd import find_nats_server
from tests.unit.deploy.manifests import (
    DEPLOY,
    enable_components,
    env_of,
    example_password_variables,
    of_kind,
    render_uncached,
)


def rendered(tmp_path: Path) -> list[dict[str, object]]:
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    enable_components(copy, ["pool", "claim", "snapshot", "nats-cluster"])
    return render_uncached(copy / "base")


def test_three_servers_a_quorum_budget_and_three_replicas(tmp_path: Path) -> None:
    docs = rendered(tmp_path)
    nats = of_kind(docs, "StatefulSet")["sandbus-nats"]
    assert nats["spec"]["replicas"] == 3
    (container,) = nats["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert {"name": "cluster", "containerPort": 6222} in container["ports"]
    budget = of_kind(docs, "PodDisruptionBudget")["sandbus-nats"]
    assert budget["spec"]["minAvailable"] == 2
    headless = of_kind(docs, "Service")["sandbus-nats-headless"]
    assert any(port["port"] == 6222 for port in headless["spec"]["ports"])
    watcher = of_kind(docs, "Deployment")["sandbus-watcher"]
    (provisioner,) = watcher["spec"]["template"]["spec"]["initContainers"]
    assert env_of(provisioner)["SANDBUS_BUS_REPLICAS"]["value"] == "3"


def test_the_server_accepts_the_clustered_configuration(tmp_path: Path) -> None:
    (config,) = (d for d in rendered(tmp_path) if d.get("kind") == "ConfigMap")
    files = tmp_path / "etc-nats"
    files.mkdir()
    data = config["data"]
    assert "routes" in data["cluster.conf"]
    for name, text in data.items():
        (files / name).write_text(text)
    passwords = {variable: "pw1" for variable in example_password_variables()}
    result = subprocess.run(
        [find_nats_server(), "-t", "-c", str(files / "nats.conf")],
        env={**os.environ, **passwords, "POD_NAME": "sandbus-nats-0"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_base_stays_one_server() -> None:
    """The base's cluster.conf holds comments only: one server, no routes."""
    text = (DEPLOY / "base" / "nats" / "cluster.conf").read_text()
    assert all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())
