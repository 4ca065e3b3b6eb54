"""An OTLP/HTTP trace receiver for the end-to-end tests, built on the official `opentelemetry-proto`
package: `POST /v1/traces` takes an `ExportTraceServiceRequest` (protobuf) and keeps its spans;
`GET /spans` lists them as JSON (ids in hex, attributes as plain values, the resource's and the
scope's too, with the export's `content-type` and `authorization`); `POST /stall` makes every
later export wait 30 s before answering (a slow collector). Listens on 127.0.0.1 on a free port
and writes it to the file named by its first argument; with two more (a PEM certificate chain and
its key) it serves HTTPS.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SPANS = []
LOCK = threading.Lock()
STALLED = threading.Event()


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/stall":
            STALLED.set()
            return self.answer(200, b"{}", "application/json")
        if self.path != "/v1/traces":
            return self.answer(404, b"{}", "application/json")
        if STALLED.is_set():
            time.sleep(30)
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        got = []
        for rs in req.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        {
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "name": s.name,
                            "kind": s.kind,
                            "start_ns": s.start_time_unix_nano,
                            "end_ns": s.end_time_unix_nano,
                            "status": s.status.code,
                            "status_message": s.status.message,
                            "flags": s.flags,
                            "attributes": attributes(s.attributes),
                            "resource": resource,
                            "scope": ss.scope.name,
                            "scope_version": ss.scope.version,
                            "content_type": self.headers.get("content-type"),
                            "authorization": self.headers.get("authorization"),
                        }
                    )
        with LOCK:
            SPANS.extend(got)
        self.answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self):
        if self.path != "/spans":
            return self.answer(404, b"{}", "application/json")
        with LOCK:
            body = json.dumps(SPANS).encode()
        self.answer(200, body, "application/json")

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if len(sys.argv) > 3:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[2], sys.argv[3])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os

    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
