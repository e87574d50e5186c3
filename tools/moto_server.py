"""moto's own server (the version pinned in requirements-emulator.txt) for EventBridge and SQS, with
requests handled one at a time and one fix to SQS. DynamoDB and DynamoDB Streams are served by AWS's
DynamoDB Local (scripts/emulator.sh), not by moto.

1. One request at a time, first come first served. moto keeps each service's state in plain Python
   objects without locks (a queue's messages, a bus's rules), and its handlers are CPU-bound under
   the GIL anyway, so every request runs under one lock. Connections are still accepted
   concurrently. The lock hands over in arrival order: Python's own lock does not, and under a few
   dozen waiting clients an unlucky request could wait for tens of seconds. No client here
   long-polls (SQS WaitTimeSeconds stays 0), which would hold the lock.

2. SQS queue attributes computed when read, not all at once. moto computes every attribute of a
   queue (three scans of all its messages, a clock read per message) to read one value: on every
   SendMessage (ContentBasedDeduplication, on a standard queue and on a FIFO queue alike: the Custom
   Event Bus double's deliveries of 2,000 events to a FIFO queue took 385 s before the FIFO case
   was answered directly too, 2.3 s after), so each EventBridge delivery to the sink queue cost time
   proportional to the queue (60 % of a PutEvents with a rule, measured with py-spy), and on every
   ReceiveMessage per message (MessageRetentionPeriod). Here a queue's attributes are a mapping
   that computes the whole set only when it is iterated, and those two values directly. Same
   results, without the quadratic cost on a queue of a few thousand deliveries.

3. EventBridge input paths parsed once. Every delivery to a target parses the same JSONPath
   expressions with a freshly built parser (23 % of a PutEvents with a rule); parsed expressions
   are immutable, so they are cached.

Usage: python moto_server.py -H 127.0.0.1 -p PORT  (the same arguments as moto_server)
"""

import collections
import collections.abc
import functools
import threading

import jsonpath_ng.ext

from moto import server
from moto.core.utils import unix_time
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.sqs.models import Queue, SQSBackend


class FifoLock:
    """A mutex that admits waiters in the order they arrived."""

    def __init__(self):
        self._mutex = threading.Lock()
        self._waiters = collections.deque()
        self._held = False

    def __enter__(self):
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                return self
            turn = threading.Event()
            self._waiters.append(turn)
        turn.wait()
        return self

    def __exit__(self, *exc):
        with self._mutex:
            if self._waiters:
                # Ownership passes straight to the oldest waiter: _held stays True.
                self._waiters.popleft().set()
            else:
                self._held = False
        return False


class SerializedApplication(DomainDispatcherApplication):
    _lock = FifoLock()

    def __call__(self, environ, start_response):
        with self._lock:
            # Materialize the body inside the lock: a lazy iterable would run after release.
            return list(super().__call__(environ, start_response))


_all_attributes = Queue.attributes.fget


class _QueueAttributes(collections.abc.Mapping):
    """`Queue.attributes`, computed when iterated; the values moto reads per message, directly."""

    def __init__(self, queue):
        self._queue = queue
        self._whole = None

    def _all(self):
        if self._whole is None:
            self._whole = _all_attributes(self._queue)
        return self._whole

    def __getitem__(self, name):
        queue = self._queue
        if name == "ContentBasedDeduplication":
            if not queue.fifo_queue:
                raise KeyError(name)  # a FIFO attribute: a standard queue does not have it
            value = queue.content_based_deduplication  # read per message sent to a FIFO queue
            return str(value).lower() if isinstance(value, bool) else value
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())


def is_message_valid_based_on_retention_period(self, queue_name, message):
    retention_period = int(self.get_queue(queue_name).message_retention_period)
    return retention_period + message.sent_timestamp / 1000 > unix_time()


Queue.attributes = property(_QueueAttributes)
SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period
jsonpath_ng.ext.parse = functools.lru_cache(maxsize=256)(jsonpath_ng.ext.parse)
server.DomainDispatcherApplication = SerializedApplication

if __name__ == "__main__":
    server.main()
