"""The Custom Event Bus double (tools/custom_bus_double.py) against the documented behaviour of
EventBridge's Custom Event Bus, through boto3's eventbridgev2 client (botocore's own Smithy RPC v2
CBOR serializer and parser), with subscribers delivering into moto's SQS.

Run: scripts/emulator.sh run -- .venv/bin/python -m pytest tools/tests (make test does)."""

import concurrent.futures
import datetime
import json
import os
import random
import re
import time
import urllib.error
import urllib.request

import botocore.exceptions
import cbor2
import pytest

from conftest import ROLE_ARN, unique

BUS_ARN = re.compile(r"arn:aws:events:us-east-1:123456789012:event-busv2/[A-Za-z0-9][.\-_A-Za-z0-9]*/[a-z0-9]{25}")


def entry(n=0, group=None, dedup=None, **fields):
    out = {"Source": "com.example.orders", "DetailType": "OrderPlaced", "Detail": json.dumps({"n": n})}
    meta = {}
    if group is not None:
        meta["EventGroupId"] = group
    if dedup is not None:
        meta["DeduplicationId"] = dedup
    if meta:
        out["SystemMetadata"] = meta
    out.update(fields)
    return out


def error_of(call):
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        call()
    response = raised.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def bodies(messages):
    return [json.loads(m["Body"]) for m in messages]


# --- buses and subscribers


def test_create_and_describe_bus(eb):
    # Given a new bus name
    name = unique("orders")
    # When the bus is created with a retention period and described
    created = eb.create_event_bus(Name=name, StorageConfiguration={"RetentionPeriodInDays": 7})
    described = eb.describe_event_bus(EventBusArn=created["EventBusArn"])
    # Then its ARN is the documented event-busv2 ARN with a generated id, and it is ACTIVE
    assert BUS_ARN.fullmatch(created["EventBusArn"]), created["EventBusArn"]
    assert created["EventBusArn"].split("/")[1] == name
    assert described["Name"] == name
    assert described["State"] == "ACTIVE"
    assert described["StorageConfiguration"]["RetentionPeriodInDays"] == 7
    assert isinstance(described["CreationTime"], datetime.datetime)
    assert abs(described["CreationTime"].timestamp() - time.time()) < 60
    # And the same name again is refused, and an unknown ARN is not found
    assert error_of(lambda: eb.create_event_bus(Name=name)) == ("ResourceAlreadyExistsException", 409)
    unknown = created["EventBusArn"][:-1] + ("a" if created["EventBusArn"][-1] != "a" else "b")
    assert error_of(lambda: eb.describe_event_bus(EventBusArn=unknown)) == ("ResourceNotFoundException", 404)


def test_a_create_resent_with_its_client_token_answers_the_first_bus(eb):
    # Given a bus created with a ClientToken (the SDKs fill one in and resend it on a retry)
    name, token = unique("retried"), unique("token")
    first = eb.create_event_bus(Name=name, ClientToken=token)["EventBusArn"]
    # When the same create is sent again, Then it answers the same bus; other parameters are a mismatch
    assert eb.create_event_bus(Name=name, ClientToken=token)["EventBusArn"] == first
    assert error_of(lambda: eb.create_event_bus(Name=unique("other"), ClientToken=token)) == \
        ("IdempotentParameterMismatchException", 409)
    assert [b["EventBusArn"] for b in eb.list_event_buses(NamePrefix=name)["EventBuses"]] == [first]


def test_subscribers_are_described_and_deleted_before_their_bus(eb, bus, make_queue, subscribe):
    # Given a bus with a FIFO subscriber into a FIFO queue
    queue = make_queue(fifo=True)
    subscriber = subscribe(bus, queue, "FIFO")
    # Then it is described as created
    described = eb.describe_subscriber(SubscriberArn=subscriber)
    assert (described["Type"], described["State"], described["EventBusArn"]) == ("FIFO", "RUNNING", bus)
    assert described["InvokeConfiguration"]["TargetArn"] == queue.arn
    assert [s["SubscriberArn"] for s in eb.list_subscribers(EventBusArn=bus)["Subscribers"]] == [subscriber]
    # And the bus cannot be deleted while it has a subscriber
    assert error_of(lambda: eb.delete_event_bus(EventBusArn=bus)) == ("ResourceInUseException", 409)
    # When the subscriber is deleted, the bus can be
    eb.delete_subscriber(SubscriberArn=subscriber)
    eb.delete_event_bus(EventBusArn=bus)
    assert error_of(lambda: eb.describe_event_bus(EventBusArn=bus)) == ("ResourceNotFoundException", 404)
    assert error_of(lambda: eb.describe_subscriber(SubscriberArn=subscriber)) == ("ResourceNotFoundException", 404)


def test_subscriber_on_unknown_bus_or_with_unmodelled_settings_is_refused(eb, bus, make_queue):
    queue = make_queue(fifo=False)
    invoke = {"RoleArn": ROLE_ARN, "TargetArn": queue.arn}
    unknown = bus[:-1] + ("a" if bus[-1] != "a" else "b")
    assert error_of(lambda: eb.create_subscriber(Name=unique("s"), EventBusArn=unknown, InvokeConfiguration=invoke)) \
        == ("ResourceNotFoundException", 404)
    # A filter would silently match everything if ignored, so the double refuses it.
    assert error_of(lambda: eb.create_subscriber(
        Name=unique("s"), EventBusArn=bus, InvokeConfiguration=invoke,
        FilterConfiguration={"Filters": [{"Scope": "DATA", "Pattern": "{}"}]})) == ("InvalidInputException", 400)


# --- PutEvents results and deduplication


def test_put_events_publishes_each_entry_with_an_id_and_increasing_sequence_numbers(eb, bus):
    # When three entries are published
    reply = eb.put_events(EventBusArn=bus, Entries=[entry(i, group="order-1", dedup=f"e{i}") for i in range(3)])
    # Then each is PUBLISHED with its own EventId and increasing SequenceNumber, in request order
    assert reply["FailedEntryCount"] == 0
    assert [e["SuccessCode"] for e in reply["Entries"]] == ["PUBLISHED"] * 3
    assert len({e["EventId"] for e in reply["Entries"]}) == 3
    sequence = [int(e["SequenceNumber"]) for e in reply["Entries"]]
    assert sequence == sorted(sequence) and len(set(sequence)) == 3
    assert all("ErrorCode" not in e for e in reply["Entries"])


def test_a_repeat_within_the_window_is_deduplicated_and_delivered_once(eb, bus, make_queue, subscribe):
    # Given a subscriber into a standard queue
    queue = make_queue(fifo=False)
    subscribe(bus, queue, "UNORDERED")
    # When an entry is published twice with one DeduplicationId, in two calls and twice in one call
    first = eb.put_events(EventBusArn=bus, Entries=[entry(1, group="g", dedup="event-1")])["Entries"][0]
    again = eb.put_events(EventBusArn=bus, Entries=[entry(1, group="g", dedup="event-1"),
                                                    entry(2, group="g", dedup="event-2"),
                                                    entry(2, group="g", dedup="event-2")])["Entries"]
    # Then the repeats are DEDUPLICATED (a success) naming the event they repeat
    assert first["SuccessCode"] == "PUBLISHED"
    assert [e["SuccessCode"] for e in again] == ["DEDUPLICATED", "PUBLISHED", "DEDUPLICATED"]
    assert again[0]["EventId"] == first["EventId"]
    assert again[2]["EventId"] == again[1]["EventId"]
    # And the queue gets each event once
    delivered = bodies(queue.receive(2))
    assert sorted(b["detail"]["n"] for b in delivered) == [1, 2]
    assert queue.receive(1, timeout=0.5) == []


def test_deduplication_is_scoped_per_event_group_and_ungrouped_entries_share_one_scope(eb, bus):
    # When one DeduplicationId is used in two groups, ungrouped twice, and ungrouped vs a group
    codes = [e["SuccessCode"] for e in eb.put_events(EventBusArn=bus, Entries=[
        entry(group="order-A", dedup="same"),
        entry(group="order-B", dedup="same"),
        entry(dedup="same"),
        entry(dedup="same"),
        entry(group="order-A", dedup="same"),
    ])["Entries"]]
    # Then only the repeats within one scope are DEDUPLICATED
    assert codes == ["PUBLISHED", "PUBLISHED", "PUBLISHED", "DEDUPLICATED", "DEDUPLICATED"]


def test_content_based_deduplication(eb, bus):
    # When two identical entries without DeduplicationId are published with CONTENT_BASED dedup
    codes = [e["SuccessCode"] for e in eb.put_events(
        EventBusArn=bus, Entries=[entry(1), entry(1), entry(2)],
        DeduplicationConfiguration={"DeduplicationType": "CONTENT_BASED"})["Entries"]]
    # Then the identical one is DEDUPLICATED; without the setting nothing is
    assert codes == ["PUBLISHED", "DEDUPLICATED", "PUBLISHED"]
    assert [e["SuccessCode"] for e in eb.put_events(EventBusArn=bus, Entries=[entry(1), entry(1)])["Entries"]] \
        == ["PUBLISHED", "PUBLISHED"]


def test_a_repeat_after_the_window_is_published_again(private_double):
    # Given a double whose dedup window is shortened to 1 s (AWS: 300 s, fixed)
    eb = private_double(CUSTOM_BUS_DEDUP_WINDOW_SECONDS="1")
    bus = eb.create_event_bus(Name=unique("short-window"))["EventBusArn"]
    first = eb.put_events(EventBusArn=bus, Entries=[entry(group="g", dedup="event-1")])["Entries"][0]
    within = eb.put_events(EventBusArn=bus, Entries=[entry(group="g", dedup="event-1")])["Entries"][0]
    # When the same DeduplicationId comes back after the window
    time.sleep(1.2)
    after = eb.put_events(EventBusArn=bus, Entries=[entry(group="g", dedup="event-1")])["Entries"][0]
    # Then it is a new event to the bus
    assert (first["SuccessCode"], within["SuccessCode"], after["SuccessCode"]) == \
        ("PUBLISHED", "DEDUPLICATED", "PUBLISHED")
    assert after["EventId"] != first["EventId"]


# --- validation


def too_long(n):
    return "x" * n


INVALID_REQUESTS = {
    "no entries": {"Entries": []},
    "101 entries": {"Entries": [entry(i) for i in range(101)]},
    "Source of 257": {"Entries": [entry(Source=too_long(257))]},
    "empty Source": {"Entries": [entry(Source="")]},
    "reserved aws. source": {"Entries": [entry(Source="aws.orders")]},
    "DetailType of 129": {"Entries": [entry(DetailType=too_long(129))]},
    "Detail not JSON": {"Entries": [entry(Detail="{not json")]},
    "EventGroupId of 129": {"Entries": [entry(group=too_long(129))]},
    "DeduplicationId of 129": {"Entries": [entry(dedup=too_long(129))]},
    "DeduplicationId of whitespace": {"Entries": [entry(dedup=" \t ")]},
    "101 Resources": {"Entries": [entry(Resources=["r"] * 101)]},
    "a Resource of 2049": {"Entries": [entry(Resources=[too_long(2049)])]},
    "missing DetailType": {"Entries": [{"Source": "s"}]},
    "unknown DeduplicationType": {"Entries": [entry()], "DeduplicationConfiguration": {"DeduplicationType": "X"}},
    "malformed bus ARN": {"EventBusArn": "my-bus", "Entries": [entry()]},
}


@pytest.mark.parametrize("case", sorted(INVALID_REQUESTS))
def test_invalid_input_rejects_the_whole_request(eb_unchecked, bus, case):
    # Given a request one of whose members breaks a documented constraint, beside a valid entry
    params = {"EventBusArn": bus, **INVALID_REQUESTS[case]}
    # When it is published, Then the whole call fails with InvalidInputException (400)
    assert error_of(lambda: eb_unchecked.put_events(**params)) == ("InvalidInputException", 400)


def test_documented_maximum_lengths_are_accepted(eb_unchecked, bus):
    # The limits themselves are valid: 100 entries; Source 256; DetailType, EventGroupId, DeduplicationId 128.
    reply = eb_unchecked.put_events(EventBusArn=bus, Entries=[
        entry(i, Source=too_long(256), DetailType=too_long(128), Resources=[too_long(2048)] * 100,
              SystemMetadata={"EventGroupId": too_long(128), "DeduplicationId": f"{i:0128d}"})
        for i in range(100)])
    assert [e["SuccessCode"] for e in reply["Entries"]] == ["PUBLISHED"] * 100


def test_unknown_bus_is_not_found(eb, bus):
    unknown = bus[:-1] + ("a" if bus[-1] != "a" else "b")
    assert error_of(lambda: eb.put_events(EventBusArn=unknown, Entries=[entry()])) == ("ResourceNotFoundException", 404)


def post(url, body, headers):
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


CBOR_HEADERS = {"Content-Type": "application/cbor", "Accept": "application/cbor", "smithy-protocol": "rpc-v2-cbor"}


@pytest.mark.parametrize("case,body,headers,want", [
    ("undecodable body", b"\xff\x00garbage", CBOR_HEADERS, (400, "InvalidInputException")),
    ("body not a map", cbor2.dumps([1, 2]), CBOR_HEADERS, (400, "InvalidInputException")),
    ("no smithy-protocol header", cbor2.dumps({}), {"Content-Type": "application/cbor"}, (400, "InvalidInputException")),
    ("JSON body", b"{}", {**CBOR_HEADERS, "Content-Type": "application/json"}, (415, "UnsupportedMediaTypeException")),
])
def test_wire_errors_are_cbor_maps_with_type_and_message(bus_endpoint, case, body, headers, want):
    # When a request breaks the protocol itself
    status, response_headers, payload = post(f"{bus_endpoint}/service/AWSEventsV2/operation/PutEvents", body, headers)
    # Then the answer is the RPC v2 CBOR error shape with the error's status
    error = cbor2.loads(payload)
    assert (status, error["__type"].split("#")[-1]) == want
    assert error["message"]
    assert response_headers.get("smithy-protocol") == "rpc-v2-cbor"
    assert response_headers.get("Content-Type") == "application/cbor"


def test_unknown_operation(bus_endpoint):
    status, _, payload = post(f"{bus_endpoint}/service/AWSEventsV2/operation/NoSuchThing", cbor2.dumps({}),
                              CBOR_HEADERS)
    assert (status, cbor2.loads(payload)["__type"].split("#")[-1]) == (404, "UnknownOperationException")


# --- delivery


def interleaved(groups, per_group, seed=7):
    """(group, n) for n in 0..per_group of each group, the groups merged in a seeded random order, so
    a group's events are sometimes adjacent and sometimes far apart."""
    rng = random.Random(seed)
    next_n = {f"order-{g}": 0 for g in range(groups)}
    out = []
    while next_n:
        group = rng.choice(sorted(next_n))
        out.append((group, next_n[group]))
        next_n[group] += 1
        if next_n[group] == per_group:
            del next_n[group]
    return out


def test_fifo_subscriber_delivers_each_group_in_publish_order_under_many_interleaved_groups(
        eb, bus, make_queue, subscribe):
    # Given a FIFO subscriber into a FIFO queue, the group as MessageGroupId
    queue = make_queue(fifo=True)
    subscribe(bus, queue, "FIFO",
              invoke={"SqsParameters": {"MessageGroupId": "{% $events.SystemMetadata.EventGroupId %}"}})
    groups, per_group = 25, 12
    published = interleaved(groups, per_group)
    # When events of 25 groups are published interleaved at random, 100 per call
    for start in range(0, len(published), 100):
        reply = eb.put_events(EventBusArn=bus, Entries=[
            entry(n, group=g, dedup=f"{g}/{n}") for g, n in published[start:start + 100]])
        assert reply["FailedEntryCount"] == 0
    # Then every event arrives once, each group in publish order, under its own MessageGroupId
    messages = queue.receive(len(published), timeout=20)
    assert len(messages) == len(published)
    seen = {}
    for message in messages:
        body = json.loads(message["Body"])
        group = message["Attributes"]["MessageGroupId"]
        seen.setdefault(group, []).append(body["detail"]["n"])
    assert seen == {f"order-{g}": list(range(per_group)) for g in range(groups)}
    assert queue.receive(1, timeout=0.5) == []


def test_unordered_subscriber_may_reorder_a_group(eb, bus, make_queue, subscribe):
    # Given an UNORDERED subscriber into a FIFO queue with one constant MessageGroupId (so the queue
    # keeps exactly the order the subscriber sent)
    queue = make_queue(fifo=True)
    subscribe(bus, queue, "UNORDERED", invoke={"SqsParameters": {"MessageGroupId": "all"}})
    # When ten events of one group are published in one call
    eb.put_events(EventBusArn=bus, Entries=[entry(n, group="order-1", dedup=str(n)) for n in range(10)])
    # Then all arrive, not in publish order (the double shuffles with a seeded generator)
    received = [b["detail"]["n"] for b in bodies(queue.receive(10))]
    assert sorted(received) == list(range(10))
    assert received != list(range(10))


def test_raw_delivery_is_the_classic_envelope(eb, bus, make_queue, subscribe):
    # Given a subscriber with the default (RAW) transformer into a standard queue
    queue = make_queue(fifo=False)
    subscribe(bus, queue, "UNORDERED")
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    # When an event with every field is published
    result = eb.put_events(EventBusArn=bus, Entries=[{
        "Source": "com.example.orders", "DetailType": "OrderPlaced",
        "Detail": json.dumps({"orderId": "o-1", "lines": [1, 2]}),
        "Resources": ["arn:aws:dynamodb:us-east-1:123456789012:table/orders"], "Time": when,
        "SystemMetadata": {"EventGroupId": "order-o-1", "DeduplicationId": "event-1"}}])["Entries"][0]
    # Then the queue gets the classic envelope with the Detail under `detail` and the EventId as `id`
    [body] = bodies(queue.receive(1))
    assert body == {
        "version": "0",
        "id": result["EventId"],
        "detail-type": "OrderPlaced",
        "source": "com.example.orders",
        "account": "123456789012",
        "time": "2026-01-02T03:04:05Z",
        "region": os.environ.get("AWS_REGION", "us-east-1"),
        "resources": ["arn:aws:dynamodb:us-east-1:123456789012:table/orders"],
        "detail": {"orderId": "o-1", "lines": [1, 2]},
    }


def test_with_metadata_delivery_carries_the_system_metadata(eb, bus, make_queue, subscribe):
    queue = make_queue(fifo=False)
    subscribe(bus, queue, "UNORDERED", Transformer={"Type": "WITH_METADATA"})
    result = eb.put_events(EventBusArn=bus, Entries=[entry(7, group="g-7", dedup="d-7")])["Entries"][0]
    [body] = bodies(queue.receive(1))
    assert body["Data"]["detail"] == {"n": 7}
    meta = body["SystemMetadata"]
    assert (meta["aws:EventId"], meta["EventGroupId"], meta["DeduplicationId"], meta["aws:DeliveryType"],
            meta["aws:SequenceNumber"]) == (result["EventId"], "g-7", "d-7", "LIVE", result["SequenceNumber"])


def test_a_subscriber_sees_only_events_accepted_after_it_was_created(eb, bus, make_queue, subscribe):
    # Given an event published before the subscriber exists (StartingPosition LATEST)
    eb.put_events(EventBusArn=bus, Entries=[entry(1)])
    queue = make_queue(fifo=False)
    subscribe(bus, queue, "UNORDERED")
    # When another is published after
    eb.put_events(EventBusArn=bus, Entries=[entry(2)])
    # Then only the later one arrives
    assert [b["detail"]["n"] for b in bodies(queue.receive(2, timeout=1.5))] == [2]


def test_undeliverable_events_become_failure_records_on_the_dead_letter_queue(
        eb, bus, make_queue, sqs, subscribe):
    # Given a subscriber whose target queue does not exist, no retries, and a dead-letter queue
    dlq = make_queue(fifo=False)
    missing = make_queue(fifo=False)
    sqs.delete_queue(QueueUrl=missing.url)
    subscribe(bus, missing, "UNORDERED", RetryPolicy={"MaxRetryAttempts": 0},
              OnFailureConfiguration={"Arn": dlq.arn})
    # When an event is published
    result = eb.put_events(EventBusArn=bus, Entries=[entry(1, group="g-1", dedup="d-1")])["Entries"][0]
    # Then the DLQ gets a failure record naming it, not the event
    [record] = bodies(dlq.receive(1))
    assert record["busArn"] == bus
    assert record["targetArn"] == missing.arn
    assert record["errorCode"]
    assert [(m["eventId"], m["eventGroupId"], m["deduplicationId"]) for m in record["failedMessages"]] == \
        [(result["EventId"], "g-1", "d-1")]


def test_delivery_waits_for_the_configured_delay(private_double, make_queue):
    # Given a double whose subscribers deliver 800 ms after an event is accepted
    eb = private_double(CUSTOM_BUS_DELIVERY_DELAY_MS="800")
    bus = eb.create_event_bus(Name=unique("delayed"))["EventBusArn"]
    queue = make_queue(fifo=False)
    eb.create_subscriber(Name=unique("sub"), EventBusArn=bus, Type="UNORDERED",
                         InvokeConfiguration={"RoleArn": ROLE_ARN, "TargetArn": queue.arn})
    # When an event is published
    accepted = time.monotonic()
    eb.put_events(EventBusArn=bus, Entries=[entry(1)])
    # Then the queue has nothing before the delay, and the event after it
    assert queue.receive(1, timeout=0.3) == []
    [message] = queue.receive(1, timeout=5)
    assert time.monotonic() - accepted >= 0.8
    assert json.loads(message["Body"])["detail"] == {"n": 1}


def test_concurrent_publishers_of_one_group_are_delivered_in_sequence_number_order(
        eb, bus, make_queue, subscribe):
    # Given a FIFO subscriber into a FIFO queue
    queue = make_queue(fifo=True)
    subscribe(bus, queue, "FIFO")
    # When 8 publishers race, each sending 10 calls of 5 events of one group
    def publish(worker):
        out = []
        for call in range(10):
            reply = eb.put_events(EventBusArn=bus, Entries=[
                entry(worker * 1000 + call * 10 + i, group="order-1") for i in range(5)])
            out += [(int(e["SequenceNumber"]), worker * 1000 + call * 10 + i)
                    for i, e in enumerate(reply["Entries"])]
        return out
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        accepted = sorted(sum(pool.map(publish, range(8)), []))
    # Then the group arrives in the order the bus accepted it (its sequence numbers)
    received = [json.loads(m["Body"])["detail"]["n"] for m in queue.receive(len(accepted), timeout=20)]
    assert received == [n for _, n in accepted]


def test_a_chunked_request_body_is_read(bus_endpoint, bus):
    # A proxy in front of the double (the project's fault proxy) may forward a body chunked.
    body = cbor2.dumps({"EventBusArn": bus, "Entries": [entry(1)]})
    chunks = iter([body[:7], body[7:]])
    status, _, payload = post(f"{bus_endpoint}/service/AWSEventsV2/operation/PutEvents", chunks,
                              {**CBOR_HEADERS, "Transfer-Encoding": "chunked"})
    assert status == 200, cbor2.loads(payload)
    assert cbor2.loads(payload)["Entries"][0]["SuccessCode"] == "PUBLISHED"


# --- raw events (PutRawEvents)


CLOUDEVENT = {"specversion": "1.0", "id": "event-1", "source": "com.example.orders", "type": "OrderCreated",
              "subject": "o-1", "datacontenttype": "application/json", "data": {"orderId": "o-1"}}


def raw_entry(data, group=None, dedup=None, content_type="application/cloudevents+json", **fields):
    meta = {"ContentType": content_type}
    if group is not None:
        meta["EventGroupId"] = group
    if dedup is not None:
        meta["DeduplicationId"] = dedup
    return {"Data": data if isinstance(data, bytes) else json.dumps(data).encode(), "SystemMetadata": meta,
            **fields}


def test_a_raw_event_is_delivered_exactly_as_sent_in_its_group_order(eb, bus, make_queue, subscribe):
    # Given a FIFO subscriber with the default (RAW) transformer into a FIFO queue
    queue = make_queue(fifo=True)
    subscribe(bus, queue, "FIFO")
    # When CloudEvents of one group are published as raw events, one repeated
    events = [dict(CLOUDEVENT, id=f"event-{n}", sequence=f"{n:020d}") for n in range(1, 4)]
    results = eb.put_raw_events(EventBusArn=bus, Entries=[
        raw_entry(e, group="order-o-1", dedup=e["id"]) for e in events])["Entries"]
    again = eb.put_raw_events(EventBusArn=bus, Entries=[raw_entry(events[0], group="order-o-1",
                                                                  dedup="event-1")])["Entries"]
    # Then each is PUBLISHED with an id and an increasing sequence number, the repeat DEDUPLICATED
    assert [r["SuccessCode"] for r in results] == ["PUBLISHED"] * 3
    assert [r["SequenceNumber"] for r in results] == sorted(r["SequenceNumber"] for r in results)
    assert again[0]["SuccessCode"] == "DEDUPLICATED"
    # And the queue gets each CloudEvent once, as sent (not in an envelope), in order, in its group
    messages = queue.receive(3)
    assert bodies(messages) == events
    assert {m["Attributes"]["MessageGroupId"] for m in messages} == {"order-o-1"}
    assert queue.receive(1, timeout=0.5) == []


def test_with_metadata_delivery_of_a_raw_event_carries_its_content_type(eb, bus, make_queue, subscribe):
    queue = make_queue(fifo=False)
    subscribe(bus, queue, "UNORDERED", Transformer={"Type": "WITH_METADATA"})
    result = eb.put_raw_events(EventBusArn=bus, Entries=[
        raw_entry(CLOUDEVENT, group="g-1", dedup="d-1", Metadata={"tenant": "t-1"})])["Entries"][0]
    [body] = bodies(queue.receive(1))
    assert body["Data"] == CLOUDEVENT
    assert body["Metadata"] == {"tenant": "t-1"}
    meta = body["SystemMetadata"]
    assert (meta["aws:EventId"], meta["ContentType"], meta["EventGroupId"], meta["DeduplicationId"]) == \
        (result["EventId"], "application/cloudevents+json", "g-1", "d-1")
    # A raw event has no Source or DetailType
    assert "aws:Source" not in meta and "aws:DetailType" not in meta


@pytest.mark.parametrize("bad", ["no content type", "text content type", "json that is not", "metadata key"])
def test_invalid_raw_input_rejects_the_whole_request(eb_unchecked, bus, bad):
    entry_of = {
        "no content type": {"Data": b"{}", "SystemMetadata": {}},
        "text content type": raw_entry({}, content_type="text/plain"),
        "json that is not": raw_entry(b"not json"),
        "metadata key": raw_entry({}, Metadata={"a/b": "v"}),
    }[bad]
    assert error_of(lambda: eb_unchecked.put_raw_events(EventBusArn=bus, Entries=[entry_of])) == \
        ("InvalidInputException", 400)
