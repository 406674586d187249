"""Futures for hostagent results, keyed by request id.

A task registers a waiter *before* it casts, because the agent's report
can arrive before the cast call even returns.
"""

import threading
from concurrent import futures

from oslo_log import log as logging

from tenks import exceptions

LOG = logging.getLogger(__name__)


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
        with self._lock:
            future = self._futures.pop(request_id, None)
        if future is None:
            # Nobody waits: a late answer after a timeout, or a report
            # meant for a conductor that has restarted since.
            LOG.debug('Dropping result of request %s from %s: no waiter',
                      request_id, host)
            return
        if error is not None:
            future.set_exception(exceptions.from_report(error, host))
        else:
            future.set_result(result)
