"""`sandbus demo` as a user runs it: one command that starts sandbus, warms a pool, times claims
from create to Ready, prints the table, and leaves neither objects nor processes behind.

Everything is a real process: the demo (with its embedded nats-server and, by default, its
development cluster), and, to look at what the demo left, `sandbus devcluster` on the demo's
own store and kubectl against it. The demo runs in a session of its own, so that "no process
behind" is every process of that session gone, whatever it started.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
SANDBUS = str(BIN / "sandbus")
KUBECTL = str(BIN / "kubectl")
HEADER = ["launch", "claims", "p50 ms", "p90 ms", "p99 ms", "max ms"]
DEMO_KINDS = "sandboxclaims,sandboxwarmpools,sandboxtemplates"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}


def _session(sid: int) -> list[str]:
    """The command lines of the processes still in session ``sid``."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.getsid(int(entry.name)) == sid:
                left.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
    return left


def _demo(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``sandbus demo ARGS`` to its end; no process of its session may outlive it."""
    process = subprocess.Popen(
        [SANDBUS, "demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    deadline = time.monotonic() + 10
    while left := _session(process.pid):
        assert time.monotonic() < deadline, f"left running after the demo: {left}"
        time.sleep(0.1)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _table(stdout: str) -> dict[str, int]:
    """The launch types of the printed table and their claim counts (``all`` included)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split("  ")[0] == "launch")
    assert [cell.strip() for cell in lines[start].split("  ") if cell.strip()] == HEADER
    counts = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        label, count, *figures = line.split()
        assert len(figures) == 4 and all(float(f) > 0 for f in figures), line
        counts[label] = int(count)
    return counts


def _assert_counts(counts: dict[str, int], claims: int) -> None:
    assert counts.pop("all") == claims, counts
    assert set(counts) <= {"warm", "cold"}, counts
    assert sum(counts.values()) == claims, counts


@contextlib.contextmanager
def _devcluster(tmp_path: Path, *args: str) -> Iterator[Path]:
    """``sandbus devcluster ARGS`` on any free port; its kubeconfig."""
    kubeconfig = tmp_path / "devcluster.kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    log = (tmp_path / "devcluster.log").open("wb")
    process = subprocess.Popen(
        [SANDBUS, "devcluster", "--port", "0", "--kubeconfig", str(kubeconfig), *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 30
        while not kubeconfig.exists():
            assert process.poll() is None, (tmp_path / "devcluster.log").read_text()
            assert time.monotonic() < deadline, "the development cluster did not start"
            time.sleep(0.05)
        yield kubeconfig
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _items(kubeconfig: Path, tmp_path: Path, kinds: str) -> list[str]:
    command = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "kc")]
    listed = subprocess.run(
        [*command, "get", kinds, "--all-namespaces", "-o", "json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=30,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    return [f"{i['kind']}/{i['metadata']['name']}" for i in json.loads(listed.stdout)["items"]]


def test_demo_on_the_embedded_default_prints_the_table_and_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    demo = _demo(
        tmp_path,
        *("--dir", str(state), "--pool", "3", "--claims", "6", "--concurrency", "2"),
        *("--nodes", "2", "--pod-ready-delay", "0.1"),
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    out = demo.stdout
    for service in ("watcher", "sandbox", "pool", "claim", "snapshot"):
        assert f"  {service:<12} ready (" in out, out
    assert "(development cluster, 2 nodes," in out, out
    assert "warming the pool  3/3" in out, out  # plain lines: stdout is no terminal
    _assert_counts(_table(out), 6)
    assert "deleted: 8 objects" in out, out

    # What the demo left in its cluster's store, read back by the development cluster itself.
    with _devcluster(tmp_path, "--data", str(state / "cluster")) as kubeconfig:
        left = _items(kubeconfig, tmp_path, f"{DEMO_KINDS},sandboxes,pods")
        assert left == [], left


def test_demo_against_a_kubeconfig_keeps_its_objects_with_keep(tmp_path: Path) -> None:
    plot = tmp_path / "latency.png"
    with _devcluster(tmp_path) as kubeconfig:
        demo = _demo(
            tmp_path,
            *("--kubeconfig", str(kubeconfig), "--dir", str(tmp_path / "state")),
            *("--pool", "2", "--claims", "3", "--concurrency", "3", "--keep"),
            *("--plot", str(plot)),
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert f"  {'kubernetes':<12} from {kubeconfig}" in demo.stdout
        _assert_counts(_table(demo.stdout), 3)
        if importlib.util.find_spec("matplotlib") is None:
            assert "matplotlib is not installed" in demo.stdout
            assert not plot.exists()
        else:
            assert plot.read_bytes().startswith(b"\x89PNG")
        kept = _items(kubeconfig, tmp_path, DEMO_KINDS)
        assert sorted(kept) == [
            "SandboxClaim/sandbus-demo-001",
            "SandboxClaim/sandbus-demo-002",
            "SandboxClaim/sandbus-demo-003",
            "SandboxTemplate/sandbus-demo",
            "SandboxWarmPool/sandbus-demo",
        ], kept

        # A second run finds them, says so, and leaves them be.
        again = _demo(tmp_path, "--kubeconfig", str(kubeconfig), "--dir", str(tmp_path / "two"))
        assert again.returncode == 1, again.stdout + again.stderr
        assert "already holds a demo's objects" in again.stderr, again.stderr
        assert sorted(_items(kubeconfig, tmp_path, DEMO_KINDS)) == sorted(kept)


def _unreachable_kubeconfig(tmp_path: Path) -> Path:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path / "nowhere.kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--claims", "0"], 2, "argument --claims: must be at least 1, not 0"),
        (["--concurrency", "many"], 2, "argument --concurrency: not a whole number: 'many'"),
        (["--kubeconfig", "missing.yaml"], 2, "--kubeconfig: no such file: missing.yaml"),
        (["--kubeconfig", "UNREACHABLE"], 1, "cannot reach the cluster of"),
        (
            ["--kubeconfig", "UNREACHABLE", "--nodes", "2"],
            2,
            "--nodes: options of the development cluster, which --kubeconfig replaces",
        ),
    ],
)
def test_bad_input_is_told_and_exits_non_zero(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    unreachable = str(_unreachable_kubeconfig(tmp_path))
    demo = _demo(tmp_path, *(unreachable if a == "UNREACHABLE" else a for a in args), timeout=30)
    assert demo.returncode == code, demo.stdout + demo.stderr
    assert message in demo.stderr, demo.stderr
    assert "Traceback" not in demo.stderr, demo.stderr
