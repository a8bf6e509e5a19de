"""``pods/exec``: a command in a Pod's container, over a WebSocket, run by a simulated runtime.

On a real cluster the API server checks the request and proxies it to the Pod's kubelet, whose
streaming server runs the command through the container runtime
(``pkg/registry/core/pod/strategy.go`` ``streamLocation``, ``pkg/kubelet/server/server.go``
``getExec``, ``kubelet/pkg/cri/streaming/remotecommand``). Here both halves answer in-process,
in their order; a refusal is a plain HTTP answer, which a client sees as a failed upgrade:

=============================================  ==================================================
the Pod does not exist                         404 NotFound Status
no ``container`` and not exactly one           400 ``a container name must be specified for pod
container                                      P, choose one of: [a b]``
a container the Pod does not have              400 ``container X is not valid for pod P``
the Pod is not bound to a node                 400 ``pod P does not have a host assigned``
none of stdin, stdout, stderr                  400 ``you must specify at least 1 of stdin,
                                               stdout, stderr`` (the kubelet's check)
the container is not running (Pending,         500 ``container not found ("X")`` as text: the
its process ended, the Pod finished)           kubelet's answer, passed through unchanged
not a WebSocket (SPDY, kubectl's fallback)     400: only WebSocket is served here
no subprotocol in common                       403, as the kubelet's WebSocket handshake refuses
=============================================  ==================================================

The stream speaks ``v5.channel.k8s.io`` or ``v4.channel.k8s.io`` (binary frames, the first
byte the channel): first an empty frame on stdout (the kubelet's "streams are ready"), then the
output, then the command's ``Status`` on channel 3 (``Success``, or ``NonZeroExitCode`` with the
exit code as the ``ExitCode`` cause, as client-go reads it), then a normal close. Stdin and TTY
are accepted and ignored: every command here finishes at once.

What the runtime simulates:

- ``kill 1`` (also ``kill -TERM 1``, ``-15``, ``-s TERM``, ``-SIGTERM``, and ``sh -c "kill 1"``)
  ends PID 1 of that container with exit code 0, as OpenSandbox's Restart recycler expects of a main
  process that handles SIGTERM; ``kill -9 1`` (``-KILL``, ``-SIGKILL``) ends it with 137. (A real
  kernel ignores SIGKILL sent to a PID namespace's init from inside the namespace; the simulation
  kills it anyway, to model an init that exits.) The exec writes the exit to ``pods/status`` as the
  kubelet reports one (:func:`~devtools.cluster.controllers.kubelet.statuses.container_exit_status`:
  the container terminated and not ready, the Pod not Ready), then answers exit 0. The simulated
  kubelet then starts the container again as the ``restartPolicy`` says: a new containerID,
  ``restartCount`` + 1, the exit as ``lastState``, and Ready after its usual delay (the ``exited``
  stage of :mod:`devtools.cluster.controllers.kubelet.stages`). A container that runs a real task
  executor (:mod:`devtools.cluster.controllers.kubelet.executor`) has its process stopped once its
  exit shows, and a new one started for the restarted container, before which the Pod is not Ready.
- A shell's ``exit N`` (``sh -c 'exit 3'``, also ``bash``/``ash``/``dash``; the first ``exit``
  of a script of ``;``-, ``&&``- or newline-separated commands) exits ``N`` modulo 256, as the
  kubelet reports it (``NonZeroExitCode``, so ``kubectl exec`` exits N too); ``false`` (bare or in
  a shell) exits 1, a bare ``exit`` 0.
- Any other command exits 0 with no output.
- Failure injection, as the kubelet's by annotation (``devcluster.sandbus.io/fail``): a Pod
  annotated ``devcluster.sandbus.io/exec-exit-code: "N"`` (1-255) has every exec exit N, with a
  line on stderr, and do nothing. Faults of the API itself come from the fault engine, which
  matches this subresource as ``exec`` (:mod:`.faults`).
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from api.objects import Json
from devtools.cluster.apirules import errors
from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.apirules.meta import now_rfc3339
from devtools.cluster.apirules.resources import Registry, ResourceType
from devtools.cluster.controllers.kubelet.statuses import container_exit_status
from devtools.cluster.http.reads import go_bool
from devtools.cluster.http.writes import PATCH_MERGE, Target, WriteOptions, Writer
from devtools.cluster.storage.store import Store

__all__ = ["EXEC_EXIT_CODE_ANNOTATION", "PROTOCOLS", "CommandOutcome", "PodExec", "run_command"]

log = logging.getLogger(__name__)


EXEC_EXIT_CODE_ANNOTATION: Final = "devcluster.sandbus.io/exec-exit-code"
PROTOCOLS: Final = ("v5.channel.k8s.io", "v4.channel.k8s.io")
_STDOUT, _STDERR, _STATUS = 1, 2, 3
_SHELLS = frozenset({"sh", "bash", "ash", "dash"})
_PID1_EXIT = {"TERM": 0, "15": 0, "KILL": 137, "9": 137}
"""How PID 1 ends on each signal the simulation delivers; other signals leave it running."""
_STATUS_WRITE_ATTEMPTS = 5
_KUBELET = WriteOptions(field_manager="kubelet", user_agent="kubelet/devcluster")


@dataclass(frozen=True)
class CommandOutcome:
    """What a simulated command did."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    pid1_exit: int | None = None
    """The exit code PID 1 of the container ends with because of it (None: it keeps running)."""


def run_command(command: Sequence[str], pod: Mapping[str, Any]) -> CommandOutcome:
    """The simulated runtime: what ``command`` does in a container of ``pod``."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    injected = str(annotations.get(EXEC_EXIT_CODE_ANNOTATION) or "")
    if injected.isdigit() and 1 <= int(injected) <= 255:
        message = f"devcluster: exit code {injected} injected by {EXEC_EXIT_CODE_ANNOTATION}\n"
        return CommandOutcome(int(injected), stderr=message.encode())
    exit_code = _shell_exit_code(command)
    if exit_code:
        return CommandOutcome(exit_code)
    return CommandOutcome(0, pid1_exit=_pid1_exit(command))


def _shell_exit_code(command: Sequence[str]) -> int:
    """The exit code of ``false``, or of a shell script that reaches ``exit N`` or ends in
    ``false`` (0 otherwise, and for what is not simulated: pipes, ``||``, variables)."""
    argv = list(command)
    if argv and argv[0].rsplit("/", 1)[-1] == "false":
        return 1
    if not (len(argv) == 3 and argv[0].rsplit("/", 1)[-1] in _SHELLS and argv[1] == "-c"):
        return 0
    try:
        lexer = shlex.shlex(argv[2].replace("\n", ";"), posix=True, punctuation_chars=";&|")
        words = list(lexer)
    except ValueError:
        return 0
    segments: list[list[str]] = [[]]
    for word in words:
        if word in (";", "&&"):
            segments.append([])
        elif set(word) <= set(";&|"):
            return 0  # a pipe, "||" or "&": not simulated
        else:
            segments[-1].append(word)
    segments = [segment for segment in segments if segment]
    for segment in segments:  # the shell stops at the first ``exit``
        if segment[0] == "exit" and len(segment) <= 2:
            code = segment[1] if len(segment) == 2 else "0"
            return int(code) % 256 if code.isdigit() else 0
    return 1 if segments and segments[-1] == ["false"] else 0


def _pid1_exit(command: Sequence[str]) -> int | None:
    argv = list(command)
    if len(argv) == 3 and argv[0].rsplit("/", 1)[-1] in _SHELLS and argv[1] == "-c":
        try:
            argv = shlex.split(argv[2])
        except ValueError:
            return None
    if not argv or argv[0].rsplit("/", 1)[-1] != "kill":
        return None
    args, signal = argv[1:], "TERM"
    if len(args) >= 2 and args[0] == "-s":
        signal, args = args[1], args[2:]
    elif args and args[0].startswith("-") and args[0] != "--":
        signal, args = args[0][1:], args[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if "1" not in args:
        return None
    return _PID1_EXIT.get(signal.upper().removeprefix("SIG"))


def _names(containers: Sequence[Json]) -> str:
    return " ".join(str(c.get("name", "")) for c in containers)


def _container_lists(pod: Json, *fields: str) -> list[Json]:
    spec = pod.get("spec") or {}
    return [c for field in fields for c in spec.get(field) or () if isinstance(c, dict)]


def _status_message(exit_code: int, command: Sequence[str]) -> Json:
    """The Status the kubelet writes on the status channel (metav1.Status as Go marshals it)."""
    if exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            "command terminated with non-zero exit code: error executing command "
            f"[{' '.join(command)}], exit code {exit_code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
    }


def _running(pod: Json, container: str) -> bool:
    status = pod.get("status") or {}
    for field in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for entry in status.get(field) or ():
            if isinstance(entry, dict) and entry.get("name") == container:
                return isinstance((entry.get("state") or {}).get("running"), dict)
    return False


class PodExec:
    """Serves ``GET``/``POST .../pods/NAME/exec`` for the API server."""

    def __init__(self, store: Store, registry: Registry, writer: Writer) -> None:
        self.store = store
        self.registry = registry
        self.writer = writer

    @property
    def _pods(self) -> ResourceType:
        pods = self.registry.lookup("", "v1", "pods")
        assert pods is not None
        return pods

    def _pod(self, namespace: str, name: str) -> Json | None:
        stored = self.store.get("pods", namespace, name)
        return None if stored is None else self._pods.present(stored)

    async def serve(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        pod = self._pod(namespace, name)
        if pod is None:
            raise errors.not_found("", "pods", name)
        query = request.query
        container = self._container(pod, name, query.get("container", ""))
        if not (pod.get("spec") or {}).get("nodeName"):
            raise errors.bad_request(f"pod {name} does not have a host assigned")
        stdout = bool(go_bool(query.get("stdout"), "stdout"))
        stderr = bool(go_bool(query.get("stderr"), "stderr"))
        if not (stdout or stderr or go_bool(query.get("stdin"), "stdin")):
            raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        if not _running(pod, container):
            return web.Response(status=500, text=f'container not found ("{container}")')
        socket = web.WebSocketResponse(protocols=PROTOCOLS)
        ready = socket.can_prepare(request)
        if not ready.ok:
            return web.Response(
                status=400,
                text="unable to upgrade: the development cluster serves exec over WebSocket "
                f"only ({', '.join(PROTOCOLS)})",
            )
        if ready.protocol is None:
            offered = request.headers.get("Sec-WebSocket-Protocol", "")
            return web.Response(
                status=403,
                text=f"requested protocol(s) are not supported: [{offered}]; "
                f"supports [{' '.join(PROTOCOLS)}]",
            )

        command = query.getall("command", [])
        outcome = run_command(command, pod)
        if outcome.pid1_exit is not None:
            await self._end_pid1(namespace, name, container, outcome.pid1_exit)
        await socket.prepare(request)
        first = _STDOUT if stdout else _STDERR if stderr else _STATUS
        await socket.send_bytes(bytes([first]))
        if stdout and outcome.stdout:
            await socket.send_bytes(bytes([_STDOUT]) + outcome.stdout)
        if stderr and outcome.stderr:
            await socket.send_bytes(bytes([_STDERR]) + outcome.stderr)
        status = _status_message(outcome.exit_code, command)
        await socket.send_bytes(
            bytes([_STATUS]) + json.dumps(status, separators=(",", ":")).encode()
        )
        await socket.close()
        return socket

    @staticmethod
    def _container(pod: Json, name: str, requested: str) -> str:
        """The container the request names, checked as ``streamLocation`` checks it."""
        containers = _container_lists(pod, "containers")
        if not requested:
            if len(containers) == 1:
                return str(containers[0].get("name", ""))
            if not containers:
                raise errors.bad_request(f"a container name must be specified for pod {name}")
            message = (
                f"a container name must be specified for pod {name}, "
                f"choose one of: [{_names(containers)}]"
            )
            init = _container_lists(pod, "initContainers")
            if init:
                message += f" or one of the init containers: [{_names(init)}]"
            raise errors.bad_request(message)
        every = _container_lists(pod, "containers", "initContainers", "ephemeralContainers")
        if not any(c.get("name") == requested for c in every):
            raise errors.bad_request(f"container {requested} is not valid for pod {name}")
        return requested

    async def _end_pid1(self, namespace: str, name: str, container: str, exit_code: int) -> None:
        """Report the container's exit in ``pods/status``, as the kubelet would (retried on a
        conflict with a concurrent status write)."""
        target = Target(self._pods, namespace, name, "status")
        for _ in range(_STATUS_WRITE_ATTEMPTS):
            pod = self._pod(namespace, name)
            if pod is None or not _running(pod, container):
                return
            patch = {
                "metadata": {"resourceVersion": (pod.get("metadata") or {}).get("resourceVersion")},
                "status": container_exit_status(pod, container, exit_code, now_rfc3339()),
            }
            try:
                await self.writer.patch(target, json.dumps(patch).encode(), PATCH_MERGE, _KUBELET)
                return
            except StatusError as refused:
                if refused.code != 409:
                    raise
        log.warning("exec: could not report the exit of %s/%s %s", namespace, name, container)
