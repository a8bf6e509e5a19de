"""How an executor is configured (upstream's ``te/config/config.go``, and its flags).

Upstream listens on ``-listen-addr=HOST:PORT`` (default ``0.0.0.0:5758``, environment
``LISTEN_ADDR``) and keeps its tasks in ``-data-dir`` (default ``/var/lib/sandbox/tasks``,
environment ``DATA_DIR``); both spellings are accepted here, beside ``--host`` and ``--port``,
because OpenSandbox's sample manifests pass ``-listen-addr=0.0.0.0:5758``. The reconcile
interval (500 ms) and the stop grace (10 s) are constants upstream and flags here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ExecutorSettings",
    "parse_listen_addr",
]

DEFAULT_HOST: Final = "0.0.0.0"
DEFAULT_PORT: Final = 5758
DEFAULT_DATA_DIR: Final = "/var/lib/sandbox/tasks"


@dataclass(frozen=True)
class ExecutorSettings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    """0: any free port (the one taken is logged)."""
    data_dir: str = DEFAULT_DATA_DIR
    reconcile_interval: float = 0.5
    """Seconds between two reconcile passes."""
    stop_grace: float = 10.0
    """Seconds a stopped process gets between SIGTERM and SIGKILL."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port}: expected 0 to 65535")
        if not self.reconcile_interval > 0:
            raise ValueError(f"reconcile interval {self.reconcile_interval}: expected seconds > 0")
        if not self.stop_grace >= 0:
            raise ValueError(f"stop grace {self.stop_grace}: expected seconds >= 0")
        if not self.data_dir:
            raise ValueError("the data dir must not be empty")


def parse_listen_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as Go's ``net.Listen`` takes it: ``[::1]:5758`` for IPv6, and an empty
    host (``:5758``) for every address. Raises ValueError."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"listen address {text!r}: expected HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"listen address {text!r}: an IPv6 host goes in brackets, [::]:5758")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"listen address {text!r}: the port is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"listen address {text!r}: expected a port from 0 to 65535")
    return host or DEFAULT_HOST, port
