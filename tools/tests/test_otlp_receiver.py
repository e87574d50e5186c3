"""The tests' OTLP receiver (tools/otlp_receiver.py) against what an OTLP/HTTP exporter sends: an
ExportTraceServiceRequest built with OpenTelemetry's own protobuf classes (opentelemetry-proto),
posted as the specification's OTLP/HTTP binary encoding, read back as JSON.

Run: scripts/emulator.sh run -- .venv/bin/python -m pytest tools/tests (make test does)."""

import gzip
import json
import os
import urllib.error
import urllib.request

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

TRACE = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
WRITER_SPAN = bytes.fromhex("00f067aa0ba902b7")


@pytest.fixture(scope="module")
def receiver():
    url = os.environ.get("OTLP_RECEIVER_ENDPOINT")
    if not url:
        pytest.fail("OTLP_RECEIVER_ENDPOINT is not set: run under scripts/emulator.sh", pytrace=False)
    return url


def request_with(span):
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="relay")))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "relay-runtime"
    scope_spans.spans.append(span)
    return request.SerializeToString()


def post(url, body, content_type="application/x-protobuf", encoding=None):
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    request = urllib.request.Request(f"{url}/v1/traces", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def spans(url, **query):
    text = "&".join(f"{k}={v}" for k, v in query.items())
    with urllib.request.urlopen(f"{url}/spans?{text}", timeout=5) as response:
        return json.loads(response.read())


def test_a_span_posted_as_otlp_protobuf_is_read_back_with_its_links_and_attributes(receiver):
    # Given a batch publish span in a trace of its own, linked to the writer's span
    own_trace = os.urandom(16)
    span = Span(trace_id=own_trace, span_id=os.urandom(8), name="publish orders", kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=1, end_time_unix_nano=2,
                attributes=[KeyValue(key="messaging.batch.message_count", value=AnyValue(int_value=2))])
    link = span.links.add(trace_id=TRACE, span_id=WRITER_SPAN)
    link.attributes.append(KeyValue(key="messaging.message.id", value=AnyValue(string_value="event-1")))

    # When it is posted gzip-encoded, as an exporter may
    status, body = post(receiver, gzip.compress(request_with(span)), encoding="gzip")

    # Then the answer is an ExportTraceServiceResponse, and the span is found by its trace and its link
    assert status == 200
    ExportTraceServiceResponse().ParseFromString(body)
    [by_trace] = spans(receiver, trace_id=own_trace.hex())
    assert [s["span_id"] for s in spans(receiver, linked=TRACE.hex())].count(by_trace["span_id"]) == 1
    assert by_trace["name"] == "publish orders"
    assert by_trace["kind"] == "SPAN_KIND_CLIENT"
    assert by_trace["attributes"] == {"messaging.batch.message_count": 2}
    assert by_trace["links"] == [{"trace_id": TRACE.hex(), "span_id": WRITER_SPAN.hex(),
                                  "attributes": {"messaging.message.id": "event-1"}}]
    assert by_trace["resource"] == {"service.name": "relay"}
    assert by_trace["scope"] == "relay-runtime"


def test_what_is_not_otlp_protobuf_is_refused(receiver):
    assert post(receiver, b"{}", content_type="application/json")[0] == 415
    assert post(receiver, b"\xff\xff\xff")[0] == 400
