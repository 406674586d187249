"""Rolling upgrades on a real RabbitMQ: clients capped by [upgrade_levels]
at older versions than the conductor and the hostagents they talk to."""

import json
import os
import subprocess

import pytest
import yaml

from conductor import rpcapi
from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import policy
from tenks import rpc
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

pytestmark = pytest.mark.functional

ADMIN = policy.admin_context()


def pin(service, caps):
    """Append [upgrade_levels] ``caps`` to the configuration of
    ``service`` (a distributed_fixtures.Service not started yet)."""
    with open(service.config, 'a') as f:
        f.write('[upgrade_levels]\n' + ''.join(
            '%s = %s\n' % item for item in caps.items()))


def test_capped_clients_against_newer_services(tmp_path):
    """The hostagents pinned to conductor API 1.0 register and take a
    node; the conductor, pinned to hostagent API 1.6, deploys it with
    the older form of its requests; a CLI and another service pinned to
    conductor API 1.1 list, deploy and tear down, and a call newer than
    their cap fails at once, naming it."""
    deployment = df.Deployment(tmp_path / 'deployment')
    pin(deployment.conductor, {'hostagent': '1.6'})
    for host in deployment.hosts:
        pin(deployment.agent(host), {'conductor': '1.0'})
    cli_conf = tmp_path / 'cli.conf'
    cli_conf.write_text('[upgrade_levels]\nconductor = 1.1\n')
    env = cf.ClusterEnv(tmp_path, port_base=7780,
                        state_dirs=deployment.state_dirs.values())
    spec_file = tmp_path / 'cluster.yaml'
    spec_file.write_text(yaml.safe_dump(env.spec(count=1)))

    def tenks(*args):
        return subprocess.run(
            [os.path.join(cf.BIN, 'tenks'), '--config-file', str(cli_conf),
             *args], capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, TENKS_TRANSPORT_URL=deployment.url))

    # Entered, it waits for both hostagents to be up: registered and
    # answering the conductor's check.
    with deployment, cf.checked(env):
        listed = tenks('hypervisor', 'list', '-f', 'json')
        assert listed.returncode == 0, listed.stderr
        assert {h['host']: h['state'] for h in json.loads(listed.stdout)} == {
            host: 'up' for host in deployment.hosts}

        refused = tenks('plan', str(spec_file))
        assert refused.returncode != 0
        assert ('plan_cluster needs version 1.2 of the conductor RPC API, '
                'above its cap 1.1 ([upgrade_levels] conductor'
                in refused.stderr), refused.stderr

        deployed = tenks('deploy', str(spec_file))
        assert deployed.returncode == 0, deployed.stderr
        assert 'deployed: 1 node(s)' in deployed.stdout
        nodes = json.loads(tenks('node', 'list', '--cluster', env.cluster,
                                 '-f', 'json').stdout)
        assert [n['name'] for n in nodes] == [env.node_name(0)]
        assert nodes[0]['hypervisor'] in deployment.hosts

        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        conf.set_override('conductor', '1.1', group='upgrade_levels')
        bus = rpc.Bus(conf, url=deployment.url)
        try:
            service = rpcapi.ConductorAPI(bus, timeout=30)
            assert [c['name'] for c in service.list_clusters(ADMIN)] == [
                env.cluster]
            with pytest.raises(exceptions.VersionCapped) as raised:
                service.audit(ADMIN)
            assert str(raised.value).startswith(
                'audit needs version 1.6 of the conductor RPC API, above '
                'its cap 1.1')
        finally:
            bus.cleanup()

        gone = tenks('teardown', env.cluster)
        assert gone.returncode == 0, gone.stderr
        assert env.leftovers() == []
