"""A small OpenTelemetry receiver for the tests: OTLP over HTTP with protobuf, decoded by the
`opentelemetry-proto` package (OpenTelemetry's own generated classes, not ours), the spans kept in
memory and read back as JSON.

scripts/emulator.sh starts it beside the emulators and exports its address as
`OTLP_RECEIVER_ENDPOINT`; a test points a process at it with the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter posts to `{endpoint}/v1/traces`), so the relays' own
exporter set-up is what is tested, not a test hook.

  POST /v1/traces   an ExportTraceServiceRequest (Content-Type application/x-protobuf, optionally
                    gzip-encoded), answered with an empty ExportTraceServiceResponse. Anything else
                    (JSON, another content type) is 415: the relays send protobuf.
  GET  /spans       every span received, as JSON; `?trace_id=HEX` only that trace's, and spans
                    whose links name it (`?linked=HEX`): [{trace_id, span_id, parent_span_id, name,
                    kind, attributes, links: [{trace_id, span_id, attributes}], status, resource,
                    scope}], ids in lowercase hex, kinds as OTLP names them (SPAN_KIND_CLIENT…),
                    attribute values as plain JSON values.
  DELETE /spans     forgets every span.
  GET  /            200 (the readiness probe).

Usage: python otlp_receiver.py -H 127.0.0.1 -p PORT
"""

import argparse
import gzip
import json
import logging
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

LOG = logging.getLogger("otlp_receiver")
PROTOBUF = "application/x-protobuf"


def value_of(any_value):
    """An OTLP AnyValue as a plain JSON value."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(any_value.kvlist_value.values)
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes_of(key_values):
    return {kv.key: value_of(kv.value) for kv in key_values}


def span_json(span, resource, scope):
    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "name": span.name,
        "kind": Span.SpanKind.Name(span.kind),
        "start_time_unix_nano": span.start_time_unix_nano,
        "end_time_unix_nano": span.end_time_unix_nano,
        "attributes": attributes_of(span.attributes),
        "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                   "attributes": attributes_of(link.attributes)} for link in span.links],
        "status": {"code": span.status.code, "message": span.status.message},
        "resource": resource,
        "scope": scope,
    }


class Store:
    def __init__(self):
        self.lock = threading.Lock()
        self.spans = []

    def add(self, request):
        received = []
        for resource_spans in request.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                scope = scope_spans.scope.name
                received.extend(span_json(span, resource, scope) for span in scope_spans.spans)
        with self.lock:
            self.spans.extend(received)
        return len(received)

    def select(self, trace_id=None, linked=None):
        with self.lock:
            spans = list(self.spans)
        if trace_id is None and linked is None:
            return spans
        return [s for s in spans
                if (trace_id is not None and s["trace_id"] == trace_id)
                or (linked is not None and any(link["trace_id"] == linked for link in s["links"]))]

    def clear(self):
        with self.lock:
            self.spans.clear()


STORE = Store()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        LOG.debug("%s " + fmt, self.address_string(), *args)

    def reply(self, status, body=b"", content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/":
            return self.reply(200, b"{}")
        if url.path != "/spans":
            return self.reply(404, b'{"error": "not found"}')
        query = urllib.parse.parse_qs(url.query)
        spans = STORE.select(trace_id=query.get("trace_id", [None])[0], linked=query.get("linked", [None])[0])
        return self.reply(200, json.dumps(spans).encode())

    def do_DELETE(self):
        if urllib.parse.urlsplit(self.path).path != "/spans":
            return self.reply(404, b'{"error": "not found"}')
        STORE.clear()
        return self.reply(200, b"{}")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if urllib.parse.urlsplit(self.path).path != "/v1/traces":
            return self.reply(404, b'{"error": "only /v1/traces is served"}')
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != PROTOBUF:
            return self.reply(415, json.dumps({"error": f"{content_type!r}: only {PROTOBUF} is served"}).encode())
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as error:  # noqa: BLE001 - any undecodable body is the client's fault
            return self.reply(400, json.dumps({"error": f"not an ExportTraceServiceRequest: {error}"}).encode())
        count = STORE.add(request)
        LOG.info("received %d span(s)", count)
        return self.reply(200, ExportTraceServiceResponse().SerializeToString(), PROTOBUF)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=4318)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    LOG.info("OTLP/HTTP receiver listening on %s:%d", args.host, args.port)
    server.serve_forever()


if __name__ == "__main__":
    main()
