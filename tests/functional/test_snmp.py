"""SNMP nodes: a real VirtualPDU (in its own venv) in front of real
libvirt domains, driven with net-snmp's snmpset and snmpget as a PDU
client (Ironic's snmp driver) would.

IPMI ports 9880-9889 and the VirtualPDU's UDP port 9890 only (the fault
test: 9950-9959 and UDP 1171). The tests check that teardown leaves no
VirtualPDU process and no file of it.
"""

import contextlib
import os
import signal
import subprocess
import time

import libvirt
import pytest

from hostagent.drivers.bmc import processes
from hostagent.drivers.bmc import virtualpdu
from tenks import exceptions
from tenks.cli import embedded
from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

PORT = 9890
# The APC Rack PDU's outlet control (rPDUOutletControlOutletCommand):
# 1 on, 2 off.
OUTLET_CONTROL = '1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.%d'


def snmp_command(command, community, outlet, *value, port=PORT, wait=2,
                 retries=1):
    return [command, '-v2c', '-c', community, '-t', str(wait), '-r',
            str(retries), '-Oqv', '127.0.0.1:%d' % port,
            OUTLET_CONTROL % outlet, *value]


def snmp(command, community, outlet, *value, **kwargs):
    return subprocess.run(
        snmp_command(command, community, outlet, *value, **kwargs),
        capture_output=True, text=True, timeout=30)


def domain_state(name):
    conn = libvirt.open(cf.URI)
    try:
        return conn.lookupByName(name).state()[0]
    finally:
        conn.close()


def wait_state(name, state, timeout=20):
    deadline = time.monotonic() + timeout
    while domain_state(name) != state:
        assert time.monotonic() < deadline, 'domain %s not in state %d' % (
            name, state)
        time.sleep(0.1)


class SnmpEnv(cf.ClusterEnv):
    """A test cluster whose leftovers include its VirtualPDU."""

    def pdu_dirs(self):
        root = os.path.join(self.state_dir, 'virtualpdu')
        if not os.path.isdir(root):
            return []
        return sorted(os.path.join(root, name) for name in os.listdir(root)
                      if name.startswith(self.cluster + '-'))

    def pdu_pids(self):
        return sorted(pid for path in self.pdu_dirs()
                      for pid in processes.marked_pids(
                          virtualpdu.VirtualPduDriver._marker(path)))

    def leftovers(self):
        return super().leftovers() + [
            'VirtualPDU %s' % path for path in self.pdu_dirs()]

    def force_clean(self):
        for path in self.pdu_dirs():
            processes.kill(processes.marked_pids(
                virtualpdu.VirtualPduDriver._marker(path)), 3)
        super().force_clean()


@pytest.fixture
def env(tmp_path):
    with cf.checked(SnmpEnv(tmp_path, port_base=9880)) as cluster:
        yield cluster


def test_outlets_power_the_domains_and_teardown_leaves_nothing(env):
    spec = env.spec(count=2, snmp_port=PORT, snmp_community='c0mmunity',
                    default_ironic_driver='snmp')
    env.deploy(spec)
    nodes = {n['name']: n for n in env.nodes()}
    assert {name: (n['bmc_type'], n['bmc_port'], n['bmc_system_id'])
            for name, n in nodes.items()} == {
        env.node_name(0): ('snmp', PORT, '1'),
        env.node_name(1): ('snmp', PORT, '2')}
    [path] = env.pdu_dirs()
    [pid] = env.pdu_pids()
    first, second = env.node_name(0), env.node_name(1)

    # Outlet 2 on: its domain starts, the other stays off; a read says
    # what libvirt says.
    assert snmp('snmpget', 'c0mmunity', 2).stdout.strip() == '2'
    on = snmp('snmpset', 'c0mmunity', 2, 'i', '1')
    assert on.returncode == 0, on.stderr
    wait_state(second, libvirt.VIR_DOMAIN_RUNNING)
    assert domain_state(first) == libvirt.VIR_DOMAIN_SHUTOFF
    assert snmp('snmpget', 'c0mmunity', 2).stdout.strip() == '1'
    # A wrong community gets no answer, and changes nothing.
    wrong = snmp('snmpset', 'public', 2, 'i', '2')
    assert wrong.returncode != 0 and 'Timeout' in wrong.stderr
    assert domain_state(second) == libvirt.VIR_DOMAIN_RUNNING
    assert snmp('snmpset', 'c0mmunity', 2, 'i', '2').returncode == 0
    wait_state(second, libvirt.VIR_DOMAIN_SHUTOFF)
    # Started elsewhere (not through the PDU): the outlet reads on.
    conn = libvirt.open(cf.URI)
    try:
        conn.lookupByName(first).create()
    finally:
        conn.close()
    assert snmp('snmpget', 'c0mmunity', 1).stdout.strip() == '1'

    # Root's files only; the community in the PDU's configuration alone.
    for root, _, files in os.walk(path):
        assert os.stat(root).st_mode & 0o777 == 0o700, root
        for name in files:
            file = os.path.join(root, name)
            assert os.stat(file).st_mode & 0o777 == 0o600, file
            with open(file, 'rb') as f:
                assert (b'c0mmunity' in f.read()) == (
                    name == virtualpdu.CONFIG), file

    # One node fewer: its outlet goes, the PDU keeps running.
    env.deploy(dict(spec, specs=[dict(spec['specs'][0], count=1)]))
    assert env.pdu_pids() == [pid]
    assert os.listdir(os.path.join(path, 'outlets')) == ['1']

    env.teardown()
    assert env.pdu_dirs() == []
    assert not processes.alive(pid)
    assert snmp('snmpget', 'c0mmunity', 1).returncode != 0


FAULT_PORT = 1171


@pytest.fixture
def fault_env(tmp_path):
    with cf.checked(SnmpEnv(tmp_path, port_base=9950)) as cluster:
        yield cluster


def stays(name, state, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert domain_state(name) == state
        time.sleep(0.2)


def test_each_fault_kind_on_an_outlet_of_a_real_virtualpdu(fault_env):
    env = fault_env
    spec = env.spec(count=2, snmp_port=FAULT_PORT, snmp_community='c0mm',
                    default_ironic_driver='snmp')
    env.deploy(spec)
    first, second = env.node_name(0), env.node_name(1)

    def ask(command, outlet, *value, **kwargs):
        return snmp(command, 'c0mm', outlet, *value, port=FAULT_PORT,
                    **kwargs)

    def timed_get(outlet, **kwargs):
        started = time.monotonic()
        found = ask('snmpget', outlet, **kwargs)
        return found, time.monotonic() - started

    with embedded.embedded(env.conf) as conductor:
        faults = conductor.bmc_faults

        def fault(kind, duration=None, probability=None):
            shown = faults.set(first, kind, duration, probability)
            assert shown['bmc_fault']['kind'] == kind

        assert ask('snmpget', 1).stdout.strip() == '2'

        # unreachable: outlet 1 answers nothing, outlet 2 at once.
        fault('unreachable')
        gone, took = timed_get(1, wait=1, retries=0)
        assert gone.returncode != 0 and 'Timeout' in gone.stderr
        assert ask('snmpget', 2, wait=1, retries=0).stdout.strip() == '2'

        # slow: outlet 1 answers 2 s late; meanwhile outlet 2 at once.
        fault('slow', 2)
        started = time.monotonic()
        late = subprocess.Popen(
            snmp_command('snmpget', 'c0mm', 1, port=FAULT_PORT, wait=5,
                         retries=0),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)
        other, took = timed_get(2, wait=1, retries=0)
        assert other.stdout.strip() == '2' and took < 0.5, took
        out, err = late.communicate(timeout=10)
        assert (late.returncode, out.strip()) == (0, '2'), err
        assert 2 <= time.monotonic() - started < 3.5

        # error: genErr to a read and to a power change, not made.
        fault('error')
        failed = ask('snmpget', 1)
        assert failed.returncode != 0 and 'genError' in failed.stderr, (
            failed.stderr)
        failed = ask('snmpset', 1, 'i', '1')
        assert failed.returncode != 0 and 'genError' in failed.stderr
        assert ask('snmpget', 2).returncode == 0

        # flaky: some of the requests fail so.
        fault('flaky', probability=0.5)
        results = [ask('snmpget', 1, retries=0) for _ in range(20)]
        assert {r.returncode == 0 for r in results} == {True, False}
        assert all('genError' in r.stderr for r in results if r.returncode)

        # power-stuck: acknowledged, never made; the outlet reads off.
        fault('power-stuck')
        done = ask('snmpset', 1, 'i', '1')
        assert (done.returncode, done.stdout.strip()) == (0, '1')
        stays(first, libvirt.VIR_DOMAIN_SHUTOFF, 1.5)
        assert ask('snmpget', 1).stdout.strip() == '2'
        # Another outlet of the PDU switches.
        assert ask('snmpset', 2, 'i', '1').returncode == 0
        wait_state(second, libvirt.VIR_DOMAIN_RUNNING)

        # A PDU outlet has no boot device.
        with pytest.raises(exceptions.BmcFaultInvalid) as refused:
            faults.set(first, 'boot-device-ignored')
        assert 'a PDU outlet has no boot device' in str(refused.value)
        fault('error')

    # The PDU started again (its process killed, a deploy repairs it)
    # still shows the fault.
    for pid in env.pdu_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    env.deploy(spec)
    assert 'genError' in ask('snmpget', 1).stderr
    assert {n['name']: n['bmc_fault'] for n in env.nodes()} == {
        first: {'kind': 'error'}, second: None}

    # Cleared: the outlet answers and switches again.
    with embedded.embedded(env.conf) as conductor:
        assert conductor.bmc_faults.clear(all_nodes=True) == {
            'cleared': [first], 'failed': {}}
    assert ask('snmpset', 1, 'i', '1').returncode == 0
    wait_state(first, libvirt.VIR_DOMAIN_RUNNING)
    assert ask('snmpget', 1).stdout.strip() == '1'
    assert ask('snmpset', 1, 'i', '2').returncode == 0
    wait_state(first, libvirt.VIR_DOMAIN_SHUTOFF)

    env.teardown()
    assert env.pdu_dirs() == []
