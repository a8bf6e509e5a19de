"""The pure parts of the development router (devtools/router.py) and of the sandbox runtime
(devtools/sandboxruntime): reading the SDK's router headers, choosing the Pod IP (503 while the
Sandbox is not Ready; a client's X-Sandbox-Pod-IP only among the Sandbox's own), confining
paths to the sandbox's directory and reading a multipart upload as requests sends it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from devtools.router import DEFAULT_TIMEOUT, Route, RoutingError, parse_route, target_ip
from devtools.sandboxruntime.files import Escape, confined, parse_multipart


def _sandbox(ready: str | None, ips: list[str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"podIPs": ips or []}
    if ready is not None:
        status["conditions"] = [
            {"type": "Ready", "status": ready, "reason": "PodNotReady", "message": "waiting"}
        ]
    return {"status": status}


def test_the_headers_the_sdk_sends() -> None:
    route = parse_route(
        {
            "X-Sandbox-ID": "python-sandbox-pool-abcde",
            "X-Sandbox-Namespace": "team-a",
            "X-Sandbox-Port": "8888",
            "X-Sandbox-Pod-IP": "127.244.0.2",
            "X-Sandbox-Timeout": "70",
        }
    )
    assert route == Route("python-sandbox-pool-abcde", "team-a", 8888, "127.244.0.2", 70.0)
    assert parse_route({"X-Sandbox-ID": "s"}) == Route("s", "default", 8888, None, DEFAULT_TIMEOUT)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Sandbox-ID": "Not_A_Name"},
        {"X-Sandbox-ID": "s", "X-Sandbox-Port": "http"},
        {"X-Sandbox-ID": "s", "X-Sandbox-Port": "70000"},
        {"X-Sandbox-ID": "s", "X-Sandbox-Namespace": "../x"},
    ],
)
def test_malformed_headers_are_a_400(headers: dict[str, str]) -> None:
    with pytest.raises(RoutingError) as raised:
        parse_route(headers)
    assert raised.value.status == 400


def test_the_pod_ip_is_the_sandboxs_own() -> None:
    route = parse_route({"X-Sandbox-ID": "s", "X-Sandbox-Pod-IP": "10.0.0.9"})
    assert target_ip(_sandbox("True", ["127.244.0.2"]), route) == "127.244.0.2"
    chosen = parse_route({"X-Sandbox-ID": "s", "X-Sandbox-Pod-IP": "127.244.0.3"})
    assert target_ip(_sandbox("True", ["127.244.0.2", "127.244.0.3"]), chosen) == "127.244.0.3"


@pytest.mark.parametrize(
    "sandbox", [_sandbox(None), _sandbox("False", ["127.244.0.2"]), _sandbox("True")]
)
def test_not_ready_or_no_ip_is_a_503(sandbox: dict[str, Any]) -> None:
    with pytest.raises(RoutingError) as raised:
        target_ip(sandbox, parse_route({"X-Sandbox-ID": "s"}))
    assert raised.value.status == 503
    assert raised.value.message.startswith("sandbox default/s is ")


def test_paths_stay_in_the_sandbox(tmp_path: Path) -> None:
    base = str(tmp_path)
    assert confined(base, "/a/b.txt") == str(tmp_path / "a" / "b.txt")
    assert confined(base, ".") == str(tmp_path)
    (tmp_path / "link").symlink_to("/etc")
    for bad in ("../x", "a/../../x", "link/passwd"):
        with pytest.raises(Escape):
            confined(base, bad)


def test_a_multipart_upload_as_requests_sends_it() -> None:
    content = bytes(range(256)) + b"\r\n--not-the-boundary\r\n"
    prepared = requests.Request(
        "POST", "http://x/upload", files={"file": ("dir/data.bin", content)}
    ).prepare()
    body = prepared.body
    assert isinstance(body, bytes)
    upload = parse_multipart(prepared.headers["Content-Type"], body)
    assert upload is not None
    assert (upload.filename, upload.content) == ("dir/data.bin", content)
    assert parse_multipart("application/json", body) is None
