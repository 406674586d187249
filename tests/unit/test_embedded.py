"""The embedded conductor and hostagent: what every start leaves."""

import pytest

from conductor import conductor as conductor_module
from conductor import rpcapi as conductor_rpcapi
from tenks import policy
from tenks import states
from tenks.cli import embedded
from tests.unit.conftest import make_conf
from tests.unit.conftest import make_spec


def test_a_start_that_fails_leaves_no_server_on_the_bus(
        conf, hypervisor, monkeypatch, tmp_path):
    """The in-memory bus is one per process: a conductor left running by
    a start that failed would answer the next one's calls from its own
    state database."""
    def fails(self):
        raise RuntimeError('boom')
    with monkeypatch.context() as patch:
        patch.setattr(conductor_module.Conductor, 'end_orphans', fails)
        with pytest.raises(RuntimeError, match='boom'):
            with embedded.embedded(conf):
                pass
    other = make_conf(tmp_path / 'other')
    with embedded.embedded(other) as conductor:
        conductor.db.save_cluster('mine', make_spec(count=1),
                                  states.CLUSTER_DEPLOYED)
        api = conductor_rpcapi.ConductorAPI(conductor.bus)
        for _ in range(6):
            assert [c['name'] for c in api.list_clusters(
                policy.admin_context())] == ['mine']


def test_the_first_command_finds_the_local_hostagent_registered(
        conf, hypervisor):
    with embedded.embedded(conf) as conductor:
        assert [h['host'] for h in conductor.registry.list_hypervisors()
                ] == ['hv1']
