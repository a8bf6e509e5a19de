"""``python -m devtools.sandboxruntime --host IP --port 8888 --data-dir DIR``: serve one sandbox.

Started by the development cluster's kubelet for each Pod that asks for the agent-sandbox
runtime (see the package's docstring). It first picks its isolation (:mod:`.isolation`) and,
when there is one, runs itself again inside it (``--inside``, so the second start does not
choose again); then it serves until SIGTERM or SIGINT, which kills every command of the
sandbox before it exits.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from devtools.sandboxruntime.commands import Commands
from devtools.sandboxruntime.isolation import choose, describe
from devtools.sandboxruntime.server import RuntimeServer

log = logging.getLogger("devtools.sandboxruntime")

CONTAINER_ENV_VARIABLE = "SANDBUS_SANDBOX_ENV"  # the container's env, from the kubelet


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.sandboxruntime")
    parser.add_argument("--host", required=True, help="the Pod's IP, to listen on")
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--data-dir", required=True, help="the sandbox's own directory")
    parser.add_argument("--inside", help=argparse.SUPPRESS)  # already in this isolation
    return parser.parse_args(argv)


def _environment(base: str) -> dict[str, str]:
    """A sandbox's environment: none of the developer's variables but PATH, so no token or
    credential of theirs reaches code an agent runs; plus the container's own ``env``, which
    the kubelet passes as JSON in ``SANDBUS_SANDBOX_ENV``."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": base,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }
    env.update(_container_env())
    # Where the sandbox is, whatever the container said: the runtime serves this directory.
    env.update({"PWD": base, "SANDBOX_BASE_DIR": base})
    return env


def _container_env() -> dict[str, str]:
    raw = os.environ.get(CONTAINER_ENV_VARIABLE)
    if not raw:
        return {}
    try:
        given = json.loads(raw)
    except ValueError:
        log.warning("sandbox runtime: %s is not JSON; the container's env is left out", raw)
        return {}
    return {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {}


def _reexec_isolated(args: argparse.Namespace) -> None:
    """Run this runtime again inside the chosen isolation (returns only when there is none)."""
    isolation = choose()
    if not isolation.isolated:
        return
    log.info("sandbox runtime: %s", describe(isolation))
    argv = [
        sys.executable,
        "-m",
        "devtools.sandboxruntime",
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--data-dir",
        args.data_dir,
        "--inside",
        isolation.name,
    ]
    wrapped = isolation.wrap(argv, writable=os.path.abspath(args.data_dir))
    sys.stderr.flush()
    os.execv(wrapped[0], wrapped)


def _stop_on_signals(server: RuntimeServer, commands: Commands) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        commands.close()
        # shutdown() waits for serve_forever to return: not from the thread that runs it.
        threading.Thread(target=server.shutdown, daemon=True).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = _arguments(argv)
    os.makedirs(args.data_dir, exist_ok=True)
    if args.inside is None:
        _reexec_isolated(args)
    base = os.path.abspath(args.data_dir)
    commands = Commands(base, _environment(base))
    info = {"message": "Sandbox Runtime is active.", "isolation": args.inside or "none"}
    server = RuntimeServer((args.host, args.port), base, commands, info)
    _stop_on_signals(server, commands)
    log.info("sandbox runtime: serving %s on %s:%s", base, args.host, args.port)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        commands.close()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
