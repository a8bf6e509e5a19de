"""The runtime's HTTP API, the legacy python runtime's as agent-sandbox's SDK calls it:

- ``GET /`` — health (the quick-start template's readiness probe): ``{"status": "ok", ...}``;
- ``POST /execute`` ``{"command": str, "timeout_seconds": float?}`` →
  ``{"stdout", "stderr", "exit_code", "timed_out"}`` (see :mod:`.commands`);
- ``POST /upload`` — multipart/form-data, part ``file``, its filename the destination path;
- ``GET /download/<path>`` — the file's bytes, 404 when it is not a file;
- ``GET /list/<path>`` — the directory's entries, 404 when it is not a directory;
- ``GET /exists/<path>`` — ``{"path", "exists"}``.

``<path>`` comes percent-encoded (the SDK encodes ``/`` too), relative to the sandbox's
directory; one leading out of it is a 403. A thread per connection (a long command does not
hold up the others), HTTP/1.1 keep-alive, and bodies with a length or chunked. The standard
library only: one of these runs per sandbox Pod, so it must start fast and small.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from devtools.sandboxruntime.commands import Commands
from devtools.sandboxruntime.files import Escape, confined, listing, parse_multipart

__all__ = ["RuntimeServer"]

log = logging.getLogger(__name__)

_MAX_BODY: Final = 1 << 30  # what one request may upload
_CHUNK: Final = 1 << 16


class RuntimeServer(ThreadingHTTPServer):
    """Serves one sandbox: its directory and its commands."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], base_dir: str, commands: Commands, info: dict[str, Any]
    ) -> None:
        self.base_dir = base_dir
        self.commands = commands
        self.default_timeout = _default_timeout()
        self.info = info
        super().__init__(address, _Handler)


def _default_timeout() -> float:
    """The limit of a command that names none: ``SANDBOX_EXEC_TIMEOUT_SECONDS``, 300 by default
    (the upstream runtime's variable and default)."""
    try:
        value = float(os.environ.get("SANDBOX_EXEC_TIMEOUT_SECONDS", "300"))
    except ValueError:
        return 300.0
    return value if 0 < value < float("inf") else 300.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RuntimeServer

    # -- routing -------------------------------------------------------------------------------

    def do_GET(self) -> None:
        route, _, rest = self.path.lstrip("/").partition("/")
        relative = urllib.parse.unquote(rest.split("?", 1)[0])
        if route == "":
            self._json(HTTPStatus.OK, {"status": "ok", **self.server.info})
        elif route == "download":
            self._with_path(relative, self._download)
        elif route == "list":
            self._with_path(relative, self._list)
        elif route == "exists":
            self._with_path(relative, lambda full: self._exists(relative, full))
        else:
            self._json(HTTPStatus.NOT_FOUND, {"message": f"no such endpoint: GET {self.path}"})

    def do_POST(self) -> None:
        body = self._body()
        if body is None:
            return
        if self.path == "/execute":
            self._execute(body)
        elif self.path == "/upload":
            self._upload(body)
        else:
            self._json(HTTPStatus.NOT_FOUND, {"message": f"no such endpoint: POST {self.path}"})

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # -- endpoints -----------------------------------------------------------------------------

    def _execute(self, body: bytes) -> None:
        try:
            request = json.loads(body)
            command = request["command"]
            timeout = request.get("timeout_seconds") or self.server.default_timeout
            if not isinstance(command, str) or not float(timeout) > 0:
                raise ValueError("command must be a string, timeout_seconds a positive number")
        except (ValueError, KeyError, TypeError) as error:
            self._json(HTTPStatus.UNPROCESSABLE_ENTITY, {"message": f"bad request: {error}"})
            return
        outcome = self.server.commands.run(command, float(timeout))
        self._json(HTTPStatus.OK, outcome.as_json())

    def _upload(self, body: bytes) -> None:
        upload = parse_multipart(self.headers.get("Content-Type", ""), body)
        if upload is None:
            self._json(HTTPStatus.BAD_REQUEST, {"message": "expected a multipart part 'file'"})
            return
        try:
            full = confined(self.server.base_dir, upload.filename)
        except Escape:
            self._json(HTTPStatus.FORBIDDEN, {"message": "Access denied"})
            return
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as out:
            out.write(upload.content)
        message = f"File '{upload.filename}' uploaded successfully."
        self._json(HTTPStatus.OK, {"message": message})

    def _download(self, full: str) -> None:
        if not os.path.isfile(full):
            self._json(HTTPStatus.NOT_FOUND, {"message": "File not found"})
            return
        size = os.path.getsize(full)
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with open(full, "rb") as source:
            while chunk := source.read(_CHUNK):
                self.wfile.write(chunk)

    def _list(self, full: str) -> None:
        if not os.path.isdir(full):
            self._json(HTTPStatus.NOT_FOUND, {"message": "Path is not a directory"})
            return
        self._json(HTTPStatus.OK, listing(full))

    def _exists(self, relative: str, full: str) -> None:
        self._json(HTTPStatus.OK, {"path": relative, "exists": os.path.exists(full)})

    # -- plumbing ------------------------------------------------------------------------------

    def _with_path(self, relative: str, then: Any) -> None:
        try:
            full = confined(self.server.base_dir, relative)
        except Escape:
            self._json(HTTPStatus.FORBIDDEN, {"message": "Access denied"})
            return
        then(full)

    def _body(self) -> bytes | None:
        """The request's body, by Content-Length or chunked; None once an error is answered."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"message": "body too large"})
            return None
        return self.rfile.read(length)

    def _chunked(self) -> bytes | None:
        parts: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > _MAX_BODY:
                self.close_connection = True
                self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"message": "body too large"})
                return None
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after the chunk

    def _json(self, status: HTTPStatus, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
