"""A distributed Tenks on this machine: RabbitMQ (a private vhost), a
tenks-conductor and two tenks-hostagent processes that act as distinct
hypervisors (own host names, name prefixes, state and IPMI host)."""

import contextlib
import datetime
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

import oslo_messaging as messaging

from conductor import rpcapi
from tenks import conf as tenks_conf
from tenks import policy
from tenks import rpc
from tests.functional import cluster_fixtures as cf
from tests.functional import memory_probe

BIN = cf.BIN

ADMIN = policy.admin_context()


class Broker:
    """A RabbitMQ node of this machine: its node name and AMQP port."""

    def __init__(self, node, port):
        self.node = node
        self.port = port

    def ctl(self, *args):
        """Run ``rabbitmqctl ARGS`` on this node."""
        return subprocess.run(
            ['rabbitmqctl', '-n', self.node, '-q', *args], check=True,
            capture_output=True, text=True, timeout=60,
            env=dict(os.environ, ERL_EPMD_ADDRESS='127.0.0.1'))

    def url(self, vhost):
        return 'rabbit://guest:guest@127.0.0.1:%d/%s' % (self.port, vhost)


# The machine's RabbitMQ, which every test shares (tools/setup.sh).
SHARED = Broker('rabbit@localhost', 5672)


def rabbitmqctl(*args):
    SHARED.ctl(*args)


def wait_for_text(path, text, timeout=60):
    """Until the file ``path`` (a pathlib.Path) holds ``text``."""
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert time.monotonic() < deadline, path.read_text()
        time.sleep(0.1)


class Service:
    """One tenks-conductor or tenks-hostagent process; ``memory``: the
    report file of a memory_probe to run it in (None: none)."""

    def __init__(self, name, config, log, memory=None):
        self.name = name
        self.config = config
        self.log = log
        self.memory = memory
        self.process = None

    def start(self, **environ):
        """``environ``: variables to add to its environment."""
        kind = self.name.split('-')[0]
        if self.memory is None:
            command = [os.path.join(BIN, 'tenks-' + kind)]
        else:
            command = [sys.executable, memory_probe.__file__, self.memory,
                       kind]
        with open(self.log, 'ab') as log:
            self.process = subprocess.Popen(
                [*command, '--config-file', self.config],
                stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=dict(os.environ, **environ))

    def stop(self, sig=signal.SIGTERM, timeout=90):
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Deployment:

    def __init__(self, tmp_path, agent_timeout=20, grace=5, agent_retries=0,
                 probe=False, threads=None, agents=2, database=None,
                 conductors=1, jobboard=None, claim_expiry=4,
                 openstack=None, broker=SHARED):
        """``probe``: run each service in a memory_probe. ``threads``:
        the most threads each service's RPC server runs requests in
        ([DEFAULT] executor_thread_pool_size; None: oslo.messaging's
        default). ``agents``: how many hostagents (1 or 2).
        ``database``: the conductors' [database] connection (None: the
        SQLite file of its state directory). ``conductors``: how many,
        sharing ``jobboard`` ([conductor] jobboard_url) with claims that
        expire after ``claim_expiry`` s. ``openstack``: the endpoints of
        the cloud the conductors use (openstack_fixtures). ``broker``:
        the RabbitMQ node (a Broker) their bus is on."""
        self.token = secrets.token_hex(3)
        self.broker = broker
        self.vhost = 'tenks-test-%s' % self.token
        self.url = broker.url(self.vhost)
        self.tmp = tmp_path
        self.probe = probe
        self.threads = threads
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.conductor_hosts = ['cond-%s' % self.token] + [
            'cond%d-%s' % (n, self.token) for n in range(2, conductors + 1)]
        self.conductor_host = self.conductor_hosts[0]
        self.hosts = ['hva-%s' % self.token, 'hvb-%s' % self.token][:agents]
        self.state_dirs = {h: str(tmp_path / h) for h in self.hosts}
        self.services = {}
        # What the hypervisors' state is once they registered (a host
        # with enable_on_register = false is 'disabled').
        self.ready_states = {'up'}
        extra = ''
        if jobboard:
            extra += 'jobboard_url = %s\njobboard_claim_expiry = %d\n' % (
                jobboard, claim_expiry)
        if database:
            extra += '[database]\nconnection = %s\n' % database
        if openstack:
            extra += '[openstack]\n' + ''.join(
                '%s = %s\n' % (option, openstack[service])
                for service, option in (('baremetal', 'ironic_url'),
                                        ('compute', 'nova_url'),
                                        ('placement', 'placement_url')))
        self.conductors = [self._service(
            'conductor' if host == self.conductor_host else
            'conductor-%s' % host, host, '''
[conductor]
host = %s
agent_timeout = %d
agent_down_time = 5
agent_retries = %d
graceful_shutdown_timeout = %d
''' % (host, agent_timeout, agent_retries, grace) + extra)
            for host in self.conductor_hosts]
        self.conductor = self.conductors[0]
        # What the conductors' environment adds (TENKS_FAULT, say).
        self.conductor_environ = {}
        for host, prefix in zip(self.hosts, 'ab'[:agents], strict=True):
            self._service('hostagent-' + prefix, host, '''
[hostagent]
host = %s
resource_prefix = %s
heartbeat_interval = 1
''' % (host, prefix))

    def _service(self, name, host, section):
        state = str(self.tmp / host)
        config = self.tmp / ('%s.conf' % host)
        defaults = '[DEFAULT]\ntransport_url = %s\nstate_dir = %s\n' % (
            self.service_url(host), state)
        if self.threads is not None:
            defaults += 'executor_thread_pool_size = %d\n' % self.threads
        config.write_text(defaults + section)
        self.services[name] = Service(
            name, str(config), str(self.tmp / ('%s.log' % host)),
            str(self.tmp / ('%s.memory' % host)) if self.probe else None)
        return self.services[name]

    def service_url(self, host):
        """The transport URL of the service named ``host``."""
        return self.url

    def grant(self):
        """Let the services and the test use the vhost: as guest."""
        self.broker.ctl('set_permissions', '-p', self.vhost, 'guest', '.*',
                        '.*', '.*')

    def agent(self, host):
        return self.services['hostagent-' + 'ab'[self.hosts.index(host)]]

    def __enter__(self):
        self.broker.ctl('add_vhost', self.vhost)
        self.grant()
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        self.bus = rpc.Bus(conf, url=self.url)
        self.api = rpcapi.ConductorAPI(self.bus, timeout=60)
        try:
            for service in self.services.values():
                service.start(**(self.conductor_environ
                                 if service in self.conductors else {}))
            self.wait_for_agents(self.hosts)
        except BaseException:
            # No with-block will stop what started.
            self.__exit__()
            raise
        return self

    def python_heaps(self):
        """{host: bytes the Python heap of its service holds} (see
        memory_probe), of the conductor and each hostagent."""
        services = {self.conductor_host: self.conductor,
                    **{host: self.agent(host) for host in self.hosts}}
        heaps = memory_probe.read([s.memory for s in services.values()])
        return {host: heaps[service.memory]
                for host, service in services.items()}

    def wait_for_agents(self, hosts, timeout=60, since=None, states=None):
        """Wait until the hostagents of ``hosts`` are up (in one of
        ``states``, default ready_states). ``since``: a time (UTC) they
        must have been heard of after, so that an agent started again
        counts once it has registered, not while its killed
        predecessor's last heartbeat is still recent."""
        states = states or self.ready_states
        # A call sent before the conductor's queue exists is lost: poll
        # with a short timeout.
        poll = rpcapi.ConductorAPI(self.bus, timeout=2)
        deadline = time.monotonic() + timeout
        while True:
            try:
                up = {h['host'] for h in poll.list_hypervisors(ADMIN)
                      if h['state'] in states
                      and (since is None or heard_after(h, since))}
            except Exception:
                up = set()
            if set(hosts) <= up:
                return
            if time.monotonic() > deadline:
                raise AssertionError('hostagents %s never came up; logs in '
                                     '%s' % (hosts, self.tmp))
            time.sleep(0.2)

    def __exit__(self, *exc):
        for service in self.services.values():
            service.stop()
        self.bus.cleanup()
        with contextlib.suppress(subprocess.CalledProcessError):
            self.broker.ctl('delete_vhost', self.vhost)

    def wait(self, operation_id, timeout=180):
        """The operation once it has ended, asked with a short timeout:
        a question or its answer lost (the broker restarted, and the
        conductor or this client have not declared their queues again)
        is asked again."""
        poll = rpcapi.ConductorAPI(self.bus, timeout=2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                operation = poll.get_operation(ADMIN, operation_id)
            except messaging.MessagingTimeout:
                continue
            if operation['state'] != 'running':
                return operation
            time.sleep(0.2)
        raise AssertionError('operation %s did not end' % operation_id)

    def cli(self, *args):
        return subprocess.run(
            [os.path.join(BIN, 'tenks'), *args], capture_output=True,
            text=True, timeout=300,
            env=dict(os.environ, TENKS_TRANSPORT_URL=self.url))

    def cli_process(self, *args, stderr, url=None):
        """``tenks ARGS`` started over ``url`` (default: this vhost's),
        its calls timing out after 3 s (the conductor answers at once);
        its stdout a pipe, its stderr ``stderr``."""
        config = self.tmp / 'cli.conf'
        config.write_text('[DEFAULT]\nrpc_response_timeout = 3\n')
        return subprocess.Popen(
            [os.path.join(BIN, 'tenks'), '--config-file', str(config),
             *args], stdout=subprocess.PIPE, stderr=stderr, text=True,
            env=dict(os.environ, TENKS_TRANSPORT_URL=url or self.url))


def heard_after(hypervisor, when):
    """Whether ``hypervisor`` (as listed) was last heard of after
    ``when`` (an aware UTC time)."""
    seen = datetime.datetime.fromisoformat(hypervisor['last_seen'])
    return seen.replace(tzinfo=datetime.timezone.utc) > when


class BrokerProxy:
    """A TCP proxy on loopback to RabbitMQ: a client that reaches the
    broker through it loses its connections when the proxy stops, and
    can connect again once it starts again (on the same port)."""

    def __init__(self, target=('127.0.0.1', 5672)):
        self.target = target
        self.port = cf.free_tcp_port()
        self._listener = None
        self._sockets = []
        self._lock = threading.Lock()

    def url(self, url):
        """``url`` (rabbit://user:password@127.0.0.1:5672/vhost) through
        this proxy."""
        return url.replace(':%d/' % self.target[1], ':%d/' % self.port)

    def start(self):
        self._listener = socket.create_server(('127.0.0.1', self.port))
        threading.Thread(target=self._accept, args=(self._listener,),
                         daemon=True).start()

    def stop(self):
        """Close the listening socket and every connection through it."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
            if self._listener is not None:
                sockets.append(self._listener)
                self._listener = None
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                broker = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, broker]
            for source, sink in ((client, broker), (broker, client)):
                threading.Thread(target=self._pump, args=(source, sink),
                                 daemon=True).start()

    @staticmethod
    def _pump(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
