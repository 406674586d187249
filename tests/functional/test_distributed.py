"""Distributed mode on a real RabbitMQ: a conductor and two hostagents as
separate processes, driven by the CLI and by another service's client."""

import contextlib
import datetime
import json
import os
import secrets
import signal
import sqlite3
import threading
import time

import libvirt
import pytest
import yaml
from pyroute2 import IPRoute

from conductor import rpcapi
from tenks import exceptions
from tenks import notifier
from tenks import policy
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

pytestmark = pytest.mark.functional

ADMIN = policy.admin_context()


@pytest.fixture(scope='module')
def deployment(tmp_path_factory):
    with df.Deployment(tmp_path_factory.mktemp('distributed')) as d:
        yield d


@pytest.fixture
def env(tmp_path, deployment):
    cluster = cf.ClusterEnv(tmp_path, port_base=7500,
                            state_dirs=deployment.state_dirs.values())
    with cf.checked(cluster):
        yield cluster


class Collector:
    """Notification endpoint keeping every event of one cluster."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.events = []

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        if payload.get('cluster') == self.cluster:
            self.events.append((event_type, payload))

    error = info


def test_cli_deploys_over_both_hypervisors(deployment, env, tmp_path):
    spec = env.spec(count=4)
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(spec))
    collector = Collector(env.cluster)
    listener = notifier.listener(deployment.bus, collector,
                                 pool='test-' + env.cluster)
    listener.start()
    try:
        done = deployment.cli('deploy', str(path))
        assert done.returncode == 0, done.stderr
        assert 'deployed: 4 node(s)' in done.stdout

        listed = deployment.cli('node', 'list', '--cluster', env.cluster,
                                '-f', 'json')
        nodes = json.loads(listed.stdout)
        by_host = {h: [n for n in nodes if n['hypervisor'] == h]
                   for h in deployment.hosts}
        assert [len(v) for v in by_host.values()] == [2, 2]
        assert len({n['bmc_port'] for n in nodes}) == 4
        # Page by page over the bus: every node once, in the order asked.
        pages, marker = [], []
        while not pages or len(pages[-1]) == 3:
            page = deployment.cli('node', 'list', '--cluster', env.cluster,
                                  '--limit', '3', '--sort', 'name:desc',
                                  '-f', 'json', *marker)
            assert page.returncode == 0, page.stderr
            pages.append(json.loads(page.stdout))
            marker = ['--marker', pages[-1][-1]['uuid']]
        assert [n['name'] for page in pages for n in page] == sorted(
            (n['name'] for n in nodes), reverse=True)
        conn = libvirt.open(cf.URI)
        try:
            for node in nodes:
                port = node['bmc_port']
                assert cf.ipmitool(port, 'power', 'on').returncode == 0
                dom = conn.lookupByName(node['name'])
                assert dom.isActive()
                assert cf.ipmitool(port, 'power', 'off').returncode == 0
                assert not dom.isActive()
        finally:
            conn.close()

        hypervisors = json.loads(deployment.cli(
            'hypervisor', 'list', '-f', 'json').stdout)
        assert {h['host']: h['nodes'] for h in hypervisors} == {
            h: 2 for h in deployment.hosts}

        gone = deployment.cli('teardown', env.cluster)
        assert gone.returncode == 0, gone.stderr
        assert env.leftovers() == []
        # Events arrive in order: start, one per node, end.
        deadline = time.monotonic() + 10
        while (len(collector.events) < 12
               and time.monotonic() < deadline):
            time.sleep(0.1)
    finally:
        listener.stop()
        listener.wait()
    types = [event_type for event_type, _ in collector.events]
    assert types == (['tenks.cluster.deploy.start']
                     + ['tenks.node.create.end'] * 4
                     + ['tenks.cluster.deploy.end',
                        'tenks.cluster.teardown.start']
                     + ['tenks.node.delete.end'] * 4
                     + ['tenks.cluster.teardown.end'])
    created = [p for t, p in collector.events
               if t == 'tenks.node.create.end']
    assert {p['name'] for p in created} == {n['name'] for n in nodes}
    assert {(p['bmc_address'], p['bmc_port']) for p in created} == {
        (n['bmc_address'], n['bmc_port']) for n in nodes}


def test_another_service_uses_the_rpc_api(deployment, env):
    api = deployment.api
    spec = env.spec(count=2)
    operation = deployment.wait(api.deploy_cluster(ADMIN, spec))
    assert operation['state'] == 'succeeded', operation['error']
    # One task per node.
    assert operation['progress']['node'] == [2, 2]

    cluster = api.get_cluster(ADMIN, env.cluster)
    assert cluster['state'] == 'deployed'
    assert cluster['spec']['ipmi_password'] == '***'
    assert len(cluster['nodes']) == 2

    bad = dict(spec, specs=[{'type': 'nope', 'count': -1}])
    with pytest.raises(exceptions.SpecError) as raised:
        api.deploy_cluster(ADMIN, bad)
    assert 'specs[0].count' in str(raised.value)
    assert "unknown node type 'nope'" in str(raised.value)
    with pytest.raises(exceptions.ClusterNotFound):
        api.teardown_cluster(ADMIN, 'no-such-cluster')
    # A changed spec is applied: one more node.
    operation = deployment.wait(api.deploy_cluster(ADMIN, env.spec(count=3)))
    assert operation['state'] == 'succeeded', operation['error']
    assert len(api.get_cluster(ADMIN, env.cluster)['nodes']) == 3

    operation = deployment.wait(api.teardown_cluster(ADMIN, env.cluster))
    assert operation['state'] == 'succeeded', operation['error']
    assert env.leftovers() == []


def test_a_forged_registration_gets_no_node(deployment, env):
    """Issue 19: register_agent cast by something that is not a hostagent,
    heartbeating as one under a host name nobody serves: the host is
    listed unverified, and a deploy neither waits for it nor gives it
    a node."""
    api = deployment.api
    ghost = 'ghost-%s' % deployment.token
    forger = rpcapi.ConductorAPI(deployment.bus)
    stop = threading.Event()

    def heartbeat():
        while not stop.is_set():
            # Any peer of the bus can claim the service role.
            forger.register_agent(
                policy.service_context(), ghost,
                {'host': ghost, 'cpus': 256, 'memory_mb': 1 << 20})
            stop.wait(1)

    thread = threading.Thread(target=heartbeat, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while ghost not in states(api):
            assert time.monotonic() < deadline, 'the cast never arrived'
            time.sleep(0.2)
        operation = deployment.wait(
            api.deploy_cluster(ADMIN, env.spec(count=2)))
        assert operation['state'] == 'succeeded', operation['error']
        assert {n['hypervisor'] for n in api.list_nodes(
            ADMIN, env.cluster)} <= set(deployment.hosts)
        assert states(api)[ghost] == 'unverified'
        operation = deployment.wait(api.teardown_cluster(ADMIN, env.cluster))
        assert operation['state'] == 'succeeded', operation['error']
    finally:
        stop.set()
        thread.join()
        # Silent, it goes down (agent_down_time 5 s) and can be forgotten.
        deadline = time.monotonic() + 30
        while states(api).get(ghost) != 'down':
            assert time.monotonic() < deadline, states(api)
            time.sleep(0.5)
        api.delete_hypervisor(ADMIN, ghost)
    assert env.leftovers() == []


def states(api):
    return {h['host']: h['state'] for h in api.list_hypervisors(ADMIN)}


def test_killed_hostagent_fails_the_deploy_naming_it(tmp_path):
    with df.Deployment(tmp_path / 'deployment', agent_timeout=3) as d:
        env = cf.ClusterEnv(tmp_path, port_base=7550,
                            state_dirs=d.state_dirs.values())
        try:
            _kill_agent_mid_deploy(d, env)
        finally:
            left = env.leftovers()
            env.force_clean()
        assert left == [], 'the test left %s behind' % left


def _kill_agent_mid_deploy(d, env):
    victim, survivor = d.hosts[1], d.hosts[0]
    operation_id = d.api.deploy_cluster(ADMIN, env.spec(count=2))
    d.agent(victim).stop(signal.SIGKILL)
    operation = d.wait(operation_id)
    assert operation['state'] == 'failed'
    assert 'Hostagent on %s did not answer' % victim in operation['error']

    # Nothing of the cluster is left on the surviving hypervisor.
    conn = libvirt.open(cf.URI)
    try:
        assert not [p.name() for p in conn.listAllStoragePools()
                    if p.name() == 'tenks-a%s' % env.cluster]
        domains = {n['name']: n['hypervisor']
                   for n in d.api.list_nodes(ADMIN, env.cluster)}
        assert survivor not in domains.values()
    finally:
        conn.close()
    # Back again, the agent lets a teardown remove what it had made.
    restarted = datetime.datetime.now(datetime.timezone.utc)
    d.agent(victim).start()
    d.wait_for_agents([victim], since=restarted)
    if any(c['name'] == env.cluster for c in d.api.list_clusters(ADMIN)):
        operation = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
        assert operation['state'] == 'succeeded', operation['error']


def followed(path):
    """The id of the operation a CLI run with -v and its stderr in
    ``path`` follows, once it does."""
    df.wait_for_text(path, 'Following operation ')
    return path.read_text().split('Following operation ')[1].split()[0]


def test_stopped_conductor_hands_back_and_resumes(tmp_path):
    """SIGTERM with no grace period: the running deploy is handed back,
    and the restarted conductor finishes the same operation. The CLI
    waiting on it, its questions timing out meanwhile, follows it to its
    end; what it prints and the result count the whole operation."""
    with df.Deployment(tmp_path / 'deployment', grace=0) as d:
        env = cf.ClusterEnv(tmp_path, port_base=7560,
                            state_dirs=d.state_dirs.values())
        with cf.checked(env):
            path = tmp_path / 'cluster.yaml'
            path.write_text(yaml.safe_dump(env.spec(count=4)))
            err = tmp_path / 'cli.err'
            # The nodes' BMCs wait until the conductor is stopped: the
            # deploy is still running then.
            held = contextlib.ExitStack()
            for state_dir in d.state_dirs.values():
                held.enter_context(cf.bmc_changes_held(state_dir))
            with open(err, 'w') as stderr:
                cli = d.cli_process('-v', 'deploy', str(path),
                                    stderr=stderr)
            try:
                operation_id = followed(err)
                d.conductor.stop()
                held.close()
                state_db = os.path.join(str(tmp_path / 'deployment'),
                                        d.conductor_host, 'state.sqlite')
                with sqlite3.connect(state_db) as db:
                    [(state,)] = db.execute(
                        'SELECT state FROM tenks_operations WHERE id = ?',
                        (operation_id,)).fetchall()
                assert state == 'running'
                df.wait_for_text(err, 'No answer from the conductor about '
                                   'operation %s' % operation_id)
                d.conductor.start()
                out, _ = cli.communicate(timeout=300)
            finally:
                held.close()
                cli.kill()
            assert cli.returncode == 0, err.read_text()
            assert 'The conductor answers again' in err.read_text()
            operation = d.wait(operation_id)
            assert operation['state'] == 'succeeded', operation['error']
            result = operation['result']
            assert result['resumed']
            # The whole deploy: every node, and the plan it applied.
            assert operation['progress']['node'] == [4, 4]
            assert len([t for t in result['changed']
                        if t.startswith('node:')]) == 4
            assert 'Resumed deploy %s' % operation_id in out
            assert 'Cluster %s deployed: 4 node(s), %d change(s)' % (
                env.cluster, len(result['plan'])) in out
            assert result['plan']
            # One start, one end: the resume did not announce it again.
            events = [e['event_type']
                      for e in d.api.list_events(ADMIN, env.cluster)
                      if e['payload'].get('operation') == operation_id]
            assert events == ['tenks.cluster.deploy.start',
                              'tenks.cluster.deploy.end']
            nodes = d.api.list_nodes(ADMIN, env.cluster)
            assert [n['state'] for n in nodes] == ['deployed'] * 4
            for node in nodes:
                assert cf.ipmitool(node['bmc_port'], 'power',
                                   'status').returncode == 0
            operation = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
            assert operation['state'] == 'succeeded', operation['error']


def test_cli_follows_its_operation_through_a_broker_outage(
        deployment, env, tmp_path):
    """The CLI's connection to RabbitMQ breaks while it follows a deploy
    (its own only: it goes through a proxy) and comes back: the CLI
    follows the same operation to its end."""
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(env.spec(count=2)))
    proxy = df.BrokerProxy()
    proxy.start()
    err = tmp_path / 'cli.err'
    with open(err, 'w') as stderr:
        cli = deployment.cli_process('-v', 'deploy', str(path),
                                     stderr=stderr,
                                     url=proxy.url(deployment.url))
    try:
        operation_id = followed(err)
        proxy.stop()
        df.wait_for_text(err, 'No answer from the conductor about operation '
                           '%s' % operation_id)
        time.sleep(5)
        proxy.start()
        out, _ = cli.communicate(timeout=300)
    finally:
        cli.kill()
        proxy.stop()
    assert cli.returncode == 0, err.read_text()
    assert 'Cluster %s deployed: 2 node(s)' % env.cluster in out
    assert 'The conductor answers again' in err.read_text()
    operation = deployment.wait(deployment.api.teardown_cluster(
        ADMIN, env.cluster))
    assert operation['state'] == 'succeeded', operation['error']


def test_down_hostagent_fails_the_operation_not_the_call(tmp_path):
    """deploy_cluster answers with the operation id at once although a
    hostagent is gone; the operation fails naming it. Once down and
    hosting nothing, the hypervisor can be deleted."""
    with df.Deployment(tmp_path / 'deployment', agent_timeout=4) as d:
        env = cf.ClusterEnv(tmp_path, port_base=7960,
                            state_dirs=d.state_dirs.values())
        with cf.checked(env):
            victim, survivor = d.hosts[1], d.hosts[0]
            d.agent(victim).stop(signal.SIGKILL)
            started = time.monotonic()
            operation_id = d.api.deploy_cluster(ADMIN, env.spec(count=2))
            assert time.monotonic() - started < 2
            assert d.api.get_operation(ADMIN, operation_id)['state'] == (
                'running')
            # Still counted up: refused, saying why.
            with pytest.raises(exceptions.HypervisorInUse,
                               match='its hostagent is up'):
                d.api.delete_hypervisor(ADMIN, victim)

            operation = d.wait(operation_id)
            assert operation['state'] == 'failed'
            assert ('Hostagent on %s did not answer inspect' % victim
                    in operation['error'])
            with pytest.raises(exceptions.ClusterNotFound):
                d.api.get_cluster(ADMIN, env.cluster)

            deadline = time.monotonic() + 30
            while d.api.get_hypervisor(ADMIN, victim)['state'] != 'down':
                assert time.monotonic() < deadline
                time.sleep(0.5)
            done = d.cli('hypervisor', 'delete', victim)
            assert done.returncode == 0, done.stderr
            assert [h['host'] for h in d.api.list_hypervisors(ADMIN)] == [
                survivor]
            with pytest.raises(exceptions.HypervisorNotFound):
                d.api.delete_hypervisor(ADMIN, victim)


def test_nodes_go_where_their_networks_are_mapped(tmp_path):
    """Only hva maps physnet2, a network the spec does not declare (as an
    override file of the Ansible-based Tenks leaves it to per-host
    mappings): nodes needing physnet1 and physnet2 all go to hva, and
    physnet2's bridge there holds the mapped interface; a node needing
    only physnet1 may go to either. IPMI ports 9620-9629."""
    # A veth end stands for the hypervisor's NIC of physnet2.
    uplink = 'fd%s' % secrets.token_hex(3)
    with IPRoute() as ipr:
        ipr.link('add', ifname=uplink, kind='veth', peer=uplink + 'p')
    try:
        d = df.Deployment(tmp_path / 'deployment')
        hva, hvb = d.hosts
        with open(d.agent(hva).config, 'a') as f:
            f.write('physnet_mappings = physnet2:%s\n' % uplink)
        with d:
            env = cf.ClusterEnv(tmp_path, port_base=9620,
                                state_dirs=d.state_dirs.values())
            with cf.checked(env):
                spec = env.spec(
                    node_types={
                        'both': {'memory_mb': 128, 'vcpus': 1,
                                 'physical_networks': ['physnet1',
                                                       'physnet2']},
                        'one': {'memory_mb': 128, 'vcpus': 1,
                                'physical_networks': ['physnet1']}},
                    specs=[{'type': 'both', 'count': 3,
                            'node_name_prefix': env.node_prefix},
                           {'type': 'one', 'count': 2,
                            'node_name_prefix': env.node_prefix + 'o'}])
                operation = d.wait(d.api.deploy_cluster(ADMIN, spec))
                assert operation['state'] == 'succeeded', operation['error']
                nodes = d.api.list_nodes(ADMIN, env.cluster)
                both = [n for n in nodes if len(n['nics']) == 2]
                assert [n['hypervisor'] for n in both] == [hva] * 3
                # The spreading weigher puts the others on hvb.
                assert {n['hypervisor'] for n in nodes} == {hva, hvb}
                [bridge] = {nic['bridge'] for n in both for nic in n['nics']
                            if nic['physnet'] == 'physnet2'}
                assert os.path.basename(os.readlink(
                    '/sys/class/net/%s/master' % uplink)) == bridge
                operation = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
                assert operation['state'] == 'succeeded', operation['error']
        # The mapped interface is not Tenks': released, not removed.
        assert os.path.isdir('/sys/class/net/%s' % uplink)
        assert not os.path.exists('/sys/class/net/%s/master' % uplink)
    finally:
        with IPRoute() as ipr:
            ipr.link('del', ifname=uplink)
