"""The broker and a hostagent going away during a deploy (issue 22): a
conductor and two hostagents on a RabbitMQ node of this module's own
(broker_fixtures), stopped with ``rabbitmqctl stop_app`` (every
connection, queue and message lost) and started again.

Each deploy is caught at the same point: the hostagents hold their BMC
changes (cf.bmc_changes_held), so both node requests have made their
domains and wait; the fault comes, then the requests go on. IPMI ports
9560-9599.
"""

import contextlib
import datetime
import os
import secrets
import signal
import threading
import time

import libvirt
import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
import yaml

from conductor import agents
from conductor import waiters
from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import notifier
from tenks import rpc
from tenks.db import api as db_api
from tenks.db import flow_tables
from tests.functional import broker_fixtures as bf
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df
from tests.functional import test_distributed as td

pytestmark = pytest.mark.functional

ADMIN = df.ADMIN
MEMORY_KIB = 128 * 1024


@pytest.fixture(scope='module')
def broker():
    with bf.PrivateBroker() as broker:
        yield broker


@pytest.fixture
def bus(broker):
    """A bus of this test's own on ``broker``, whose connections check
    their heartbeats every second (default: every 10 s)."""
    vhost = 'tenks-test-%s' % secrets.token_hex(3)
    broker.ctl('add_vhost', vhost)
    broker.ctl('set_permissions', '-p', vhost, 'guest', '.*', '.*', '.*')
    conf = tenks_conf.new_conf()
    rpc.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override('heartbeat_timeout_threshold', 6,
                      group='oslo_messaging_rabbit')
    bus = rpc.Bus(conf, url=broker.url(vhost))
    try:
        yield bus
    finally:
        bus.cleanup()
        broker.ctl('delete_vhost', vhost)


class Echo:
    target = messaging.Target(version='1.0')

    def echo(self, context, value):
        return value


@contextlib.contextmanager
def in_thread(function, *args, **kwargs):
    """Run ``function`` in a thread; yield a list that gets what it
    returns or raises."""
    outcome = []

    def run():
        try:
            outcome.append(function(*args, **kwargs))
        except Exception as e:
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield outcome, thread
    finally:
        thread.join(60)


def test_requests_give_up_while_the_broker_is_down(broker, bus):
    """A hostagent request while RabbitMQ is down gives up at its
    deadline (2 s x 2), naming the host and why, though the conductor
    has answered a call before: the connection its answer went on
    reconnects until the broker is back, holding itself meanwhile."""
    server = bus.get_server('echo', 'here', [Echo()])
    server.start()
    try:
        client = messaging.get_rpc_client(bus.transport, messaging.Target(
            topic='echo', server='here', version='1.0'))
        assert client.call({}, 'echo', value=1) == 1
        agents_client = agents.AgentClient(bus, waiters.Waiters(), 'c1',
                                           timeout=2, retries=1)
        with broker.down():
            # Its heartbeat notices, and begins to reconnect.
            time.sleep(2)
            started = time.monotonic()
            with in_thread(agents_client.request, 'hv1', 'audit',
                           'r1') as (outcome, thread):
                thread.join(15)
                took = time.monotonic() - started
                assert not thread.is_alive(), (
                    'the request still waits %.0f s later' % took)
    finally:
        server.stop()
        server.wait()
    [error] = outcome
    assert isinstance(error, exceptions.AgentTimeout), repr(error)
    assert str(error).startswith('Hostagent on hv1 did not answer audit '
                                 'within 4 s; its last copy could not be '
                                 'sent: the broker cannot be reached')
    print('gave up after %.1f s' % took)


def test_events_do_not_wait_for_the_broker(broker, bus):
    """An event sent while RabbitMQ is down is recorded, and the
    operation sending it goes on within seconds."""
    recorded = []

    class Events:
        def add_event(self, **event):
            recorded.append(event['event_type'])

    sender = notifier.Notifier(bus, Events(), 'tenks.conductor.test')
    sender.emit('tenks.cluster.deploy.start', 'c', {})
    with broker.down():
        started = time.monotonic()
        with in_thread(sender.emit, 'tenks.cluster.deploy.end', 'c',
                       {}) as (outcome, thread):
            thread.join(15)
            took = time.monotonic() - started
            assert not thread.is_alive(), (
                'the event still waits %.0f s later' % took)
    assert outcome == [None]
    assert recorded == ['tenks.cluster.deploy.start',
                        'tenks.cluster.deploy.end']
    print('sent in %.1f s' % took)


def defined(names):
    """How many of the domains ``names`` libvirt has."""
    conn = libvirt.open(cf.URI)
    try:
        return len({d.name() for d in conn.listAllDomains()} & set(names))
    finally:
        conn.close()


def wait_for_domains(env, count, timeout=90):
    names = [env.node_name(i) for i in range(count)]
    deadline = time.monotonic() + timeout
    while defined(names) < count:
        assert time.monotonic() < deadline, 'the nodes were never made'
        time.sleep(0.1)


@contextlib.contextmanager
def bmcs_held(d):
    """Hold the BMC changes of every hostagent of ``d`` for the block
    (an ExitStack: close it to let them go earlier)."""
    with contextlib.ExitStack() as held:
        for state_dir in d.state_dirs.values():
            held.enter_context(cf.bmc_changes_held(state_dir))
        yield held


class ProxiedConductor(df.Deployment):
    """A Deployment whose conductor reaches the broker through
    ``proxy`` (a df.BrokerProxy)."""

    def __init__(self, *args, proxy, **kwargs):
        self.proxy = proxy
        super().__init__(*args, **kwargs)

    def service_url(self, host):
        if host == self.conductor_host:
            return self.proxy.url(self.url)
        return self.url


def deployment(tmp_path, broker, cls=df.Deployment, **options):
    """A ``cls`` on ``broker`` whose services try to reconnect at least
    every 2 s (oslo.messaging's default, 30 s, is for the default
    agent_timeout of minutes, not for these tests' seconds)."""
    d = cls(tmp_path / 'deployment', broker=broker, **options)
    for service in d.services.values():
        with open(service.config, 'a') as f:
            f.write('[oslo_messaging_rabbit]\nrabbit_interval_max = 2\n')
    return d


def node_tasks(d, operation_id):
    """{name: whether it failed (or is reverted)} of the node tasks of
    the operation's flow, each a batch of one hypervisor's nodes, as its
    conductor's state database records them (read directly: no call
    crosses a broker that is down)."""
    engine = sa.create_engine(db_api.default_url(
        os.path.join(str(d.tmp), d.conductor_host)))
    atoms, flows = flow_tables.ATOMS, flow_tables.FLOWS
    query = sa.select(atoms.c.name, atoms.c.state).where(
        atoms.c.name.startswith('node:'),
        atoms.c.parent_uuid.in_(sa.select(flows.c.uuid).where(
            flows.c.parent_uuid == operation_id)))
    try:
        with engine.connect() as conn:
            return {name: state in ('FAILURE', 'REVERTING', 'REVERTED')
                    for name, state in conn.execute(query)}
    finally:
        engine.dispose()


def assert_complete(d, env, count):
    """The cluster is deployed, whole and alone: one domain per node with
    its memory, a BMC answering for each, a clean audit."""
    # The hostagents register again after an outage or a restart, and
    # only then does the audit look at their hypervisors: a heartbeat
    # waits out the connection's backoff, which may end after the answers.
    d.wait_for_agents(d.hosts)
    nodes = d.api.list_nodes(ADMIN, env.cluster)
    assert [n['state'] for n in nodes] == ['deployed'] * count
    conn = libvirt.open(cf.URI)
    try:
        domains = [dom for dom in conn.listAllDomains()
                   if env.ours(dom.name())]
        assert sorted(dom.name() for dom in domains) == sorted(
            n['name'] for n in nodes)
        assert [dom.maxMemory() for dom in domains] == [MEMORY_KIB] * count
    finally:
        conn.close()
    assert len({n['bmc_port'] for n in nodes}) == count
    for node in nodes:
        assert cf.ipmitool(node['bmc_port'], 'power',
                           'status').returncode == 0
    # One IPMI host per hypervisor serves its BMCs.
    assert [len(cf.ipmi_host_pids(s)) for s in d.state_dirs.values()] == [
        1] * len(d.state_dirs)
    drift = d.api.audit(ADMIN, env.cluster)['drift']
    assert drift == [], drift


def test_deploy_completes_after_a_short_broker_outage(broker, tmp_path):
    """RabbitMQ stops while both node requests run, for well less than
    their deadline (6 s x 4): the agents finish the requests meanwhile;
    their answers, or the conductor's copies of the requests, go once
    the broker is back, and the deploy ends deployed. The CLI following
    it waits through the outage and reports the deploy."""
    with deployment(tmp_path, broker, agent_timeout=6,
                    agent_retries=3) as d:
        env = cf.ClusterEnv(tmp_path, port_base=9560,
                            state_dirs=d.state_dirs.values())
        with cf.checked(env):
            path = tmp_path / 'cluster.yaml'
            path.write_text(yaml.safe_dump(env.spec(count=2)))
            err = tmp_path / 'cli.err'
            with bmcs_held(d) as held:
                with open(err, 'w') as stderr:
                    cli = d.cli_process('-v', 'deploy', str(path),
                                        stderr=stderr)
                try:
                    operation_id = td.followed(err)
                    wait_for_domains(env, 2)
                    with broker.down():
                        # The agents finish the nodes meanwhile.
                        held.close()
                        df.wait_for_text(
                            err, 'No answer from the conductor about '
                                 'operation %s' % operation_id)
                        time.sleep(5)
                    out, _ = cli.communicate(timeout=300)
                finally:
                    cli.kill()
            assert cli.returncode == 0, err.read_text()
            assert 'Cluster %s deployed: 2 node(s)' % env.cluster in out
            assert 'The conductor answers again' in err.read_text()
            operation = d.wait(operation_id)
            assert operation['state'] == 'succeeded', operation['error']
            assert_complete(d, env, 2)
            operation = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
            assert operation['state'] == 'succeeded', operation['error']


def test_answer_waits_for_its_conductor_to_reconnect(broker, tmp_path):
    """RabbitMQ restarts while both node requests run, each sent once
    (agent_retries 0); the agents finish them meanwhile. The conductor
    reaches the broker again only seconds after the agents have: their
    answers find no queue for it at first, and go once it is back. The
    deploy ends deployed."""
    proxy = df.BrokerProxy(target=('127.0.0.1', broker.port))
    proxy.start()
    try:
        with deployment(tmp_path, broker, cls=ProxiedConductor,
                        proxy=proxy, agent_timeout=30, agent_retries=0) as d:
            env = cf.ClusterEnv(tmp_path, port_base=9590,
                                state_dirs=d.state_dirs.values())
            with cf.checked(env):
                with bmcs_held(d) as held:
                    operation_id = d.api.deploy_cluster(ADMIN,
                                                        env.spec(count=2))
                    wait_for_domains(env, 2)
                    proxy.stop()
                    with broker.down():
                        held.close()
                        time.sleep(2)
                    # The agents reconnect (within 2 s) and answer.
                    time.sleep(5)
                    proxy.start()
                operation = d.wait(operation_id)
                assert operation['state'] == 'succeeded', operation['error']
                assert_complete(d, env, 2)
                operation = d.wait(d.api.teardown_cluster(ADMIN,
                                                          env.cluster))
                assert operation['state'] == 'succeeded', operation['error']
    finally:
        proxy.stop()


def test_deploy_fails_and_reverts_when_the_broker_stays_away(broker,
                                                             tmp_path):
    """RabbitMQ stops while both node requests run and stays down past
    their deadline (6 s x 2): the conductor gives them up by then,
    though no copy of them could be sent; once the broker is back, the
    deploy's revert removes what it made, and the deploy fails naming
    the hostagent that did not answer."""
    deadline = 6 * 2
    with deployment(tmp_path, broker, agent_timeout=6,
                    agent_retries=1) as d:
        env = cf.ClusterEnv(tmp_path, port_base=9570,
                            state_dirs=d.state_dirs.values())
        with cf.checked(env):
            with bmcs_held(d) as held:
                operation_id = d.api.deploy_cluster(ADMIN, env.spec(count=2))
                wait_for_domains(env, 2)
                with broker.down():
                    stopped = time.monotonic()
                    held.close()
                    # Every node task given up (a flow stored has them
                    # all).
                    while not all(node_tasks(d, operation_id).values()
                                  or [False]):
                        assert time.monotonic() - stopped < deadline + 20, (
                            'the deploy still waits for its hostagents '
                            '%.0f s after the broker stopped'
                            % (time.monotonic() - stopped))
                        time.sleep(0.2)
                    gave_up = time.monotonic() - stopped
            print('gave up %.1f s after the broker stopped' % gave_up)
            assert gave_up < deadline + 5
            operation = d.wait(operation_id)
            assert operation['state'] == 'failed'
            assert any('Hostagent on %s did not answer ensure_node' % host
                       in operation['error'] for host in d.hosts), (
                operation['error'])
            with pytest.raises(exceptions.ClusterNotFound):
                d.api.get_cluster(ADMIN, env.cluster)
            assert env.leftovers() == []
            drift = d.api.audit(ADMIN, env.cluster)['drift']
            assert drift == [], drift


def test_deploy_completes_after_a_hostagent_restart(broker, tmp_path):
    """A hostagent is killed (SIGKILL) while its node request runs and
    started again: the conductor's copy of the request, kept in the
    agent's queue, reaches the new agent, which finishes the half-made
    node; nothing is made twice."""
    with deployment(tmp_path, broker, agent_timeout=5,
                    agent_retries=3) as d:
        env = cf.ClusterEnv(tmp_path, port_base=9580,
                            state_dirs=d.state_dirs.values())
        with cf.checked(env):
            victim = d.hosts[0]
            with bmcs_held(d):
                operation_id = d.api.deploy_cluster(ADMIN, env.spec(count=2))
                wait_for_domains(env, 2)
                d.agent(victim).stop(signal.SIGKILL)
            since = datetime.datetime.now(datetime.timezone.utc)
            d.agent(victim).start()
            d.wait_for_agents([victim], since=since)
            operation = d.wait(operation_id)
            assert operation['state'] == 'succeeded', operation['error']
            assert_complete(d, env, 2)
            operation = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
            assert operation['state'] == 'succeeded', operation['error']
