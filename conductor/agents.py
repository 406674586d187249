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
        [answer] = self.request_all(host, method, [(request_id, late, kwargs)],
                                    operation=operation)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def request_all(self, host, method, calls, operation=None,
                    answered=None):
        """Run ``method`` on ``host``'s agent once for each of ``calls``
        ([(request id, late, keyword arguments)]), all cast at once and
        awaited together by the calling thread; each as ``request``.
        Returns, in order, each call's result or the error it got.
        ``answered(i, answer)``, if given, is called in the calling
        thread as the answer to ``calls[i]`` comes (its result, or the
        error it brought)."""
        started = time.time()
        deadline = started + self.timeout * (self.retries + 1)
        waits = [self.waiters.register(request_id)
                 for request_id, _, _ in calls]
        unsent = [None] * len(calls)
        waiting = range(len(calls))
        try:
            for attempt in range(1, self.retries + 2):
                ends = started + self.timeout * attempt
                for i in waiting:
                    request_id, _, kwargs = calls[i]
                    unsent[i] = self._send(
                        waits[i], ends, host, method, request_id,
                        operation=operation, deadline=deadline, **kwargs)
                _await(waits, waiting, ends, answered)
                waiting = [i for i in waiting if not waits[i].done()]
                if not waiting:
                    break
            for i in waiting:
                request_id, late, _ = calls[i]
                if late is not None:
                    # Kept while the waiter still stands: an answer that
                    # comes now finds one or the other.
                    self.late_results.remember(request_id, host, operation,
                                               late)
        finally:
            for request_id, _, _ in calls:
                self.waiters.discard(request_id)
        answers = []
        for i, wait in enumerate(waits):
            request_id, late, _ = calls[i]
            if not wait.done():
                answers.append(exceptions.AgentTimeout(
                    host=host, method=method,
                    timeout=self.timeout * (self.retries + 1),
                    unsent='' if unsent[i] is None else (
                        '; its last copy could not be sent: %s'
                        % unsent[i])))
                continue
            if i in waiting and late is not None:
                # Answered while this call was giving up.
                self.late_results.forget(request_id)
            error = wait.exception()
            answers.append(wait.result() if error is None else error)
        return answers

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


def _await(waits, indexes, until, answered):
    """Wait until the futures ``waits[i]`` (i in ``indexes``) are done
    or ``until`` passes; ``answered(i, result or error)`` as each one
    is (None: no call)."""
    timeout = max(0, until - time.time())
    if answered is None:
        futures.wait([waits[i] for i in indexes], timeout)
        return
    index = {waits[i]: i for i in indexes}
    try:
        for done in futures.as_completed(index, timeout):
            answered(index[done], done.exception() or done.result())
    except futures.TimeoutError:
        pass
