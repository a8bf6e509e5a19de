"""`sandbus up` as a user runs it: one command, then kubectl and `sandbus events tail` against it.

Everything here is a real process: `sandbus up` (embedded nats-server, and the development
cluster and every service each its own process, or all in one with ``--one-process``), kubectl,
and the tail command, exactly as the README tells a user to run them. The supervision of the
children is tested here too: each part's pid and endpoint, SIGTERM leaving no process behind,
a SIGKILLed service restarted, and ``up`` stopping when restarts run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from services.cli.run import SERVICES
from tests.e2e.up import (
    SANDBUS,
    children_of,
    endpoints,
    fetch,
    kubectl,
    running,
    user_env,
    wait_for_file,
    wait_until,
)

SANDBOX = """
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: hello-up
spec:
  podTemplate:
    spec:
      containers:
        - name: main
          image: busybox
"""


def test_a_sandbox_created_with_kubectl_shows_up_in_events_tail(
    sandbus_up: Path, tmp_path: Path
) -> None:
    env = user_env()
    nats_url = (sandbus_up / "nats-url").read_text().strip()

    applied = kubectl(sandbus_up, tmp_path, "apply", "-f", "-", input=SANDBOX)
    assert applied.returncode == 0, applied.stderr.decode()
    assert b"sandbox.agents.x-k8s.io/hello-up created" in applied.stdout

    tail = subprocess.Popen(
        [SANDBUS, "events", "tail", "--nats", nats_url, "--kind", "Sandbox", "--since", "10m"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert tail.stdout is not None
        deadline = time.monotonic() + 60
        seen: list[str] = []
        while time.monotonic() < deadline:
            line = tail.stdout.readline().decode()
            if not line:
                break
            seen.append(line)
            if "hello-up" in line:
                break
        assert any("hello-up" in line and "Sandbox" in line for line in seen), seen
    finally:
        tail.send_signal(signal.SIGTERM)
        try:
            tail.wait(timeout=20)
        except subprocess.TimeoutExpired:
            tail.kill()
            tail.wait()


WARM_POOL = """
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: scaled
spec:
  podTemplate:
    spec:
      containers:
        - name: main
          image: busybox
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: scaled
spec:
  replicas: 2
  sandboxTemplateRef:
    name: scaled
"""


def _pool_size(state: Path, tmp_path: Path) -> tuple[int, int | None]:
    """How many Sandboxes the pool ``scaled`` has, and how many its status reports."""
    pool = kubectl(state, tmp_path, "get", "sandboxwarmpool/scaled", "-o", "json")
    assert pool.returncode == 0, pool.stderr.decode()
    status = json.loads(pool.stdout).get("status") or {}
    selector = status.get("selector")
    if not selector:
        return 0, status.get("replicas")
    listed = kubectl(state, tmp_path, "get", "sandboxes", "-l", selector, "-o", "json")
    assert listed.returncode == 0, listed.stderr.decode()
    return len(json.loads(listed.stdout)["items"]), status.get("replicas")


def _wait_for_size(state: Path, tmp_path: Path, size: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (seen := _pool_size(state, tmp_path)) != (size, size):
        assert time.monotonic() < deadline, f"not {size} members within {timeout}s: {seen}"
        time.sleep(0.2)


@pytest.mark.parametrize("sandbus_up", [["--one-process"]], indirect=True)
def test_kubectl_scale_resizes_a_warm_pool(sandbus_up: Path, tmp_path: Path) -> None:
    """With ``--one-process``: every part in the one process of `sandbus up`, behind one
    /metrics."""
    up_pid = int((tmp_path / "up.pid").read_text())
    parts = endpoints(sandbus_up)
    assert set(parts) == set(SERVICES), parts
    assert {part["pid"] for part in parts.values()} == {up_pid}
    assert len({part["metrics"] for part in parts.values()}) == 1, parts

    applied = kubectl(sandbus_up, tmp_path, "apply", "-f", "-", input=WARM_POOL)
    assert applied.returncode == 0, applied.stderr.decode()
    _wait_for_size(sandbus_up, tmp_path, 2, timeout=60)

    scaled = kubectl(sandbus_up, tmp_path, "scale", "sandboxwarmpool/scaled", "--replicas=4")
    assert scaled.returncode == 0, scaled.stderr.decode()
    assert b"sandboxwarmpool.extensions.agents.x-k8s.io/scaled scaled" in scaled.stdout
    _wait_for_size(sandbus_up, tmp_path, 4, timeout=60)

    # Every worker of the one process behind one /metrics, and ready.
    assert fetch(parts["pool"]["readyz"]) == (200, "ok\n")
    status, text = fetch(parts["pool"]["metrics"])
    assert status == 200
    for worker, kind in (("pool", "SandboxWarmPool"), ("sandbox", "Sandbox")):
        series = f'sandbus_reconcile_total{{kind="{kind}",result="ok",worker="{worker}"}}'
        assert series in text, text
    # controller-runtime's series under upstream's controller names, once per controller.
    for controller in ("sandboxwarmpool", "sandbox", "sandboxclaim", "batchsandbox"):
        series = f'controller_runtime_max_concurrent_reconciles{{controller="{controller}"}}'
        assert text.count(series) == 1, text
    assert text.count("# TYPE controller_runtime_active_workers gauge") == 1
    assert text.count("agent_sandbox_build_info{") == 1
    published = next(
        line for line in text.splitlines() if line.startswith("sandbus_watcher_published_total")
    )
    assert float(published.split()[1]) > 0, "the watcher's publishing, on the same endpoint"
    assert 'sandbus_events_pending{worker="pool"}' in text, "each worker's consumer lag"
    handled = next(
        line
        for line in text.splitlines()
        if line.startswith('sandbus_events_handled_total{worker="pool"}')
    )
    assert float(handled.split()[1]) > 0


def test_explain_rerun_makes_the_recorded_decisions_again(sandbus_up: Path, tmp_path: Path) -> None:
    """`sandbus explain KIND/NS/NAME --rerun` as the README shows it, with the worker
    definitions sandbus registers: every recorded decision about a Sandbox made Ready is made
    again the same way by the planner that runs now."""
    nats_url = (sandbus_up / "nats-url").read_text().strip()
    applied = kubectl(sandbus_up, tmp_path, "apply", "-f", "-", input=SANDBOX)
    assert applied.returncode == 0, applied.stderr.decode()
    deadline = time.monotonic() + 60
    while True:
        ready = kubectl(
            sandbus_up,
            tmp_path,
            "get",
            "sandbox",
            "hello-up",
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        )
        if ready.stdout.decode() == "True":
            break
        assert time.monotonic() < deadline, ready.stderr.decode()
        time.sleep(0.2)
    while True:  # the last answers of the worker's writes reach the event log shortly after
        rerun = subprocess.run(
            [SANDBUS, "explain", "Sandbox/default/hello-up", "--rerun", "--nats", nats_url],
            capture_output=True,
            env=user_env(),
            timeout=60,
            check=False,
        )
        lines = rerun.stdout.decode().splitlines()
        if rerun.returncode == 0 and not any("note:" in line for line in lines):
            break
        assert time.monotonic() < deadline, rerun.stdout.decode() + rerun.stderr.decode()
        time.sleep(0.5)
    assert lines and all(line.endswith(": same decision") for line in lines), lines


@pytest.mark.parametrize(
    "sandbus_up",
    [["--nodes", "2", "--pod-ready-delay", "0.1", "--write-latency-ms", "1"]],
    indirect=True,
)
def test_up_says_each_service_is_ready_and_passes_the_cluster_options_on(
    sandbus_up: Path, tmp_path: Path
) -> None:
    """One line per service once it says it is ready (no longer "started"), then what to try;
    and the development cluster's options reach it: two nodes registered."""
    lines = (tmp_path / "up.log").read_text().splitlines()
    said = [line for line in lines if line.startswith("  ")]
    parts = endpoints(sandbus_up)
    for service in SERVICES:
        shown = rf"  {service} +ready \(\d+\.\d s\); pid (\d+), (http://\S+/metrics)"
        found = [m for m in (re.fullmatch(shown, line) for line in said) if m]
        assert found, said
        assert found[0].groups() == (str(parts[service]["pid"]), parts[service]["metrics"])
    assert not any("started" in line for line in said), said
    assert any("(development cluster, 2 nodes," in line for line in said), said
    hints = "\n".join(lines[next(i for i, line in enumerate(lines) if line.startswith("ready.")) :])
    for hint in ("get sandboxes", "sandbus events tail --nats", "sandbus demo"):
        assert hint in hints, hints

    nodes = kubectl(sandbus_up, tmp_path, "get", "nodes", "-o", "json")
    assert nodes.returncode == 0, nodes.stderr.decode()
    assert len(json.loads(nodes.stdout)["items"]) == 2, nodes.stdout.decode()


@pytest.mark.parametrize("sandbus_up", [["--nats-cluster", "3"]], indirect=True)
def test_up_with_a_nats_cluster_replicates_every_stream(sandbus_up: Path) -> None:
    """``--nats-cluster 3``: three nats-servers as one JetStream cluster, and every stream the
    services use has three replicas."""
    urls = (sandbus_up / "nats-url").read_text().strip().split(",")
    assert len(urls) == 3

    async def replicas() -> dict[str, int]:
        connection = await nats.connect(urls)
        try:
            return {
                str(info.config.name): info.config.num_replicas or 1
                for info in await connection.jetstream().streams_info()
            }
        finally:
            await connection.close()

    found = asyncio.run(replicas())
    assert found and set(found.values()) == {3}, found


def test_a_new_user_applies_every_example_and_reads_the_metrics(
    sandbus_up: Path, tmp_path: Path
) -> None:
    """As the README has a new user do: ``kubectl apply -R -f examples/`` against ``sandbus up``
    works, the example claim becomes Ready, and the one ``/metrics`` of ``sandbus up`` carries
    agent-sandbox's claim metrics and every worker's and the watcher's own."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    applied = kubectl(sandbus_up, tmp_path, "apply", "-R", "-f", str(examples))
    assert applied.returncode == 0, applied.stderr.decode()

    deadline = time.monotonic() + 120
    while True:
        got = kubectl(sandbus_up, tmp_path, "get", "sandboxclaim", "session-42", "-o", "json")
        conditions = json.loads(got.stdout or b"{}").get("status", {}).get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            break
        assert time.monotonic() < deadline, got.stdout.decode() + got.stderr.decode()
        time.sleep(0.5)

    # Each process's own /metrics, found where the banner and endpoints.json name it.
    urls = {part["metrics"] for part in endpoints(sandbus_up).values()}
    deadline = time.monotonic() + 60
    while True:
        text = "".join(fetch(url)[1] for url in sorted(urls))
        cold = [
            line
            for line in text.splitlines()
            if line.startswith("agent_sandbox_claim_creation_total{")
            and 'launch_type="cold"' in line
        ]
        ready = [
            line
            for line in text.splitlines()
            if line.startswith("agent_sandboxes{") and 'ready_condition="true"' in line
        ]
        wanted = [
            *([] if cold else ['agent_sandbox_claim_creation_total{...launch_type="cold"...}']),
            *([] if ready else ['agent_sandboxes{...ready_condition="true"...}']),
            "agent_sandbox_claim_controller_startup_latency_ms_count",
            "sandbus_warm_queue_depth{",
            "sandbus_watcher_published_total",
            *(
                f'sandbus_reconcile_total{{kind="{kind}",result="ok",worker="{worker}"}}'
                for worker, kind in (
                    ("sandbox", "Sandbox"),
                    ("pool", "SandboxWarmPool"),
                    ("claim", "SandboxClaim"),
                    ("claim", "BatchSandbox"),
                    ("snapshot", "SandboxSnapshot"),
                )
            ),
        ]
        missing = [series for series in wanted if series not in text]
        if not missing:
            break
        assert time.monotonic() < deadline, missing
        time.sleep(0.5)


def _descendants(pid: int) -> list[int]:
    found = []
    for child in children_of(pid):
        found += [child, *_descendants(child)]
    return found


@contextlib.contextmanager
def _up(tmp_path: Path, *arguments: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`sandbus up` of its own (the test decides how it ends), until it is ready; killed, and
    its children with it, if the test leaves it running."""
    state = tmp_path / "state"
    with (tmp_path / "up.log").open("wb") as log:
        process = subprocess.Popen(
            [SANDBUS, "up", "--dir", str(state), *arguments],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env={k: v for k, v in user_env().items() if k != "SANDBUS_METRICS_ADDRESS"},
        )
        try:
            wait_for_file(state / "nats-url", process, timeout=60)
            yield process, state
        finally:
            if process.poll() is None:
                process.kill()  # its children get SIGTERM from the kernel (die with parent)
                process.wait()


def test_each_part_runs_in_a_process_of_its_own_and_serves_its_endpoints(
    sandbus_up: Path, tmp_path: Path
) -> None:
    """The development cluster and every service: a child process each of `sandbus up`, each
    serving /metrics, /healthz and /readyz where the banner and endpoints.json say."""
    up_pid = int((tmp_path / "up.pid").read_text())
    parts = endpoints(sandbus_up)
    assert set(parts) == {"devcluster", *SERVICES}, parts
    pids = [part["pid"] for part in parts.values()]
    assert len(set(pids)) == len(pids) and up_pid not in pids, parts
    assert set(pids) <= set(children_of(up_pid)), (pids, children_of(up_pid))
    banner = (tmp_path / "up.log").read_text()
    for name, part in parts.items():
        assert part["metrics"] in banner, (name, banner)
        status, text = fetch(part["metrics"])
        assert status == 200 and "agent_sandbox_build_info{" in text, (name, status)
        assert fetch(part["healthz"]) == (200, "ok\n"), name
        assert fetch(part["readyz"]) == (200, "ok\n"), name
    status, text = fetch(parts["claim"]["metrics"])
    assert "# TYPE agent_sandbox_claim_controller_startup_latency_ms histogram" in text


def test_sigterm_stops_every_child_and_leaves_no_process_behind(tmp_path: Path) -> None:
    with _up(tmp_path) as (process, _):
        descendants = _descendants(process.pid)
        assert len(descendants) >= 2 + len(SERVICES), descendants  # nats, cluster, services
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, (tmp_path / "up.log").read_text()
    left = [pid for pid in descendants if running(pid)]
    assert not left, left
    # The services first (each stops cleanly on SIGTERM), then the cluster.
    lines = (tmp_path / "up.log").read_text().splitlines()
    said = [line for line in lines if line.startswith("  ")]  # up's own status lines
    stopped = [line.split()[0] for line in said if line.endswith(" stopped")]
    assert sorted(stopped[:-1]) == sorted(SERVICES) and stopped[-1] == "devcluster", lines


def test_a_killed_service_is_reported_and_started_again(sandbus_up: Path, tmp_path: Path) -> None:
    up_pid = int((tmp_path / "up.pid").read_text())
    killed = endpoints(sandbus_up)["claim"]["pid"]
    os.kill(killed, signal.SIGKILL)
    said = f"  claim        killed by SIGKILL (pid {killed}); restarting in"
    wait_until(said, lambda: said in (tmp_path / "up.log").read_text(), timeout=30)

    def started_again() -> bool:
        claims = [
            pid
            for pid in children_of(up_pid)
            if b"\0claim\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        return bool(claims) and killed not in claims

    wait_until("a new claim process", started_again, timeout=30)
    claim = endpoints(sandbus_up)["claim"]  # the same port, served again; the new pid
    wait_until("the new claim process ready", lambda: fetch(claim["readyz"])[0] == 200, timeout=60)
    pid = endpoints(sandbus_up)["claim"]["pid"]  # read again: written once it was started
    assert pid != killed and pid in children_of(up_pid)


def test_up_stops_with_an_error_when_a_service_runs_out_of_restarts(tmp_path: Path) -> None:
    with _up(tmp_path, "--max-restarts", "0") as (process, state):
        descendants = _descendants(process.pid)
        killed = endpoints(state)["pool"]["pid"]
        os.kill(killed, signal.SIGKILL)
        assert process.wait(timeout=60) == 1
    log = (tmp_path / "up.log").read_text()
    assert f"  pool         killed by SIGKILL (pid {killed}), after 0 restarts; stopping" in log
    left = [pid for pid in descendants if running(pid)]
    assert not left, left
