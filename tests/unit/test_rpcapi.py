"""Client and server sides of each RPC API stay in step."""

import inspect

import pytest

from conductor import manager as conductor_manager
from conductor import rpcapi as conductor_rpcapi
from hostagent import manager as hostagent_manager
from hostagent import rpcapi as hostagent_rpcapi
from tenks import exceptions
from tests.unit.conftest import make_spec


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



def test_every_client_call_reaches_its_handler(conductor, hypervisor):
    """Each call of the client, through the bus, reaches a handler of
    the same arguments; expected errors keep their types."""
    api = conductor_rpcapi.ConductorAPI(conductor.bus)
    operation_id = api.deploy_cluster(make_spec(count=1))
    conductor.wait(operation_id)
    assert api.get_operation(operation_id)['state'] == 'succeeded'
    assert [o['id'] for o in api.list_operations('unit')] == [operation_id]
    assert api.get_cluster('unit')['state'] == 'deployed'
    assert [c['name'] for c in api.list_clusters()] == ['unit']
    assert len(api.list_nodes('unit')) == 1
    assert api.get_hypervisor('hv1')['nodes'] == 1
    assert [h['host'] for h in api.list_hypervisors()] == ['hv1']
    assert api.list_events('unit', limit=1)
    with pytest.raises(exceptions.HypervisorInUse):
        api.delete_hypervisor('hv1')
    with pytest.raises(exceptions.HypervisorNotFound):
        api.delete_hypervisor('nope')
    with pytest.raises(exceptions.SpecChanged):
        api.deploy_cluster(make_spec(count=2))
    conductor.wait(api.teardown_cluster('unit'))
    with pytest.raises(exceptions.ClusterNotFound):
        api.teardown_cluster('unit')
