"""Simulated hypervisors (hostagent.drivers.fake) on real RabbitMQ: many
tenks-hostagent processes, many nodes, and Ironic managing a simulated
node over real Redfish."""

import collections
import pathlib
import signal
import sqlite3
import time

from tests.functional import distributed_fixtures as df
from tests.functional import openstack_fixtures as of
from tests.functional import simulated_fixtures as sf

ADMIN = df.ADMIN


def things_left(cluster):
    """{host: (kind, name) of what its fake drivers still hold}."""
    left = {}
    for host in cluster.hosts:
        for path in sorted((cluster.tmp / host / 'fake').glob('*.sqlite')):
            with sqlite3.connect(path) as db:
                found = db.execute('SELECT kind, name FROM things').fetchall()
            if found:
                left.setdefault(host, []).extend(found)
    return left


def test_500_nodes_on_10_hostagents_deploy_and_tear_down(tmp_path):
    with sf.SimulatedCluster(tmp_path, 10) as cluster:
        spec = cluster.spec('sim500', 500)
        deployed = cluster.wait(cluster.api.deploy_cluster(ADMIN, spec))
        assert deployed['state'] == 'succeeded', deployed['error']
        nodes = cluster.api.list_nodes(ADMIN, 'sim500')
        assert len(nodes) == 500
        assert {n['state'] for n in nodes} == {'deployed'}
        per_host = collections.Counter(n['hypervisor'] for n in nodes)
        assert sorted(per_host) == sorted(cluster.hosts)
        assert things_left(cluster)
        # A re-run finds nothing to change.
        again = cluster.wait(cluster.api.deploy_cluster(ADMIN, spec))
        assert again['state'] == 'succeeded', again['error']
        assert again['result']['changed'] == []
        gone = cluster.wait(cluster.api.teardown_cluster(ADMIN, 'sim500'))
        assert gone['state'] == 'succeeded', gone['error']
        assert cluster.api.list_nodes(ADMIN, 'sim500') == []
        assert things_left(cluster) == {}


def test_ironic_manages_a_simulated_node_over_redfish(
        tmp_path, openstack_services, cloud):
    with sf.SimulatedCluster(tmp_path, 1,
                             openstack=openstack_services) as cluster:
        prefix = 'sf' + cluster.token
        spec = cluster.spec(
            'simrf', 1, redfish_port=df.cf.free_tcp_port(),
            redfish_password='rf-pw',
            node_types={'rf': {'memory_mb': 64, 'vcpus': 1,
                               'volumes': [{'capacity': '1MiB'}],
                               'physical_networks': ['physnet1'],
                               'ironic_driver': 'redfish'}},
            specs=[{'type': 'rf', 'count': 1, 'node_name_prefix': prefix,
                    'ironic_config': {'resource_class': 'tenks-sim'}}])
        try:
            deployed = cluster.wait(cluster.api.deploy_cluster(ADMIN, spec))
            assert deployed['state'] == 'succeeded', deployed['error']
            [node] = cluster.api.list_nodes(ADMIN, 'simrf')
            ironic = cloud.baremetal.get_node(node['uuid'])
            # Available: Ironic's redfish driver reached the simulated
            # system with the credentials (manage checks them).
            assert (ironic.driver, ironic.provision_state) == (
                'redfish', 'available')
            assert ironic.power_state == 'power off'
            gone = cluster.wait(cluster.api.teardown_cluster(ADMIN, 'simrf'))
            assert gone['state'] == 'succeeded', gone['error']
            assert things_left(cluster) == {}
            assert not list((cluster.tmp / cluster.hosts[0] / 'sushy')
                            .glob('simrf-*'))
        finally:
            of.remove_ironic_nodes(cloud, prefix)


def _first_change_runs(cluster, cluster_name):
    """Deploy one node on a hypervisor whose changes take minutes, and
    return once the hostagent runs the deploy's first change."""
    cluster.api.deploy_cluster(ADMIN, cluster.spec(cluster_name, 1))
    df.wait_for_text(pathlib.Path(cluster.agents[0].log), 'Simulating ')


def test_a_stopping_hostagent_exits_after_its_grace(tmp_path):
    # Each simulated change takes 300 s: the stop finds one running.
    with sf.SimulatedCluster(
            tmp_path, 1, agent_options='graceful_shutdown_timeout = 2',
            fake='latency = 300', agent_defaults='debug = True\n',
            conductor_options='graceful_shutdown_timeout = 0\n') as cluster:
        _first_change_runs(cluster, 'simstop')
        agent = cluster.agents[0]
        started = time.monotonic()
        agent.process.send_signal(signal.SIGTERM)
        assert agent.process.wait(60) == 0
        assert time.monotonic() - started < 30
        log = pathlib.Path(agent.log).read_text()
        assert ('request(s) still running after graceful_shutdown_timeout '
                '(2 s)') in log, log


def test_a_second_signal_stops_a_draining_conductor_at_once(tmp_path):
    with sf.SimulatedCluster(
            tmp_path, 1, agent_options='graceful_shutdown_timeout = 0',
            fake='latency = 300', agent_defaults='debug = True\n',
            conductor_options='graceful_shutdown_timeout = 600\n'
            ) as cluster:
        _first_change_runs(cluster, 'simsig')
        conductor = cluster.conductor
        conductor.process.send_signal(signal.SIGTERM)
        # It drains: the deploy waits for the hostagent's change.
        time.sleep(2)
        assert conductor.process.poll() is None
        conductor.process.send_signal(signal.SIGTERM)
        assert conductor.process.wait(30) == 1
        assert 'tenks-conductor: signalled again, exiting now' in (
            pathlib.Path(conductor.log).read_text())
