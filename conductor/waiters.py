"""Futures for hostagent results, keyed by request id.

A task registers a waiter *before* it casts, because the agent's report
can arrive before the cast call even returns.
"""

import threading
from concurrent import futures

from tenks import exceptions


class Waiters:

    def __init__(self):
        self._lock = threading.Lock()
        self._futures = {}

    def register(self, request_id):
        future = futures.Future()
        with self._lock:
            self._futures[request_id] = future
        return future

    def discard(self, request_id):
        with self._lock:
            self._futures.pop(request_id, None)

    def complete(self, request_id, host, result=None, error=None):
        """Hand the outcome to its waiter; whether there was one (none: a
        late answer after a timeout, or a report meant for a conductor
        that has restarted since)."""
        with self._lock:
            # Set under the lock: once discard() has returned, the
            # waiter's future has its outcome or never gets one.
            future = self._futures.pop(request_id, None)
            if future is None:
                return False
            if error is not None:
                future.set_exception(exceptions.from_report(error, host))
            else:
                future.set_result(result)
        return True
