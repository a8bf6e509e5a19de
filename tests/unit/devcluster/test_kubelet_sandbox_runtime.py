"""The simulated kubelet's decisions about the Pods that ask for agent-sandbox's runtime
(devtools/sandboxruntime), without a server or a process: which Pods those are (the quick-start
template's python-runtime image, or the annotation), that they get a loopback IP and a process
of the agent-sandbox kind on 8888, that the task executor's rule wins over it, and that turning
the runtime off simulates them as before. The driver of test_kubelet_plan plays the API server.
"""

from __future__ import annotations

import dataclasses

import pytest

from devtools.cluster.controllers.kubelet.executor import (
    AGENT_SANDBOX,
    SANDBOX_RUNTIME_PORT,
    TASK_EXECUTOR,
    ExecutorState,
    WantedExecutor,
    container_env,
    process_command,
    process_port,
    runtime_of,
    wanted_executor,
)
from tests.support.samples import is_ready
from tests.unit.devcluster.kubelet import CONFIG, Driver, make_pod

QUICKSTART_IMAGE = (
    "us-central1-docker.pkg.dev/k8s-staging-images/agent-sandbox/python-runtime-sandbox:latest-main"
)
RUNTIMES = dataclasses.replace(CONFIG, task_executor_network="127.251")
RUNTIME_OFF = dataclasses.replace(RUNTIMES, sandbox_runtime_command=None)


def quickstart_pod(name: str = "p") -> dict[str, object]:
    return make_pod(name, containers=[{"name": "python-runtime", "image": QUICKSTART_IMAGE}])


@pytest.mark.parametrize(
    ("image", "annotation", "expected"),
    [
        (QUICKSTART_IMAGE, None, (AGENT_SANDBOX, "c")),
        ("python-runtime-sandbox", None, (AGENT_SANDBOX, "c")),
        ("registry.local:5000/python-runtime-sandbox@sha256:abc", None, (AGENT_SANDBOX, "c")),
        ("registry.example.com/sandboxes/python-runtime:3.12", None, None),
        ("python-runtime-sandbox-fork:1", None, None),
        ("nginx:1.25", "agent-sandbox", (AGENT_SANDBOX, "c")),
        ("nginx:1.25", "agent-sandbox/c", (AGENT_SANDBOX, "c")),
        ("nginx:1.25", "agent-sandbox/missing", None),
        ("nginx:1.25", "something-else", None),
    ],
)
def test_which_pods_ask_for_the_runtime(
    image: str, annotation: str | None, expected: tuple[str, str] | None
) -> None:
    annotations = {} if annotation is None else {"devcluster.sandbus.io/runtime": annotation}
    pod = make_pod(annotations=annotations, containers=[{"name": "c", "image": image}])
    assert runtime_of(pod) == expected


def test_the_task_executor_rule_wins() -> None:
    pod = make_pod(
        containers=[
            {"name": "python-runtime", "image": QUICKSTART_IMAGE},
            {"name": "task-executor", "image": "opensandbox/task-executor:v0.4.0"},
        ]
    )
    assert runtime_of(pod) == (TASK_EXECUTOR, "task-executor")


def test_how_each_kind_is_run() -> None:
    assert process_port(AGENT_SANDBOX) == SANDBOX_RUNTIME_PORT == 8888
    assert process_port(TASK_EXECUTOR) == 5758
    command = process_command(RUNTIMES, AGENT_SANDBOX)
    assert command is not None and "devtools.sandboxruntime" in command
    assert process_command(RUNTIME_OFF, AGENT_SANDBOX) is None


def test_a_runtime_pod_gets_a_loopback_ip_and_is_ready_once_the_runtime_answers() -> None:
    driver = Driver(quickstart_pod(), RUNTIMES)
    driver.run_until(lambda p: p["status"].get("phase") == "Running")
    assert driver.pod["status"]["podIP"].startswith("127.251.")
    wanted = wanted_executor(driver.pod, driver.stage(), RUNTIMES)
    assert wanted is not None
    assert (wanted.kind, wanted.container, wanted.host) == (
        AGENT_SANDBOX,
        "python-runtime",
        driver.pod["status"]["podIP"],
    )
    # Running, but the runtime has not answered GET / yet: not Ready, however long it waits.
    driver.executor = ExecutorState(wanted.container_id)
    for _ in range(5):
        driver.step()
    assert not is_ready(driver.pod)
    driver.executor = ExecutorState(wanted.container_id, healthy=True)
    driver.run_until(is_ready)


def test_with_the_runtime_off_the_pod_is_simulated_as_before() -> None:
    driver = Driver(quickstart_pod(), RUNTIME_OFF)
    driver.run_until(is_ready)
    assert driver.pod["status"]["podIP"].startswith("10.244.")
    assert wanted_executor(driver.pod, driver.stage(), RUNTIME_OFF) is None
    assert WantedExecutor("c", "id", "h").kind == TASK_EXECUTOR  # the default, as before


def test_the_runtime_gets_the_containers_literal_env() -> None:
    pod = make_pod(
        containers=[
            {
                "name": "python-runtime",
                "image": QUICKSTART_IMAGE,
                "env": [
                    {"name": "GREETING", "value": "hi"},
                    {"name": "EMPTY"},
                    {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                ],
            }
        ]
    )
    assert container_env(pod, "python-runtime") == (("GREETING", "hi"), ("EMPTY", ""))
