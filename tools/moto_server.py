"""moto's own server (the version pinned in requirements-emulator.txt), with two fixes to DynamoDB
transactions so the emulator behaves like DynamoDB under concurrent clients.

1. One request at a time. moto keeps each service's state in plain Python objects without locks.
   TransactWriteItems deep-copies the tables it touches and writes that copy back when the transaction
   is cancelled: with requests handled concurrently the copy can fail mid-iteration (HTTP 500) and the
   write-back undoes other clients' committed writes, which DynamoDB never does. So every request runs
   under one lock. Connections are still accepted concurrently; moto's handlers are CPU-bound under the
   GIL anyway. No client here long-polls (SQS WaitTimeSeconds stays 0), which would hold the lock.

2. Transaction rollback per item. That deep copy is of the whole table, stream records included, so
   each transaction costs time proportional to the table (about 0.7 ms per item already written: 1.5 s
   per order at 2,000 orders). With requests serialized, restoring just the items the transaction
   touched, and dropping the stream records it appended, gives the same state back, so that is what
   a cancelled transaction does here. A committed transaction runs moto's own code unchanged.

3. SQS retention check per message in O(1). ReceiveMessage checks each message's retention by
   computing every attribute of the queue (three scans of all its messages) to read one value,
   MessageRetentionPeriod; here the check reads that value directly. Same result, without the
   quadratic cost on a queue of a few thousand deliveries.

Usage: python moto_server.py -H 127.0.0.1 -p PORT  (the same arguments as moto_server)
"""

import copy
import threading

import moto.dynamodb.models as dynamodb_models
from moto import server
from moto.core.utils import unix_time
from moto.sqs.models import SQSBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.moto_server.werkzeug_app import DomainDispatcherApplication


class SerializedApplication(DomainDispatcherApplication):
    _lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self._lock:
            # Materialize the body inside the lock: a lazy iterable would run after release.
            return list(super().__call__(environ, start_response))


class _CopyWithoutTables:
    """`copy` for moto's DynamoDB backend module: tables are not copied (rollback is per item)."""

    @staticmethod
    def deepcopy(value, memo=None):
        if isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)


def _touched(backend, transact_items):
    """(table, hash key, range key) of every item the transaction names, where it can be resolved."""
    touched = []
    for entry in transact_items:
        if len(entry) != 1:
            continue
        op_type, op = next(iter(entry.items()))
        table = backend.tables.get(op.get("TableName"))
        if table is None:
            continue
        key = op.get("Item") if op_type == "Put" else op.get("Key")
        if not isinstance(key, dict) or table.hash_key_attr not in key:
            continue
        hash_key = DynamoType(key[table.hash_key_attr])
        range_key = None
        if table.range_key_attr is not None:
            if table.range_key_attr not in key:
                continue
            range_key = DynamoType(key[table.range_key_attr])
        touched.append((table, hash_key, range_key))
    return touched


def _snapshot(touched):
    items = []
    streams = {}
    for table, hash_key, range_key in touched:
        current = table.get_item(hash_key, range_key)
        items.append((table, hash_key, range_key, copy.deepcopy(current)))
        if table.stream_shard is not None:
            streams.setdefault(id(table), (table.stream_shard, len(table.stream_shard.items)))
    return items, streams


def _restore(items, streams):
    # Newest first, so an item named twice ends at its oldest state.
    for table, hash_key, range_key, saved in reversed(items):
        if range_key is None:
            if saved is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = saved
        elif saved is None:
            table.items.get(hash_key, {}).pop(range_key, None)
        else:
            table.items[hash_key][range_key] = saved
    for shard, length in streams.values():
        del shard.items[length:]


_original_transact_write_items = dynamodb_models.DynamoDBBackend.transact_write_items


def transact_write_items(self, transact_items):
    items, streams = _snapshot(_touched(self, transact_items))
    try:
        return _original_transact_write_items(self, transact_items)
    except Exception:
        _restore(items, streams)
        raise


def is_message_valid_based_on_retention_period(self, queue_name, message):
    retention_period = int(self.get_queue(queue_name).message_retention_period)
    return retention_period + message.sent_timestamp / 1000 > unix_time()


dynamodb_models.copy = _CopyWithoutTables
dynamodb_models.DynamoDBBackend.transact_write_items = transact_write_items
SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period
server.DomainDispatcherApplication = SerializedApplication

if __name__ == "__main__":
    server.main()
