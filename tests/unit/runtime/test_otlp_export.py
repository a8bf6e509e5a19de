"""OTLP export when configured: ``OTEL_EXPORTER_OTLP_ENDPOINT`` sends the spans to a collector
over OTLP/HTTP (a real HTTP server on the loopback here, decoding what it receives)."""

from __future__ import annotations

import http.server
import logging
import sys
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from services.runtime.reconcile.tracing import (
    OTLP_ENDPOINT_ENV,
    OTLP_TRACES_ENDPOINT_ENV,
    TRACING_ENV,
    otlp_traces_endpoint,
    tracing_from_environment,
)


class Collector(http.server.BaseHTTPRequestHandler):
    """Takes OTLP/HTTP export requests and keeps them (path, content type, body)."""

    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.received.append((self.path, self.headers.get("Content-Type") or "", body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    received: list[tuple[str, str, bytes]] = []
    handler = type("OneCollector", (Collector,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_the_endpoint_is_composed_as_the_specification_says() -> None:
    assert otlp_traces_endpoint({}) is None
    assert otlp_traces_endpoint({OTLP_ENDPOINT_ENV: " "}) is None
    assert otlp_traces_endpoint({OTLP_ENDPOINT_ENV: "http://c:4318"}) == "http://c:4318/v1/traces"
    assert otlp_traces_endpoint({OTLP_ENDPOINT_ENV: "http://c:4318/"}) == "http://c:4318/v1/traces"
    both = {OTLP_ENDPOINT_ENV: "http://c:4318", OTLP_TRACES_ENDPOINT_ENV: "http://t:1/x"}
    assert otlp_traces_endpoint(both) == "http://t:1/x", "the signal's own, as given"


def test_a_configured_endpoint_receives_the_spans(
    collector: tuple[str, list[tuple[str, str, bytes]]],
) -> None:
    url, received = collector
    tracing = tracing_from_environment("sandbus-claim", {OTLP_ENDPOINT_ENV: url})
    assert tracing is not None, "an endpoint alone turns tracing on"
    with tracing.tracer.start_as_current_span("ReconcileSandboxClaim"):
        pass
    tracing.shutdown()  # flushes the batch
    assert [(path, kind) for path, kind, _ in received] == [
        ("/v1/traces", "application/x-protobuf")
    ]
    request = ExportTraceServiceRequest.FromString(received[0][2])
    (resource_spans,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert service["service.name"] == "sandbus-claim"
    names = [span.name for scope in resource_spans.scope_spans for span in scope.spans]
    assert names == ["ReconcileSandboxClaim"]


def test_tracing_turned_off_stays_off_with_an_endpoint() -> None:
    assert (
        tracing_from_environment("svc", {OTLP_ENDPOINT_ENV: "http://c:4318", TRACING_ENV: "off"})
        is None
    )


def test_without_an_endpoint_nothing_is_exported(
    collector: tuple[str, list[tuple[str, str, bytes]]],
) -> None:
    _, received = collector
    tracing = tracing_from_environment("svc", {TRACING_ENV: "on"})
    assert tracing is not None
    with tracing.tracer.start_as_current_span("s"):
        pass
    tracing.shutdown()
    assert received == []


def test_without_the_exporter_package_tracing_goes_on_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with caplog.at_level(logging.WARNING):
        tracing = tracing_from_environment("svc", {OTLP_ENDPOINT_ENV: "http://c:4318"})
    assert tracing is not None
    with tracing.tracer.start_as_current_span("s") as span:
        assert span.get_span_context().is_valid
    tracing.shutdown()
    assert "opentelemetry-exporter-otlp-proto-http is not installed" in caplog.text
