"""A simulated Tenks on this machine: RabbitMQ (a private vhost), a
tenks-conductor and any number of tenks-hostagent processes with the fake
drivers (hostagent.drivers.fake), each a distinct simulated hypervisor
(own host name, resource prefix and state directory)."""

import contextlib
import os
import secrets
import signal
import subprocess
import time

from conductor import rpcapi
from tenks import conf as tenks_conf
from tenks import rpc
from tenks import spec as tenks_spec
from tests.functional import distributed_fixtures as df


class SimulatedCluster:
    """``agents`` fake hostagents and a conductor in ``tmp`` (a
    pathlib.Path). ``conductor_options`` and ``agent_options``: lines
    added to their [conductor] and [hostagent] sections; ``fake``:
    lines of the hostagents' [fake] section. ``openstack``: the
    endpoints of the cloud the conductor uses (openstack_fixtures);
    ``agent_defaults``: lines of the hostagents' [DEFAULT] section."""

    def __init__(self, tmp, agents, broker=df.SHARED, conductor_options='',
                 agent_options='', fake='', threads=None, openstack=None,
                 agent_defaults=''):
        self.token = secrets.token_hex(3)
        self.tmp = tmp
        self.broker = broker
        self.vhost = 'tenks-sim-%s' % self.token
        self.url = broker.url(self.vhost)
        tmp.mkdir(parents=True, exist_ok=True)
        self.conductor_host = 'simcond-%s' % self.token
        self.hosts = ['sim%d-%s' % (n, self.token) for n in range(agents)]
        self.services = {}
        pool = '' if threads is None else (
            'executor_thread_pool_size = %d\n' % threads)
        if openstack:
            conductor_options += '[openstack]\n' + ''.join(
                '%s = %s\n' % (option, openstack[service])
                for service, option in (('baremetal', 'ironic_url'),
                                        ('compute', 'nova_url'),
                                        ('placement', 'placement_url')))
        self.conductor = self._service('conductor', self.conductor_host, '''
[conductor]
host = %s
agent_down_time = 60
%s''' % (self.conductor_host, conductor_options), pool)
        self.agents = [self._service('hostagent-%d' % n, host, '''
[hostagent]
host = %s
resource_prefix = s%d
heartbeat_interval = 10
virt_driver = fake
network_drivers = fake
bmc_driver = fake
redfish_driver = fake
pool_dir = %s
deployments_dir = %s
physnet_mappings = physnet1:lo
%s
[fake]
%s''' % (host, n, tmp / host / 'pools', tmp / host / 'deployments',
         agent_options, fake), pool + agent_defaults)
            for n, host in enumerate(self.hosts)]

    def _service(self, name, host, section, defaults=''):
        config = self.tmp / ('%s.conf' % host)
        config.write_text('[DEFAULT]\ntransport_url = %s\nstate_dir = %s\n%s'
                          % (self.url, self.tmp / host, defaults) + section)
        self.services[name] = df.Service(name, str(config),
                                         str(self.tmp / ('%s.log' % host)))
        return self.services[name]

    def spec(self, cluster, count, **top):
        """A spec of ``count`` small simulated nodes on physnet1 (mapped
        to lo, which nothing touches: the bridges are simulated)."""
        data = {
            'cluster': cluster,
            'node_types': {'sim': {
                'memory_mb': 64, 'vcpus': 1,
                'volumes': [{'capacity': '1MiB'}],
                'physical_networks': ['physnet1'],
            }},
            'specs': [{'type': 'sim', 'count': count,
                       'node_name_prefix': 'sim'}],
            'physical_networks': ['physnet1'],
            'allow_host_uplinks': ['lo'],
            'bridge_type': 'fake',
            'bridge_prefix': 'brsim',
            'ipmi_port_range_start': 20000,
            'ipmi_port_range_end': 20000 + count - 1,
        }
        data.update(top)
        return tenks_spec.validate(data, source='simulated')

    def __enter__(self):
        self.broker.ctl('add_vhost', self.vhost)
        self.broker.ctl('set_permissions', '-p', self.vhost, 'guest', '.*',
                        '.*', '.*')
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        self.bus = rpc.Bus(conf, url=self.url)
        self.api = rpcapi.ConductorAPI(self.bus, timeout=120)
        try:
            for service in self.services.values():
                service.start()
            self.wait_for_agents()
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_for_agents(self):
        # Many hostagents starting at once share the machine's CPUs.
        timeout = 60 + 3 * len(self.hosts)
        poll = rpcapi.ConductorAPI(self.bus, timeout=5)
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(Exception):
                up = {h['host'] for h in poll.list_hypervisors(df.ADMIN)
                      if h['state'] == 'up'}
                if set(self.hosts) <= up:
                    return
            if time.monotonic() > deadline:
                raise AssertionError('simulated hostagents never came up; '
                                     'logs in %s' % self.tmp)
            time.sleep(0.5)

    def wait(self, operation_id, timeout=600):
        poll = rpcapi.ConductorAPI(self.bus, timeout=10)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                operation = poll.get_operation(df.ADMIN, operation_id)
                if operation['state'] != 'running':
                    return operation
            time.sleep(0.5)
        raise AssertionError('operation %s did not end; logs in %s'
                             % (operation_id, self.tmp))

    def __exit__(self, *exc):
        # Stopped together: each may take its graceful shutdown time.
        running = [s for s in self.services.values()
                   if s.process and s.process.poll() is None]
        for service in running:
            service.process.send_signal(signal.SIGTERM)
        for service in running:
            service.stop()
        self.bus.cleanup()
        with contextlib.suppress(subprocess.CalledProcessError):
            self.broker.ctl('delete_vhost', self.vhost)

    def pids(self):
        """{name: pid} of the running services."""
        return {name: s.process.pid for name, s in self.services.items()
                if s.process and s.process.poll() is None}


def cpu_seconds(pid):
    """User and system CPU seconds of process ``pid`` so far."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def peak_rss_mb(pid):
    """The peak resident set (VmHWM) of process ``pid``, in MiB."""
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) / 1024
    return None
