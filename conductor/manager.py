"""Server side of the conductor RPC API."""

import oslo_messaging as messaging

from conductor import rpcapi

RPC_API_VERSION = rpcapi.RPC_API_VERSION


class ConductorManager:

    target = messaging.Target(version=RPC_API_VERSION)

    def __init__(self, waiters):
        self.waiters = waiters

    def report_result(self, context, request_id, host, result=None,
                      error=None):
        self.waiters.complete(request_id, host, result=result, error=error)
