"""The local global table (tools/global_table_replicator.py between one DynamoDB Local per region)
against the documented behaviour of DynamoDB global tables, version 2019.11.21, through boto3.

Run: EMULATOR_REGIONS=us-east-1,eu-west-1 scripts/emulator.sh run -- .venv/bin/python -m pytest
tools/tests (make test and make test-custom-bus-double do)."""

import json
import os
import threading
import time
import urllib.error
import urllib.request

import boto3
import pytest

from conftest import HOW_TO_RUN, unique

HOW_TO_RUN_REGIONS = ("start the emulators with two regions: EMULATOR_REGIONS=us-east-1,eu-west-1 "
                      "scripts/emulator.sh run -- .venv/bin/python -m pytest tools/tests (make test does); "
                      + HOW_TO_RUN)


def region_variable(region):
    return "OUTBOX_EMULATOR_DYNAMODB_" + region.upper().replace("-", "_")


@pytest.fixture(scope="session")
def regions():
    """The two regions the emulator started (fails, saying how to run, when it started none)."""
    names = [r for r in os.environ.get("OUTBOX_EMULATOR_REGIONS", "").split(",") if r]
    if len(names) < 2 or not os.environ.get("OUTBOX_EMULATOR_REPLICATOR"):
        pytest.fail(f"OUTBOX_EMULATOR_REGIONS names no two regions: {HOW_TO_RUN_REGIONS}", pytrace=False)
    return names[:2]


class World:
    """The two regions' clients and the replicator's control."""

    def __init__(self, regions):
        self.a, self.b = regions
        self.control_url = os.environ["OUTBOX_EMULATOR_REPLICATOR"]
        self.ddb = {r: boto3.client("dynamodb", region_name=r, endpoint_url=os.environ[region_variable(r)])
                    for r in regions}
        self.streams = {r: boto3.client("dynamodbstreams", region_name=r,
                                        endpoint_url=os.environ[region_variable(r)]) for r in regions}

    def control(self, path, body=None):
        request = urllib.request.Request(self.control_url + path, method="POST" if body is not None else "GET",
                                         data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def wait_caught_up(self, timeout_ms=20000):
        status, body = self.control("/wait-caught-up", {"timeout_ms": timeout_ms})
        assert status == 200 and body["caught_up"], body
        return body["stats"]

    def link(self, source, destination, table, **body):
        """A control body naming the link source -> destination of `table`."""
        return {"from": source, "to": destination, "table": table, **body}

    def link_stats(self, source, destination, table):
        return self.control("/stats")[1]["directions"][f"{source}>{destination}"]["tables"][table]

    def create_table(self, region, name):
        self.ddb[region].create_table(
            TableName=name, BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})

    def items(self, region, table):
        items = self.ddb[region].scan(TableName=table, ConsistentRead=True)["Items"]
        return {i["PK"]["S"]: i for i in items}

    def records(self, region, table):
        """Every record of the table's stream in `region`, every shard, from its start."""
        client = self.streams[region]
        arn = self.ddb[region].describe_table(TableName=table)["Table"]["LatestStreamArn"]
        out = []
        for shard in client.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            iterator = client.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                                 ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            while iterator:
                page = client.get_records(ShardIterator=iterator)
                if not page["Records"]:
                    break
                out.extend(page["Records"])
                iterator = page.get("NextShardIterator")
        return out


@pytest.fixture(scope="session")
def world(regions):
    return World(regions)


@pytest.fixture
def table(world):
    """A new table in both regions; afterwards every link restored, no lag, the table deleted."""
    name = unique("replicated")
    for region in (world.a, world.b):
        world.create_table(region, name)
    yield name
    for source, destination in ((world.a, world.b), (world.b, world.a)):
        world.control("/restore", {"from": source, "to": destination})
        world.control("/lag", {"from": source, "to": destination, "lag_ms": 0})
    assert world.control("/stats")[1]["directions"][f"{world.a}>{world.b}"]["held_back"] == 0
    world.wait_caught_up()
    for region in (world.a, world.b):
        world.ddb[region].delete_table(TableName=name)


def item(key, **attributes):
    out = {"PK": {"S": key}}
    out.update({k: {"S": str(v)} for k, v in attributes.items()})
    return out


def summary(records):
    """(event, key, attribute v of the new image) per record, in stream order."""
    return [(r["eventName"], r["dynamodb"]["Keys"]["PK"]["S"], r["dynamodb"].get("NewImage", {}).get("v", {}).get("S"))
            for r in records]


def test_writes_in_either_region_reach_the_other_and_every_stream_holds_every_write_once(world, table):
    # Given a table in both regions
    a, b = world.ddb[world.a], world.ddb[world.b]
    # When an item is written in A, another in B, the first updated in B and the second deleted in A
    a.put_item(TableName=table, Item=item("k1", v="1"))
    b.put_item(TableName=table, Item=item("k2", v="2"))
    world.wait_caught_up()
    b.put_item(TableName=table, Item=item("k1", v="1b"))
    a.delete_item(TableName=table, Key={"PK": {"S": "k2"}})
    world.wait_caught_up()
    # Then both regions hold the same items
    assert world.items(world.a, table) == world.items(world.b, table) == {"k1": item("k1", v="1b")}
    # And each region's stream holds each of the four writes exactly once, wherever it began (a
    # replicated write is a write there too, and none is replicated back)
    expected = {("INSERT", "k1", "1"), ("INSERT", "k2", "2"), ("MODIFY", "k1", "1b"), ("REMOVE", "k2", None)}
    for region in (world.a, world.b):
        records = summary(world.records(region, table))
        assert len(records) == 4 and set(records) == expected, (region, records)


def test_a_transaction_is_replicated_item_by_item_and_may_be_seen_in_part(world, table):
    # Given the link from A to B cut
    world.control("/cut", world.link(world.a, world.b, table))
    # When a transaction writes three items in A, and B is let through one write only
    world.ddb[world.a].transact_write_items(TransactItems=[
        {"Put": {"TableName": table, "Item": item(f"t{i}", v=str(i))}} for i in range(3)])
    world.wait_caught_up()
    status, _ = world.control("/release", world.link(world.a, world.b, table, count=1))
    assert status == 200
    world.wait_caught_up()
    # Then B holds one item of the transaction (atomic only in the region that ran it)
    assert len(world.items(world.b, table)) == 1
    assert world.link_stats(world.a, world.b, table)["held_back"] == 2
    # And once restored, each item arrives as a write of its own in B's stream
    world.control("/restore", world.link(world.a, world.b, table))
    world.wait_caught_up()
    assert world.items(world.b, table) == world.items(world.a, table)
    assert sorted(summary(world.records(world.b, table))) == [("INSERT", f"t{i}", str(i)) for i in range(3)]


@pytest.mark.parametrize("later", ["a", "b"])
def test_the_last_writer_wins_a_conflicting_write_in_both_regions(world, table, later):
    # Given both links cut, so each region writes the item without seeing the other's write
    world.control("/cut", world.link(world.a, world.b, table))
    world.control("/cut", world.link(world.b, world.a, table))
    first, second = (world.b, world.a) if later == "a" else (world.a, world.b)
    # When the item is written in one region, then (later) in the other
    world.ddb[first].put_item(TableName=table, Item=item("k", v=f"from {first}"))
    world.wait_caught_up()
    time.sleep(0.05)
    world.ddb[second].put_item(TableName=table, Item=item("k", v=f"from {second}"))
    world.wait_caught_up()
    # And the links are restored
    world.control("/restore", world.link(world.a, world.b, table))
    world.control("/restore", world.link(world.b, world.a, table))
    world.wait_caught_up()
    # Then both regions hold the later write, and the older one was dropped where it arrived late
    assert world.items(world.a, table) == world.items(world.b, table) == {"k": item("k", v=f"from {second}")}
    assert world.link_stats(first, second, table)["dropped_as_older"] >= 1
    assert summary(world.records(second, table)) == [("INSERT", "k", f"from {second}")]


def test_a_cut_link_holds_writes_back_and_releases_them_in_order_when_restored(world, table):
    # Given the link from A to B cut
    world.control("/cut", world.link(world.a, world.b, table))
    # When A writes 20 items and updates one five times
    for i in range(20):
        world.ddb[world.a].put_item(TableName=table, Item=item(f"k{i:02}", v="0"))
    for v in range(1, 6):
        world.ddb[world.a].put_item(TableName=table, Item=item("k00", v=str(v)))
    world.wait_caught_up()
    # Then B has none of them, held back, not lost
    assert world.items(world.b, table) == {}
    assert world.link_stats(world.a, world.b, table)["held_back"] == 25
    # And once restored B holds all, each item's writes in A's order
    world.control("/restore", world.link(world.a, world.b, table))
    world.wait_caught_up()
    assert world.items(world.b, table) == world.items(world.a, table)
    assert len(world.items(world.b, table)) == 20
    k00 = [v for _, key, v in summary(world.records(world.b, table)) if key == "k00"]
    assert k00 == ["0", "1", "2", "3", "4", "5"]


def test_a_lag_delays_each_write_at_least_that_long(world, table):
    # Given a lag of 800 ms from A to B
    world.control("/lag", world.link(world.a, world.b, table, lag_ms=800))
    # When A writes an item
    written = time.monotonic()
    world.ddb[world.a].put_item(TableName=table, Item=item("k", v="1"))
    # Then B has it after the lag, not before
    while "k" not in world.items(world.b, table):
        assert time.monotonic() - written < 10, "the write never arrived"
        time.sleep(0.02)
    assert time.monotonic() - written >= 0.8
    assert world.link_stats(world.a, world.b, table)["lag_ms"] == 800


def test_a_ttl_deletion_is_replicated_as_a_plain_delete_without_ttls_identity(world, table):
    # Given an item in both regions, and TTL on in A (only there, so that B's own sweeper cannot
    # be the one that deletes it)
    world.ddb[world.a].update_time_to_live(TableName=table, TimeToLiveSpecification={
        "Enabled": True, "AttributeName": "ttl"})
    world.ddb[world.a].put_item(TableName=table, Item={**item("k", v="1"), "ttl": {"N": str(int(time.time()) + 3600)}})
    world.wait_caught_up()
    # When the item expires in A and TTL deletes it there
    world.ddb[world.a].put_item(TableName=table, Item={**item("k", v="1"), "ttl": {"N": str(int(time.time()) - 60)}})
    deadline = time.monotonic() + 30
    while world.items(world.a, table):
        assert time.monotonic() < deadline, "DynamoDB Local's TTL did not delete the item"
        time.sleep(0.1)
    world.wait_caught_up()
    # Then it is gone from B too, by a REMOVE without TTL's userIdentity, which A's REMOVE carries
    assert world.items(world.b, table) == {}
    removes = {r: [rec for rec in world.records(r, table) if rec["eventName"] == "REMOVE"] for r in (world.a, world.b)}
    assert removes[world.a][0]["userIdentity"] == {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}
    assert len(removes[world.b]) == 1 and "userIdentity" not in removes[world.b][0]


def test_a_table_created_after_the_replicator_started_is_replicated_from_its_creation(world):
    # Given a table that exists in A only, with an item written there
    name = unique("late")
    world.create_table(world.a, name)
    try:
        world.ddb[world.a].put_item(TableName=name, Item=item("early", v="1"))
        world.wait_caught_up()
        assert name not in world.control("/stats")[1]["tables"]
        # When the table is created in B too
        world.create_table(world.b, name)
        world.ddb[world.b].put_item(TableName=name, Item=item("late", v="2"))
        stats = world.wait_caught_up()
        # Then it is replicated, the item written before B had the table included
        assert name in stats["tables"]
        assert world.items(world.a, name) == world.items(world.b, name) == {
            "early": item("early", v="1"), "late": item("late", v="2")}
    finally:
        for region in (world.a, world.b):
            try:
                world.ddb[region].delete_table(TableName=name)
            except world.ddb[region].exceptions.ResourceNotFoundException:
                pass


def test_the_control_refuses_what_it_does_not_know_with_a_reason(world):
    status, body = world.control("/cut", {"from": "mars-north-1"})
    assert status == 400 and "mars-north-1" in body["error"]
    status, body = world.control("/lag", {"from": world.a, "to": world.b, "lag_ms": -1})
    assert status == 400 and "lag_ms" in body["error"]
    status, body = world.control("/release", world.link(world.a, world.b, "orders", count=1))
    assert status == 400 and "not cut" in body["error"]
    status, body = world.control("/release", {"from": world.a, "to": world.b, "count": 1})
    assert status == 400 and "'table'" in body["error"]


def test_a_cut_for_one_table_holds_back_no_other_table(world, table):
    # Given another table, and the link from A to B cut for the first one only
    other = unique("other")
    for region in (world.a, world.b):
        world.create_table(region, other)
    try:
        world.control("/cut", world.link(world.a, world.b, table))
        # When A writes to both
        world.ddb[world.a].put_item(TableName=table, Item=item("k", v="1"))
        world.ddb[world.a].put_item(TableName=other, Item=item("k", v="1"))
        world.wait_caught_up()
        # Then the other table's write reached B, the first one's is held
        assert world.items(world.b, other) == {"k": item("k", v="1")}
        assert world.items(world.b, table) == {}
        assert world.link_stats(world.a, world.b, table)["held_back"] == 1
    finally:
        for region in (world.a, world.b):
            world.ddb[region].delete_table(TableName=other)


def test_a_table_whose_writes_cannot_be_applied_holds_back_no_other_table(world, table):
    # Given a table whose replica in B has another key, so that no write to it can be applied in B
    # (the replicator keeps it at the head of its table's queue and tries again, as after a
    # destination's restart): one table stuck, as a table with a long backlog (a link restored
    # after a cut) is busy
    stuck = unique("stuck")
    world.create_table(world.a, stuck)
    world.ddb[world.b].create_table(
        TableName=stuck, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "other", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "other", "AttributeType": "S"}],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    try:
        world.wait_caught_up()
        world.ddb[world.a].put_item(TableName=stuck, Item=item("k", v="1"))
        deadline = time.monotonic() + 10
        while world.control("/stats")[1]["directions"][f"{world.a}>{world.b}"]["tables"].get(
                stuck, {}).get("queued") != 1:
            assert time.monotonic() < deadline, "the stuck table's write was never read"
            time.sleep(0.05)
        # When A then writes to the table, read after the stuck write
        world.ddb[world.a].put_item(TableName=table, Item=item("k", v="1"))
        # Then the table's write reaches B while the stuck one's is still queued
        status, body = world.control("/wait-caught-up", {"timeout_ms": 10000, "tables": [table]})
        assert status == 200 and body["caught_up"], body["stats"]["directions"][f"{world.a}>{world.b}"]["tables"]
        assert world.items(world.b, table) == {"k": item("k", v="1")}
        assert world.link_stats(world.a, world.b, stuck)["queued"] == 1
    finally:
        for region in (world.a, world.b):
            world.ddb[region].delete_table(TableName=stuck)


def test_a_wait_for_catching_up_answers_while_the_table_is_written_on(world, table):
    # Given A writing the table on and on, as a demo's writer and pollers do
    stop = threading.Event()

    def write_on():
        n = 0
        while not stop.is_set():
            world.ddb[world.a].put_item(TableName=table, Item=item(f"on {n % 10}", v=str(n)))
            n += 1
            time.sleep(0.01)

    writer = threading.Thread(target=write_on)
    writer.start()
    try:
        # When A writes an item and the caller then waits for the replicator to catch up
        world.ddb[world.a].put_item(TableName=table, Item=item("before the call", v="1"))
        status, body = world.control("/wait-caught-up", {"timeout_ms": 15000, "tables": [table]})
        # Then it answers that it caught up, and B holds the write made before the call
        assert status == 200 and body["caught_up"], body["stats"]["directions"][f"{world.a}>{world.b}"]["tables"]
        assert "before the call" in world.items(world.b, table)
    finally:
        stop.set()
        writer.join()


def test_a_local_write_overtaken_by_an_older_replicated_one_is_written_again(world, table):
    # Given an item written in A while the link to B is cut
    world.control("/cut", world.link(world.a, world.b, table))
    world.ddb[world.a].put_item(TableName=table, Item=item("k", v="older, from A"))
    world.wait_caught_up()
    # And a later write of it in B that the replicator has not read yet (B's stream left unread)
    world.control("/pause-reading", {"region": world.b, "table": table})
    world.ddb[world.b].put_item(TableName=table, Item=item("k", v="later, from B"))
    # When the link is restored, so that A's older write lands on top of B's later one (AWS's
    # conditional write would refuse it; the replicator's check did not know of B's write)
    world.control("/restore", world.link(world.a, world.b, table))
    deadline = time.monotonic() + 10
    while world.items(world.b, table)["k"]["v"]["S"] != "older, from A":
        assert time.monotonic() < deadline, "the held write was not applied"
        time.sleep(0.02)
    world.control("/resume-reading", {"region": world.b, "table": table})
    world.wait_caught_up()
    # Then both regions end with the later write: B's is written again once the replicator reads
    # its own older write back after it
    assert world.items(world.a, table) == world.items(world.b, table) == {"k": item("k", v="later, from B")}
    assert world.control("/stats")[1]["regions"][world.b]["repairs"] >= 1


def test_a_table_still_empty_when_first_read_is_replicated_after_other_tables_were_written(world, table):
    # Given the replicator reading the table while its stream is empty in both regions
    world.wait_caught_up()
    # And writes to another table in both regions meanwhile (DynamoDB Local's sequence numbers are
    # the process's, so the empty shard's first record is then numbered past where it was read)
    other = unique("other")
    for region in (world.a, world.b):
        world.create_table(region, other)
    try:
        for region in (world.a, world.b):
            world.ddb[region].put_item(TableName=other, Item=item(f"from {region}", v="1"))
        # When the table is written in A
        world.ddb[world.a].put_item(TableName=table, Item=item("k", v="1"))
        world.wait_caught_up()
        # Then the write reaches B, and B's stream holds it once
        assert world.items(world.b, table) == {"k": item("k", v="1")}
        assert summary(world.records(world.b, table)) == [("INSERT", "k", "1")]
    finally:
        for region in (world.a, world.b):
            world.ddb[region].delete_table(TableName=other)


def test_both_regions_converge_under_concurrent_conflicting_writes_to_the_same_items(world, table):
    # Given a lag both ways, so that each region's writes cross the other's in flight
    world.control("/lag", world.link(world.a, world.b, table, lag_ms=150))
    world.control("/lag", world.link(world.b, world.a, table, lag_ms=150))

    # When both regions write the same 20 items at the same time, five rounds each
    def write(region):
        for n in range(5):
            for i in range(20):
                world.ddb[region].put_item(TableName=table, Item=item(f"k{i:02}", v=f"{region} {n}"))

    threads = [threading.Thread(target=write, args=(region,)) for region in (world.a, world.b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    world.wait_caught_up()
    # Then both regions hold the same item for every key, each a region's last round
    in_a, in_b = world.items(world.a, table), world.items(world.b, table)
    assert in_a == in_b
    assert sorted(in_a) == [f"k{i:02}" for i in range(20)]
    assert {v["v"]["S"].split()[1] for v in in_a.values()} == {"4"}
