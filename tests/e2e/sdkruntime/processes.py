"""Finding the processes a sandbox runtime left on this machine, by what their command line
says: the tests look from outside every namespace, as a developer with ``ps`` would."""

from __future__ import annotations

import os
from pathlib import Path

RUNTIME_MODULE = "devtools.sandboxruntime"


def command_lines() -> dict[int, str]:
    """Every process's command line, by pid (those that end while read are skipped)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if raw:
            found[int(entry.name)] = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def matching(*needles: str) -> dict[int, str]:
    """The processes whose command line holds every one of ``needles`` (this one excepted)."""
    return {
        pid: line
        for pid, line in command_lines().items()
        if pid != os.getpid() and all(needle in line for needle in needles)
    }


def runtimes_on(ip: str) -> dict[int, str]:
    """The sandbox runtime processes (and their wrappers) listening on ``ip``."""
    return matching(RUNTIME_MODULE, f"--host {ip} ")
