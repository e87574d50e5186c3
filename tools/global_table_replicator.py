"""A local global table: replicates every table that exists in every region between DynamoDB Local
processes, one process per region, as DynamoDB global tables (version 2019.11.21) replicate.

No emulator replicates a global table, so scripts/emulator.sh starts this beside one DynamoDB Local
per region when asked (`EMULATOR_REGIONS=us-east-1,eu-west-1`, see its header). What it is faithful
to (the facts and their sources are in the project's reference notes on global tables; docs/testing.md,
"The local global table", says what the tests check):

  - Replication reads each region's DynamoDB Stream (every shard, a child shard after its parent,
    new shards and new tables found as they appear) and applies each write to the other regions
    *item by item*, with PutItem and DeleteItem: a transaction is atomic only in the region that ran
    it, and another region may see part of it.
  - Every region's stream holds every write: a replicated write is a real write in its destination,
    so it is in that region's stream too. It is not replicated back: the replicator recognises its
    own writes (it remembers, per item, the images it wrote and is waiting to read back). That
    bookkeeping is kept here, never in the items: on version 2019.11.21 no `aws:rep:*` attribute is
    visible to the relays.
  - Last writer wins, per item, by the time the write happened in its source region (here: when the
    replicator read it from that region's stream, which it reads continuously, cut or not;
    DynamoDB Local's ApproximateCreationDateTime is rounded to the minute, too coarse to order by).
    Writes to one item in two regions less than a poll apart (50 ms; up to IDLE_POLL_MAX_S for a
    table idle a while) are ordered by when they were read: the winner is arbitrary but the same in
    every region, as with AWS's internal timestamps of nearly simultaneous writes.
    A replicated write older than the version its destination holds is dropped. A destination write
    that overtakes a replicated one in flight (the condition AWS checks is atomic, ours is not) is
    repaired: when the older replicated image is read back after a newer write to the same item, the
    newer image is written again, so every region converges on the last writer.
  - A REMOVE is replicated as a delete, a TTL deletion too: a plain DeleteItem, so in the other
    region it carries no `userIdentity` (as AWS's TTL documentation says of replicated TTL deletes).
  - Each table replicates on its own, as a global table does: a direction applies several tables'
    writes at once, each table's one at a time in the order read, so one table's backlog (a link
    restored after a cut) holds back no other table's writes.
  - A cut link holds writes back (per direction, source -> destination, and table) and releases
    them in order when restored, nothing lost; a lag delays each write by at least that long after
    it was read. A cut link can also release its oldest N held writes while staying cut (to show a
    transaction half replicated).
  - DynamoDB Local's own quirk is absorbed: an iterator taken on a shard still empty fails with
    TrimmedDataAccessException once another table's writes moved the process's sequence numbers
    on; the reader takes a new one and loses nothing.

Not modelled: DynamoDB may coalesce several changes to an item into one replicated write (this
replicates every change); a table must exist in every region (no CreateTable with replicas, no
backfill of items written before the table existed in each region: the streams are read from their
start, so items written since each table was created are replicated); MRSC tables.
A table without a stream gets one (NEW_AND_OLD_IMAGES, as making a table global does); a table whose
stream has no new image (KEYS_ONLY, OLD_IMAGE) cannot be replicated and is reported in the stats.

Control interface, HTTP with JSON bodies on a loopback port (`-p PORT`). A link is a direction
(SRC -> DST) for one table: a body naming "table" (or "tables": [...]) acts on those tables' links
only, so that concurrent tests, each on tables of its own, do not hold back each other's writes;
without, on the whole direction.

  GET  /                  200 "ok" (the readiness probe)
  GET  /stats             {"regions": {REGION: {endpoint, records_read, local_writes,
                          own_writes_read, repairs}}, "directions": {"SRC>DST": {from, to, cut,
                          lag_ms, queued, held_back, applied, dropped_as_older, failed, "tables":
                          {TABLE: {cut, lag_ms, queued, held_back, applied, dropped_as_older,
                          failed}}}}, "tables": [names replicated], "not_replicated": {table: why}}.
                          `held_back` counts the writes queued while cut; `queued` every write read
                          and not applied yet; `failed` writes whose destination table was gone.
  POST /cut               {"from": SRC, "to": DST, "table": T}: holds back the writes SRC -> DST
                          ("to" left out: every direction from SRC). 200 with the stats.
  POST /restore           the same body: releases what was held, in order, and replicates again
                          (without "table": every table of the direction, those cut alone too).
  POST /lag               {"from": SRC, "to": DST, "table": T, "lag_ms": N}: each write applied no
                          sooner than N ms after it was read (without "table": the direction's lag,
                          replacing any table's own).
  POST /release           {"from": SRC, "to": DST, "table": T, "count": N}: applies T's oldest N
                          held writes, the link staying cut.
  POST /pause-reading    {"region": R, "table": T}: the reader leaves T's stream in R unread until
                          POST /resume-reading (same body): a write made there meanwhile is not
                          known to the replicator yet, as a write in flight is not (the replicator's
                          own test of its repair uses it; a wait does not wait for a paused table).
  POST /wait-caught-up    {"timeout_ms": N, "tables": [...]} (timeout 30000 by default; every table
                          without "table(s)"): answers once every write made in any region before
                          the call has been read, and every link that is not cut has applied (or
                          dropped as older) each of them, its lag included: 200 {"caught_up":
                          true, "stats": ...}, or 504 {"caught_up": false, ...} after the timeout.
                          Writes a cut holds stay held (see held_back). Writes made after the call
                          are not waited for: a table written on and on is caught up too.
Errors are 400 {"error": why}, naming what is wrong.

Usage: python global_table_replicator.py --region us-east-1=http://127.0.0.1:8001
           --region eu-west-1=http://127.0.0.1:8002 -H 127.0.0.1 -p PORT [--poll-interval-ms 50]
"""

import argparse
import base64
import collections
import dataclasses
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import botocore.config
import botocore.exceptions

LOG = logging.getLogger("global_table_replicator")

# How often a region's tables are listed again (new tables), and each table's stream described
# again (new shards), when nothing asks for it sooner (a shard that ended, a wait for catching up).
DISCOVERY_INTERVAL_S = 1.0
STREAM_DESCRIBE_INTERVAL_S = 10.0
# A table whose stream had nothing new for a few passes is read again after the poll interval
# doubled per idle pass, up to this: the suite leaves many tables behind, and reading each every
# 50 ms would load the machine for nothing. A wait for catching up reads every table on every pass
# regardless. It bounds how late a write is stamped (see "Last writer wins" above).
IDLE_POLL_MAX_S = 0.5
# A write that failed for a reason that may pass (the destination restarting) is tried again after this.
RETRY_AFTER_S = 0.2
# Writes applied at once per direction, each of another table (a table's own stay one at a time,
# in order): as a global table's replication is its own, one table's backlog (a link restored
# after a cut, a burst) delays no other table's writes. With one, a demo's backlog once held the
# suite's lease tables' heartbeats back past their failover time.
APPLIERS_PER_DIRECTION = 4


def signature(image):
    """A canonical text of an item image (None for an absent item), to recognise an image read back.

    Sets are sorted, since their order is not part of the item."""
    if image is None:
        return "<absent>"

    def canonical(value):
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k in ("SS", "NS"):
                    out[k] = sorted(v)
                elif k == "BS":
                    out[k] = sorted(base64.b64encode(b).decode() for b in v)
                elif k == "B":
                    out[k] = base64.b64encode(v).decode()
                else:
                    out[k] = canonical(v)
            return out
        if isinstance(value, list):
            return [canonical(v) for v in value]
        return value

    return json.dumps(canonical(image), sort_keys=True, separators=(",", ":"))


@dataclasses.dataclass
class Version:
    """One version of an item as a region holds it: when it was written (in its source region), its
    keys and its image (None: deleted)."""
    ts: float
    keys: dict
    image: dict | None


@dataclasses.dataclass
class Write:
    """A write read from a source region's stream, on its way to one destination."""
    table: str
    item: str  # signature of the keys
    version: Version
    read_at: float  # time.monotonic() when it was read


@dataclasses.dataclass
class Echo:
    """A write of the replicator's own that its destination's stream will show: recognised there by
    its image, so that it is not replicated back."""
    ts: float
    signature: str


class TableLink:
    """One table's replication in one direction: its queue of writes, in the order read, and its
    counts. Tables are apart so that one test's cut or lag holds back no other test's table."""

    def __init__(self):
        self.queue = collections.deque()
        self.read = 0  # writes ever queued (read from the source's stream)
        self.done = 0  # writes ever taken off the queue: applied, dropped as older or failed
        self.applied = 0
        self.dropped_as_older = 0
        self.failed = 0
        self.release_budget = 0  # held writes to apply although cut (POST /release)


class Direction:
    """Replication from one region to another, per table: each table's writes applied in the order
    read, one at a time (several tables' at once), none while the direction (or the table in it)
    is cut, none sooner than its lag after it was read."""

    def __init__(self, source, destination):
        self.source = source
        self.destination = destination
        self.links = collections.defaultdict(TableLink)  # table -> TableLink
        self.cut = False  # every table
        self.cut_tables = set()
        self.lag_s = 0.0  # every table without a lag of its own
        self.lag_tables = {}  # table -> seconds
        self.in_flight = set()  # the tables of the writes being applied

    @property
    def name(self):
        return f"{self.source.name}>{self.destination.name}"

    def is_cut(self, table):
        return self.cut or table in self.cut_tables

    def lag_of(self, table):
        return self.lag_tables.get(table, self.lag_s)

    def next_write(self, now):
        """(table, seconds to wait) of the write to apply next: the oldest due head of a table not
        cut (or released) and with no write in flight; (None, seconds until one is due, or None
        when none can be)."""
        best, wait = None, None
        for table, link in self.links.items():
            if (not link.queue or table in self.in_flight
                    or (self.is_cut(table) and link.release_budget == 0)):
                continue
            due = link.queue[0].read_at + (0 if self.is_cut(table) else self.lag_of(table))
            if due <= now:
                if best is None or link.queue[0].read_at < self.links[best].queue[0].read_at:
                    best = table
            elif wait is None or due - now < wait:
                wait = due - now
        return (best, 0) if best is not None else (None, wait)

    def read_so_far(self, tables=None):
        """(table, link, writes it has read) for `tables` (every table: None): what a wait for
        catching up waits to see done."""
        return [(table, link, link.read) for table, link in self.links.items()
                if tables is None or table in tables]

    def has_done(self, table, link, count):
        """`link` took `count` writes off its queue, or holds the rest while cut, or is gone (its
        table deleted)."""
        return (link.done >= count or self.links.get(table) is not link
                or (self.is_cut(table) and link.release_budget == 0))

    def stats(self):
        tables = {}
        for table, link in self.links.items():
            cut = self.is_cut(table)
            tables[table] = {"cut": cut, "lag_ms": round(self.lag_of(table) * 1000),
                             "queued": len(link.queue), "held_back": len(link.queue) if cut else 0,
                             "applied": link.applied, "dropped_as_older": link.dropped_as_older,
                             "failed": link.failed}
        total = {k: sum(t[k] for t in tables.values())
                 for k in ("queued", "held_back", "applied", "dropped_as_older", "failed")}
        return {"from": self.source.name, "to": self.destination.name, "cut": self.cut,
                "lag_ms": round(self.lag_s * 1000), **total, "tables": tables}


@dataclasses.dataclass
class StreamState:
    """Where the replicator reads one table's stream in one region."""
    stream_arn: str
    # shard id -> its next iterator (None: not opened yet); removed once the shard has ended.
    open_shards: dict = dataclasses.field(default_factory=dict)
    # shard id -> the sequence number of the last record read (to resume after an expired iterator)
    last_read: dict = dataclasses.field(default_factory=dict)
    parents: dict = dataclasses.field(default_factory=dict)
    finished: set = dataclasses.field(default_factory=set)
    described_at: float = 0.0
    # A table idle for a while is read less often (see IDLE_POLL_MAX_S); any record resets it.
    idle_passes: int = 0
    next_read_at: float = 0.0


class Region:
    """One region: its DynamoDB Local, the clients on it and what its reader has seen."""

    def __init__(self, name, endpoint):
        self.name = name
        self.endpoint = endpoint
        # DynamoDB Local runs with -sharedDb for a region: any key reads the region's one database.
        config = botocore.config.Config(retries={"max_attempts": 3, "mode": "standard"},
                                        connect_timeout=5, read_timeout=30)
        session = boto3.session.Session(aws_access_key_id="replicator", aws_secret_access_key="replicator",
                                        region_name=name)
        self.dynamodb = session.client("dynamodb", endpoint_url=endpoint, config=config)
        self.streams = session.client("dynamodbstreams", endpoint_url=endpoint, config=config)
        self.tables = set()  # every table in the region, as last listed
        self.listed_at = 0.0
        self.streams_by_table = {}  # table -> StreamState
        self.paused_tables = set()  # tables whose stream the reader leaves unread (POST /pause-reading)
        self.cycles = 0  # full passes of the reader over the region's replicated tables
        # table -> lock: the replicator's writes into one of this region's tables, one at a time
        self.write_locks = collections.defaultdict(threading.Lock)
        self.records_read = 0
        self.local_writes = 0
        self.own_writes_read = 0
        self.repairs = 0

    def stats(self):
        return {"endpoint": self.endpoint, "records_read": self.records_read,
                "local_writes": self.local_writes, "own_writes_read": self.own_writes_read,
                "repairs": self.repairs}


class Replicator:
    """Every table present in all regions, replicated between them (see the module's docstring)."""

    def __init__(self, regions, poll_interval_s):
        self.regions = {r.name: r for r in regions}
        self.poll_interval_s = poll_interval_s
        self.directions = {(s.name, d.name): Direction(s, d)
                           for s in regions for d in regions if s is not d}
        # One lock for the shared state below; never held during a call to DynamoDB.
        self.lock = threading.Condition()
        self.versions = {}  # (region, table, item) -> Version the region holds, as far as known
        self.echoes = collections.defaultdict(collections.deque)  # (region, table, item) -> Echo…
        self.replicated = set()  # tables present in every region, read and replicated
        self.not_replicated = {}  # table -> why it cannot be
        self.discover_now = 0  # waits under way: while any, every pass lists tables and shards afresh
        self._last_ts = 0.0

    # --- time

    def _now(self):
        """A wall-clock timestamp, strictly increasing across the replicator (caller holds the lock):
        two writes never tie under last-writer-wins."""
        self._last_ts = max(time.time(), self._last_ts + 1e-6)
        return self._last_ts

    # --- reading the streams

    def run_reader(self, region):
        """Reads `region`'s streams for ever: lists its tables, follows each replicated table's shards."""
        while True:
            complete = True
            try:
                self._discover(region)
            except botocore.exceptions.EndpointConnectionError as error:
                # The region's DynamoDB Local starting (or stopped): one line, not a traceback.
                LOG.warning("%s: %s; trying again", region.name, error)
                complete = False
            except Exception:  # noqa: BLE001 - a reader never dies; the next pass tries again
                LOG.exception("listing the tables of %s failed; trying again", region.name)
                complete = False
            for table in sorted(self.replicated):
                try:
                    self._read_table(region, table)
                except Exception:  # noqa: BLE001 - one table's failure holds back no other
                    LOG.exception("reading %s in %s failed; trying again", table, region.name)
                    complete = False
            if complete:
                # A pass counts only whole: a wait for catching up relies on it.
                with self.lock:
                    region.cycles += 1
                    self.lock.notify_all()
                time.sleep(self.poll_interval_s)
            else:
                time.sleep(RETRY_AFTER_S)

    def _discover(self, region):
        now = time.monotonic()
        if not self.discover_now and now - region.listed_at < DISCOVERY_INTERVAL_S:
            return
        names, start = set(), None
        while True:
            page = region.dynamodb.list_tables(**({"ExclusiveStartTableName": start} if start else {}))
            names.update(page.get("TableNames", []))
            start = page.get("LastEvaluatedTableName")
            if not start:
                break
        region.tables = names
        region.listed_at = now
        for gone in set(region.streams_by_table) - names:
            del region.streams_by_table[gone]
        everywhere = set.intersection(*(r.tables for r in self.regions.values()))
        with self.lock:
            self.replicated = {t for t in everywhere if t not in self.not_replicated}
            for gone in set(self.not_replicated) - everywhere:
                del self.not_replicated[gone]
            for direction in self.directions.values():
                for gone in [t for t, link in direction.links.items() if t not in everywhere and not link.queue]:
                    del direction.links[gone]

    def _stream_of(self, region, table):
        """The table's stream state in `region`, (re)described when due; None if it cannot be read."""
        state = region.streams_by_table.get(table)
        now = time.monotonic()
        if state is not None and now - state.described_at < STREAM_DESCRIBE_INTERVAL_S and not self.discover_now:
            return state
        description = region.dynamodb.describe_table(TableName=table)["Table"]
        spec = description.get("StreamSpecification") or {}
        arn = description.get("LatestStreamArn")
        if not spec.get("StreamEnabled") or not arn:
            # Making a table global turns its stream on (NEW_AND_OLD_IMAGES); so does the replicator.
            LOG.info("enabling the stream of %s in %s", table, region.name)
            region.dynamodb.update_table(TableName=table, StreamSpecification={
                "StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
            return None
        if spec.get("StreamViewType") not in ("NEW_AND_OLD_IMAGES", "NEW_IMAGE"):
            with self.lock:
                self.not_replicated[table] = (f"its stream in {region.name} is {spec.get('StreamViewType')}: "
                                              "a write cannot be replicated without its new image")
                self.replicated = self.replicated - {table}
            return None
        if state is None or state.stream_arn != arn:
            state = StreamState(stream_arn=arn)
            region.streams_by_table[table] = state
        shards, start = [], None
        while True:
            kwargs = {"StreamArn": arn, **({"ExclusiveStartShardId": start} if start else {})}
            page = region.streams.describe_stream(**kwargs)["StreamDescription"]
            shards.extend(page.get("Shards", []))
            start = page.get("LastEvaluatedShardId")
            if not start:
                break
        for shard in shards:
            shard_id = shard["ShardId"]
            if shard_id not in state.finished and shard_id not in state.open_shards:
                state.open_shards[shard_id] = None
                state.parents[shard_id] = shard.get("ParentShardId")
        state.described_at = now
        return state

    def _read_table(self, region, table):
        try:
            if table in region.paused_tables:
                return
            state = region.streams_by_table.get(table)
            now = time.monotonic()
            if state is not None and not self.discover_now and now < state.next_read_at:
                return
            state = self._stream_of(region, table)
            if state is None:
                return
            read = 0
            for shard_id in list(state.open_shards):
                parent = state.parents.get(shard_id)
                if parent is not None and parent in state.open_shards:
                    continue  # a child after its parent: records are in order per item
                read += self._read_shard(region, table, state, shard_id)
            state.idle_passes = 0 if read else state.idle_passes + 1
            backoff = self.poll_interval_s * 2 ** min(state.idle_passes, 8) if state.idle_passes > 2 else 0
            state.next_read_at = now + min(backoff, IDLE_POLL_MAX_S)
        except botocore.exceptions.ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFoundException":
                region.streams_by_table.pop(table, None)  # deleted meanwhile; the next listing says
                return
            raise

    def _read_shard(self, region, table, state, shard_id):
        """Reads a shard up to its end or its latest record; how many records it read."""
        read = 0
        iterator = state.open_shards[shard_id]
        if iterator is None:
            iterator = self._iterator(region, state, shard_id)
        renewed = False
        while iterator is not None:
            try:
                page = region.streams.get_records(ShardIterator=iterator, Limit=1000)
            except botocore.exceptions.ClientError as error:
                code = error.response["Error"]["Code"]
                if renewed or code not in ("ExpiredIteratorException", "TrimmedDataAccessException"):
                    raise
                # Resume after the last record read (or from the start) with a new iterator:
                # iterators last 15 minutes (a table whose reading was paused), and DynamoDB Local
                # answers TrimmedDataAccessException to an iterator taken on a shard still empty
                # once another table's writes moved its sequence numbers on.
                iterator = self._iterator(region, state, shard_id)
                renewed = True
                continue
            renewed = False
            records = page.get("Records", [])
            for record in records:
                self._on_record(region, table, record)
                state.last_read[shard_id] = record["dynamodb"]["SequenceNumber"]
            read += len(records)
            iterator = page.get("NextShardIterator")
            if not records:
                break
        if iterator is None:
            del state.open_shards[shard_id]
            state.finished.add(shard_id)
            state.described_at = 0.0  # a shard ended: its children are to be found
        else:
            state.open_shards[shard_id] = iterator
        return read

    @staticmethod
    def _iterator(region, state, shard_id):
        """An iterator after the last record read from the shard, or from its start: a table found
        now is replicated from its creation."""
        last = state.last_read.get(shard_id)
        position = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": last} if last
                    else {"ShardIteratorType": "TRIM_HORIZON"})
        return region.streams.get_shard_iterator(StreamArn=state.stream_arn, ShardId=shard_id,
                                                 **position)["ShardIterator"]

    def _on_record(self, region, table, record):
        """A record of `region`'s stream: the read-back of a write of ours, or a write made in the
        region (a client's, or TTL's), which is queued for every other region."""
        change = record["dynamodb"]
        keys = change["Keys"]
        image = change.get("NewImage") if record["eventName"] in ("INSERT", "MODIFY") else None
        item = signature(keys)
        seen = signature(image)
        key = (region.name, table, item)
        repair = None
        with self.lock:
            region.records_read += 1
            echoes = self.echoes.get(key)
            if echoes and echoes[0].signature == seen:
                echo = echoes.popleft()
                if not echoes:
                    del self.echoes[key]
                region.own_writes_read += 1
                held = self.versions.get(key)
                if (held is not None and held.ts > echo.ts
                        and not any(e.ts == held.ts for e in echoes)):
                    # A newer write made in this region reached the item before ours (its record
                    # came first, ours overwrote it): the region holds our older image. Write the
                    # newer one again, as last writer wins.
                    repair = held
                else:
                    return
            else:
                version = Version(self._now(), keys, image)
                self.versions[key] = version
                region.local_writes += 1
                read_at = time.monotonic()
                for (source, _), direction in self.directions.items():
                    if source == region.name:
                        link = direction.links[table]
                        link.queue.append(Write(table, item, version, read_at))
                        link.read += 1
                self.lock.notify_all()
        if repair is not None:
            region.repairs += 1
            self._write(region, table, item, repair)
            with self.lock:
                self.lock.notify_all()

    # --- applying the writes

    def run_direction(self, direction):
        """Applies a direction's writes for ever, each table's in order (one of the direction's
        APPLIERS_PER_DIRECTION threads): none while cut (unless released), none sooner than its lag
        after it was read."""
        while True:
            with self.lock:
                while True:
                    table, wait = direction.next_write(time.monotonic())
                    if table is not None:
                        break
                    self.lock.wait(wait)
                link = direction.links[table]
                write = link.queue[0]
                direction.in_flight.add(table)
            try:
                outcome = self._apply(direction, write)
            except Exception:  # noqa: BLE001 - kept at the head, in order, and tried again
                LOG.exception("applying a write %s of %s failed; trying again", direction.name, table)
                outcome = "retry"
            if outcome == "retry":
                time.sleep(RETRY_AFTER_S)  # the table still in flight: no other thread tries it meanwhile
            with self.lock:
                direction.in_flight.discard(table)
                self.lock.notify_all()
                if outcome == "retry":
                    continue
                link.queue.popleft()
                link.done += 1
                if direction.is_cut(table) and link.release_budget > 0:
                    link.release_budget -= 1
                if outcome == "applied":
                    link.applied += 1
                elif outcome == "older":
                    link.dropped_as_older += 1
                else:
                    link.failed += 1

    def _apply(self, direction, write):
        destination = direction.destination
        key = (destination.name, write.table, write.item)
        with self.lock:
            held = self.versions.get(key)
            if held is not None and held.ts > write.version.ts:
                return "older"
        try:
            return "applied" if self._write(destination, write.table, write.item, write.version) else "older"
        except botocore.exceptions.ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFoundException":
                LOG.warning("table %s is gone from %s: a write from %s dropped", write.table,
                            destination.name, direction.source.name)
                return "failed"
            raise

    def _write(self, region, table, item, version):
        """Writes `version` of an item into `region` (PutItem or DeleteItem), remembering to
        recognise it in the region's stream; False when a newer version got there first."""
        key = (region.name, table, item)
        echo = Echo(version.ts, signature(version.image))
        with self.lock:
            write_lock = region.write_locks[table]
        with write_lock:
            with self.lock:
                held = self.versions.get(key)
                if held is not None and held.ts > version.ts:
                    return False
                self.versions[key] = version
                self.echoes[key].append(echo)
            try:
                if version.image is None:
                    old = region.dynamodb.delete_item(TableName=table, Key=version.keys,
                                                      ReturnValues="ALL_OLD").get("Attributes")
                else:
                    old = region.dynamodb.put_item(TableName=table, Item=version.image,
                                                   ReturnValues="ALL_OLD").get("Attributes")
            except Exception:
                self._forget(key, echo)
                raise
            if signature(old) == echo.signature:
                # Nothing changed (the same image, or a delete of an absent item): no record follows.
                self._forget(key, echo)
        return True

    def _forget(self, key, echo):
        with self.lock:
            echoes = self.echoes.get(key)
            if echoes and echo in echoes:
                echoes.remove(echo)
                if not echoes:
                    del self.echoes[key]

    # --- control

    def directions_named(self, body):
        """The directions a control request names: from SRC to DST, or from SRC to every region."""
        source = body.get("from")
        if source not in self.regions:
            raise ValueError(f"'from' must be one of the regions {sorted(self.regions)}, not {source!r}")
        target = body.get("to")
        if target is None:
            return [d for (s, _), d in self.directions.items() if s == source]
        if (source, target) not in self.directions:
            raise ValueError(f"'to' must be another of the regions {sorted(self.regions)}, not {target!r}")
        return [self.directions[(source, target)]]

    @staticmethod
    def tables_named(body):
        """The tables a control request names ("table" or "tables"); None: every table."""
        if "table" in body:
            tables = [body["table"]]
        elif "tables" in body:
            tables = body["tables"]
        else:
            return None
        if not isinstance(tables, list) or not all(isinstance(t, str) and t for t in tables):
            raise ValueError(f"'table' must be a table name, 'tables' a list of them, not {tables!r}")
        return set(tables)

    def set_cut(self, body, cut):
        tables = self.tables_named(body)
        with self.lock:
            for direction in self.directions_named(body):
                if tables is None:
                    direction.cut = cut
                    if not cut:
                        direction.cut_tables.clear()
                elif cut:
                    direction.cut_tables |= tables
                else:
                    direction.cut_tables -= tables
                for table, link in direction.links.items():
                    if not direction.is_cut(table):
                        link.release_budget = 0
            self.lock.notify_all()

    def set_lag(self, body):
        lag_ms = body.get("lag_ms")
        if not isinstance(lag_ms, (int, float)) or isinstance(lag_ms, bool) or lag_ms < 0:
            raise ValueError(f"'lag_ms' must be a number of milliseconds >= 0, not {lag_ms!r}")
        tables = self.tables_named(body)
        with self.lock:
            for direction in self.directions_named(body):
                if tables is None:
                    direction.lag_s = lag_ms / 1000
                    direction.lag_tables.clear()
                else:
                    direction.lag_tables.update({t: lag_ms / 1000 for t in tables})
            self.lock.notify_all()

    def release(self, body):
        count = body.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"'count' must be a whole number >= 1, not {count!r}")
        tables = self.tables_named(body)
        if tables is None or len(tables) != 1:
            raise ValueError("'table' must name the one table whose held writes to release")
        (table,) = tables
        with self.lock:
            for direction in self.directions_named(body):
                if not direction.is_cut(table):
                    raise ValueError(f"{direction.name} is not cut for {table}: nothing is held to release")
                direction.links[table].release_budget += count
            self.lock.notify_all()

    def set_reading(self, body, paused):
        region = self.regions.get(body.get("region"))
        if region is None:
            raise ValueError(f"'region' must be one of the regions {sorted(self.regions)}, not {body.get('region')!r}")
        tables = self.tables_named(body)
        if tables is None:
            raise ValueError("'table' must name the table whose stream to leave unread (or read again)")
        with self.lock:
            if paused:
                region.paused_tables |= tables
            else:
                region.paused_tables -= tables
            self.lock.notify_all()

    def wait_caught_up(self, timeout_s, tables=None):
        """True once every write made before the call (to `tables`, or any table) is read and
        applied by every direction that is not cut (see POST /wait-caught-up); False after
        `timeout_s`. Writes made since may go on: what is waited for is fixed by the call, so a
        table written on and on (a writer, pollers' heartbeats) is caught up as soon as any."""
        deadline = time.monotonic() + timeout_s
        called = time.monotonic()

        def passes(count):
            """Until every reader made `count` more whole passes: the last began after now."""
            cycles = {name: r.cycles for name, r in self.regions.items()}
            return self._wait_until(lambda: all(r.cycles >= cycles[n] + count
                                                for n, r in self.regions.items()), deadline)

        with self.lock:
            self.discover_now += 1
            try:
                # Every region's tables listed after the call first: a pass replicates the tables
                # in every region's last listing, so a pass that began before another region
                # listed a new table afresh would read none of its writes.
                if not self._wait_until(lambda: all(r.listed_at >= called for r in self.regions.values()),
                                        deadline):
                    return False
                # Two passes of every reader: the second began after the call, with a fresh listing
                # of the tables and of their shards, and read every write made before it.
                if not passes(2):
                    return False
                # Every link has applied what it had read by then (or holds it, cut).
                read = [(direction, *entry) for direction in self.directions.values()
                        for entry in direction.read_so_far(tables)]
                if not self._wait_until(lambda: all(d.has_done(t, link, n) for d, t, link, n in read),
                                        deadline):
                    return False
                # Two more passes: each applied write read back in its destination, and a write
                # that overtook it there written again (the repair, within the pass that reads it).
                return passes(2)
            finally:
                self.discover_now -= 1

    def _wait_until(self, condition, deadline):
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.lock.wait(min(remaining, 0.5))
        return True

    def stats(self):
        with self.lock:
            return {"regions": {name: r.stats() for name, r in self.regions.items()},
                    "directions": {d.name: d.stats() for d in self.directions.values()},
                    "tables": sorted(self.replicated),
                    "not_replicated": dict(self.not_replicated)}

    def start(self):
        for region in self.regions.values():
            threading.Thread(target=self.run_reader, args=(region,), daemon=True,
                             name=f"read-{region.name}").start()
        for direction in self.directions.values():
            for n in range(APPLIERS_PER_DIRECTION):
                threading.Thread(target=self.run_direction, args=(direction,), daemon=True,
                                 name=f"apply-{direction.name}-{n}").start()


def handler_for(replicator):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            LOG.debug(fmt, *args)

        def reply(self, status, body):
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/":
                self.reply(200, "ok")
            elif self.path == "/stats":
                self.reply(200, replicator.stats())
            else:
                self.reply(404, {"error": f"no such resource {self.path}"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                if self.path == "/cut":
                    replicator.set_cut(body, True)
                elif self.path == "/restore":
                    replicator.set_cut(body, False)
                elif self.path == "/lag":
                    replicator.set_lag(body)
                elif self.path == "/release":
                    replicator.release(body)
                elif self.path == "/pause-reading":
                    replicator.set_reading(body, True)
                elif self.path == "/resume-reading":
                    replicator.set_reading(body, False)
                elif self.path == "/wait-caught-up":
                    timeout_ms = body.get("timeout_ms", 30000)
                    if not isinstance(timeout_ms, (int, float)) or timeout_ms <= 0:
                        raise ValueError(f"'timeout_ms' must be a positive number, not {timeout_ms!r}")
                    caught_up = replicator.wait_caught_up(timeout_ms / 1000, replicator.tables_named(body))
                    self.reply(200 if caught_up else 504, {"caught_up": caught_up, "stats": replicator.stats()})
                    return
                else:
                    self.reply(404, {"error": f"no such operation {self.path}"})
                    return
            except ValueError as error:  # json.JSONDecodeError is one
                self.reply(400, {"error": str(error)})
                return
            self.reply(200, replicator.stats())

    return Handler


def parse_region(text):
    name, sep, endpoint = text.partition("=")
    if not sep or not name or not endpoint.startswith("http"):
        raise argparse.ArgumentTypeError(f"expected REGION=http://HOST:PORT, not {text!r}")
    return name, endpoint


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--region", action="append", type=parse_region, required=True,
                        help="REGION=ENDPOINT of one region's DynamoDB Local (at least two)")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    parser.add_argument("--poll-interval-ms", type=int, default=50,
                        help="pause between two passes of a region's reader over its streams")
    args = parser.parse_args(argv)
    names = [name for name, _ in args.region]
    if len(set(names)) != len(names) or len(names) < 2:
        parser.error(f"--region: at least two different regions, got {names}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(levelname)s %(message)s")
    replicator = Replicator([Region(name, endpoint) for name, endpoint in args.region],
                            args.poll_interval_ms / 1000)
    replicator.start()
    server = ThreadingHTTPServer((args.host, args.port), handler_for(replicator))
    LOG.info("replicating %s; control on http://%s:%d", ", ".join(names), args.host, args.port)
    server.serve_forever()


if __name__ == "__main__":
    main()
