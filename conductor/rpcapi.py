"""Client side of the conductor RPC API.

API version history:

* 1.0 - Initial version: report_result, the hostagent's answer to a
  request.
"""

from tenks import rpc

RPC_API_VERSION = '1.0'


class ConductorAPI:

    def __init__(self, bus):
        self.client = bus.get_client(rpc.CONDUCTOR_TOPIC, RPC_API_VERSION)

    def report_result(self, conductor, request_id, host, result=None,
                      error=None):
        """Hand the outcome of ``request_id`` to the conductor waiting."""
        cctxt = self.client.prepare(server=conductor, version='1.0')
        cctxt.cast({}, 'report_result', request_id=request_id, host=host,
                   result=result, error=error)
