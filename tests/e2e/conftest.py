"""What the end-to-end tests share: a real Kubernetes, where a Docker engine answers.

``k3s_kubeconfig`` starts testcontainers' K3s container (one per session: it takes half a minute
to start) and yields the path of a kubeconfig for it. K3s is a whole Kubernetes (API server,
scheduler, kubelet, containerd) in one privileged container. Where no Docker engine answers, a
test that asks for it is skipped with the reason ("no Docker engine: ..."). The engine is asked
once per session, through testcontainers' own client (DOCKER_HOST, the Docker context,
``~/.testcontainers.properties``), with every call bounded by :data:`DOCKER_PING_TIMEOUT`. So a
machine without a socket skips at once, and one whose engine does not answer skips within that
bound instead of hanging.

``SANDBUS_TEST_K3S_IMAGE`` picks another K3s release; the default is the Kubernetes minor
version the development cluster reports, so both stand for the same API.

``sandbus_up`` runs `sandbus up --dir TMP/state` as a user runs it, stopped with SIGTERM (and
checked to exit 0) after the test (tests/e2e/test_up.py, tests/e2e/claim/test_sdk.py); its
output goes to ``TMP/up.log`` and its process id to ``TMP/up.pid``.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.up import SANDBUS, wait_for_file

DOCKER_PING_TIMEOUT = 3
"""Seconds the Docker engine has to answer before the K3s tests are skipped."""
K3S_IMAGE = os.environ.get("SANDBUS_TEST_K3S_IMAGE", "rancher/k3s:v1.33.1-k3s1")


@functools.cache
def docker_engine_missing() -> str | None:
    """Why no Docker engine can be used, or None when one answers."""
    try:
        # Imported here: the docker client is only needed where an engine may answer.
        from testcontainers.core.docker_client import DockerClient

        DockerClient(timeout=DOCKER_PING_TIMEOUT).client.ping()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


@pytest.fixture(scope="session")
def k3s_kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig for a K3s cluster in a container, for the whole session."""
    missing = docker_engine_missing()
    if missing is not None:
        pytest.skip(f"no Docker engine: {missing}")
    from testcontainers.community.k3s import K3SContainer

    with K3SContainer(image=K3S_IMAGE) as container:
        path = tmp_path_factory.mktemp("k3s") / "kubeconfig"
        path.write_text(container.config_yaml())
        yield path


@pytest.fixture
def sandbus_up(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """`sandbus up --dir state` until it is ready; with indirect parametrization, further
    arguments."""
    arguments: list[str] = getattr(request, "param", [])
    state = tmp_path / "state"
    log = (tmp_path / "up.log").open("wb")
    environment = {k: v for k, v in os.environ.items() if k != "SANDBUS_METRICS_ADDRESS"}
    process = subprocess.Popen(
        [SANDBUS, "up", "--dir", str(state), *arguments],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env=environment,  # every endpoint on a free port, named in state/endpoints.json
    )
    (tmp_path / "up.pid").write_text(str(process.pid))
    try:
        wait_for_file(state / "nats-url", process, timeout=60)
        yield state
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, (tmp_path / "up.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
