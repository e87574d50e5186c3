"""Fixtures for the Custom Event Bus double's tests: boto3 clients (a client that is not ours) on the
emulators that scripts/emulator.sh starts, and a private double for settings a test changes."""

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import boto3
import botocore.config
import pytest

ROOT = Path(__file__).resolve().parents[2]
HOW_TO_RUN = ("run the tests under the project's emulators: scripts/emulator.sh run -- "
              ".venv/bin/python -m pytest tools/tests (or make test; scripts/emulator.sh install "
              "installs Python's pinned tools into .venv)")
ROLE_ARN = "arn:aws:iam::123456789012:role/custom-bus-double-tests"


def pytest_sessionstart(session):
    """Fails the run at once, saying how to run it, when the emulators are not there (never skips)."""
    missing = [v for v in ("AWS_ENDPOINT_URL_EVENTBRIDGEV2", "AWS_ENDPOINT_URL") if not os.environ.get(v)]
    if missing:
        pytest.exit(f"{', '.join(missing)} not set: {HOW_TO_RUN}", returncode=1)


def endpoint(variable):
    value = os.environ.get(variable)
    if not value:
        pytest.fail(f"{variable} is not set: {HOW_TO_RUN}", pytrace=False)
    return value


@pytest.fixture(scope="session")
def bus_endpoint():
    return endpoint("AWS_ENDPOINT_URL_EVENTBRIDGEV2")


@pytest.fixture(scope="session")
def eb(bus_endpoint):
    """boto3's eventbridgev2 client, reaching the double through AWS_ENDPOINT_URL_EVENTBRIDGEV2 alone."""
    return boto3.client("eventbridgev2", config=botocore.config.Config(retries={"max_attempts": 1}))


@pytest.fixture(scope="session")
def eb_unchecked(bus_endpoint):
    """The same client without botocore's own parameter checks, so invalid input reaches the double."""
    return boto3.client("eventbridgev2", config=botocore.config.Config(
        parameter_validation=False, retries={"max_attempts": 1}))


@pytest.fixture(scope="session")
def sqs():
    endpoint("AWS_ENDPOINT_URL")
    return boto3.client("sqs")


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class Queue:
    def __init__(self, sqs, url, arn):
        self.sqs = sqs
        self.url = url
        self.arn = arn

    def receive(self, count, timeout=10.0):
        """Receives (and deletes) messages until `count` arrived or `timeout` passed, in receive order."""
        messages = []
        deadline = time.monotonic() + timeout
        while len(messages) < count and time.monotonic() < deadline:
            reply = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10,
                                             AttributeNames=["All"], WaitTimeSeconds=0)
            batch = reply.get("Messages", [])
            if not batch:
                time.sleep(0.05)
                continue
            messages.extend(batch)
            self.sqs.delete_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)])
        return messages


@pytest.fixture
def make_queue(sqs):
    def make(fifo):
        name = unique("double") + (".fifo" if fifo else "")
        attributes = {"FifoQueue": "true"} if fifo else {}
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return Queue(sqs, url, arn)
    return make


@pytest.fixture
def bus(eb):
    return eb.create_event_bus(Name=unique("bus"))["EventBusArn"]


@pytest.fixture
def subscribe(eb):
    def create(bus_arn, queue, kind, **extra):
        return eb.create_subscriber(Name=unique("sub"), EventBusArn=bus_arn, Type=kind,
                                    InvokeConfiguration={"RoleArn": ROLE_ARN, "TargetArn": queue.arn,
                                                         **extra.pop("invoke", {})},
                                    **extra)["SubscriberArn"]
    return create


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def private_double():
    """Starts a second double with the given CUSTOM_BUS_* settings; yields an eventbridgev2 client on it."""
    processes = []

    def start(**settings):
        port = free_port()
        env = dict(os.environ, CUSTOM_BUS_SQS_ENDPOINT=endpoint("AWS_ENDPOINT_URL"), **settings)
        process = subprocess.Popen([sys.executable, str(ROOT / "tools" / "custom_bus_double.py"),
                                    "-H", "127.0.0.1", "-p", str(port)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(url + "/", timeout=1)
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("the private Custom Event Bus double did not start", pytrace=False)
                time.sleep(0.05)
        return boto3.client("eventbridgev2", endpoint_url=url,
                            config=botocore.config.Config(retries={"max_attempts": 1}))

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)
