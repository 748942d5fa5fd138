"""A real OTLP/HTTP endpoint for the export tests: it decodes what `OTLPSpanExporter` posts and keeps the spans."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


@dataclass
class Receiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [s for s in list(self.spans) if s.name.startswith(prefix)]


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve `POST /v1/traces` on a free loopback port until the block ends."""
    lock = threading.Lock()
    received: list[ReceivedSpan] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                for rs in request.resource_spans:
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            received.append(ReceivedSpan(
                                s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                                {a.key: _value(a.value) for a in s.attributes},
                            ))
            body = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received)
    finally:
        server.shutdown()
        server.server_close()
