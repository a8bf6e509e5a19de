"""agent-sandbox's Python SDK, unchanged, on `sandbus up`: a sandbox from a warm pool, a command,
a file written and read back, then the sandbox deleted.

    sandbus up                                           # in one terminal
    kubectl --kubeconfig .sandbus/kubeconfig apply -f examples/sdk/python-sandbox.yaml
    python examples/sdk/quickstart.py                    # in another

The SDK reaches the sandbox's runtime through the router `sandbus up` starts (its URL is in
.sandbus/router-url), as it would reach agent-sandbox's sandbox-router on a real cluster;
``--pod-ip`` goes straight to the Pod's IP instead (``SandboxInClusterConnectionConfig``).

The commands run on YOUR OWN MACHINE (the development cluster's Pods are processes here, in
namespaces of their own where the machine allows it): run only what you would run yourself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import (
    SandboxConnectionConfig,
    SandboxDirectConnectionConfig,
    SandboxInClusterConnectionConfig,
)
from k8s_agent_sandbox.sandbox import Sandbox
from kubernetes import config as k8s_config


def connection(state: Path, pod_ip: bool) -> SandboxConnectionConfig:
    if pod_ip:
        return SandboxInClusterConnectionConfig()
    router = (state / "router-url").read_text().strip()
    return SandboxDirectConnectionConfig(api_url=router)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path(".sandbus"), help="sandbus up's --dir")
    parser.add_argument("--pool", default="python-sandbox-pool", help="the SandboxWarmPool")
    parser.add_argument("--pod-ip", action="store_true", help="skip the router: use the Pod IP")
    args = parser.parse_args()

    api = k8s_config.new_client_from_config(config_file=str(args.dir / "kubeconfig"))
    client: SandboxClient[Sandbox] = SandboxClient(
        connection_config=connection(args.dir, args.pod_ip), api_client=api
    )
    with api, client:
        sandbox = client.create_sandbox(args.pool, namespace="default", sandbox_ready_timeout=60)
        print(f"sandbox {sandbox.sandbox_id} (claim {sandbox.claim_name})")
        commands, files = sandbox.commands, sandbox.files
        assert commands is not None and files is not None  # None only once it is closed
        try:
            result = commands.run("echo hi from $(uname -s)")
            print(f"run: exit {result.exit_code}, stdout {result.stdout!r}")
            files.write("hello.txt", b"hello, sandbox\n")
            print(f"read: {files.read('hello.txt')!r}")
            print(f"list: {[entry.name for entry in files.list('.')]}")
            slow = commands.run("sleep 30", command_timeout=1)
            print(f"sleep 30 with command_timeout=1: timed_out={slow.timed_out}")
        finally:
            client.delete_sandbox(sandbox.claim_name or sandbox.sandbox_id, namespace="default")
            print("deleted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
