"""A throw-away cluster for end-to-end tests, and a check for leftovers.

Each test's cluster has names of its own (cluster, node prefix, bridge
prefix), so :meth:`ClusterEnv.leftovers` can list whatever of it remains
on the machine and :meth:`ClusterEnv.force_clean` can remove it straight
through libvirt, netlink and signals when Tenks itself could not.
"""

import contextlib
import fcntl
import os
import secrets
import signal
import socket
import subprocess
import sys
import traceback

import libvirt
import pytest
from pyroute2 import IPRoute

from conductor import audit as audits
from hostagent.drivers.bmc import ipmi_store
from hostagent.drivers.bmc import processes
from tenks import conf as tenks_conf
from tenks import spec as tenks_spec
from tenks.cli import embedded

URI = 'qemu:///system'
# The console scripts installed beside this venv's python.
BIN = os.path.dirname(sys.executable)
TENKS = os.path.join(BIN, 'tenks')


def ipmitool(port, *command, password='password'):
    return subprocess.run(
        ['ipmitool', '-I', 'lanplus', '-H', '127.0.0.1', '-p', str(port),
         '-U', 'admin', '-P', password, '-R', '3', '-N', '10', *command],
        capture_output=True, text=True, timeout=30)


# The call phase's report of a test, stored by conftest's hook.
CALL_REPORT = pytest.StashKey()


def call_failed(request):
    """Whether the test of fixture ``request`` has failed."""
    report = request.node.stash.get(CALL_REPORT, None)
    return report is None or report.failed


def assert_nothing_left(request, left):
    """Fail a test that passed but left ``left`` behind. A test that
    failed has its own error: what it left (already removed) is only
    printed beside it, so the report shows the first failure."""
    if not call_failed(request):
        assert left == [], 'the test left %s behind' % left
    elif left:
        print('The failed test left %s behind (removed)' % left)


@contextlib.contextmanager
def torn_down(cluster):
    """Tear ``cluster`` down when the block ends, however it ends. When
    the block failed, its error is the one raised: a teardown that
    fails too is only printed."""
    try:
        yield cluster
    except BaseException:
        try:
            cluster.teardown()
        except Exception:
            print('Teardown after the failure failed too:\n%s'
                  % traceback.format_exc())
        raise
    cluster.teardown()


@contextlib.contextmanager
def checked(cluster):
    """Yield ``cluster``; then remove whatever of it the test left, and
    fail the test if there was anything. A block that failed (or was
    interrupted) has its own error: what it left is removed too, and
    only printed."""
    try:
        yield cluster
    except BaseException:
        left = cluster.leftovers()
        cluster.force_clean()
        if left:
            print('The failed block left %s behind (removed)' % left)
        raise
    left = cluster.leftovers()
    cluster.force_clean()
    assert left == [], 'the test left %s behind' % left


def interrupt_on_sigterm():
    """Make SIGTERM (and SIGHUP), as ``kill`` or a timeout sends it to a
    test run, interrupt it as Ctrl-C does, so that its with blocks,
    finally clauses and fixtures tear down what it made; once: a
    second signal does not interrupt that teardown."""
    def interrupt(signum, frame):
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt('signal %d' % signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def free_tcp_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def ipmi_host_pids(state_dir):
    """Live processes of the IPMI host of ``state_dir`` (by their mark,
    pid file or not)."""
    return processes.marked_pids(
        ipmi_store.marker(os.path.join(state_dir, 'ipmi')))


def ipmi_host_pid(state_dir):
    """The pid of the IPMI host of ``state_dir``, or None."""
    return min(ipmi_host_pids(state_dir), default=None)


@contextlib.contextmanager
def bmc_changes_held(state_dir):
    """Hold the lock of the IPMI BMCs of ``state_dir`` (made, as its
    hostagent makes it, if none has been yet): a request that changes a
    BMC waits until the block ends; reads do not."""
    directory = os.path.join(state_dir, 'ipmi')
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(directory, 'lock'), os.O_RDWR | os.O_CREAT,
                 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class ClusterEnv:

    def __init__(self, tmp_path, port_base, state_dirs=()):
        token = secrets.token_hex(2)
        self.cluster = 'ft-%s' % token
        self.node_prefix = 'f%s' % token
        self.bridge_prefix = 'fb%s' % token
        self.port_base = port_base
        self.state_dir = str(tmp_path / 'state')
        # Where the IPMI hosts of this cluster's hypervisors keep their
        # state.
        self.state_dirs = [self.state_dir, *state_dirs]
        self.conf = tenks_conf.new_conf()
        self.conf([], default_config_files=[])
        self.conf.set_override('state_dir', self.state_dir)
        # libvirt daemons this cluster's hypervisors use.
        self.uris = [URI]

    def spec(self, count=2, **top):
        data = {
            'cluster': self.cluster,
            'node_types': {'small': {
                'memory_mb': 128, 'vcpus': 1,
                'volumes': [{'capacity': '64MiB'}, {'capacity': '32MiB'}],
                'physical_networks': ['physnet1'],
            }},
            'specs': [{'type': 'small', 'count': count,
                       'node_name_prefix': self.node_prefix}],
            'physical_networks': ['physnet1'],
            'bridge_prefix': self.bridge_prefix,
            'ipmi_port_range_start': self.port_base,
            'ipmi_port_range_end': self.port_base + 9,
        }
        data.update(top)
        return tenks_spec.validate(data, source='test')

    def node_name(self, index):
        return '%s%d' % (self.node_prefix, index)

    def deploy(self, spec):
        with embedded.embedded(self.conf) as conductor:
            return conductor.deployments.deploy(spec)

    def plan(self, spec):
        with embedded.embedded(self.conf) as conductor:
            return conductor.deployments.plan(spec)

    def teardown(self):
        with embedded.embedded(self.conf) as conductor:
            return conductor.teardowns.teardown(self.cluster)

    def audit(self, cluster=None, clean=False):
        """The audit (see conductor.audit) by this cluster's conductor."""
        with embedded.embedded(self.conf) as conductor:
            return audits.audit(conductor, cluster, clean)

    def nodes(self):
        with embedded.embedded(self.conf) as conductor:
            return [n.as_dict() for n in
                    conductor.db.list_nodes(cluster=self.cluster)]

    def ours(self, name):
        # Pools carry a host prefix ('tenks-a<cluster>'); clusters named
        # after this one (cluster-a, ...) count too.
        return name.startswith(self.node_prefix) or (
            name.startswith('tenks-') and self.cluster in name)

    def _links(self, ipr):
        owner = 'tenks:%s' % self.cluster
        return [link for link in ipr.get_links()
                if (link.get('ifalias') or '').startswith(owner)
                or link.get('ifname').startswith(self.bridge_prefix)
                or link.get('ifname').startswith('p-' + self.node_prefix)]

    def leftovers(self):
        """Everything of this cluster still on the machine."""
        found = []
        for uri in self.uris:
            conn = libvirt.open(uri)
            try:
                found += ['domain %s' % d.name()
                          for d in conn.listAllDomains()
                          if self.ours(d.name())]
                found += ['pool %s' % p.name()
                          for p in conn.listAllStoragePools()
                          if self.ours(p.name())]
            finally:
                conn.close()
        with IPRoute() as ipr:
            found += ['link %s' % link.get('ifname')
                      for link in self._links(ipr)]
        pool_root = self.conf.hostagent.pool_dir
        found += ['directory %s' % d for d in sorted(os.listdir(pool_root))
                  if self.cluster in d]
        found += ['IPMI host %d' % pid for d in self.state_dirs
                  for pid in sorted(ipmi_host_pids(d))]
        found += ['NVRAM file %s' % path for path in self._nvram_files()]
        return found

    def _nvram_files(self):
        nvram_dir = self.conf.hostagent.nvram_dir
        if not os.path.isdir(nvram_dir):
            return []
        return [os.path.join(nvram_dir, name)
                for name in sorted(os.listdir(nvram_dir))
                if name.startswith(self.node_prefix)]

    def force_clean(self):
        for state_dir in self.state_dirs:
            for pid in ipmi_host_pids(state_dir):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        for uri in self.uris:
            # One libvirtd down (a test stopped it) keeps the rest.
            with contextlib.suppress(libvirt.libvirtError):
                remove_libvirt_things(uri, self.ours)
        with IPRoute() as ipr:
            for link in self._links(ipr):
                with contextlib.suppress(Exception):
                    ipr.link('del', index=link['index'])
        for path in self._nvram_files():
            with contextlib.suppress(OSError):
                os.remove(path)
        pool_root = self.conf.hostagent.pool_dir
        for name in os.listdir(pool_root):
            if self.cluster in name:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(pool_root, name))


def remove_libvirt_things(uri, ours):
    """Destroy and undefine the domains, and delete the pools with their
    volumes, whose names ``ours(name)`` accepts, on libvirt ``uri``."""
    conn = libvirt.open(uri)
    try:
        for dom in conn.listAllDomains():
            if ours(dom.name()):
                with contextlib.suppress(libvirt.libvirtError):
                    dom.destroy()
                with contextlib.suppress(libvirt.libvirtError):
                    dom.undefineFlags(
                        libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
        for pool in conn.listAllStoragePools():
            if ours(pool.name()):
                for vol in pool.listAllVolumes():
                    with contextlib.suppress(libvirt.libvirtError):
                        vol.delete()
                with contextlib.suppress(libvirt.libvirtError):
                    pool.destroy()
                with contextlib.suppress(libvirt.libvirtError):
                    pool.undefine()
    finally:
        conn.close()
