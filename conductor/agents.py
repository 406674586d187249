"""Requests to hostagents: cast, then wait for the reported result."""

from concurrent import futures

from hostagent import rpcapi as hostagent_rpcapi
from tenks import exceptions


class AgentClient:

    def __init__(self, bus, waiters, conductor_host, timeout):
        self.api = hostagent_rpcapi.HostAgentAPI(bus)
        self.waiters = waiters
        self.conductor_host = conductor_host
        self.timeout = timeout

    def request(self, host, method, request_id, **kwargs):
        """Run ``method`` on ``host``'s agent; return its result.

        Raises the typed error the agent reported, or AgentTimeout.
        """
        future = self.waiters.register(request_id)
        try:
            self.api.cast(host, method, request_id, self.conductor_host,
                          **kwargs)
            return future.result(self.timeout)
        except futures.TimeoutError:
            raise exceptions.AgentTimeout(host=host, method=method,
                                          timeout=self.timeout) from None
        finally:
            self.waiters.discard(request_id)
