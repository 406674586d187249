"""The conductor in rooms: the embedded CLI and an RPC caller reach the
same rooms through the same API (conductor.manager), so a bad argument
gets the same error from both; the Conductor itself only wires the
rooms and runs them."""

import pytest

from conductor import conductor as conductor_module
from conductor import rpcapi as conductor_rpcapi
from tenks import exceptions
from tenks import policy
from tenks.cli import client

# The CLI client's method, the RPC API's, their arguments, the error.
BAD_CALLS = [
    ('deploy', 'deploy_cluster', ({'cluster': 'c'},), exceptions.SpecError),
    ('plan', 'plan_cluster', ({'cluster': 'c'},), exceptions.SpecError),
    ('teardown', 'teardown_cluster', ('nope',), exceptions.ClusterNotFound),
    ('update_aggregate', 'update_aggregate', ('a1', {'zone': 'az1'}),
     exceptions.AggregateInvalid),
    ('update_aggregate', 'update_aggregate', ('a1', 'a2'),
     exceptions.AggregateInvalid),
    ('update_hypervisor', 'update_hypervisor', ('hv1', 'yes'),
     exceptions.HypervisorInvalid),
    ('update_hypervisor', 'update_hypervisor', ('hv1', True, 'why'),
     exceptions.HypervisorInvalid),
    ('get_operation', 'get_operation', ('nope',),
     exceptions.OperationNotFound),
    ('start_host_maintenance', 'start_host_maintenance', ('nope',),
     exceptions.HypervisorNotFound),
]


@pytest.mark.parametrize('cli_method,rpc_method,args,error', BAD_CALLS)
def test_the_cli_and_an_rpc_caller_get_the_same_error(
        conf, hypervisor, cli_method, rpc_method, args, error):
    with client.EmbeddedClient(conf) as tenks:
        tenks.create_aggregate('a1')
        tenks.conductor.registry.register_agent('hv1', {'host': 'hv1'})
        with pytest.raises(error) as from_cli:
            getattr(tenks, cli_method)(*args)
        api = conductor_rpcapi.ConductorAPI(tenks.conductor.bus)
        with pytest.raises(error) as from_rpc:
            getattr(api, rpc_method)(policy.admin_context(), *args)
    # The remote error carries the conductor's traceback after its text.
    assert str(from_cli.value) == str(from_rpc.value).split(
        '\nTraceback')[0]


def test_the_conductor_only_wires_and_runs_its_rooms():
    """What the conductor does is in its rooms (deployments, teardowns,
    maintenance, registry, aggregates, records, the audit), reached
    through its API, not through pass-throughs of the Conductor."""
    public = {name for name in vars(conductor_module.Conductor)
              if not name.startswith('_')}
    assert public == {
        'runner', 'start', 'prune', 'stop', 'drain', 'resume_interrupted',
        'end_orphans', 'resume', 'allocating', 'moving', 'store',
        'conductors'}
