"""Requests to hostagents: cast, then wait for the reported result."""

import time
from concurrent import futures

from oslo_log import log as logging

from hostagent import rpcapi as hostagent_rpcapi
from tenks import exceptions
from tenks import rpc

LOG = logging.getLogger(__name__)


class AgentClient:

    def __init__(self, bus, waiters, conductor_host, timeout, retries=0,
                 late_results=None):
        """``late_results``: a conductor.late.LateResults, which keeps
        what answers that come after a request gave up do."""
        self.api = hostagent_rpcapi.HostAgentAPI(bus)
        self.waiters = waiters
        self.conductor_host = conductor_host
        self.timeout = timeout
        self.retries = retries
        self.late_results = late_results

    def request(self, host, method, request_id, operation=None, late=None,
                **kwargs):
        """Run ``method`` on ``host``'s agent; return its result.

        Without an answer within the timeout the same request is cast
        again, ``retries`` times (agent operations are idempotent and
        keyed by request id, so an agent that comes back in time just
        answers). A copy the bus does not take (the broker down, or no
        queue for the agent: either restarting) is cast again every
        rpc.RESEND_INTERVAL s meanwhile. Each copy carries the request's
        deadline, the end of the last wait: the agent does not begin it
        after that, and the request gives up then, whether its copies
        went or not. Raises the typed error the agent reported, or
        AgentTimeout.

        ``operation``: the operation the request is part of. ``late``:
        what an answer that comes after this call gave up does to the
        record (flows.base.late_ensure, late_remove); kept when it gives
        up, and applied by conductor.late.
        """
        started = time.time()
        deadline = started + self.timeout * (self.retries + 1)
        future = self.waiters.register(request_id)
        unsent = None
        try:
            for attempt in range(1, self.retries + 2):
                ends = started + self.timeout * attempt
                unsent = self._send(future, ends, host, method, request_id,
                                    operation=operation, deadline=deadline,
                                    **kwargs)
                try:
                    return future.result(max(0, ends - time.time()))
                except futures.TimeoutError:
                    pass
            if late is not None:
                # Kept while the waiter still stands: an answer that
                # comes now finds one or the other.
                self.late_results.remember(request_id, host, operation,
                                           late)
        finally:
            self.waiters.discard(request_id)
        if future.done():
            # Answered while this call was giving up.
            if late is not None:
                self.late_results.forget(request_id)
            return future.result()
        raise exceptions.AgentTimeout(
            host=host, method=method,
            timeout=self.timeout * (self.retries + 1),
            unsent='' if unsent is None else (
                '; its last copy could not be sent: %s' % unsent))

    def _send(self, future, until, host, method, request_id, **kwargs):
        """Cast a copy of the request, again while the bus does not take
        it, until it goes, ``future`` (its answer) is done or ``until``
        passes. Returns None once a copy went, else why none did."""
        log = LOG.warning
        while True:
            try:
                self.api.cast(host, method, request_id, self.conductor_host,
                              **kwargs)
                return None
            except rpc.UNDELIVERED as e:
                why = rpc.undelivered(e, host)
            log('Could not send %s (request %s) to %s: %s; sending it again',
                method, request_id, host, why)
            log = LOG.debug
            pause = min(rpc.RESEND_INTERVAL, until - time.time())
            if pause <= 0 or futures.wait([future], pause).done:
                return why
