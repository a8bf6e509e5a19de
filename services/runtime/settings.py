"""Connection settings shared by every command: where NATS is and where Kubernetes is.

Precedence is the usual one for a twelve-factor service: a command-line flag beats an
environment variable, which beats the default. For Kubernetes the default follows kubectl and
client-go: ``--kubeconfig``, then ``$KUBECONFIG``, then the in-cluster service account when the
process runs in a Pod, then ``~/.kube/config``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from services.runtime.kubeclient import ApiClient

__all__ = [
    "DEFAULT_NATS_URL",
    "NATS_URL_ENV",
    "Settings",
    "add_connection_args",
    "kube_api_client",
]

NATS_URL_ENV = "SANDBUS_NATS_URL"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
_IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = DEFAULT_NATS_URL
    kubeconfig: str | None = None
    """None means: in-cluster config inside a Pod, else ~/.kube/config."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        return cls(
            nats_url=args.nats or os.environ.get(NATS_URL_ENV) or DEFAULT_NATS_URL,
            kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None,
        )


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connections")
    group.add_argument(
        "--nats",
        metavar="URL",
        help=f"NATS server URL (default: ${NATS_URL_ENV}, else {DEFAULT_NATS_URL})",
    )
    group.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config)",
    )


async def kube_api_client(settings: Settings) -> ApiClient:
    """An ApiClient configured from the settings; the caller closes it."""
    # Imported here: most commands never need a Kubernetes client.
    from services.runtime.kubeclient import Configuration, kube_config, new_api_client

    configuration = Configuration()
    if settings.kubeconfig:
        path = Path(settings.kubeconfig).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"kubeconfig not found: {path}")
        await kube_config.load_kube_config(
            config_file=str(path), client_configuration=configuration
        )
    elif os.environ.get(_IN_CLUSTER_ENV):
        kube_config.load_incluster_config(client_configuration=configuration)
    else:
        await kube_config.load_kube_config(client_configuration=configuration)
    return new_api_client(configuration)
