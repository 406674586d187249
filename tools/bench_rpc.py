"""Time Tenks' control plane: conductor -> hostagent -> result event.

Three parts, each printed as a small table:

latency     N sequential AgentClient.request(host, 'ensure_volume', ...)
            round trips (cast to the agent, report_result back to the
            waiting caller): median, p95 and p99 in ms.
throughput  concurrent round trips from a pool of threads (requests/s),
            and one-way casts to the agent with nobody waiting (casts/s,
            until the agent has handled them all).
deploy      in-process time of Conductor.deploy / a no-change re-run /
            teardown in embedded mode with the real drivers (libvirt,
            Linux bridges, virtualbmc), for 1 and 8 nodes, and the cost
            of one more node: (8 nodes - 1 node) / 7; medians of a
            few runs.

The first two run the real RPC pieces (Waiters, ConductorManager's
report_result, HostAgentManager behind RPC servers on the conductor and
hostagent topics) with trivial in-memory drivers, so only the control
plane is measured, once on the embedded in-memory transport and once on
RabbitMQ (127.0.0.1:5672, guest/guest, in a private vhost
tenks-bench-<random> removed at the end). The deploy part needs root
and tools/setup.sh done; it uses nodes bq*, bridges brbq*, IPMI ports
7600-7699 and a private state directory, and tears down at the end.

    .venv/bin/python tools/bench_rpc.py [-n 500] [--requests 1000]
        [--threads 32] [--runs 3] [--parts latency,throughput,deploy]
"""
# ruff: noqa: E402

import argparse
import contextlib
import os
import secrets
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import types
import warnings
from concurrent import futures
from unittest import mock

# futurist and oslo.service import eventlet, which warns that it is
# deprecated although Tenks never uses it (as in tenks/cli/main.py).
warnings.filterwarnings('ignore', message='(?s).*Eventlet is deprecated')

from conductor import agents
from conductor import manager as conductor_manager
from conductor import waiters
from hostagent import manager as hostagent_manager
from hostagent.drivers import base
from hostagent.drivers.bmc import ipmi_store
from hostagent.drivers.bmc import processes
from tenks import conf as tenks_conf
from tenks import rpc
from tenks import spec as tenks_spec
from tenks.cli import embedded

PARTS = ('latency', 'throughput', 'deploy')
WARM_UP = 20  # round trips before measuring (connections, queues)
VOLUME = {'pool': 'bench', 'name': 'bench', 'capacity': 512, 'fmt': 'raw',
          'owner': 'tenks:bench:bench'}


# Trivial drivers: the agent does nothing but count.

class Counter:

    def __init__(self):
        self.value = 0
        self._cond = threading.Condition()

    def add(self):
        with self._cond:
            self.value += 1
            self._cond.notify_all()

    def wait_for(self, value, timeout):
        with self._cond:
            if not self._cond.wait_for(lambda: self.value >= value,
                                       timeout):
                raise RuntimeError('the agent handled %d of %d in %d s' % (
                    self.value, value, timeout))


def _nothing(self, *args):
    return False


def _null(driver_class):
    """``driver_class`` with each of its abstract methods doing nothing."""
    return type('Null' + driver_class.__name__, (driver_class,),
                dict.fromkeys(driver_class.__abstractmethods__, _nothing))


class NullVirt(_null(base.VirtDriver)):

    def __init__(self, conf):
        super().__init__(conf)
        self.handled = Counter()

    def facts(self):
        return {'libvirt_version': '0', 'cpus': 1, 'memory_mb': 1}

    def ensure_volume(self, pool, name, capacity, fmt, owner):
        self.handled.add()
        return base.ensured(True)


NullNetwork = _null(base.NetworkDriver)
NullBmc = _null(base.BmcDriver)
NullRedfish = _null(base.RedfishDriver)
NullSnmp = _null(base.SnmpDriver)


NULL_DRIVERS = {'tenks.virt_drivers': NullVirt,
                'tenks.network_drivers': NullNetwork,
                'tenks.bmc_drivers': NullBmc,
                'tenks.redfish_drivers': NullRedfish,
                'tenks.snmp_drivers': NullSnmp}


def load_null_driver(namespace, name, conf):
    return NULL_DRIVERS[namespace](conf)


# The two transports.

def rabbitmqctl(*args):
    subprocess.run(['rabbitmqctl', '-n', 'rabbit@localhost', '-q', *args],
                   check=True, capture_output=True, timeout=60,
                   env=dict(os.environ, ERL_EPMD_ADDRESS='127.0.0.1'))


@contextlib.contextmanager
def rabbit_vhost():
    vhost = 'tenks-bench-%s' % secrets.token_hex(3)
    rabbitmqctl('add_vhost', vhost)
    try:
        rabbitmqctl('set_permissions', '-p', vhost, 'guest', '.*', '.*',
                    '.*')
        yield 'rabbit://guest:guest@127.0.0.1:5672/%s' % vhost
    finally:
        rabbitmqctl('delete_vhost', vhost)


@contextlib.contextmanager
def in_memory():
    yield rpc.EMBEDDED_TRANSPORT_URL


TRANSPORTS = (('memory', in_memory), ('rabbitmq', rabbit_vhost))


# Parts 1 and 2: conductor and hostagent endpoints over the bus.

def new_bus(url, threads):
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    rpc.register_opts(conf)
    # Room for every sending thread (the casters, or the agent's RPC
    # workers reporting): no waiting for a pooled connection.
    conf.set_override('rpc_conn_pool_size',
                      max(threads, conf.executor_thread_pool_size),
                      group='oslo_messaging_rabbit')
    return rpc.Bus(conf, url=url)


class ControlPlane:
    """A conductor endpoint (report_result only) and a hostagent with
    null drivers, each behind its RPC server."""

    def __init__(self, url, threads, timeout=30):
        self.token = secrets.token_hex(3)
        self.count = 0
        # A bus each, as in two processes.
        self.buses = [new_bus(url, threads), new_bus(url, threads)]
        conductor_bus, agent_bus = self.buses
        agent_bus.conf.set_override('host', 'bench-hv-%s' % self.token,
                                    group='hostagent')
        with mock.patch.object(hostagent_manager, 'load_driver',
                               load_null_driver):
            agent = hostagent_manager.HostAgentManager(agent_bus.conf,
                                                       agent_bus)
        self.host = agent.host
        self.handled = agent.virt.handled
        conductor_host = 'bench-cond-%s' % self.token
        # The casts' results, which nobody waits for, are dropped.
        conductor = types.SimpleNamespace(
            waiters=waiters.Waiters(), conf=conductor_bus.conf,
            late_results=types.SimpleNamespace(apply=lambda *a, **k: None))
        self.client = agents.AgentClient(conductor_bus, conductor.waiters,
                                         conductor_host, timeout)
        self.servers = [
            conductor_bus.get_server(rpc.CONDUCTOR_TOPIC, conductor_host,
                                     [conductor_manager.ConductorManager(
                                         conductor)]),
            agent_bus.get_server(rpc.HOSTAGENT_TOPIC, self.host, [agent])]

    def __enter__(self):
        for server in self.servers:
            server.start()
        return self

    def __exit__(self, *exc):
        for server in self.servers:
            server.stop()
            server.wait()
        for bus in self.buses:
            bus.cleanup()

    def request_id(self, i):
        return 'bench/%s/%d' % (self.token, i)

    def request(self, i):
        """One round trip; its duration in seconds."""
        started = time.perf_counter()
        self.client.request(self.host, 'ensure_volume', self.request_id(i),
                            **VOLUME)
        return time.perf_counter() - started

    def cast(self, i):
        self.client.api.cast(self.host, 'ensure_volume', self.request_id(i),
                             self.client.conductor_host, **VOLUME)

    def latency(self, n):
        return [self.request(i) for i in range(self.next(n))]

    def throughput(self, n, threads):
        """(round trips/s, casts/s sent, casts/s handled by the agent)."""
        with futures.ThreadPoolExecutor(threads) as pool:
            first = self.next(n)
            started = time.perf_counter()
            list(pool.map(self.request, range(first, first + n)))
            requests = n / (time.perf_counter() - started)

            first = self.next(n)
            handled = self.handled.value + n
            started = time.perf_counter()
            list(pool.map(self.cast, range(first, first + n)))
            sent = n / (time.perf_counter() - started)
            self.handled.wait_for(handled, timeout=120)
            done = n / (time.perf_counter() - started)
        return requests, sent, done

    def next(self, n):
        """Reserve ``n`` request numbers; return the first."""
        first, self.count = self.count, self.count + n
        return first


def percentile(values, p):
    return statistics.quantiles(values, n=100, method='inclusive')[p - 1]


def bench_rpc(args, parts):
    latency, throughput = {}, {}
    for name, transport in TRANSPORTS:
        with transport() as url, ControlPlane(url, args.threads) as plane:
            plane.latency(WARM_UP)
            if 'latency' in parts:
                latency[name] = [t * 1000 for t in plane.latency(args.n)]
            if 'throughput' in parts:
                throughput[name] = plane.throughput(args.requests,
                                                    args.threads)
    if latency:
        print('\nRound trip conductor -> agent -> event, %d sequential '
              'requests (ms)' % args.n)
        print('%-10s %8s %8s %8s %8s' % ('transport', 'median', 'p95',
                                         'p99', 'max'))
        for name, values in latency.items():
            print('%-10s %8.2f %8.2f %8.2f %8.2f' % (
                name, statistics.median(values), percentile(values, 95),
                percentile(values, 99), max(values)))
    if throughput:
        print('\nThroughput, %d requests from %d threads (per second)'
              % (args.requests, args.threads))
        print('%-10s %12s %12s %14s' % ('transport', 'round trips',
                                        'casts sent', 'casts handled'))
        for name, (requests, sent, done) in throughput.items():
            print('%-10s %12.0f %12.0f %14.0f' % (name, requests, sent,
                                                  done))


# Part 3: real deploys in embedded mode.

def make_spec(cluster, count):
    return tenks_spec.validate({
        'cluster': cluster,
        'node_types': {'bench': {
            'memory_mb': 128, 'vcpus': 1,
            'volumes': [{'capacity': '1GiB'}],
            'physical_networks': ['physnet1'],
        }},
        'specs': [{'type': 'bench', 'count': count,
                   'node_name_prefix': 'bq'}],
        'physical_networks': ['physnet1'],
        'bridge_prefix': 'brbq',
        'ipmi_port_range_start': 7600,
        'ipmi_port_range_end': 7699,
    }, source='bench_rpc')


def timed(conf, operation, arg):
    """Seconds ``operation`` (deploy or teardown) takes in a conductor
    with its local hostagent, as one tenks command runs it."""
    with embedded.embedded(conf) as conductor:
        run = (conductor.deployments.deploy if operation == 'deploy'
               else conductor.teardowns.teardown)
        started = time.perf_counter()
        run(arg)
        return time.perf_counter() - started


def tear_down(conf, cluster):
    with embedded.embedded(conf) as conductor:
        if conductor.db.get_cluster(cluster) is not None:
            conductor.teardowns.teardown(cluster)


def stop_ipmi_host(state_dir):
    """Kill what a failed teardown left of our IPMI host: its process
    carries the mark of its directory in its environment."""
    marker = ipmi_store.marker(os.path.join(state_dir, 'ipmi'))
    for pid in processes.marked_pids(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def bench_deploy(args):
    token = secrets.token_hex(3)
    figures = {}
    with tempfile.TemporaryDirectory(prefix='tenks-bench-') as tmp:
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        conf.set_override('state_dir', os.path.join(tmp, 'state'))
        try:
            for size in (1, 8):
                cluster = 'bench-%s-%d' % (token, size)
                spec = make_spec(cluster, size)
                runs = []
                try:
                    for _ in range(args.runs):
                        runs.append((timed(conf, 'deploy', spec),
                                     timed(conf, 'deploy', spec),
                                     timed(conf, 'teardown', cluster)))
                finally:
                    tear_down(conf, cluster)
                figures[size] = [statistics.median(phase)
                                 for phase in zip(*runs, strict=True)]
        finally:
            stop_ipmi_host(conf.state_dir)
    print('\nReal deploy, embedded mode, in-process time (s, median of %d)'
          % args.runs)
    print('%-10s %8s %8s %9s' % ('phase', '1 node', '8 nodes', 'per node'))
    for index, phase in enumerate(('deploy', 're-run', 'teardown')):
        one, eight = figures[1][index], figures[8][index]
        print('%-10s %8.2f %8.2f %9.3f' % (phase, one, eight,
                                           (eight - one) / 7))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', type=int, default=500,
                        help='sequential requests for the latency')
    parser.add_argument('--requests', type=int, default=1000,
                        help='requests (and casts) for the throughput')
    parser.add_argument('--threads', type=int, default=32)
    parser.add_argument('--runs', type=int, default=3,
                        help='deploy, re-run and teardown runs per size')
    parser.add_argument('--parts', default=','.join(PARTS),
                        help='comma-separated: %s' % ','.join(PARTS))
    args = parser.parse_args()
    parts = set(args.parts.split(','))
    if parts - set(PARTS):
        parser.error('unknown parts: %s' % ', '.join(parts - set(PARTS)))
    if parts & {'latency', 'throughput'}:
        bench_rpc(args, parts)
    if 'deploy' in parts:
        bench_deploy(args)


if __name__ == '__main__':
    main()
