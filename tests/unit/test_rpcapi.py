"""Client and server sides of each RPC API stay in step."""

import inspect

from conductor import manager as conductor_manager
from conductor import rpcapi as conductor_rpcapi
from hostagent import manager as hostagent_manager
from hostagent import rpcapi as hostagent_rpcapi


def test_conductor_versions_match():
    assert (conductor_manager.ConductorManager.target.version
            == conductor_rpcapi.RPC_API_VERSION)


def test_hostagent_versions_match():
    assert (hostagent_manager.HostAgentManager.target.version
            == hostagent_rpcapi.RPC_API_VERSION)


def test_hostagent_methods_match_the_manager():
    for method, kwargs in hostagent_rpcapi.METHODS.items():
        handler = getattr(hostagent_manager.HostAgentManager, method)
        params = list(inspect.signature(handler).parameters)
        assert params == ['self', 'context', 'request_id', 'reply_to',
                          *kwargs], method
