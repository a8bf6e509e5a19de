"""The simulated kubelet's decisions about the Pods that run OpenSandbox's task executor, without
a server or a process: which Pods those are, the loopback IPs they get, which process the shell
should run for them, and the planner's part (Ready only once the process answered ``/health``,
a process that died as its container's crash, deletion only once it is gone). The driver of
test_kubelet_plan plays the API server; its ``executor`` plays what the shell saw.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from api.objects import Json
from devtools.cluster.controllers.kubelet.actions import DeletePod, PatchStatus
from devtools.cluster.controllers.kubelet.config import DEFAULT_TASK_EXECUTOR_COMMAND, KubeletConfig
from devtools.cluster.controllers.kubelet.executor import (
    ExecutorState,
    WantedExecutor,
    container_exit_code,
    current_state,
    executor_argv,
    executor_container,
    runs_task_executor,
    wanted_executor,
)
from devtools.cluster.controllers.kubelet.nodes import allocate_pod_ip
from devtools.cluster.controllers.kubelet.stages import observe_stage, plan_pod
from tests.support.samples import is_ready
from tests.unit.devcluster.kubelet import CONFIG, VIEW, Driver, make_pod

# OpenSandbox's samples: a Pool whose sandbox container runs the executor as its command (after
# an init container copied it in), and a BatchSandbox with it as a sidecar given only flags.
POOL_CONTAINERS = [
    {
        "name": "sandbox",
        "image": "python:3.12-slim",
        "command": ["/opt/opensandbox/bin/task-executor", "-listen-addr=0.0.0.0:5758"],
    }
]
POOL_INIT = [
    {
        "name": "install-task-executor",
        "image": "registry.example.com/opensandbox/task-executor:v0.4.0",
        "command": ["cp", "/usr/local/bin/task-executor", "/opt/opensandbox/bin/task-executor"],
    }
]
SIDECAR_CONTAINERS = [
    {"name": "main", "image": "python:3.12-slim"},
    {
        "name": "task-executor",
        "image": "registry.example.com/opensandbox/task-executor:v0.4.0",
        "args": ["-listen-addr=0.0.0.0:5758"],
    },
]
EXECUTORS = dataclasses.replace(CONFIG, task_executor_network="127.250")
CONFIG_OFF = dataclasses.replace(CONFIG, task_executor_command=None)


def executor_pod(name: str = "p", **spec: Any) -> Json:
    spec.setdefault("containers", copy.deepcopy(SIDECAR_CONTAINERS))
    return make_pod(name, **spec)


def status_of(pod: Json, name: str) -> Json:
    found: Json = next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)
    return found


def running(driver: Driver, container: str = "task-executor") -> str:
    """Run the pod up to its containers running; the executor container's id."""
    driver.run_until(lambda p: p["status"].get("phase") == "Running")
    return str(status_of(driver.pod, container)["containerID"])


# ----------------------------------------------------------------------------- which pods


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        (POOL_CONTAINERS, "sandbox"),  # named in the command
        (SIDECAR_CONTAINERS, "task-executor"),  # the container's name, its args only flags
        ([{"name": "c", "image": "x", "args": ["exec /bin/task-executor -v"]}], "c"),  # args
        ([{"name": "web", "image": "nginx:1.25"}], None),
        ([{"name": "web", "image": "task-executor:1", "command": ["nginx"]}], None),  # image
    ],
)
def test_the_rule_names_the_container_that_runs_the_executor(
    containers: list[Json], expected: str | None
) -> None:
    pod = make_pod(containers=copy.deepcopy(containers))
    assert executor_container(pod) == expected
    assert runs_task_executor(pod) is (expected is not None)


def test_an_init_container_that_installs_the_executor_does_not_count() -> None:
    pod = make_pod(
        initContainers=copy.deepcopy(POOL_INIT), containers=[{"name": "web", "image": "nginx"}]
    )
    assert executor_container(pod) is None
    pool = make_pod(initContainers=copy.deepcopy(POOL_INIT), containers=POOL_CONTAINERS)
    assert executor_container(pool) == "sandbox"


# ----------------------------------------------------------------------------- loopback IPs


def test_loopback_ips_are_allocated_like_the_others() -> None:
    assert allocate_pod_ip(0, frozenset()) == "10.244.0.2"  # the default stays the pod network
    assert allocate_pod_ip(0, frozenset(), "127.244") == "127.244.0.2"
    assert allocate_pod_ip(1, frozenset(), "127.244") == "127.244.1.2"
    taken = frozenset({"127.244.0.2", "127.244.0.3", "10.244.0.4"})
    assert allocate_pod_ip(0, taken, "127.244") == "127.244.0.4"
    full = frozenset(f"127.244.0.{host}" for host in range(2, 255))
    assert allocate_pod_ip(0, full, "127.244") is None


def test_an_executor_pod_gets_a_loopback_ip_and_the_others_keep_theirs() -> None:
    driver = Driver(executor_pod(), EXECUTORS)
    running(driver)
    assert driver.pod["status"]["podIP"] == "127.250.0.2"
    assert driver.pod["status"]["podIPs"] == [{"ip": "127.250.0.2"}]

    taken = dataclasses.replace(VIEW, ips_in_use={"devcluster-node-0": frozenset({"127.250.0.2"})})
    second = Driver(executor_pod("q"), EXECUTORS, taken)
    running(second)
    assert second.pod["status"]["podIP"] == "127.250.0.3"  # never the same as another pod's

    plain = Driver(make_pod(), EXECUTORS)
    plain.run_until(lambda p: p["status"].get("phase") == "Running")
    assert plain.pod["status"]["podIP"] == "10.244.0.2"

    off = Driver(executor_pod(), dataclasses.replace(CONFIG, task_executor_command=None))
    off.run_until(is_ready)  # simulated as before: no process to wait for
    assert off.pod["status"]["podIP"] == "10.244.0.2"


def test_without_a_claimed_network_the_documented_one_is_used() -> None:
    driver = Driver(executor_pod(), CONFIG)
    running(driver)
    assert driver.pod["status"]["podIP"] == "127.244.0.2"


@pytest.mark.parametrize("network", ["10.244", "127", "127.1.2", "127.300", "127.x"])
def test_the_network_must_be_a_loopback_slash_16(network: str) -> None:
    with pytest.raises(ValueError, match="task_executor_network"):
        KubeletConfig(task_executor_network=network)


# ----------------------------------------------------------------------------- which process


def test_the_process_is_wanted_while_the_executor_container_runs() -> None:
    driver = Driver(executor_pod(), EXECUTORS)
    assert wanted_executor(driver.pod, driver.stage(), EXECUTORS) is None  # not even bound
    driver.run_until(lambda p: "containerStatuses" in p["status"])
    assert wanted_executor(driver.pod, driver.stage(), EXECUTORS) is None  # creating
    container_id = running(driver)
    wanted = wanted_executor(driver.pod, driver.stage(), EXECUTORS)
    assert wanted == WantedExecutor("task-executor", container_id, "127.250.0.2")
    assert wanted_executor(driver.pod, driver.stage(), CONFIG_OFF) is None

    deleting = copy.deepcopy(driver.pod)
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    assert wanted_executor(deleting, observe_stage(deleting, VIEW), EXECUTORS) is None

    # Its PID 1 ended (kill 1 through exec): no process until the kubelet starts it again.
    exited = copy.deepcopy(driver.pod)
    status_of(exited, "task-executor")["state"] = {"terminated": {"exitCode": 0}}
    assert wanted_executor(exited, observe_stage(exited, VIEW), EXECUTORS) is None
    # Another container's PID 1 ended: the executor's process runs on.
    other = copy.deepcopy(driver.pod)
    status_of(other, "main")["state"] = {"terminated": {"exitCode": 0}}
    assert observe_stage(other, VIEW) == "exited"
    assert wanted_executor(other, "exited", EXECUTORS) == wanted


def test_a_state_counts_only_for_the_container_instance_the_pod_shows() -> None:
    driver = Driver(executor_pod(), EXECUTORS)
    container_id = running(driver)
    state = ExecutorState(container_id, healthy=True)
    assert current_state(driver.pod, state) == state
    assert current_state(driver.pod, ExecutorState("containerd://older", healthy=True)) is None
    assert current_state(make_pod(), state) is None


def test_the_command_is_filled_in_and_exits_read_as_a_container_s() -> None:
    argv = executor_argv(DEFAULT_TASK_EXECUTOR_COMMAND, "127.244.0.2", 5758, "/tmp/d")
    assert argv[1:] == [
        "-m",
        "services.taskexecutor",
        "--host",
        "127.244.0.2",
        "--port",
        "5758",
        "--data-dir",
        "/tmp/d",
    ]
    assert executor_argv(("x", "--listen={host}:{port}", '{"a": 1}'), "h", 1, "d") == [
        "x",
        "--listen=h:1",
        '{"a": 1}',
    ]
    assert [container_exit_code(code) for code in (0, 3, -9, -15)] == [0, 3, 137, 143]
    # From a dict of options (the command line, JSON) the command may come as a list.
    listed: Any = ["a", "{port}"]
    assert KubeletConfig(task_executor_command=listed).task_executor_command == ("a", "{port}")


# ----------------------------------------------------------------------------- readiness


def test_ready_only_once_the_executor_answered() -> None:
    driver = Driver(executor_pod(), EXECUTORS)
    container_id = running(driver)
    started = driver.clock
    assert driver.step() == []  # the planner sees the running stage from here on
    for executor in (None, ExecutorState(container_id), ExecutorState("containerd://old", True)):
        decision = plan_pod(
            driver.pod, driver.memory, driver.at(), EXECUTORS, VIEW, executor=executor
        )
        # Not Ready, and no timer: the shell requeues the pod when /health answers.
        assert decision.actions == () and decision.wake_after is None
    driver.clock += 10 * EXECUTORS.pod_ready_delay
    assert driver.step() == [] and not is_ready(driver.pod)

    driver.executor = ExecutorState(container_id, healthy=True)
    (ready,) = driver.step()  # the ready delay is long past: Ready at once
    assert isinstance(ready, PatchStatus) and is_ready(driver.pod)
    assert driver.clock - started == pytest.approx(10 * EXECUTORS.pod_ready_delay)


def test_an_answer_before_the_ready_delay_waits_for_the_delay() -> None:
    driver = Driver(executor_pod(), EXECUTORS)
    container_id = running(driver)
    started = driver.clock
    driver.executor = ExecutorState(container_id, healthy=True)
    driver.run_until(is_ready)
    assert driver.clock - started == pytest.approx(EXECUTORS.pod_ready_delay)


def test_a_process_that_died_is_its_container_s_crash_then_a_restart() -> None:
    driver = Driver(executor_pod(), EXECUTORS)
    container_id = running(driver)
    driver.executor = ExecutorState(container_id, healthy=True)
    driver.run_until(is_ready)
    main_before = status_of(driver.pod, "main")

    driver.executor = ExecutorState(container_id, healthy=True, exit_code=137)  # SIGKILLed
    (crashed,) = driver.step()
    assert isinstance(crashed, PatchStatus)
    executor = status_of(driver.pod, "task-executor")
    assert executor["restartCount"] == 1 and executor["ready"] is False
    assert executor["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    terminated = executor["lastState"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")
    assert terminated["containerID"] == container_id
    assert status_of(driver.pod, "main") == main_before  # the other container runs on
    assert not is_ready(driver.pod)
    assert driver.stage() == "backoff:1"
    assert wanted_executor(driver.pod, driver.stage(), EXECUTORS) is None

    backing_off = driver.clock
    driver.run_until(lambda p: "running" in status_of(p, "task-executor")["state"])
    assert driver.clock - backing_off == pytest.approx(EXECUTORS.crash_backoff)
    restarted = status_of(driver.pod, "task-executor")
    assert restarted["containerID"] != container_id
    assert restarted["restartCount"] == 1 and restarted["lastState"]["terminated"] == terminated
    wanted = wanted_executor(driver.pod, driver.stage(), EXECUTORS)
    assert wanted is not None and wanted.container_id == restarted["containerID"]

    # The dead process's state is about the old instance: not Ready until the new one answers.
    driver.clock += 10
    assert driver.step() == [] and not is_ready(driver.pod)
    driver.executor = ExecutorState(restarted["containerID"], healthy=True)
    driver.run_until(is_ready)


def test_a_process_that_died_before_it_answered_crash_loops_too() -> None:
    driver = Driver(executor_pod(containers=copy.deepcopy(POOL_CONTAINERS)), EXECUTORS)
    container_id = running(driver, "sandbox")
    driver.executor = ExecutorState(container_id, exit_code=1)
    driver.step()
    sandbox = status_of(driver.pod, "sandbox")
    assert sandbox["restartCount"] == 1 and sandbox["lastState"]["terminated"]["exitCode"] == 1


def test_under_restart_policy_never_a_dead_executor_stays_down() -> None:
    driver = Driver(executor_pod(restartPolicy="Never"), EXECUTORS)
    container_id = running(driver)
    driver.executor = ExecutorState(container_id, healthy=True, exit_code=0)
    driver.step()
    executor = status_of(driver.pod, "task-executor")
    assert executor["restartCount"] == 0
    assert executor["state"]["terminated"]["exitCode"] == 0
    assert driver.stage() == "exited"


# ----------------------------------------------------------------------------- deletion


def test_deletion_finishes_only_once_the_process_is_gone() -> None:
    driver = Driver(executor_pod(), EXECUTORS)
    container_id = running(driver)
    driver.executor = ExecutorState(container_id, healthy=True)
    driver.run_until(is_ready)
    driver.pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    driver.pod["metadata"]["deletionGracePeriodSeconds"] = 30
    assert driver.stage() == "deleting"
    driver.clock += 60
    assert driver.step() == []  # still stopping: no terminal status, no wake-up
    driver.executor = ExecutorState(container_id, healthy=True, exit_code=143)  # SIGTERMed
    driver.run_until(lambda p: p["status"]["phase"] in ("Succeeded", "Failed"))
    assert driver.step() == [DeletePod("uid-p")]


def test_a_terminal_pod_is_deleted_only_once_its_process_is_gone() -> None:
    driver = Driver(executor_pod(), EXECUTORS)
    container_id = running(driver)
    driver.pod["status"]["phase"] = "Succeeded"
    driver.pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    driver.executor = ExecutorState(container_id)
    assert driver.step() == []
    driver.executor = None
    assert driver.step() == [DeletePod("uid-p")]
