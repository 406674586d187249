"""The virtualbmc BMC driver against real libvirt, vbmcd and ipmitool.

Domains are diskless 128 MiB TCG guests named ``hv-vbmc-*``; BMCs use
UDP ports 6900-6949 (7800-7802 for the tests of issue 7, 7820-7829 for
those of the BMC clean-up fixes), and each test's
vbmcd a free control port. Fixtures undefine
the domains and kill every vbmcd process of the test even when the test
fails, without relying on the driver.
"""

import concurrent.futures
import contextlib
import glob
import itertools
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time

import libvirt
import pytest

from hostagent.drivers.bmc import virtualbmc
from tenks import conf as tenks_conf
from tenks import exceptions
from tests.functional import drivers_fixtures as fx
from tests.functional.cluster_fixtures import free_tcp_port

pytestmark = pytest.mark.functional

URI = 'qemu:///system'
PORTS = itertools.cycle(range(6900, 6950))
NAMES = itertools.count()
ADDRESS = '127.0.0.1'
USER = 'admin'
PASSWORD = 'secret'
DOMAIN_XML = """<domain type='qemu'><name>%s</name>
<memory unit='MiB'>128</memory><vcpu>1</vcpu>
<os><type arch='x86_64'>hvm</type></os></domain>"""


def make_conf(state_dir, control_port):
    conf = tenks_conf.new_conf()
    conf([])
    conf.set_override('state_dir', str(state_dir))
    conf.set_override('libvirt_uri', URI, group='hostagent')
    conf.set_override('vbmcd_control_port', control_port, group='hostagent')
    return conf


def control_port(driver):
    return driver.conf.hostagent.vbmcd_control_port


def alive(pid):
    """Whether the process has a thread that is not a zombie."""
    states = ''
    for path in glob.glob('/proc/%d/task/*/stat' % pid):
        with contextlib.suppress(OSError), open(path) as f:
            states += f.read().rpartition(')')[2].split()[0]
    return bool(set(states) - set('ZX'))


def vbmcd_pids(state_dir):
    """Live processes of the vbmcd run for state_dir, BMC children too."""
    marker = ('VIRTUALBMC_CONFIG=%s/vbmc/virtualbmc.conf'
              % state_dir).encode()
    pids = set()
    for pid in filter(str.isdigit, os.listdir('/proc')):
        with contextlib.suppress(OSError):
            with open('/proc/%s/environ' % pid, 'rb') as f:
                if marker in f.read().split(b'\0') and alive(int(pid)):
                    pids.add(int(pid))
    return pids


def daemon_pid(state_dir):
    with open(os.path.join(state_dir, 'vbmc', 'vbmcd.pid')) as f:
        return int(f.read())


def wait_for(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.02)


def kill_vbmcd(state_dir):
    pids = vbmcd_pids(state_dir)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(map(alive, pids)))


def udp_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind((ADDRESS, port))
        except OSError:
            return False
        return True


def tcp_open(port):
    with socket.socket() as sock:
        return sock.connect_ex((ADDRESS, port)) == 0


def ipmi(port, *command, password=PASSWORD):
    return subprocess.run(
        ['ipmitool', '-I', 'lanplus', '-H', ADDRESS, '-p', str(port),
         '-U', USER, '-P', password, *command],
        capture_output=True, text=True, timeout=60)


@pytest.fixture(scope='module')
def conn():
    conn = libvirt.open(URI)
    yield conn
    conn.close()


@pytest.fixture
def domains(conn):
    """make(n) defines n domains; all are destroyed and undefined after."""
    made = []

    def make(count=1):
        names = ['hv-vbmc-%d-%d' % (os.getpid(), next(NAMES))
                 for _ in range(count)]
        for name in names:
            conn.defineXML(DOMAIN_XML % name)
            made.append(name)
        return names

    yield make
    for name in made:
        with contextlib.suppress(libvirt.libvirtError):
            domain = conn.lookupByName(name)
            if domain.isActive():
                domain.destroy()
            domain.undefine()


@pytest.fixture
def make_driver(tmp_path):
    """make(name) returns a driver with state_dir tmp_path/name.

    The drivers of one test share a control port of their own, so what
    one test leaves cannot hold another's.
    """
    drivers = []
    port = free_tcp_port()

    def make(name='state'):
        drivers.append(virtualbmc.VirtualBmcDriver(
            make_conf(tmp_path / name, port)))
        return drivers[-1]

    yield make
    for driver in drivers:
        kill_vbmcd(driver.conf.state_dir)
        if driver._proc is not None:
            driver._proc.wait()  # reap the vbmcd this test process ran


@pytest.fixture
def driver(make_driver):
    return make_driver()


def test_ipmi_power_controls_domain(driver, domains, conn):
    name, = domains()
    port = next(PORTS)
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD) == fx.CREATED

    status = ipmi(port, 'power', 'status')
    assert status.returncode == 0, status.stderr
    assert 'off' in status.stdout
    assert ipmi(port, 'power', 'on').returncode == 0
    assert conn.lookupByName(name).isActive()
    assert 'on' in ipmi(port, 'power', 'status').stdout
    assert ipmi(port, 'power', 'off').returncode == 0
    assert not conn.lookupByName(name).isActive()
    assert 'off' in ipmi(port, 'power', 'status').stdout


def test_ensure_is_idempotent_and_applies_changes(make_driver, domains):
    driver = make_driver()
    name, = domains()
    port = next(PORTS)
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD) == fx.CREATED
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD) == fx.UNCHANGED
    # A new hostagent process uses the vbmcd the last one started.
    assert make_driver().ensure_bmc(name, ADDRESS, port, USER,
                                    PASSWORD) == fx.UNCHANGED
    assert driver.list_bmcs() == [{'domain': name, 'address': ADDRESS,
                                   'port': port, 'status': 'running'}]

    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             'other') == fx.FIXED
    assert ipmi(port, 'power', 'status', password='other').returncode == 0
    assert ipmi(port, 'power', 'status').returncode != 0

    new_port = next(PORTS)
    assert driver.ensure_bmc(name, ADDRESS, new_port, USER,
                             PASSWORD) == fx.FIXED
    assert udp_free(port)
    assert ipmi(new_port, 'power', 'status').returncode == 0


def test_vbmcd_outlives_the_hostagent_process(driver, domains):
    """In embedded mode a hostagent lives only as long as one command."""
    name, = domains()
    port = next(PORTS)
    script = ('import sys; from tests.functional import '
              'test_virtualbmc_driver as t; '
              'd = t.virtualbmc.VirtualBmcDriver(t.make_conf(sys.argv[1], '
              'int(sys.argv[4]))); '
              'assert d.ensure_bmc(sys.argv[2], t.ADDRESS, int(sys.argv[3]), '
              't.USER, t.PASSWORD)["created"]')
    subprocess.run([sys.executable, '-c', script, driver.conf.state_dir,
                    name, str(port), str(control_port(driver))],
                   check=True, timeout=60,
                   cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                       os.path.abspath(__file__)))))
    assert ipmi(port, 'power', 'status').returncode == 0
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD) == fx.UNCHANGED
    assert driver.remove_bmc(name)
    assert vbmcd_pids(driver.conf.state_dir) == set()


def test_wrong_password_is_refused(driver, domains):
    name, = domains()
    port = next(PORTS)
    driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD)
    assert ipmi(port, 'power', 'status', password='wrong').returncode != 0


def test_port_in_use(driver, domains):
    name, = domains()
    port = next(PORTS)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind((ADDRESS, port))
        with pytest.raises(exceptions.PortInUse) as error:
            driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD)
    assert error.value.kwargs == {'port': port, 'address': ADDRESS}
    assert driver.list_bmcs() == []


def test_vbmcd_error_is_driver_error(driver):
    password = 'pw-' + secrets.token_hex(6)
    with pytest.raises(exceptions.DriverError, match='hv-vbmc-undefined'):
        driver.ensure_bmc('hv-vbmc-undefined', ADDRESS, next(PORTS), USER,
                          password)
    assert driver.list_bmcs() == []
    with open(os.path.join(driver.conf.state_dir, 'vbmc', 'vbmcd.log')) as f:
        assert password not in f.read()


def test_remove_frees_port_and_last_stops_vbmcd(driver, domains):
    state_dir = driver.conf.state_dir
    names = domains(2)
    ports = [next(PORTS) for _ in names]
    for name, port in zip(names, ports, strict=True):
        driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD)
    pid = daemon_pid(state_dir)
    assert len(vbmcd_pids(state_dir)) == 3  # vbmcd and one child per BMC

    assert driver.remove_bmc(names[0])
    assert udp_free(ports[0])
    assert [b['domain'] for b in driver.list_bmcs()] == names[1:]
    assert alive(pid)
    assert len(vbmcd_pids(state_dir)) == 2

    assert driver.remove_bmc(names[1])
    assert udp_free(ports[1])
    assert not alive(pid)
    assert not os.path.exists(os.path.join(state_dir, 'vbmc', 'vbmcd.pid'))
    assert not tcp_open(control_port(driver))
    assert vbmcd_pids(state_dir) == set()
    assert driver.list_bmcs() == []

    # Nothing to remove: vbmcd is not started to find that out.
    assert not driver.remove_bmc(names[1])
    assert vbmcd_pids(state_dir) == set()


def test_remove_while_vbmcd_is_down(driver, domains):
    name, = domains()
    assert not driver.remove_bmc(name)
    assert driver.list_bmcs() == []
    assert vbmcd_pids(driver.conf.state_dir) == set()


def test_recovers_from_killed_vbmcd(driver, domains):
    """Children of a SIGKILLed vbmcd keep their ports until killed."""
    state_dir = driver.conf.state_dir
    name, = domains()
    port = next(PORTS)
    driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD)
    os.kill(daemon_pid(state_dir), signal.SIGKILL)
    driver._proc.wait()
    assert not udp_free(port)  # the orphaned BMC child still holds it
    assert driver.list_bmcs()[0]['status'] == 'down'

    # The restarted vbmcd serves the stored BMC once more: a repair.
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD) == fx.FIXED
    assert ipmi(port, 'power', 'status').returncode == 0
    assert driver.remove_bmc(name)
    assert vbmcd_pids(state_dir) == set()
    assert udp_free(port)


def test_foreign_vbmcd_on_control_port(make_driver, domains):
    ours, theirs = domains(2)
    make_driver('theirs').ensure_bmc(theirs, ADDRESS, next(PORTS), USER,
                                     PASSWORD)
    driver = make_driver('ours')
    with pytest.raises(exceptions.ResourceConflict,
                       match='127.0.0.1:%d' % control_port(driver)):
        driver.ensure_bmc(ours, ADDRESS, next(PORTS), USER, PASSWORD)
    with pytest.raises(exceptions.ResourceConflict):
        driver.remove_bmc(theirs)


def test_password_is_kept_private(driver, domains):
    state_dir = driver.conf.state_dir
    name, = domains()
    port = next(PORTS)
    password = 'pw-' + secrets.token_hex(6)
    driver.ensure_bmc(name, ADDRESS, port, USER, password)
    assert ipmi(port, 'power', 'status', password=password).returncode == 0

    vbmc_dir = os.path.join(state_dir, 'vbmc')
    for path in (vbmc_dir, os.path.join(vbmc_dir, 'domains')):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    with open(os.path.join(vbmc_dir, 'vbmcd.log')) as f:
        assert password not in f.read()
    holders = []
    for parent, _, files in os.walk(state_dir):
        for path in (os.path.join(parent, f) for f in files):
            with open(path, 'rb') as f:
                if password.encode() in f.read():
                    holders.append(path)
                    assert os.stat(path).st_mode & 0o077 == 0, path
    assert holders  # vbmcd stores it, in a private file
    for pid in vbmcd_pids(state_dir):
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            assert password.encode() not in f.read()


def test_parallel_ensure(driver, domains):
    names = domains(4)
    ports = [next(PORTS) for _ in names]
    # The first BMC twice: one call adds it, the other finds it.
    args = list(zip(names, ports, strict=True)) + [(names[0], ports[0])]
    with concurrent.futures.ThreadPoolExecutor(len(args)) as pool:
        changed = list(pool.map(
            lambda a: driver.ensure_bmc(a[0], ADDRESS, a[1], USER,
                                        PASSWORD)['created'], args))
    assert changed[1:4] == [True] * 3
    assert sorted([changed[0], changed[4]]) == [False, True]
    for port in ports:
        result = ipmi(port, 'power', 'status')
        assert result.returncode == 0, result.stderr
    assert sorted(b['port'] for b in driver.list_bmcs()) == sorted(ports)


def test_timings(driver, domains, capsys):
    """Measure ensure_bmc for 8 BMCs; bounds are loose, figures printed."""
    keeper, *names = domains(9)
    ports = [next(PORTS) for _ in names]
    args = [(name, ADDRESS, port, USER, PASSWORD)
            for name, port in zip(names, ports, strict=True)]

    def timed(func, *a):
        start = time.monotonic()
        result = func(*a)
        return result, time.monotonic() - start

    # The keeper's BMC keeps vbmcd up between the rounds.
    _, cold = timed(driver.ensure_bmc, keeper, ADDRESS, next(PORTS), USER,
                    PASSWORD)
    serial = [timed(driver.ensure_bmc, *a)[1] for a in args]
    _, again = timed(lambda: [driver.ensure_bmc(*a) for a in args])
    _, removal = timed(lambda: [driver.remove_bmc(n) for n in names])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        changed, threaded = timed(lambda: list(pool.map(
            lambda a: driver.ensure_bmc(*a)['created'], args)))
    assert changed == [True] * 8
    _, last = timed(lambda: [driver.remove_bmc(n)
                             for n in [keeper, *names]])
    with capsys.disabled():
        print('\nvirtualbmc driver: first ensure_bmc (starts vbmcd) '
              '%.3f s; 8 BMCs serial %.3f s (each %.3f-%.3f s); '
              'unchanged 8 %.3f s; remove 8 %.3f s; 8 BMCs from 8 '
              'threads %.3f s; remove 9 incl. stopping vbmcd %.3f s'
              % (cold, sum(serial), min(serial), max(serial), again,
                 removal, threaded, last))
    assert sum(serial) < 8 and threaded < 8 and cold < 10


def served_port(state_dir):
    """The control port our vbmcd of ``state_dir`` was started with."""
    with open(os.path.join(state_dir, 'vbmc', 'virtualbmc.conf')) as f:
        return int(re.search(r'server_port = (\d+)', f.read()).group(1))


def test_state_dirs_get_a_vbmcd_each(tmp_path, domains):
    """No control port configured: two state directories (two hostagents
    on one machine) run a vbmcd each, each serving only its own BMCs,
    and tearing one down leaves the other's BMC answering."""
    state_dirs = [str(tmp_path / name) for name in ('a', 'b')]
    drivers = [virtualbmc.VirtualBmcDriver(make_conf(state_dir, None))
               for state_dir in state_dirs]
    names = domains(2)
    ports = [7800, 7801]
    try:
        for driver, name, port in zip(drivers, names, ports, strict=True):
            assert driver.ensure_bmc(name, ADDRESS, port, USER,
                                     PASSWORD) == fx.CREATED
        pids = [daemon_pid(state_dir) for state_dir in state_dirs]
        assert pids[0] != pids[1]
        control = [served_port(state_dir) for state_dir in state_dirs]
        assert control[0] != control[1]
        assert all(map(tcp_open, control))
        for driver, name, port in zip(drivers, names, ports, strict=True):
            assert driver.list_bmcs() == [{
                'domain': name, 'address': ADDRESS, 'port': port,
                'status': 'running'}]

        # The next hostagent process of a state directory finds its vbmcd.
        again = virtualbmc.VirtualBmcDriver(make_conf(state_dirs[0], None))
        assert again.ensure_bmc(names[0], ADDRESS, ports[0], USER,
                                PASSWORD) == fx.UNCHANGED
        assert daemon_pid(state_dirs[0]) == pids[0]

        assert drivers[0].remove_bmc(names[0])
        assert vbmcd_pids(state_dirs[0]) == set()
        assert alive(pids[1])
        status = ipmi(ports[1], 'power', 'status')
        assert status.returncode == 0, status.stderr
        assert drivers[1].remove_bmc(names[1])
        assert vbmcd_pids(state_dirs[1]) == set()
    finally:
        for driver in drivers:
            kill_vbmcd(driver.conf.state_dir)
            if driver._proc is not None:
                driver._proc.wait()


def test_failed_ensure_leaves_no_bmc(driver, domains, monkeypatch):
    """A BMC added but not started is deleted by the request that failed
    (vbmcd would otherwise keep it, and start it with the next one)."""
    name, = domains()
    request = driver._request

    def failing_start(command, **args):
        if command == 'start':
            raise driver._error('run vbmcd %r' % command, 'injected')
        return request(command, **args)

    monkeypatch.setattr(driver, '_request', failing_start)
    with pytest.raises(exceptions.DriverError, match='injected'):
        driver.ensure_bmc(name, ADDRESS, 7802, USER, PASSWORD)
    monkeypatch.undo()
    assert driver.list_bmcs() == []
    assert not os.path.exists(os.path.join(
        driver.conf.state_dir, 'vbmc', 'domains', name))
    assert udp_free(7802)


def test_remove_while_vbmcd_is_dead_stops_the_orphaned_bmc(driver,
                                                            domains):
    """vbmcd died, other BMCs remain: the removed BMC's orphaned child
    no longer answers IPMI, its port is free, the others are kept."""
    state_dir = driver.conf.state_dir
    names = domains(2)
    ports = [7820, 7821]
    for name, port in zip(names, ports, strict=True):
        driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD)
    os.kill(daemon_pid(state_dir), signal.SIGKILL)
    driver._proc.wait()
    assert not udp_free(ports[0])  # its orphaned child still answers

    assert driver.remove_bmc(names[0])
    assert udp_free(ports[0])
    assert ipmi(ports[0], 'power', 'status').returncode != 0
    assert driver.list_bmcs() == [{'domain': names[1], 'address': ADDRESS,
                                   'port': ports[1], 'status': 'down'}]
    assert driver.remove_bmc(names[1])
    assert vbmcd_pids(state_dir) == set()
    assert udp_free(ports[1])


def test_failed_ensure_keeps_the_bmc_it_found(driver, domains,
                                              monkeypatch):
    """A request that finds the BMC as asked and then gives up waiting
    for its port leaves that BMC: the request did not make it."""
    name, = domains()
    port = 7822
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD) == fx.CREATED
    monkeypatch.setattr(virtualbmc, 'BIND_TIMEOUT', 0.2)
    monkeypatch.setattr(virtualbmc, '_udp_bound', lambda *args: False)
    with pytest.raises(exceptions.DriverError, match='was not bound'):
        driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD)
    monkeypatch.undo()
    assert driver.list_bmcs() == [{'domain': name, 'address': ADDRESS,
                                   'port': port, 'status': 'running'}]
    assert ipmi(port, 'power', 'status').returncode == 0
    assert driver.remove_bmc(name)
    assert udp_free(port)
