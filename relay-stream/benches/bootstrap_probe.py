#!/usr/bin/env python3
# One-off probe of the release bootstrap, used for docs/benchmarks.md when the Rust bench
# (tests/benches/relay_stream_bootstrap.rs) could not be built in time. Serves the Lambda runtime API
# and a fake AWS JSON endpoint (PutEvents all accepted, UpdateItem {}) on one port.
# Usage: BOOTSTRAP=target/lambda/relay-stream/bootstrap python3 relay-stream/benches/bootstrap_probe.py start|batch [N]
# Minimal runtime API + AWS JSON endpoint for one-off measurements of the release bootstrap.
import http.server, json, subprocess, sys, threading, time, os, statistics
MODE = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
first = {}
done = threading.Event()
def record(i):
    eid = f"0194f7c2-8a4b-7d3e-9c1a-{i:012d}"
    return {"eventID": f"ev{i}", "eventName": "INSERT", "awsRegion": "us-east-1", "dynamodb": {
        "ApproximateCreationDateTime": int(time.time()), "Keys": {"PK": {"S": "USER#b"}, "SK": {"S": "OUTBOX#"+eid}},
        "NewImage": {"PK": {"S": "USER#b"}, "SK": {"S": "OUTBOX#"+eid}, "EntityType": {"S": "OutboxEvent"},
            "EventId": {"S": eid}, "EventType": {"S": "OrderCreated"}, "AggregateType": {"S": "Order"},
            "AggregateId": {"S": f"o-{i}"}, "Sequence": {"N": "1"},
            "Payload": {"S": json.dumps({"orderId": f"o-{i}", "amountCents": 1200, "status": "CREATED"})},
            "Status": {"S": "PENDING"}, "CreatedAt": {"S": "2026-11-28T08:00:00.000Z"},
            "GSI1PK": {"S": "OUTBOX#PENDING#1"}, "GSI1SK": {"S": "EVENT#x#"+eid}},
        "SequenceNumber": f"{i:021d}", "SizeBytes": 600, "StreamViewType": "NEW_AND_OLD_IMAGES"}}
EVENT = json.dumps({"Records": [record(i) for i in range(N)]}).encode()
served = [False]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, code, body, headers={}):
        self.send_response(code)
        for k, v in headers.items(): self.send_header(k, v)
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        first.setdefault("t", time.monotonic())
        if MODE == "start" or served[0]:
            done.set(); time.sleep(3600); return
        served[0] = True
        self.reply(200, EVENT, {"lambda-runtime-aws-request-id": "r1", "lambda-runtime-deadline-ms": str(int(time.time()*1000)+300000),
            "lambda-runtime-invoked-function-arn": "arn:aws:lambda:us-east-1:0:function:f", "content-type": "application/json"})
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        target = self.headers.get("x-amz-target", "")
        if target.endswith("PutEvents"):
            n = len(json.loads(body)["Entries"])
            self.reply(200, json.dumps({"FailedEntryCount": 0, "Entries": [{"EventId": "e"}]*n}).encode(), {"content-type": "application/x-amz-json-1.1"})
        elif target:
            self.reply(200, b"{}", {"content-type": "application/x-amz-json-1.0"})
        else:
            first["response"] = body; self.reply(202, b""); done.set()
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H); port = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
env = dict(os.environ, AWS_LAMBDA_RUNTIME_API=f"http://127.0.0.1:{port}", AWS_LAMBDA_FUNCTION_NAME="relay-stream",
    AWS_LAMBDA_FUNCTION_VERSION="1", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="128", AWS_LAMBDA_LOG_FORMAT="JSON",
    TABLE_NAME="t", EVENT_BUS_NAME="b", EVENT_SOURCE="s", AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
    AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true", RUST_LOG="warn")
t0 = time.monotonic()
p = subprocess.Popen([os.environ.get("BOOTSTRAP", "./bootstrap")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
done.wait(120)
if MODE == "start":
    print(f"{(first['t']-t0)*1000:.2f}")
else:
    rss = [l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmHWM")][0].split()[1]
    print(f"batch {N}: {(time.monotonic()-t0)*1000:.0f} ms, peak RSS {int(rss)/1024:.1f} MiB, response {first.get('response', b'')[:200]!r}")
p.kill()
