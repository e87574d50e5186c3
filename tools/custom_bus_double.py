"""A local test double of EventBridge's Custom Event Bus (service EventsV2), since no emulator has one.

Clients reach it through the SDK's standard endpoint variable `AWS_ENDPOINT_URL_EVENTBRIDGEV2`
(scripts/emulator.sh starts it beside moto and exports it), with no code branch of their own. It speaks
the SDK's real wire protocol, Smithy RPC v2 CBOR, with the shapes of botocore's service model
(botocore/data/eventbridgev2/2025-05-15/service-2.json) and of the Rust crate aws-sdk-eventbridgev2 1.x
(src/protocol_serde/shape_*.rs):

  - requests: `POST /service/AWSEventsV2/operation/{Operation}`, `Content-Type: application/cbor`,
    `smithy-protocol: rpc-v2-cbor`, a CBOR map of PascalCase members (maps of either length encoding,
    as the Rust SDK writes indefinite-length maps); timestamps as CBOR tag 1 epoch seconds;
  - responses: HTTP 200 with a CBOR map and `smithy-protocol: rpc-v2-cbor`; errors as a CBOR map
    `{__type, message}` with the status the model gives each error (InvalidInputException 400,
    ResourceNotFoundException 404, ResourceAlreadyExistsException/ResourceInUseException 409, ...).

Operations: CreateEventBus, DescribeEventBus, ListEventBuses, DeleteEventBus, CreateSubscriber,
DescribeSubscriber, ListSubscribers, DeleteSubscriber, PutEvents, PutRawEvents. Any other operation of the model
answers 400 InvalidInputException naming it as not modelled; an operation the model does not have
answers 404 UnknownOperationException (the Smithy RPC v2 rule).

What it models:
  - Buses: `arn:aws:events:<region>:<account>:event-busv2/<name>/<25 chars [a-z0-9]>`, ACTIVE at once,
    a name unique per account (ResourceAlreadyExistsException), deletion refused while subscribers
    exist (ResourceInUseException). A create repeated with its ClientToken (the SDKs fill one in and
    resend it on a retry) answers the first one's resource; the token with other parameters is an
    IdempotentParameterMismatchException.
  - PutEvents validation, as the model and the API reference say: 1 to 100 entries; Source 1-256
    characters and not starting with the reserved `aws.`; DetailType 1-128; Detail a JSON object;
    Resources 0-100 strings of at most 2048; Time a timestamp; EventGroupId 1-128; DeduplicationId
    1-128 with at least one character that is not whitespace or a control character;
    DeduplicationConfiguration.DeduplicationType = CONTENT_BASED; the bus ARN well-formed
    (InvalidInputException) and existing (ResourceNotFoundException). Every one of these rejects the
    whole request (see "decided" below), as does a body that is not a CBOR map.
  - PutRawEvents, as the model says: 1 to 100 entries, each `Data` (bytes), optional `Metadata` (at
    most 100 string keys of 1-128 characters without `/`, string values) and a required
    `SystemMetadata` with `ContentType` (`application/...`), `EventGroupId` and `DeduplicationId`
    as for PutEvents; results, sequence numbers and deduplication (content-based: the SHA-256 of
    `Data`) the same. A raw event has no Source, DetailType nor Time (its ingestion time stands in).
  - Results per entry in request order: EventId (a UUID), SequenceNumber (a decimal string, increasing
    with ingestion order per bus, zero-padded to 20 digits so it also sorts as text), SuccessCode
    PUBLISHED or DEDUPLICATED; FailedEntryCount 0.
  - Deduplication by `SystemMetadata.DeduplicationId`, or by content (SHA-256 of Source, DetailType,
    Detail, Resources and Time) with `DeduplicationConfiguration.CONTENT_BASED`: a repeat within the
    window (CUSTOM_BUS_DEDUP_WINDOW_SECONDS, default 300) of the first accepted entry with that key,
    in the same bus and scope, returns DEDUPLICATED and is stored and delivered no second time. The
    scope is the EventGroupId; entries without one share one scope. One publishing account.
  - Subscribers: FIFO or UNORDERED (default UNORDERED), an SQS target on the moto SQS it is given
    (CUSTOM_BUS_SQS_ENDPOINT, else AWS_ENDPOINT_URL_SQS, else AWS_ENDPOINT_URL), `StartingPosition`
    LATEST (an event reaches the subscribers that existed when it was accepted), Transformer RAW (the
    default: the classic envelope `{version, id, detail-type, source, account, time, region,
    resources, detail}`, `id` = the EventId; a raw event's `Data` exactly as sent, as text) or
    WITH_METADATA (`{Data, Metadata, SystemMetadata}`, a raw event's JSON `Data` as JSON),
    SendMessageBatch of up to 10 events, one event per message. For a FIFO queue, MessageGroupId is
    SqsParameters.MessageGroupId (a constant or one of the expressions listed at _SYSTEM_METADATA_EXPR)
    or else the event's group, and MessageDeduplicationId is SqsParameters.MessageDeduplicationId or
    else the EventId (per message, as AWS's SQS FIFO pattern does). An event without an EventGroupId
    gets a generated one (`aws:` + its EventId), as the service does.
  - Asynchronous delivery by one thread per subscriber, each event no earlier than
    CUSTOM_BUS_DELIVERY_DELAY_MS (default 0) after it was accepted (with 0 it may reach the queue
    before the PutEvents reply reaches the publisher). A FIFO subscriber sends in ingestion
    (SequenceNumber) order, also across concurrent calls. An UNORDERED one shuffles each batch it sends with a random generator
    seeded by CUSTOM_BUS_UNORDERED_SEED (default 1), so tests see what UNORDERED allows.
  - Delivery failures: a failed SendMessageBatch call is retried (RetryPolicy.MaxRetryAttempts,
    default 5, backoff from CUSTOM_BUS_RETRY_BASE_MS, default 200, doubling) and then, like an entry
    SQS rejects, written as a failure record to OnFailureConfiguration.Arn (the record's fields as
    the user guide lists them) or dropped and logged when there is none.

What it does not model: retention and replay (StorageConfiguration is stored and echoed only;
StartingPosition POINT_IN_TIME, State STOPPED, ResumePosition), filters (FilterConfiguration is
refused), JSONATA transformers, BatchConfiguration (batches are up to 10, sent as soon as ready),
targets other than SQS, SqsParameters DelaySeconds/MessageAttributes (refused), schema registries
(SchemaRegistryConfiguration is refused; Avro and Protobuf `Data` is not decoded), event sources, resource policies, tags and UpdateEventBus/UpdateSubscriber, KMS
and encryption, IAM/SigV4 (the Authorization header is not checked; RoleArn is stored only), quotas
and throttling (no ThrottlingException, no bus count limit, no per-group ingestion rate, no byte
limit on an entry or a request: the docs give none), the bus states CREATING/DELETING (everything
is ACTIVE at once, so no InvalidStateException), several publishing accounts,
RetryPolicy.MaxEventAgeInSeconds, per-group blocking on a FIFO subscriber's retries (a failed call
holds back the whole subscriber, not only the groups in it).

Where the docs left it to decide (and what the double does):
  - Whole request or per entry: every validation failure above is a whole-request
    InvalidInputException naming the entry index (the model's constraints are checked while the
    request is read, and "anything caught while deserializing the request rejects the entire batch");
    the `aws.` source and a Detail that is not a JSON object are treated the same way, since the docs
    document no per-entry error code for PutEvents.
  - A DEDUPLICATED entry returns the EventId and SequenceNumber of the entry it repeats.
  - A raw event whose ContentType is JSON (`application/json` or `application/...+json`) must have
    `Data` that is JSON, else the whole request is an InvalidInputException, like PutEvents' Detail
    (the docs document a per-entry VALIDATION_ERROR only for Avro and Protobuf). Any `application/`
    subtype is accepted (the SDK's model names `application/cloudevents+json` as an example).
  - The window is measured from the first accepted entry (a repeat does not extend it).
  - The envelope's `id` is the EventId returned to the publisher.
  - A request without `smithy-protocol: rpc-v2-cbor` answers 400, one with another Content-Type 415
    (so a client that does not speak the protocol fails loudly).
  - A subscriber without `Type` is UNORDERED; a FIFO queue without SqsParameters.MessageGroupId gets
    the event's group, and without MessageDeduplicationId the EventId; an ungrouped event's
    generated group is `aws:` + its EventId (one group per event).
  - A failure record's errorCode: INTERNAL_SERVER_ERROR for a failed SendMessageBatch call,
    CUSTOMER_VALIDATION for an entry SQS refused.

Usage: python custom_bus_double.py -H 127.0.0.1 -p PORT
"""

import argparse
import base64
import collections
import datetime
import hashlib
import json
import logging
import os
import random
import re
import secrets
import string
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import botocore.config
import cbor2

LOG = logging.getLogger("custom_bus_double")

SERVICE_PATH_PREFIX = "/service/AWSEventsV2/operation/"
SMITHY_PROTOCOL = "rpc-v2-cbor"

# Limits from the service model and the API reference (docs/eventbridge-custom-bus reference §1).
MAX_ENTRIES = 100  # PutEvents entries per request, fixed
SOURCE_MAX = 256  # PutEventsRequestEntry.Source
DETAIL_TYPE_MAX = 128  # PutEventsRequestEntry.DetailType
RESOURCES_MAX = 100  # PutEventsRequestEntry.Resources items
RESOURCE_MAX = 2048  # one resource's length
GROUP_ID_MAX = 128  # PutEventsSystemMetadata.EventGroupId
DEDUP_ID_MAX = 128  # PutEventsSystemMetadata.DeduplicationId
NAME_MAX = 256  # EventBusName, SubscriberName
DESCRIPTION_MAX = 512  # Description
SQS_BATCH_MAX = 10  # SendMessageBatch entries per call (the SQS target delivers with it)
DEFAULT_RETRY_ATTEMPTS = 5  # RetryPolicy.MaxRetryAttempts default
RESERVED_SOURCE_PREFIX = "aws."
RAW_METADATA_MAX = 100  # PutRawEventsRequestEntry.Metadata keys
# PutRawEventsSystemMetadata.ContentType: an `application/` media type (json, avro, protobuf,
# octet-stream, or a structured-syntax suffix such as cloudevents+json), parameters allowed.
CONTENT_TYPE_RE = re.compile(r"application/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(;.*)?")

NAME_RE = re.compile(r"[A-Za-z0-9][.\-_A-Za-z0-9]*")
BUS_ARN_RE = re.compile(
    r"arn:aws(-[a-z0-9]+)*:events:[a-z][a-z0-9]*(-[a-z0-9]+)*:([0-9]{12}):"
    r"event-busv2/[A-Za-z0-9][.\-_A-Za-z0-9]{0,255}/[a-z0-9]{25}"
)
SUBSCRIBER_ARN_RE = re.compile(
    r"arn:aws(-[a-z0-9]+)*:events:[a-z][a-z0-9]*(-[a-z0-9]+)*:([0-9]{12}):"
    r"subscriber/[A-Za-z0-9][.\-_A-Za-z0-9]{0,255}/[a-z0-9]{25}"
)
ROLE_ARN_RE = re.compile(r"arn:aws(-[a-z0-9]+)*:iam::\d{12}:role/[\w+=,.@/-]+")
SQS_ARN_RE = re.compile(
    r"arn:aws(-[a-z0-9]+)*:sqs:([a-z][a-z0-9]*(?:-[a-z0-9]+)*):([0-9]{12}):"
    r"([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)"
)
# EventDeduplicationId: at least one character that is not whitespace or a control character.
DEDUP_ID_RE = re.compile(
    "[\\s\\S]*[^\u0009-\u000d\u001c-\u0020\u1680\u2000-\u2006\u2008-\u200a\u2028\u2029\u205f\u3000][\\s\\S]*"
)
# The SqsParameters expressions the double resolves: `{% $events.SystemMetadata.<field> %}` with the
# field bare or quoted (`aws:EventId` needs quotes in JSONata). Anything else in `{% %}` is refused.
_SYSTEM_METADATA_EXPR = re.compile(
    r"\{%\s*\$events?\.SystemMetadata\.(?:`([^`]+)`|'([^']+)'|\"([^\"]+)\"|([A-Za-z][A-Za-z0-9]*))\s*%\}"
)


def is_json(content_type):
    """Whether a media type is JSON: application/json, or a +json structured-syntax suffix."""
    subtype = content_type.split(";", 1)[0].strip().lower().removeprefix("application/")
    return subtype == "json" or subtype.endswith("+json")


class ApiError(Exception):
    """An error answer: the model's error name, its HTTP status and a message."""

    STATUS = {
        "AccessDeniedException": 403,
        "ConcurrentModificationException": 409,
        "IdempotentParameterMismatchException": 409,
        "InternalException": 500,
        "InvalidInputException": 400,
        "InvalidStateException": 409,
        "LimitExceededException": 400,
        "ResourceAlreadyExistsException": 409,
        "ResourceInUseException": 409,
        "ResourceNotFoundException": 404,
        "ThrottlingException": 429,
        "UnknownOperationException": 404,
        "UnsupportedMediaTypeException": 415,
    }

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = self.STATUS[code]


def invalid(message):
    return ApiError("InvalidInputException", message)


def now_ts():
    return time.time()


def cbor_time(seconds):
    """A timestamp member: CBOR tag 1 around epoch seconds, millisecond precision (Smithy RPC v2)."""
    return cbor2.CBORTag(1, round(seconds, 3))


def iso_time(seconds):
    """The classic envelope's `time`: RFC 3339 in UTC to the second, as EventBridge writes it."""
    return datetime.datetime.fromtimestamp(int(seconds), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def resource_id():
    """The 25-character [a-z0-9] id the service appends to a bus or subscriber ARN."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(25))


# ---------------------------------------------------------------------------------------------------
# Input checks (the model's constraints)


def want_map(value, where):
    if not isinstance(value, dict):
        raise invalid(f"{where} must be a structure")
    return value


def want_string(params, key, where, *, required=False, min_len=1, max_len=None, pattern=None):
    value = params.get(key)
    if value is None:
        if required:
            raise invalid(f"{where}{key} is required")
        return None
    if not isinstance(value, str):
        raise invalid(f"{where}{key} must be a string")
    if len(value) < min_len:
        raise invalid(f"{where}{key} must have at least {min_len} characters")
    if max_len is not None and len(value) > max_len:
        raise invalid(f"{where}{key} must have at most {max_len} characters (it has {len(value)})")
    if pattern is not None and not pattern.fullmatch(value):
        raise invalid(f"{where}{key} does not match the pattern {pattern.pattern}")
    return value


def want_int(params, key, where, *, low, high):
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise invalid(f"{where}{key} must be an integer from {low} to {high}")
    return value


def want_enum(params, key, where, allowed, default=None):
    value = params.get(key, default)
    if value is None:
        return None
    if value not in allowed:
        raise invalid(f"{where}{key} must be one of {', '.join(allowed)}")
    return value


def timestamp_seconds(value, where):
    """A tag-1 timestamp as cbor2 decodes it (a datetime), or the bare number botocore may send."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp()
    if isinstance(value, cbor2.CBORTag) and value.tag == 1 and isinstance(value.value, (int, float)):
        return float(value.value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise invalid(f"{where} must be a timestamp")


# ---------------------------------------------------------------------------------------------------
# State


class Bus:
    def __init__(self, arn, name, description, storage, encryption, created):
        self.arn = arn
        self.name = name
        self.description = description
        self.storage = storage
        self.encryption = encryption
        self.created = created
        self.subscribers = {}  # arn -> Subscriber
        self.client_token = None
        self.request = None
        self.sequence = 0
        # (scope, key) -> (accepted_at, event_id, sequence_number); scope = EventGroupId or None.
        self.dedup = {}

    def describe(self):
        out = {
            "EventBusArn": self.arn,
            "Name": self.name,
            "State": "ACTIVE",
            "CreationTime": cbor_time(self.created),
            "LastModifiedTime": cbor_time(self.created),
            "StorageConfiguration": {
                "RetentionPeriodInDays": self.storage.get("RetentionPeriodInDays", 1),
                "RetentionWindowStartTime": cbor_time(self.created),
            },
        }
        if self.description is not None:
            out["Description"] = self.description
        if self.encryption is not None:
            out["EncryptionConfiguration"] = self.encryption
        return out


class Event:
    __slots__ = ("event_id", "sequence", "group", "dedup_id", "source", "detail_type", "detail",
                 "resources", "time", "accepted", "raw", "content_type", "metadata")

    def __init__(self, **fields):
        self.raw = None  # a raw event's Data (PutRawEvents); None for PutEvents
        self.content_type = "application/eventbridge+json"
        self.metadata = {}
        for key, value in fields.items():
            setattr(self, key, value)


class Subscriber:
    """One subscriber and its delivery thread."""

    def __init__(self, double, arn, name, bus, request, created):
        self.double = double
        self.arn = arn
        self.name = name
        self.bus = bus
        self.request = request
        self.client_token = request.get("ClientToken")
        self.created = created
        self.kind = request.get("Type") or "UNORDERED"
        invoke = request["InvokeConfiguration"]
        self.target_arn = invoke["TargetArn"]
        match = SQS_ARN_RE.fullmatch(self.target_arn)
        self.target_region, self.target_account, self.target_queue = match.group(2, 3, 4)
        self.fifo_queue = self.target_queue.endswith(".fifo")
        sqs = invoke.get("SqsParameters") or {}
        self.group_template = sqs.get("MessageGroupId")
        self.dedup_template = sqs.get("MessageDeduplicationId")
        self.transformer = (request.get("Transformer") or {}).get("Type") or "RAW"
        self.dlq_arn = (request.get("OnFailureConfiguration") or {}).get("Arn")
        retry = request.get("RetryPolicy") or {}
        self.max_attempts = retry.get("MaxRetryAttempts", DEFAULT_RETRY_ATTEMPTS)
        self.pending = collections.deque()  # Events in publish order, not yet delivered
        self.cond = threading.Condition()
        self.stopped = False
        self.random = random.Random(double.unordered_seed)
        self.thread = threading.Thread(target=self.run, name=f"deliver-{name}", daemon=True)

    def describe(self):
        out = {
            "SubscriberArn": self.arn,
            "Name": self.name,
            "EventBusArn": self.bus.arn,
            "Type": self.kind,
            "StartingPosition": "LATEST",
            "State": "RUNNING",
            "Revoked": False,
            "CreationTime": cbor_time(self.created),
            "LastModifiedTime": cbor_time(self.created),
        }
        for key in ("InvokeConfiguration", "Description", "Transformer", "RetryPolicy",
                    "OnFailureConfiguration", "LogConfiguration"):
            if self.request.get(key) is not None:
                out[key] = self.request[key]
        return out

    def summary(self):
        return {
            "SubscriberArn": self.arn,
            "Name": self.name,
            "EventBusArn": self.bus.arn,
            "TargetArn": self.target_arn,
            "Type": self.kind,
            "Revoked": False,
            "State": "RUNNING",
            "CreationTime": cbor_time(self.created),
            "LastModifiedTime": cbor_time(self.created),
            "SubscriberAccountId": self.double.account,
        }

    def offer(self, events):
        with self.cond:
            self.pending.extend(events)
            self.cond.notify()

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify()

    # --- delivery

    def next_batch(self):
        """Waits for up to SQS_BATCH_MAX events whose delivery delay has passed; None once stopped."""
        delay = self.double.delivery_delay
        with self.cond:
            while True:
                if self.stopped:
                    return None
                if self.pending:
                    wait = self.pending[0].accepted + delay - now_ts()
                    if wait <= 0:
                        batch = []
                        while self.pending and len(batch) < SQS_BATCH_MAX and \
                                self.pending[0].accepted + delay <= now_ts():
                            batch.append(self.pending.popleft())
                        return batch
                    self.cond.wait(wait)
                else:
                    self.cond.wait()

    def run(self):
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            if self.kind == "UNORDERED":
                self.random.shuffle(batch)
            try:
                self.deliver(batch)
            except Exception:  # noqa: BLE001 - a delivery thread must outlive any one failure
                LOG.exception("subscriber %s: delivery failed", self.name)

    def deliver(self, batch):
        entries = [self.message(i, event) for i, event in enumerate(batch)]
        attempt = 0
        while True:
            try:
                reply = self.double.sqs().send_message_batch(QueueUrl=self.queue_url(), Entries=entries)
                break
            except Exception as error:  # noqa: BLE001 - any failed call is retried, then recorded
                attempt += 1
                if attempt > self.max_attempts or self.stopped:
                    self.dead_letter(batch, "INTERNAL_SERVER_ERROR", str(error), attempt - 1)
                    return
                time.sleep(self.double.retry_base * 2 ** (attempt - 1))
        for failed in reply.get("Failed", []):
            event = batch[int(failed["Id"])]
            self.dead_letter([event], "CUSTOMER_VALIDATION", failed.get("Message", failed.get("Code", "")), 0)

    def queue_url(self):
        return self.double.queue_url(self.target_region, self.target_account, self.target_queue)

    def group_of(self, event):
        return event.group if event.group is not None else f"aws:{event.event_id}"

    def system_metadata(self, event):
        meta = {
            "aws:EventId": event.event_id,
            "aws:DeliveryType": "LIVE",
            "EventGroupId": self.group_of(event),
            "ContentType": event.content_type,
            "aws:IngestionTime": iso_time(event.accepted),
            "aws:SequenceNumber": event.sequence,
        }
        if event.raw is None:  # PutEvents only
            meta["aws:Source"] = event.source
            meta["aws:DetailType"] = event.detail_type
        if event.dedup_id is not None:
            meta["DeduplicationId"] = event.dedup_id
        return meta

    def envelope(self, event):
        return {
            "version": "0",
            "id": event.event_id,
            "detail-type": event.detail_type,
            "source": event.source,
            "account": self.double.account,
            "time": iso_time(event.time),
            "region": self.double.region,
            "resources": list(event.resources),
            "detail": event.detail,
        }

    def resolve(self, template, event):
        match = _SYSTEM_METADATA_EXPR.fullmatch(template)
        if match is None:
            return template
        field = next(g for g in match.groups() if g is not None)
        return self.system_metadata(event).get(field, "")

    def data(self, event):
        """What `RAW` delivers: the classic envelope of a PutEvents event, a raw event's Data as sent
        (as text; base64 for bytes that are not UTF-8)."""
        if event.raw is None:
            return json.dumps(self.envelope(event), separators=(",", ":"))
        try:
            return event.raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(event.raw).decode("ascii")

    def message(self, index, event):
        if self.transformer == "WITH_METADATA":
            if event.raw is None:
                data = self.envelope(event)
            elif is_json(event.content_type):
                data = json.loads(event.raw)
            else:
                data = self.data(event)
            body = json.dumps({"Data": data, "Metadata": event.metadata,
                               "SystemMetadata": self.system_metadata(event)}, separators=(",", ":"))
        else:
            body = self.data(event)
        entry = {"Id": str(index), "MessageBody": body}
        if self.group_template is not None:
            entry["MessageGroupId"] = self.resolve(self.group_template, event)
        elif self.fifo_queue:
            entry["MessageGroupId"] = self.group_of(event)
        if self.fifo_queue:
            entry["MessageDeduplicationId"] = (
                self.resolve(self.dedup_template, event) if self.dedup_template is not None else event.event_id
            )
        return entry

    def dead_letter(self, events, code, message, attempts):
        if self.dlq_arn is None:
            LOG.error("subscriber %s: %d event(s) dropped after %d retries (%s), no OnFailureConfiguration",
                      self.name, len(events), attempts, code)
            return
        record = {
            "busArn": self.bus.arn,
            "subscriberArn": self.arn,
            "targetArn": self.target_arn,
            "errorCode": code,
            "errorMessage": message[:1024],
            "exhaustedRetryCondition": "MaximumRetryAttempts",
            "retryAttempts": attempts,
            "failedMessages": [
                {"eventId": e.event_id, "eventGroupId": self.group_of(e),
                 "deduplicationId": e.dedup_id, "timestamp": iso_time(e.accepted)}
                for e in events
            ],
        }
        _, region, account, queue = SQS_ARN_RE.fullmatch(self.dlq_arn).groups()
        params = {"QueueUrl": self.double.queue_url(region, account, queue),
                  "MessageBody": json.dumps(record, separators=(",", ":"))}
        if queue.endswith(".fifo"):
            params["MessageGroupId"] = self.group_of(events[0])
            params["MessageDeduplicationId"] = str(uuid.uuid4())
        try:
            self.double.sqs().send_message(**params)
        except Exception:  # noqa: BLE001 - nowhere left to put it
            LOG.exception("subscriber %s: could not write the failure record to %s", self.name, self.dlq_arn)


class Double:
    """The service's state and operations; one lock guards all of it."""

    def __init__(self):
        self.account = os.environ.get("CUSTOM_BUS_ACCOUNT", "123456789012")
        self.region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.dedup_window = float(os.environ.get("CUSTOM_BUS_DEDUP_WINDOW_SECONDS", "300"))
        self.delivery_delay = float(os.environ.get("CUSTOM_BUS_DELIVERY_DELAY_MS", "0")) / 1000
        self.unordered_seed = int(os.environ.get("CUSTOM_BUS_UNORDERED_SEED", "1"))
        self.retry_base = float(os.environ.get("CUSTOM_BUS_RETRY_BASE_MS", "200")) / 1000
        self.sqs_endpoint = (os.environ.get("CUSTOM_BUS_SQS_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL_SQS")
                             or os.environ.get("AWS_ENDPOINT_URL"))
        self.lock = threading.Lock()
        self.buses = {}  # arn -> Bus
        self.subscribers = {}  # arn -> Subscriber
        self._local = threading.local()
        self._queue_urls = {}

    # --- SQS (moto)

    def sqs(self):
        client = getattr(self._local, "sqs", None)
        if client is None:
            client = boto3.session.Session().client(
                "sqs", region_name=self.region, endpoint_url=self.sqs_endpoint,
                config=botocore.config.Config(retries={"max_attempts": 1}),
            )
            self._local.sqs = client
        return client

    def queue_url(self, region, account, queue):
        key = (region, account, queue)
        url = self._queue_urls.get(key)
        if url is None:
            url = self.sqs().get_queue_url(QueueName=queue, QueueOwnerAWSAccountId=account)["QueueUrl"]
            self._queue_urls[key] = url
        return url

    # --- operations

    def bus(self, arn):
        bus = self.buses.get(arn)
        if bus is None:
            raise ApiError("ResourceNotFoundException", f"Event bus {arn} does not exist.")
        return bus

    def create_event_bus(self, params):
        name = want_string(params, "Name", "", required=True, max_len=NAME_MAX, pattern=NAME_RE)
        description = want_string(params, "Description", "", min_len=0, max_len=DESCRIPTION_MAX)
        storage = want_map(params.get("StorageConfiguration") or {}, "StorageConfiguration")
        want_int(storage, "RetentionPeriodInDays", "StorageConfiguration.", low=1, high=365)
        encryption = params.get("EncryptionConfiguration")
        token = want_string(params, "ClientToken", "", max_len=64)
        with self.lock:
            bus = self.replayed(token, params, self.buses.values())
            if bus is None:
                if any(b.name == name for b in self.buses.values()):
                    raise ApiError("ResourceAlreadyExistsException", f"Event bus {name} already exists.")
                arn = f"arn:aws:events:{self.region}:{self.account}:event-busv2/{name}/{resource_id()}"
                bus = Bus(arn, name, description, storage, encryption, now_ts())
                bus.client_token, bus.request = token, params
                self.buses[arn] = bus
            out = bus.describe()
        out.pop("LastModifiedTime")
        return out

    @staticmethod
    def replayed(token, params, resources):
        """The resource an earlier create with this ClientToken made (the SDKs fill the token and
        resend it on a retry), or None; the same token with other parameters is a mismatch."""
        if token is None:
            return None
        for resource in resources:
            if resource.client_token == token:
                if resource.request != params:
                    raise ApiError("IdempotentParameterMismatchException",
                                   "ClientToken was used before with other parameters.")
                return resource
        return None

    def describe_event_bus(self, params):
        arn = want_string(params, "EventBusArn", "", required=True, pattern=BUS_ARN_RE)
        with self.lock:
            return self.bus(arn).describe()

    def list_event_buses(self, params):
        prefix = want_string(params, "NamePrefix", "", max_len=NAME_MAX) or ""
        with self.lock:
            buses = [b for b in self.buses.values() if b.name.startswith(prefix)]
            return {"EventBuses": [
                {k: v for k, v in b.describe().items() if k not in ("StorageConfiguration", "EncryptionConfiguration")}
                | {"EventBusAccountId": self.account}
                for b in buses
            ]}

    def delete_event_bus(self, params):
        arn = want_string(params, "EventBusArn", "", required=True, pattern=BUS_ARN_RE)
        with self.lock:
            bus = self.bus(arn)
            if bus.subscribers:
                raise ApiError("ResourceInUseException", f"Event bus {arn} still has subscribers.")
            del self.buses[arn]
        return {}

    def create_subscriber(self, params):
        name = want_string(params, "Name", "", required=True, max_len=NAME_MAX, pattern=NAME_RE)
        bus_arn = want_string(params, "EventBusArn", "", required=True, pattern=BUS_ARN_RE)
        want_string(params, "Description", "", min_len=0, max_len=DESCRIPTION_MAX)
        invoke = params.get("InvokeConfiguration")
        if invoke is None:
            raise invalid("InvokeConfiguration is required")
        want_map(invoke, "InvokeConfiguration")
        want_string(invoke, "RoleArn", "InvokeConfiguration.", required=True, pattern=ROLE_ARN_RE)
        target = want_string(invoke, "TargetArn", "InvokeConfiguration.", required=True, max_len=1600)
        if not SQS_ARN_RE.fullmatch(target):
            raise invalid("InvokeConfiguration.TargetArn: the double delivers to SQS queues only")
        other = [k for k in invoke if k.endswith("Parameters") and k != "SqsParameters"]
        if other:
            raise invalid(f"InvokeConfiguration.{other[0]}: the double delivers to SQS queues only")
        sqs = want_map(invoke.get("SqsParameters") or {}, "InvokeConfiguration.SqsParameters")
        for key in ("MessageGroupId", "MessageDeduplicationId"):
            value = want_string(sqs, key, "InvokeConfiguration.SqsParameters.", min_len=0, max_len=8192)
            if value is not None and "{%" in value and not _SYSTEM_METADATA_EXPR.fullmatch(value):
                raise invalid(f"InvokeConfiguration.SqsParameters.{key}: the double resolves only "
                              "{% $events.SystemMetadata.<field> %} expressions")
        for key in ("DelaySeconds", "MessageAttributes", "MessageSystemAttributes"):
            if key in sqs:
                raise invalid(f"InvokeConfiguration.SqsParameters.{key} is not modelled by the double")
        want_enum(params, "Type", "", ("FIFO", "UNORDERED"))
        want_enum(params, "StartingPosition", "", ("LATEST",))
        want_enum(params, "State", "", ("RUNNING",))
        transformer = want_map(params.get("Transformer") or {}, "Transformer")
        want_enum(transformer, "Type", "Transformer.", ("RAW", "WITH_METADATA"))
        for key in ("FilterConfiguration", "PointInTimeConfiguration", "BatchConfiguration"):
            if params.get(key) is not None:
                raise invalid(f"{key} is not modelled by the double")
        retry = want_map(params.get("RetryPolicy") or {}, "RetryPolicy")
        want_int(retry, "MaxRetryAttempts", "RetryPolicy.", low=0, high=185)
        want_int(retry, "MaxEventAgeInSeconds", "RetryPolicy.", low=60, high=86400)
        on_failure = want_map(params.get("OnFailureConfiguration") or {}, "OnFailureConfiguration")
        want_string(on_failure, "Arn", "OnFailureConfiguration.", max_len=1600, pattern=SQS_ARN_RE)
        token = want_string(params, "ClientToken", "", max_len=64)
        with self.lock:
            bus = self.bus(bus_arn)
            subscriber = self.replayed(token, params, bus.subscribers.values())
            if subscriber is None:
                if any(s.name == name for s in bus.subscribers.values()):
                    raise ApiError("ResourceAlreadyExistsException", f"Subscriber {name} already exists.")
                arn = f"arn:aws:events:{self.region}:{self.account}:subscriber/{name}/{resource_id()}"
                subscriber = Subscriber(self, arn, name, bus, params, now_ts())
                bus.subscribers[arn] = subscriber
                self.subscribers[arn] = subscriber
                subscriber.thread.start()
            out = subscriber.describe()
        return {k: out[k] for k in ("SubscriberArn", "Name", "EventBusArn", "Type", "StartingPosition",
                                    "State", "CreationTime")}

    def subscriber(self, params):
        arn = want_string(params, "SubscriberArn", "", required=True, pattern=SUBSCRIBER_ARN_RE)
        subscriber = self.subscribers.get(arn)
        if subscriber is None:
            raise ApiError("ResourceNotFoundException", f"Subscriber {arn} does not exist.")
        return subscriber

    def describe_subscriber(self, params):
        with self.lock:
            return self.subscriber(params).describe()

    def list_subscribers(self, params):
        bus_arn = want_string(params, "EventBusArn", "", pattern=BUS_ARN_RE)
        prefix = want_string(params, "NamePrefix", "", max_len=NAME_MAX) or ""
        with self.lock:
            subscribers = self.bus(bus_arn).subscribers.values() if bus_arn else self.subscribers.values()
            return {"Subscribers": [s.summary() for s in subscribers if s.name.startswith(prefix)]}

    def delete_subscriber(self, params):
        with self.lock:
            subscriber = self.subscriber(params)
            del self.subscribers[subscriber.arn]
            del subscriber.bus.subscribers[subscriber.arn]
        subscriber.stop()
        return {}

    def put_events(self, params):
        bus_arn = want_string(params, "EventBusArn", "", required=True, max_len=1011, pattern=BUS_ARN_RE)
        entries = params.get("Entries")
        if not isinstance(entries, list):
            raise invalid("Entries is required and must be a list")
        if not 1 <= len(entries) <= MAX_ENTRIES:
            raise invalid(f"Entries must have 1 to {MAX_ENTRIES} members (it has {len(entries)})")
        content_based = False
        if params.get("DeduplicationConfiguration") is not None:
            config = want_map(params["DeduplicationConfiguration"], "DeduplicationConfiguration")
            if config.get("DeduplicationType") is None:
                raise invalid("DeduplicationConfiguration.DeduplicationType is required")
            want_enum(config, "DeduplicationType", "DeduplicationConfiguration.", ("CONTENT_BASED",))
            content_based = True
        checked = [self.check_entry(i, entry) for i, entry in enumerate(entries)]
        received = now_ts()
        results, accepted = [], []
        with self.lock:
            bus = self.bus(bus_arn)
            for entry in checked:
                results.append(self.ingest(bus, entry, content_based, received, accepted))
            # Offered under the lock, so two concurrent calls reach each subscriber in the order
            # of their sequence numbers (a subscriber's own lock is never held while taking this one).
            if accepted:
                for subscriber in bus.subscribers.values():
                    subscriber.offer(accepted)
        return {"FailedEntryCount": 0, "Entries": results}

    def put_raw_events(self, params):
        bus_arn = want_string(params, "EventBusArn", "", required=True, max_len=1011, pattern=BUS_ARN_RE)
        entries = params.get("Entries")
        if not isinstance(entries, list):
            raise invalid("Entries is required and must be a list")
        if not 1 <= len(entries) <= MAX_ENTRIES:
            raise invalid(f"Entries must have 1 to {MAX_ENTRIES} members (it has {len(entries)})")
        if params.get("SchemaRegistryConfiguration") is not None:
            raise invalid("SchemaRegistryConfiguration is not modelled by the local Custom Event Bus double")
        content_based = False
        if params.get("DeduplicationConfiguration") is not None:
            config = want_map(params["DeduplicationConfiguration"], "DeduplicationConfiguration")
            want_enum(config, "DeduplicationType", "DeduplicationConfiguration.", ("CONTENT_BASED",))
            content_based = True
        checked = [self.check_raw_entry(i, entry) for i, entry in enumerate(entries)]
        received = now_ts()
        results, accepted = [], []
        with self.lock:
            bus = self.bus(bus_arn)
            for entry in checked:
                results.append(self.ingest(bus, entry, content_based, received, accepted))
            if accepted:
                for subscriber in bus.subscribers.values():
                    subscriber.offer(accepted)
        return {"FailedEntryCount": 0, "Entries": results}

    def check_raw_entry(self, index, entry):
        where = f"Entries[{index}]."
        want_map(entry, f"Entries[{index}]")
        data = entry.get("Data")
        if not isinstance(data, (bytes, bytearray)):
            raise invalid(f"{where}Data is required and must be a blob")
        data = bytes(data)
        metadata = want_map(entry.get("Metadata") or {}, f"{where}Metadata")
        if len(metadata) > RAW_METADATA_MAX:
            raise invalid(f"{where}Metadata has more than {RAW_METADATA_MAX} keys")
        for key, value in metadata.items():
            if not isinstance(key, str) or not 1 <= len(key) <= 128 or "/" in key or not isinstance(value, str):
                raise invalid(f"{where}Metadata keys are 1 to 128 characters without '/', values strings")
        if entry.get("SystemMetadata") is None:
            raise invalid(f"{where}SystemMetadata is required")
        meta = want_map(entry["SystemMetadata"], f"{where}SystemMetadata")
        content_type = want_string(meta, "ContentType", f"{where}SystemMetadata.", required=True,
                                   max_len=256, pattern=CONTENT_TYPE_RE)
        if is_json(content_type):
            try:
                json.loads(data)
            except ValueError:
                raise invalid(f"{where}Data is not valid JSON for ContentType {content_type}") from None
        group = want_string(meta, "EventGroupId", f"{where}SystemMetadata.", max_len=GROUP_ID_MAX)
        dedup_id = want_string(meta, "DeduplicationId", f"{where}SystemMetadata.", max_len=DEDUP_ID_MAX,
                               pattern=DEDUP_ID_RE)
        return {"raw": data, "content_type": content_type, "metadata": metadata, "group": group,
                "dedup_id": dedup_id}

    def check_entry(self, index, entry):
        where = f"Entries[{index}]."
        want_map(entry, f"Entries[{index}]")
        source = want_string(entry, "Source", where, required=True, max_len=SOURCE_MAX)
        if source.startswith(RESERVED_SOURCE_PREFIX):
            raise invalid(f"{where}Source: the prefix {RESERVED_SOURCE_PREFIX!r} is reserved")
        detail_type = want_string(entry, "DetailType", where, required=True, max_len=DETAIL_TYPE_MAX)
        detail_text = want_string(entry, "Detail", where, min_len=0)
        detail = {}
        if detail_text is not None:
            try:
                detail = json.loads(detail_text)
            except ValueError:
                raise invalid(f"{where}Detail is not valid JSON") from None
            if not isinstance(detail, dict):
                raise invalid(f"{where}Detail must be a JSON object")
        resources = entry.get("Resources") or []
        if not isinstance(resources, list) or len(resources) > RESOURCES_MAX:
            raise invalid(f"{where}Resources must be a list of at most {RESOURCES_MAX} strings")
        for r, resource in enumerate(resources):
            if not isinstance(resource, str) or len(resource) > RESOURCE_MAX:
                raise invalid(f"{where}Resources[{r}] must be a string of at most {RESOURCE_MAX} characters")
        event_time = None
        if entry.get("Time") is not None:
            event_time = timestamp_seconds(entry["Time"], f"{where}Time")
        meta = want_map(entry.get("SystemMetadata") or {}, f"{where}SystemMetadata")
        group = want_string(meta, "EventGroupId", f"{where}SystemMetadata.", max_len=GROUP_ID_MAX)
        dedup_id = want_string(meta, "DeduplicationId", f"{where}SystemMetadata.", max_len=DEDUP_ID_MAX,
                               pattern=DEDUP_ID_RE)
        return {"source": source, "detail_type": detail_type, "detail_text": detail_text, "detail": detail,
                "resources": resources, "time": event_time, "group": group, "dedup_id": dedup_id}

    def ingest(self, bus, entry, content_based, received, accepted):
        """One checked entry under the lock: its result, and the Event appended to `accepted`."""
        key = None
        raw = entry.get("raw")
        if content_based and raw is not None:
            key = ("content", hashlib.sha256(raw).hexdigest())
        elif content_based:
            content = json.dumps([entry["source"], entry["detail_type"], entry["detail_text"],
                                  entry["resources"], entry["time"]])
            key = ("content", hashlib.sha256(content.encode()).hexdigest())
        elif entry["dedup_id"] is not None:
            key = ("id", entry["dedup_id"])
        if key is not None:
            scope_key = (entry["group"], key)
            seen = bus.dedup.get(scope_key)
            if seen is not None and received - seen[0] < self.dedup_window:
                return {"EventId": seen[1], "SequenceNumber": seen[2], "SuccessCode": "DEDUPLICATED"}
        bus.sequence += 1
        if raw is not None:
            event = Event(
                event_id=str(uuid.uuid4()), sequence=f"{bus.sequence:020d}", group=entry["group"],
                dedup_id=entry["dedup_id"], source=None, detail_type=None, detail=None, resources=[],
                time=received, accepted=received, raw=raw, content_type=entry["content_type"],
                metadata=entry["metadata"],
            )
        else:
            event = Event(
                event_id=str(uuid.uuid4()), sequence=f"{bus.sequence:020d}", group=entry["group"],
                dedup_id=entry["dedup_id"], source=entry["source"], detail_type=entry["detail_type"],
                detail=entry["detail"], resources=entry["resources"],
                time=entry["time"] if entry["time"] is not None else received, accepted=received,
            )
        if key is not None:
            self.forget_expired(bus, received)
            bus.dedup.pop(scope_key, None)  # a key seen again after its window goes to the end
            bus.dedup[scope_key] = (received, event.event_id, event.sequence)
        accepted.append(event)
        return {"EventId": event.event_id, "SequenceNumber": event.sequence, "SuccessCode": "PUBLISHED"}

    def forget_expired(self, bus, at):
        """Drops expired dedup keys, oldest first (dicts keep insertion order, which is time order)."""
        while bus.dedup:
            oldest_key = next(iter(bus.dedup))
            if at - bus.dedup[oldest_key][0] < self.dedup_window:
                return
            del bus.dedup[oldest_key]

    OPERATIONS = {
        "CreateEventBus": create_event_bus,
        "DescribeEventBus": describe_event_bus,
        "ListEventBuses": list_event_buses,
        "DeleteEventBus": delete_event_bus,
        "CreateSubscriber": create_subscriber,
        "DescribeSubscriber": describe_subscriber,
        "ListSubscribers": list_subscribers,
        "DeleteSubscriber": delete_subscriber,
        "PutEvents": put_events,
        "PutRawEvents": put_raw_events,
    }
    # The model's other operations: answered as not modelled rather than as unknown.
    NOT_MODELLED = {
        "CreateEventSource", "DeleteEventSource", "DeleteResourcePolicy", "DescribeEventSource",
        "GetResourcePolicy", "ListEventSources", "ListResourcePolicies", "ListTagsForResource",
        "PutResourcePolicy", "RevokeResource", "TagResource", "UntagResource",
        "UpdateEventBus", "UpdateEventSource", "UpdateSubscriber",
    }

    def call(self, operation, params):
        handler = self.OPERATIONS.get(operation)
        if handler is None:
            if operation in self.NOT_MODELLED:
                raise invalid(f"{operation} is not modelled by the local Custom Event Bus double")
            raise ApiError("UnknownOperationException", f"Unknown operation {operation}")
        return handler(self, params)


# ---------------------------------------------------------------------------------------------------
# HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the SDKs reuse connections
    # Headers and body go out in two writes; with Nagle's algorithm the body waits for the client's
    # delayed ACK of the headers, 40 ms per call on a kept-alive connection (measured: 45 ms per
    # PutEvents of 100 entries, against 2 ms of work).
    disable_nagle_algorithm = True
    server_version = "custom-bus-double"
    double: Double

    def log_message(self, fmt, *args):
        LOG.debug("%s " + fmt, self.address_string(), *args)

    def reply(self, status, body):
        payload = cbor2.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/cbor")
        self.send_header("smithy-protocol", SMITHY_PROTOCOL)
        self.send_header("x-amzn-requestid", str(uuid.uuid4()))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def error(self, error):
        if error.status >= 500:
            LOG.error("%s: %s", error.code, error.message)
        self.reply(error.status, {"__type": f"com.amazonaws.eventsv2#{error.code}", "message": error.message})

    def do_GET(self):
        # Readiness: anything that answers will do (scripts/emulator.sh).
        payload = b"custom-bus-double\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def read_body(self):
        """The request body, with a Content-Length (as the SDKs send it) or chunked (as a proxy may)."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_POST(self):
        body = self.read_body()
        try:
            if not self.path.startswith(SERVICE_PATH_PREFIX):
                raise ApiError("UnknownOperationException", f"No operation at {self.path}")
            operation = self.path[len(SERVICE_PATH_PREFIX):].split("?", 1)[0]
            if self.headers.get("smithy-protocol") != SMITHY_PROTOCOL:
                raise invalid(f"the smithy-protocol header must be {SMITHY_PROTOCOL}")
            content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip()
            if body and content_type != "application/cbor":
                raise ApiError("UnsupportedMediaTypeException", "Content-Type must be application/cbor")
            if body:
                try:
                    params = cbor2.loads(body)
                except Exception:  # noqa: BLE001 - cbor2 raises several types for bad input
                    raise invalid("the request body is not valid CBOR") from None
            else:
                params = {}
            if not isinstance(params, dict):
                raise invalid("the request body must be a CBOR map")
            result = self.double.call(operation, params)
        except ApiError as error:
            self.error(error)
            return
        except Exception as error:  # noqa: BLE001 - answer as the service would, and log it
            LOG.exception("internal error")
            self.error(ApiError("InternalException", f"internal error in the double: {error}"))
            return
        self.reply(200, result)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("CUSTOM_BUS_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    double = Double()
    if not double.sqs_endpoint:
        parser.error("no SQS endpoint: set CUSTOM_BUS_SQS_ENDPOINT, AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL")
    handler = type("BoundHandler", (Handler,), {"double": double})
    server = ThreadingHTTPServer((args.host, args.port), handler)
    server.daemon_threads = True
    LOG.info("listening on %s:%d (account %s, region %s, SQS at %s, dedup window %ss, delivery delay %ss)",
             args.host, args.port, double.account, double.region, double.sqs_endpoint, double.dedup_window,
             double.delivery_delay)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
