"""The hostagent's RPC endpoint on a real RabbitMQ (a private vhost), with
its real libvirt driver: requests re-sent while the first copy runs, and
requests on the same thing while another runs."""

import contextlib
import os
import secrets
import subprocess
import threading
import time

import oslo_messaging as messaging
import pytest

from hostagent import manager as hostagent_manager
from hostagent import rpcapi as hostagent_rpcapi
from tenks import rpc
from tests.functional import distributed_fixtures as df
from tests.functional import drivers_fixtures as fx

pytestmark = pytest.mark.functional

GIB = 1024 ** 3
SLOW = 2  # s each driver call takes


class Reports:
    """A stand-in conductor endpoint keeping every report_result."""

    target = messaging.Target(version='1.0')

    def __init__(self):
        self.received = []
        self.cond = threading.Condition()

    def report_result(self, context, request_id, host, result=None,
                      error=None):
        with self.cond:
            self.received.append((request_id, result, error))
            self.cond.notify_all()

    def wait_for(self, count, timeout=30):
        with self.cond:
            assert self.cond.wait_for(
                lambda: len(self.received) >= count, timeout), self.received
            return list(self.received)


@pytest.fixture
def bus():
    vhost = 'tenks-test-%s' % secrets.token_hex(3)
    df.rabbitmqctl('add_vhost', vhost)
    try:
        df.rabbitmqctl('set_permissions', '-p', vhost, 'guest', '.*', '.*',
                       '.*')
        conf = fx.make_conf('/nonexistent')
        bus = rpc.Bus(conf, url='rabbit://guest:guest@127.0.0.1:5672/%s'
                      % vhost)
        try:
            yield bus
        finally:
            # Before the vhost goes: a connection left open keeps
            # trying to reach it, and logs so, for the rest of the run.
            bus.cleanup()
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            df.rabbitmqctl('delete_vhost', vhost)


@contextlib.contextmanager
def serving(bus, server, endpoint, topic):
    srv = bus.get_server(topic, server, [endpoint])
    srv.start()
    try:
        yield
    finally:
        srv.stop()
        srv.wait()


def test_request_sent_again_while_running_joins_it(bus, tmp_path, left):
    """A retry after agent_timeout, or a resumed operation, re-sends a
    request the agent is still running: it runs once, and every copy's
    conductor hears the outcome."""
    conf = fx.make_conf(tmp_path)
    host = left.name('-hv')
    agent = hostagent_manager.HostAgentManager(conf, bus)
    pool = left.name('-pool')
    pool_dir = os.path.join(left.directory(), 'pool')
    agent.virt.ensure_pool(pool, pool_dir, fx.OWNER)
    runs = []
    real = agent.virt.ensure_volume

    def slow_ensure_volume(*args):
        runs.append(args)
        time.sleep(SLOW)
        return real(*args)

    agent.virt.ensure_volume = slow_ensure_volume
    reports = {name: Reports() for name in ('cond-a', 'cond-b')}
    api = hostagent_rpcapi.HostAgentAPI(bus)
    args = {'pool': pool, 'name': 'hx-v', 'capacity': GIB, 'fmt': 'qcow2',
            'owner': fx.OWNER}
    with contextlib.ExitStack() as stack:
        stack.enter_context(serving(bus, host, agent, rpc.HOSTAGENT_TOPIC))
        for name, endpoint in reports.items():
            stack.enter_context(serving(bus, '%s-%s' % (host, name),
                                        endpoint, rpc.CONDUCTOR_TOPIC))

        def cast(conductor, request_id='op/volume:hx-v/execute'):
            api.cast(host, 'ensure_volume', request_id,
                     '%s-%s' % (host, conductor), **args)

        cast('cond-a')
        time.sleep(SLOW / 4)
        cast('cond-a')  # its retry
        cast('cond-b')  # another conductor resuming the operation
        a = reports['cond-a'].wait_for(2)
        b = reports['cond-b'].wait_for(1)
        assert len(runs) == 1
        assert [result for _, result, _ in a + b] == [
            fx.CREATED] * 3, a + b

        # Sent again once it is over: the kept outcome, not a new run.
        cast('cond-b')
        assert reports['cond-b'].wait_for(2)[1][1] == fx.CREATED
        assert len(runs) == 1

        # Another request id runs (and finds the volume there).
        cast('cond-a', 'op2/volume:hx-v/execute')
        assert reports['cond-a'].wait_for(3)[2][1] == fx.UNCHANGED
        assert len(runs) == 2
    # Marked as this hostagent's.
    assert agent.virt.remove_volume(pool, 'hx-v',
                                    agent.nodes.mark(fx.OWNER)) is True
    assert agent.virt.remove_pool(pool, pool_dir, fx.OWNER) is True


def test_remove_sent_while_ensure_runs_waits_for_it(bus, tmp_path, left):
    """After an agent_timeout the conductor reverts: its remove_volume
    (another request id) reaches the agent while ensure_volume of that
    volume still runs. The remove waits, then removes what the ensure
    made: no volume is left that nothing records."""
    conf = fx.make_conf(tmp_path)
    host = left.name('-hv')
    agent = hostagent_manager.HostAgentManager(conf, bus)
    pool = left.name('-pool')
    pool_dir = os.path.join(left.directory(), 'pool')
    agent.virt.ensure_pool(pool, pool_dir, fx.OWNER)
    real = agent.virt.ensure_volume

    def slow_ensure_volume(*args):
        time.sleep(SLOW)
        return real(*args)

    agent.virt.ensure_volume = slow_ensure_volume
    reports = Reports()
    api = hostagent_rpcapi.HostAgentAPI(bus)
    owner = {'pool': pool, 'name': 'hx-v', 'owner': fx.OWNER}
    try:
        with serving(bus, host, agent, rpc.HOSTAGENT_TOPIC), \
                serving(bus, host + '-cond', reports, rpc.CONDUCTOR_TOPIC):
            api.cast(host, 'ensure_volume', 'op/volume:hx-v/execute',
                     host + '-cond', capacity=GIB, fmt='qcow2', **owner)
            time.sleep(SLOW / 4)
            api.cast(host, 'remove_volume', 'op/volume:hx-v/revert',
                     host + '-cond', **owner)
            received = reports.wait_for(2)
        assert [(request_id, result) for request_id, result, _ in
                received] == [('op/volume:hx-v/execute', fx.CREATED),
                              ('op/volume:hx-v/revert', {'changed': True})]
        assert os.listdir(pool_dir) == []
    finally:
        agent.virt.remove_volume(pool, 'hx-v', fx.OWNER)
        agent.virt.remove_pool(pool, pool_dir, fx.OWNER)
