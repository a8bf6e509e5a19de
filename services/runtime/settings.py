"""Settings: where NATS and Kubernetes are, and the one way a ``SANDBUS_*`` variable is read.

Precedence is the usual one for a twelve-factor service: a command-line flag beats an
environment variable, which beats the default. For Kubernetes the default follows kubectl and
client-go: ``--kubeconfig``, then ``$KUBECONFIG``, then the in-cluster service account when the
process runs in a Pod, then ``~/.kube/config``.

Every other setting is an environment variable read by :func:`setting`, with its type and
default: unset or blank is the default, and a value that does not parse stops the service at
start with the variable named, rather than being read as the default.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast, overload

import msgspec

if TYPE_CHECKING:
    from services.runtime.kubeclient import ApiClient

__all__ = [
    "DEFAULT_NATS_URL",
    "NATS_URL_ENV",
    "Settings",
    "add_connection_args",
    "kube_api_client",
    "setting",
]

T = TypeVar("T", bool, int, float, str)
D = TypeVar("D")


@overload
def setting(
    name: str,
    kind: type[T],
    default: T,
    *,
    minimum: float | None = None,
    above: bool = False,
    env: Mapping[str, str] | None = None,
) -> T: ...


@overload
def setting(
    name: str,
    kind: type[T],
    default: D,
    *,
    minimum: float | None = None,
    above: bool = False,
    env: Mapping[str, str] | None = None,
) -> T | D: ...


def setting(
    name: str,
    kind: type[T],
    default: D,
    *,
    minimum: float | None = None,
    above: bool = False,
    env: Mapping[str, str] | None = None,
) -> T | D:
    """The environment variable ``name`` (of ``env``, else the process's) as a ``kind``: ``str``
    (the text, stripped), ``bool`` (``true`` or ``false``, in any case), ``int`` (a whole
    number) or ``float`` (a finite number). Numbers may be bounded below by ``minimum``
    (``above``: strictly). Unset or blank: ``default``. Anything else raises ValueError
    naming the variable, its value and what was expected."""
    text = (os.environ if env is None else env).get(name, "").strip()
    if not text:
        return default
    if kind is str:
        return cast("T", text)
    if kind is bool:
        flag = text.lower()
        if flag not in ("true", "false"):
            raise ValueError(f"{name}={text!r}: expected true or false")
        return cast("T", flag == "true")
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    whole = kind is int
    wanted = "a whole number" if whole else "a number"
    if minimum is not None:
        wanted += f", more than {minimum:g}" if above else f", {minimum:g} or more"
    if (
        not math.isfinite(number)
        or (whole and number != int(number))
        or (minimum is not None and (number <= minimum if above else number < minimum))
    ):
        raise ValueError(f"{name}={text!r}: expected {wanted}")
    return cast("T", int(number) if whole else number)


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
