"""A stand-in for OpenSandbox's task executor, for the tests of the simulated kubelet that runs one
per Pod: ``python fake_task_executor.py --host H --port P --data-dir D [--hold-until FILE]``.

It does what the kubelet relies on and nothing more: it serves HTTP on exactly ``H:P``, answers
``GET /health`` with 200 once serving, and leaves a trace in its data dir (a line per start in
``D/starts``), so a test can tell a restart on the same data dir from a fresh one. With
``--hold-until`` it waits until that file exists before it listens, so a test can watch a Pod
whose executor has started but does not answer yet. SIGTERM ends it (Python's default).
"""

from __future__ import annotations

import argparse
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"ok\n" if self.path == "/health" else b"not found\n"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the kubelet's probes would fill the log


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--hold-until", type=Path, default=None)
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    with (args.data_dir / "starts").open("a") as starts:
        starts.write(f"{os.getpid()}\n")
    while args.hold_until is not None and not args.hold_until.exists():
        time.sleep(0.02)
    server = ThreadingHTTPServer((args.host, args.port), Health)
    print(f"fake task executor serving on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
