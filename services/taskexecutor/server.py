"""The executor's HTTP server (docs/opensandbox.md §5 "routes", upstream's ``te/server``).

Plain HTTP/1.1 with keep-alive, from the standard library's ``http.server``, one thread per
connection. Not aiohttp: an executor runs in every sandbox Pod (in the development cluster, one
process per simulated Pod), and aiohttp's import alone costs about a fifth of a second and
15 MB of memory, for a server that answers a controller every few seconds.

The answers:

==========================  =================================================================
``POST /setTasks``          200 with every task; 409 when a desired task could not be created
                            (a task is active already), after the rest of the sync was done
``GET /getTasks``           200 with every task
``POST /tasks``             201 with the task; 409 when its name is taken or a task is active
``GET /tasks/{name}``       200 with the task; 404 when there is none
``DELETE /tasks/{name}``    204 (the task is stopped, then removed); 404 when there is none
``GET /health``             200 ``{"status": "healthy"}``
==========================  =================================================================

A body that is not JSON, or not the shape a route takes, is 400 and changes nothing. Errors
carry upstream's ``{"code": "<HTTP reason>", "message": "..."}``. Bodies are read by
``Content-Length`` or chunked, up to :data:`MAX_BODY` bytes (413 beyond). A connection that
sends nothing for 30 s is closed (upstream's read and write timeouts).
"""

from __future__ import annotations

import logging
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Final

from services.taskexecutor.core.routes import Route, resolve
from services.taskexecutor.core.wire import WireError, decode_task, decode_tasks, encode
from services.taskexecutor.executor import Refused, TaskExecutor

__all__ = ["MAX_BODY", "ExecutorServer", "make_server"]

log = logging.getLogger(__name__)

MAX_BODY: Final = 8 * 1024 * 1024
IO_TIMEOUT: Final = 30.0


class _BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sandbus-task-executor"
    timeout = IO_TIMEOUT
    executor: ClassVar[TaskExecutor]

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    # --- answering ------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes | None, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        if status != HTTPStatus.NO_CONTENT:  # a 204 carries no Content-Length (RFC 9110 8.6)
            self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, encode(value) + b"\n")

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        body = {"code": HTTPStatus(status).phrase, "message": message}
        self._send(status, encode(body) + b"\n", headers)

    # --- reading --------------------------------------------------------------------------------

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                length = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BodyError(400, "malformed chunked body") from None
            if length == 0:
                while self.rfile.readline(1024).strip():  # trailers
                    pass
                return b"".join(chunks)
            size += length
            if size > MAX_BODY:
                raise _BodyError(413, f"the body is larger than {MAX_BODY} bytes")
            chunks.append(self.rfile.read(length))
            self.rfile.readline(1024)  # the CRLF after the chunk

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        text = self.headers.get("Content-Length")
        if text is None:
            return b""
        try:
            length = int(text)
        except ValueError:
            raise _BodyError(400, f"Content-Length {text!r} is not a number") from None
        if length < 0:
            raise _BodyError(400, f"Content-Length {text!r} is not a number")
        if length > MAX_BODY:
            raise _BodyError(413, f"the body is larger than {MAX_BODY} bytes")
        return self.rfile.read(length)

    # --- routing --------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        try:
            body = self._body()
        except _BodyError as error:
            # The rest of the body is unread: the connection cannot carry another request.
            self.close_connection = True
            self._error(error.status, str(error))
            return
        resolved = resolve(method, self.path)
        if resolved.route is None:
            headers = {"Allow": ", ".join(resolved.allow)} if resolved.allow else None
            self._error(resolved.status, resolved.problem, headers)
            return
        try:
            self._answer(resolved.route, resolved.name, body)
        except WireError as error:
            self._error(400, str(error))
        except Refused as error:
            self._error(409, str(error))
        except Exception as error:
            log.exception("%s %s failed", method, self.path)
            self._error(500, f"{type(error).__name__}: {error}")

    def _answer(self, route: Route, name: str, body: bytes) -> None:
        executor = self.executor
        if route is Route.HEALTH:
            self._json(200, {"status": "healthy"})
        elif route is Route.GET_TASKS:
            self._json(200, executor.list())
        elif route is Route.SET_TASKS:
            result = executor.sync(decode_tasks(body))
            if result.refused:
                self._error(409, "; ".join(result.refused))
            else:
                self._json(200, result.tasks)
        elif route is Route.CREATE_TASK:
            self._json(201, executor.create(decode_task(body)))
        elif route is Route.GET_TASK:
            report = executor.get(name)
            if report is None:
                self._error(404, f"task {name} not found")
            else:
                self._json(200, report)
        elif route is Route.DELETE_TASK:
            if executor.delete(name):
                self._send(204, None)
            else:
                self._error(404, f"task {name} not found")


class ExecutorServer(ThreadingHTTPServer):
    daemon_threads = True
    # A stopping executor does not wait for its connections: a controller's keep-alive one
    # would hold it for the whole read timeout.
    block_on_close = False
    allow_reuse_address = True

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _ExecutorServer6(ExecutorServer):
    address_family = socket.AF_INET6


def make_server(executor: TaskExecutor, host: str, port: int) -> ExecutorServer:
    """Bind ``host:port`` (port 0: any free one) for ``executor``. Raises OSError."""
    handler = type("Handler", (_Handler,), {"executor": executor})
    kind = _ExecutorServer6 if ":" in host else ExecutorServer
    return kind((host, port), handler)
