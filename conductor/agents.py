"""Requests to hostagents: cast, then wait for the reported result."""

from concurrent import futures

from hostagent import rpcapi as hostagent_rpcapi
from tenks import exceptions


class AgentClient:

    def __init__(self, bus, waiters, conductor_host, timeout, retries=0):
        self.api = hostagent_rpcapi.HostAgentAPI(bus)
        self.waiters = waiters
        self.conductor_host = conductor_host
        self.timeout = timeout
        self.retries = retries

    def request(self, host, method, request_id, **kwargs):
        """Run ``method`` on ``host``'s agent; return its result.

        Without an answer within the timeout the same request is cast
        again, ``retries`` times (agent operations are idempotent and
        keyed by request id, so an agent that comes back in time just
        answers). Raises the typed error the agent reported, or
        AgentTimeout.
        """
        future = self.waiters.register(request_id)
        try:
            for _ in range(self.retries + 1):
                self.api.cast(host, method, request_id, self.conductor_host,
                              **kwargs)
                try:
                    return future.result(self.timeout)
                except futures.TimeoutError:
                    pass
            raise exceptions.AgentTimeout(
                host=host, method=method,
                timeout=self.timeout * (self.retries + 1))
        finally:
            self.waiters.discard(request_id)
