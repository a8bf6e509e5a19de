"""How far a sandbox's processes are kept from the developer's machine, and the wrapper that
does it.

The runtime runs on the developer's own machine, as the developer's user: agents send it code
no person reviewed. So, where the machine allows it, the whole runtime (and every command it
starts) is re-executed inside a wrapper that gives it namespaces of its own:

- ``bwrap`` (bubblewrap), when installed and working: a user, PID, IPC and UTS namespace, the
  host's file system read-only except the sandbox's own directory, a private ``/tmp``, and
  ``--die-with-parent``;
- else ``unshare --user --map-root-user --pid --fork --kill-child --mount-proc``, when the
  kernel allows unprivileged user namespaces: the commands cannot see or signal the developer's
  other processes, and, the runtime being PID 1 of its namespace, the kernel kills every
  process left in it when the runtime ends, however it ends;
- else nothing: the commands run as the developer, in a process group and working directory of
  their own only. That is never silent: :func:`choose` logs a warning saying so.

The network namespace is the host's in every case: the runtime must listen on its Pod's
loopback IP, which is where the kubelet probes it and the router forwards to.

``SANDBUS_SANDBOX_ISOLATION`` forces a choice (``bwrap``, ``unshare`` or ``none``; ``auto`` or
unset: the first that works). A forced wrapper that does not work is an error, not a fallback.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["ISOLATION_ENV", "Isolation", "choose", "describe"]

log = logging.getLogger(__name__)

ISOLATION_ENV: Final = "SANDBUS_SANDBOX_ISOLATION"
_PROBE_TIMEOUT: Final = 10.0

UNISOLATED_WARNING: Final = (
    "sandbox runtime: neither bubblewrap (bwrap) nor unprivileged user namespaces (unshare "
    "--user) work on this machine, so sandbox commands run UNISOLATED as your own user, on "
    "your own machine, with only a working directory and process group of their own. Install "
    "bubblewrap, or allow user namespaces, to isolate them."
)


@dataclass(frozen=True)
class Isolation:
    """A wrapper: its name and the argv prefix that runs a command inside it."""

    name: str  # "bwrap", "unshare" or "none"
    prefix: tuple[str, ...]

    @property
    def isolated(self) -> bool:
        return self.name != "none"

    def wrap(self, argv: Sequence[str], writable: str) -> list[str]:
        """``argv`` run inside the wrapper, with ``writable`` (the sandbox's directory) the one
        host directory it may write to where the wrapper confines writes at all."""
        if self.name == "bwrap":
            return [*self.prefix, "--bind", writable, writable, "--", *argv]
        if self.name == "unshare":
            return [*self.prefix, *argv]
        return list(argv)


_NONE = Isolation("none", ())


def _bwrap(path: str | None) -> Isolation | None:
    binary = shutil.which("bwrap", path=path)
    if binary is None:
        return None
    return Isolation(
        "bwrap",
        (
            binary,
            "--die-with-parent",
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ),
    )


def _unshare(path: str | None) -> Isolation | None:
    binary = shutil.which("unshare", path=path)
    if binary is None:
        return None
    return Isolation(
        "unshare",
        (binary, "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount-proc"),
    )


def _works(isolation: Isolation) -> bool:
    """Whether the wrapper can run ``true`` here (a container may forbid user namespaces)."""
    argv = isolation.wrap(["true"], writable="/tmp")
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _candidates(path: str | None) -> dict[str, Isolation | None]:
    return {"bwrap": _bwrap(path), "unshare": _unshare(path)}


@functools.cache
def choose(wanted: str | None = None, path: str | None = None) -> Isolation:
    """The wrapper to run sandboxes in: ``wanted`` (default: ``$SANDBUS_SANDBOX_ISOLATION``,
    else ``auto``), looking for the programs on ``path`` (default: ``$PATH``). Falling back to
    none logs :data:`UNISOLATED_WARNING`; asking for none logs that it was asked for."""
    wanted = (wanted or os.environ.get(ISOLATION_ENV) or "auto").strip().lower()
    if wanted == "none":
        log.warning("sandbox runtime: isolation turned off (%s=none)", ISOLATION_ENV)
        return _NONE
    candidates = _candidates(path)
    if wanted != "auto":
        if wanted not in candidates:
            raise ValueError(f"{ISOLATION_ENV}={wanted!r}: say bwrap, unshare, none or auto")
        forced = candidates[wanted]
        if forced is None or not _works(forced):
            raise RuntimeError(f"{ISOLATION_ENV}={wanted}: {wanted} does not work here")
        return forced
    for candidate in candidates.values():
        if candidate is not None and _works(candidate):
            return candidate
    log.warning(UNISOLATED_WARNING)
    return _NONE


def describe(isolation: Isolation) -> str:
    """One phrase for a banner or a log line."""
    if isolation.name == "bwrap":
        return "isolated by bubblewrap (own user and PID namespaces, read-only host files)"
    if isolation.name == "unshare":
        return "isolated by unshare (own user and PID namespaces)"
    return "NOT isolated (no bubblewrap, no user namespaces): they run as you"
