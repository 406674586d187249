"""The virtualbmc BMC driver against real libvirt, its IPMI host and
ipmitool.

Domains are diskless 128 MiB TCG guests named ``hv-vbmc-*``; BMCs use
UDP ports 6900-6949 (7800-7802 for the tests of issue 7). Fixtures
undefine the domains and kill every process of each test's BMC service
(found by its state directory, in its environment) even when the test
fails, without relying on the driver.
"""

import concurrent.futures
import contextlib
import glob
import itertools
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from xml.etree import ElementTree as ET

import libvirt
import pytest

from hostagent.drivers.bmc import virtualbmc
from tenks import conf as tenks_conf
from tenks import exceptions
from tests.functional import drivers_fixtures as fx

pytestmark = pytest.mark.functional

URI = 'qemu:///system'
PORTS = itertools.cycle(range(6900, 6950))
NAMES = itertools.count()
ADDRESS = '127.0.0.1'
USER = 'admin'
PASSWORD = 'secret'
# What the BMCs are made for: a hostagent's marks for two deployments.
OWNER = fx.OWNER + '/hv1'
OTHER = fx.OTHER + '/hv1'
DOMAIN_XML = """<domain type='qemu'><name>%s</name>
<memory unit='MiB'>128</memory><vcpu>1</vcpu>
<os><type arch='x86_64'>hvm</type></os></domain>"""
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def make_conf(state_dir):
    conf = tenks_conf.new_conf()
    conf([])
    conf.set_override('state_dir', str(state_dir))
    conf.set_override('libvirt_uri', URI, group='hostagent')
    return conf


def alive(pid):
    """Whether the process has a thread that is not a zombie."""
    states = ''
    for path in glob.glob('/proc/%d/task/*/stat' % pid):
        with contextlib.suppress(OSError), open(path) as f:
            states += f.read().rpartition(')')[2].split()[0]
    return bool(set(states) - set('ZX'))


def service_pids(state_dir):
    """Live processes serving the BMCs of ``state_dir``: those with its
    path in their environment (the IPMI host's mark)."""
    pids = set()
    for pid in filter(str.isdigit, os.listdir('/proc')):
        with contextlib.suppress(OSError):
            with open('/proc/%s/environ' % pid, 'rb') as f:
                if (str(state_dir).encode() in f.read()
                        and int(pid) != os.getpid() and alive(int(pid))):
                    pids.add(int(pid))
    return pids


def kill_service(state_dir):
    pids = service_pids(state_dir)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(map(alive, pids)))


def host_pid(state_dir):
    with open(os.path.join(state_dir, 'ipmi', 'host.pid')) as f:
        return int(f.read())


def held_sockets(pids):
    """What the processes hold: {'tcp': listening ports, 'udp': ports,
    'unix': paths of listening sockets}."""
    inodes = set()
    for pid in pids:
        fd_dir = '/proc/%d/fd' % pid
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                link = os.readlink(os.path.join(fd_dir, fd))
                if link.startswith('socket:['):
                    inodes.add(link[8:-1])
    held = {'tcp': set(), 'udp': set(), 'unix': set()}
    for kind in ('tcp', 'udp'):
        for table in (kind, kind + '6'):
            with open('/proc/net/%s' % table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    # TCP state 0A: listening.
                    if fields[9] in inodes and (kind == 'udp'
                                                or fields[3] == '0A'):
                        held[kind].add(int(fields[1].split(':')[1], 16))
    with open('/proc/net/unix') as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            # Flag __SO_ACCEPTCON: listening.
            if (fields[6] in inodes and int(fields[3], 16) & 0x10000
                    and len(fields) > 7):
                held['unix'].add(fields[7])
    return held


def wait_for(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.02)


def udp_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind((ADDRESS, port))
        except OSError:
            return False
        return True


def ipmi(port, *command, password=PASSWORD, user=USER):
    return subprocess.run(
        ['ipmitool', '-I', 'lanplus', '-H', ADDRESS, '-p', str(port),
         '-U', user, '-P', password, '-R', '2', '-N', '2', *command],
        capture_output=True, text=True, timeout=60)


def control(state_dir, data):
    """Send ``data`` (bytes) to the IPMI host's control socket as it is,
    close our side; its answer, parsed (None if none)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(os.path.join(state_dir, 'ipmi', 'control.sock'))
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = sock.makefile('rb').readline()
    return json.loads(answer) if answer else None


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
    """make(name) returns a driver with state_dir tmp_path/name (or
    ``state_dir``); every BMC process of theirs is killed after."""
    drivers = []

    def make(name='state', state_dir=None):
        drivers.append(virtualbmc.VirtualBmcDriver(
            make_conf(state_dir or tmp_path / name)))
        return drivers[-1]

    yield make
    for driver in drivers:
        kill_service(driver.conf.state_dir)
        if driver._proc is not None:
            driver._proc.wait()  # reap what this test process started


@pytest.fixture
def driver(make_driver):
    return make_driver()


@pytest.fixture(scope='module')
def local_user():
    """An unprivileged user of this machine, for the test's lifetime."""
    name = 'tenks-t%d' % os.getpid()
    subprocess.run(['useradd', '--system', '--no-create-home', '--shell',
                    '/usr/sbin/nologin', name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(['userdel', name], check=True)


@pytest.fixture
def open_state_dir():
    """A state directory others may enter and list (mode 0755), as an
    operator may have made it: what protects the BMCs is below it."""
    path = tempfile.mkdtemp(prefix='tenks-bmc-', dir='/var/tmp')
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def as_user(user, script, *args):
    """Run Python ``script`` as ``user``; its stdout, parsed as JSON."""
    result = subprocess.run(
        ['setpriv', '--reuid=%d' % user.pw_uid, '--regid=%d' % user.pw_gid,
         '--clear-groups', sys.executable, '-c', script, *args],
        capture_output=True, text=True, timeout=60, cwd='/',
        env={'PATH': '/usr/bin:/bin', 'HOME': '/'})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# As a local user: reach every control endpoint of the BMC service and
# ask it for a BMC of the victim domain, with credentials of our own
# (speaking vbmcd's protocol to a TCP port, the IPMI host's to a Unix
# socket); then power the domain on through it; and read whatever of the
# state directory we can.
ATTACK = r'''
import json, os, socket, subprocess, sys
state_dir, endpoints, bmc = json.loads(sys.argv[1])
reached, refused = [], []
for kind, where in endpoints:
    try:
        if kind == 'tcp':
            import zmq
            sock = zmq.Context().socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, 5000)
            sock.connect('tcp://127.0.0.1:%d' % where)
            sock.send_json(dict(
                command='add', domain_name=bmc['domain'],
                username=bmc['username'], password=bmc['password'],
                port=bmc['port'], address=bmc['address'],
                libvirt_uri=bmc['libvirt_uri'], libvirt_sasl_username=None,
                libvirt_sasl_password=None))
            answers = [sock.recv_json()]
            sock.send_json({'command': 'start',
                            'domain_names': [bmc['domain']]})
            answers.append(sock.recv_json())
        else:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(where)
                sock.sendall(json.dumps({'op': 'add', 'bmc': bmc}).encode()
                             + b'\n')
                answers = [sock.makefile().readline()]
        reached.append([kind, where, answers])
    except Exception as e:  # refused, unreachable, or no answer
        refused.append([kind, where, repr(e)])
power = subprocess.run(
    ['ipmitool', '-I', 'lanplus', '-H', bmc['address'], '-p',
     str(bmc['port']), '-U', bmc['username'], '-P', bmc['password'],
     '-R', '2', '-N', '2', 'power', 'on'], capture_output=True)
read = {}
for parent, _, files in os.walk(state_dir):
    for name in files:
        path = os.path.join(parent, name)
        try:
            with open(path, 'rb') as f:
                read[path] = f.read().decode(errors='replace')
        except OSError:
            pass
print(json.dumps({'reached': reached, 'refused': refused,
                  'powered_on': power.returncode == 0, 'read': read}))
'''


def test_ipmi_power_controls_domain(driver, domains, conn):
    name, = domains()
    port = next(PORTS)
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD, OWNER) == fx.CREATED

    status = ipmi(port, 'power', 'status')
    assert status.returncode == 0, status.stderr
    assert 'off' in status.stdout
    assert ipmi(port, 'power', 'on').returncode == 0
    assert conn.lookupByName(name).isActive()
    assert 'on' in ipmi(port, 'power', 'status').stdout
    assert 'System Power         : on' in ipmi(
        port, 'chassis', 'status').stdout
    assert ipmi(port, 'power', 'off').returncode == 0
    assert not conn.lookupByName(name).isActive()
    assert 'off' in ipmi(port, 'power', 'status').stdout


def test_boot_device_follows_ipmi(driver, domains, conn):
    """As virtualbmc: the domain's <os><boot dev>, also when Ironic asks
    for a persistent or UEFI boot."""
    name, = domains()
    port = next(PORTS)
    driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)

    def boot_dev():
        xml = ET.fromstring(conn.lookupByName(name).XMLDesc())
        return [b.get('dev') for b in xml.findall('os/boot')]

    for command, dev, shown in (
            (['pxe'], 'network', 'Force PXE'),
            (['disk', 'options=persistent'], 'hd', 'Force Boot from default '
             'Hard-Drive'),
            (['cdrom', 'options=efiboot'], 'cdrom', 'Force Boot from CD/DVD'),
            (['pxe', 'options=persistent,efiboot'], 'network', 'Force PXE')):
        result = ipmi(port, 'chassis', 'bootdev', *command)
        assert result.returncode == 0, result.stderr
        assert boot_dev() == [dev]
        assert shown in ipmi(port, 'chassis', 'bootparam', 'get',
                             '5').stdout


def test_ensure_is_idempotent_and_applies_changes(make_driver, domains):
    driver = make_driver()
    name, = domains()
    port = next(PORTS)
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD, OWNER) == fx.CREATED
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD, OWNER) == fx.UNCHANGED
    # A new hostagent process uses the host the last one started.
    assert make_driver().ensure_bmc(name, ADDRESS, port, USER,
                                    PASSWORD, OWNER) == fx.UNCHANGED
    assert driver.list_bmcs() == [{'domain': name, 'address': ADDRESS,
                                   'port': port, 'status': 'running'}]

    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             'other', OWNER) == fx.FIXED
    assert ipmi(port, 'power', 'status', password='other').returncode == 0
    assert ipmi(port, 'power', 'status').returncode != 0

    new_port = next(PORTS)
    assert driver.ensure_bmc(name, ADDRESS, new_port, USER,
                             PASSWORD, OWNER) == fx.FIXED
    assert udp_free(port)
    assert ipmi(new_port, 'power', 'status').returncode == 0


def test_a_failed_move_leaves_the_bmc_answering(driver, domains):
    """A move to a port somebody holds fails and changes nothing."""
    name, = domains()
    port, busy = next(PORTS), next(PORTS)
    driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind((ADDRESS, busy))
        with pytest.raises(exceptions.PortInUse):
            driver.ensure_bmc(name, ADDRESS, busy, USER, 'new', OWNER)
    assert driver.list_bmcs() == [{'domain': name, 'address': ADDRESS,
                                   'port': port, 'status': 'running'}]
    assert ipmi(port, 'power', 'status').returncode == 0
    assert driver.bmc_changes({name: {
        'address': ADDRESS, 'port': port, 'username': USER,
        'password': PASSWORD}}, OWNER) == {name: []}


def test_host_outlives_the_hostagent_process(driver, domains):
    """In embedded mode a hostagent lives only as long as one command."""
    name, = domains()
    port = next(PORTS)
    script = ('import sys; from tests.functional import '
              'test_virtualbmc_driver as t; '
              'd = t.virtualbmc.VirtualBmcDriver(t.make_conf(sys.argv[1])); '
              'assert d.ensure_bmc(sys.argv[2], t.ADDRESS, int(sys.argv[3]), '
              't.USER, t.PASSWORD, t.OWNER)["created"]')
    subprocess.run([sys.executable, '-c', script, driver.conf.state_dir,
                    name, str(port)], check=True, timeout=60, cwd=ROOT)
    assert ipmi(port, 'power', 'status').returncode == 0
    assert driver.ensure_bmc(name, ADDRESS, port, USER,
                             PASSWORD, OWNER) == fx.UNCHANGED
    assert driver.remove_bmc(name, OWNER)
    assert service_pids(driver.conf.state_dir) == set()


def test_wrong_password_is_refused(driver, domains):
    name, = domains()
    port = next(PORTS)
    driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)
    assert ipmi(port, 'power', 'status', password='wrong').returncode != 0


def test_port_in_use(driver, domains):
    name, = domains()
    port = next(PORTS)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind((ADDRESS, port))
        with pytest.raises(exceptions.PortInUse) as error:
            driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)
    assert error.value.kwargs == {'port': port, 'address': ADDRESS}
    assert driver.list_bmcs() == []
    assert service_pids(driver.conf.state_dir) == set()


def test_undefined_domain_is_driver_error(driver):
    password = 'pw-' + secrets.token_hex(6)
    with pytest.raises(exceptions.DriverError, match='hv-vbmc-undefined'):
        driver.ensure_bmc('hv-vbmc-undefined', ADDRESS, next(PORTS), USER,
                          password, OWNER)
    assert driver.list_bmcs() == []
    with open(os.path.join(driver.conf.state_dir, 'ipmi', 'host.log')) as f:
        assert password not in f.read()


def test_one_process_serves_every_bmc_and_goes_with_the_last(driver,
                                                            domains):
    state_dir = driver.conf.state_dir
    names = domains(3)
    ports = [next(PORTS) for _ in names]
    for name, port in zip(names, ports, strict=True):
        driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)
    pid = host_pid(state_dir)
    assert service_pids(state_dir) == {pid}
    for port in ports:
        assert ipmi(port, 'power', 'status').returncode == 0

    assert driver.remove_bmc(names[0], OWNER)
    assert udp_free(ports[0])
    assert [b['domain'] for b in driver.list_bmcs()] == names[1:]
    assert service_pids(state_dir) == {pid}

    for name, port in zip(names[1:], ports[1:], strict=True):
        assert driver.remove_bmc(name, OWNER)
        assert udp_free(port)
    assert not alive(pid)
    for left in ('host.pid', 'control.sock'):
        assert not os.path.exists(os.path.join(state_dir, 'ipmi', left))
    assert driver.list_bmcs() == []

    # Nothing to remove: the host is not started to find that out.
    assert not driver.remove_bmc(names[1], OWNER)
    assert service_pids(state_dir) == set()


def test_remove_while_host_is_down(driver, domains):
    name, = domains()
    assert not driver.remove_bmc(name, OWNER)
    assert driver.list_bmcs() == []
    assert service_pids(driver.conf.state_dir) == set()


def test_a_bmc_of_another_owner_is_never_changed_nor_removed(driver,
                                                             domains):
    """Each definition records whom its BMC was made for; a request of
    another owner is refused and leaves the BMC answering as it was."""
    name, = domains()
    port = next(PORTS)
    driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)
    definition = os.path.join(driver.conf.state_dir, 'ipmi', 'bmcs',
                              name + '.json')
    with open(definition) as f:
        assert json.load(f)['owner'] == OWNER
    with pytest.raises(exceptions.ResourceConflict, match=OWNER):
        driver.ensure_bmc(name, ADDRESS, next(PORTS), USER, 'new', OTHER)
    with pytest.raises(exceptions.ResourceConflict, match=OWNER):
        driver.remove_bmc(name, OTHER)
    wanted = {name: {'address': ADDRESS, 'port': port, 'username': USER,
                     'password': PASSWORD}}
    assert driver.bmc_changes(wanted, OTHER) == {name: 'foreign'}
    assert driver.bmc_changes(wanted, OWNER) == {name: []}
    assert ipmi(port, 'power', 'status').returncode == 0
    assert driver.remove_bmc(name, OWNER)
    assert udp_free(port)


def test_a_definition_that_records_no_owner_is_nobodys(driver, domains):
    """As one stored before definitions recorded their owner: not
    adopted, changed or removed; the operator removes it."""
    name, = domains()
    bmcs = os.path.join(driver.conf.state_dir, 'ipmi', 'bmcs')
    os.makedirs(bmcs, mode=0o700)
    path = os.path.join(bmcs, name + '.json')
    with open(path, 'w') as f:
        json.dump({'domain': name, 'address': ADDRESS, 'port': next(PORTS),
                   'username': USER, 'password': PASSWORD,
                   'libvirt_uri': URI}, f)
    for attempt in (
            lambda: driver.ensure_bmc(name, ADDRESS, next(PORTS), USER,
                                      PASSWORD, OWNER),
            lambda: driver.remove_bmc(name, OWNER)):
        with pytest.raises(exceptions.ResourceConflict,
                           match='its definition records no owner'):
            attempt()
    assert os.path.exists(path)
    assert service_pids(driver.conf.state_dir) == set()


def test_killed_host_frees_every_port_and_comes_back_with_all(driver,
                                                              domains):
    state_dir = driver.conf.state_dir
    names = domains(2)
    ports = [next(PORTS) for _ in names]
    for name, port in zip(names, ports, strict=True):
        driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)
    os.kill(host_pid(state_dir), signal.SIGKILL)
    driver._proc.wait()
    # No process of the BMCs outlives it.
    assert all(map(udp_free, ports))
    assert [b['status'] for b in driver.list_bmcs()] == ['down', 'down']

    # The host started again serves every stored BMC: a repair.
    assert driver.ensure_bmc(names[0], ADDRESS, ports[0], USER,
                             PASSWORD, OWNER) == fx.FIXED
    for port in ports:
        assert ipmi(port, 'power', 'status').returncode == 0
    for name in names:
        assert driver.remove_bmc(name, OWNER)
    assert service_pids(state_dir) == set()
    assert all(map(udp_free, ports))


def test_password_is_kept_private(driver, domains):
    state_dir = driver.conf.state_dir
    name, = domains()
    port = next(PORTS)
    password = 'pw-' + secrets.token_hex(6)
    driver.ensure_bmc(name, ADDRESS, port, USER, password, OWNER)
    assert ipmi(port, 'power', 'status', password=password).returncode == 0

    ipmi_dir = os.path.join(state_dir, 'ipmi')
    for path in (ipmi_dir, os.path.join(ipmi_dir, 'bmcs')):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    with open(os.path.join(ipmi_dir, 'host.log')) as f:
        assert password not in f.read()
    holders = []
    for parent, _, files in os.walk(state_dir):
        for path in (os.path.join(parent, f) for f in files):
            if stat.S_ISSOCK(os.stat(path).st_mode):
                continue
            with open(path, 'rb') as f:
                if password.encode() in f.read():
                    holders.append(os.path.relpath(path, ipmi_dir))
                    assert os.stat(path).st_mode & 0o077 == 0, path
    assert holders == ['bmcs/%s.json' % name]
    for pid in service_pids(state_dir):
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
                                        PASSWORD, OWNER)['created'], args))
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
    args = [(name, ADDRESS, port, USER, PASSWORD, OWNER)
            for name, port in zip(names, ports, strict=True)]

    def timed(func, *a):
        start = time.monotonic()
        result = func(*a)
        return result, time.monotonic() - start

    # The keeper's BMC keeps the host up between the rounds.
    _, cold = timed(driver.ensure_bmc, keeper, ADDRESS, next(PORTS), USER,
                    PASSWORD, OWNER)
    serial = [timed(driver.ensure_bmc, *a)[1] for a in args]
    _, again = timed(lambda: [driver.ensure_bmc(*a) for a in args])
    _, removal = timed(lambda: [driver.remove_bmc(n, OWNER) for n in names])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        changed, threaded = timed(lambda: list(pool.map(
            lambda a: driver.ensure_bmc(*a)['created'], args)))
    assert changed == [True] * 8
    _, last = timed(lambda: [driver.remove_bmc(n, OWNER)
                             for n in [keeper, *names]])
    with capsys.disabled():
        print('\nvirtualbmc driver: first ensure_bmc (starts the IPMI '
              'host) %.3f s; 8 BMCs serial %.3f s (each %.3f-%.3f s); '
              'unchanged 8 %.3f s; remove 8 %.3f s; 8 BMCs from 8 '
              'threads %.3f s; remove 9 incl. stopping the host %.3f s'
              % (cold, sum(serial), min(serial), max(serial), again,
                 removal, threaded, last))
    assert sum(serial) < 8 and threaded < 8 and cold < 10


def test_state_dirs_get_a_host_each(make_driver, domains):
    """Two state directories (two hostagents on one machine) run a host
    each, each serving only its own BMCs, and tearing one down leaves
    the other's BMC answering."""
    drivers = [make_driver(name) for name in ('a', 'b')]
    state_dirs = [d.conf.state_dir for d in drivers]
    names = domains(2)
    ports = [7800, 7801]
    for driver, name, port in zip(drivers, names, ports, strict=True):
        assert driver.ensure_bmc(name, ADDRESS, port, USER,
                                 PASSWORD, OWNER) == fx.CREATED
    pids = [host_pid(state_dir) for state_dir in state_dirs]
    assert pids[0] != pids[1]
    for driver, name, port in zip(drivers, names, ports, strict=True):
        assert driver.list_bmcs() == [{
            'domain': name, 'address': ADDRESS, 'port': port,
            'status': 'running'}]

    # The next hostagent process of a state directory finds its host.
    again = make_driver(state_dir=state_dirs[0])
    assert again.ensure_bmc(names[0], ADDRESS, ports[0], USER,
                            PASSWORD, OWNER) == fx.UNCHANGED
    assert host_pid(state_dirs[0]) == pids[0]

    assert drivers[0].remove_bmc(names[0], OWNER)
    assert service_pids(state_dirs[0]) == set()
    assert alive(pids[1])
    status = ipmi(ports[1], 'power', 'status')
    assert status.returncode == 0, status.stderr
    assert drivers[1].remove_bmc(names[1], OWNER)
    assert service_pids(state_dirs[1]) == set()


def test_only_the_bmc_ports_are_open(driver, domains):
    """Issue 19: no TCP port; a Unix socket in the 0700 directory."""
    state_dir = driver.conf.state_dir
    names = domains(2)
    ports = [next(PORTS) for _ in names]
    for name, port in zip(names, ports, strict=True):
        driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)
    assert held_sockets(service_pids(state_dir)) == {
        'tcp': set(), 'udp': set(ports),
        'unix': {os.path.join(state_dir, 'ipmi', 'control.sock')}}
    path = os.path.join(state_dir, 'ipmi', 'control.sock')
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_local_user_can_neither_control_bmcs_nor_read_secrets(
        open_state_dir, make_driver, domains, conn, local_user):
    """Issue 19: a local user cannot add a BMC of its own to a domain (and
    power it on), nor read a BMC password, through anything the BMC
    service of a state directory holds."""
    driver = make_driver(state_dir=open_state_dir)
    ours, victim = domains(2)
    password = 'pw-' + secrets.token_hex(6)
    driver.ensure_bmc(ours, ADDRESS, next(PORTS), USER, password, OWNER)
    held = held_sockets(service_pids(open_state_dir))
    endpoints = ([['tcp', port] for port in sorted(held['tcp'])]
                 + [['unix', path] for path in sorted(held['unix'])])
    assert endpoints  # the driver can control its BMCs
    theirs = {'domain': victim, 'address': ADDRESS, 'port': next(PORTS),
              'username': 'mallory', 'password': 'mallory',
              'libvirt_uri': URI, 'owner': OWNER}

    found = as_user(local_user, ATTACK,
                    json.dumps([open_state_dir, endpoints, theirs]))

    assert found['reached'] == []
    assert not found['powered_on']
    assert not conn.lookupByName(victim).isActive()
    assert ipmi(theirs['port'], 'power', 'status', user='mallory',
                password='mallory').returncode != 0
    assert [path for path, text in found['read'].items()
            if password in text] == []
    assert [b['domain'] for b in driver.list_bmcs()] == [ours]


def test_control_refuses_another_user_even_through_an_open_socket(
        open_state_dir, make_driver, domains, local_user):
    """Should its directory and socket be opened by mistake, the host
    still answers only its own user (SO_PEERCRED)."""
    driver = make_driver(state_dir=open_state_dir)
    ours, victim = domains(2)
    driver.ensure_bmc(ours, ADDRESS, next(PORTS), USER, PASSWORD, OWNER)
    ipmi_dir = os.path.join(open_state_dir, 'ipmi')
    os.chmod(ipmi_dir, 0o711)
    os.chmod(os.path.join(ipmi_dir, 'control.sock'), 0o666)
    theirs = {'domain': victim, 'address': ADDRESS, 'port': next(PORTS),
              'username': 'mallory', 'password': 'mallory',
              'libvirt_uri': URI, 'owner': OWNER}
    found = as_user(local_user, ATTACK, json.dumps(
        ['/nonexistent', [['unix', os.path.join(ipmi_dir, 'control.sock')]],
         theirs]))
    assert len(found['reached']) == 1, found['refused']
    [[_, _, [answer]]] = found['reached']
    assert json.loads(answer)['kind'] == 'denied'
    assert not found['powered_on']
    assert [b['domain'] for b in driver.list_bmcs()] == [ours]


MALFORMED = [
    b'garbage\n',
    b'\n',
    b'\xff\xfe\x00\n',
    b'[]\n',
    b'{"op": "add"}\n',
    b'{"op": "show"}\n',
    b'{"op": "remove", "domain": "../../../etc/passwd"}\n',
    b'{"op": "add", "bmc": {"domain": "../x"}}\n',
    b'{"op": "compare", "bmcs": "all"}\n',
    b'[' * 200000 + b'\n',
    b'{"op": "list"',  # no newline: the client stopped short
]


def test_malformed_requests_get_errors_and_every_bmc_keeps_answering(
        driver, domains):
    state_dir = driver.conf.state_dir
    names = domains(2)
    ports = [next(PORTS) for _ in names]
    for name, port in zip(names, ports, strict=True):
        driver.ensure_bmc(name, ADDRESS, port, USER, PASSWORD, OWNER)
    pid = host_pid(state_dir)
    before = driver.list_bmcs()

    for data in MALFORMED:
        answer = control(state_dir, data)
        assert answer['kind'] == 'invalid', (data[:40], answer)
        assert answer['bmcs'] == 2
    # A client that says nothing at all.
    assert control(state_dir, b'') == {
        'error': 'a request is a line of JSON, ended by a newline',
        'kind': 'invalid', 'bmcs': 2}

    assert host_pid(state_dir) == pid and alive(pid)
    assert driver.list_bmcs() == before
    for port in ports:
        result = ipmi(port, 'power', 'status')
        assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(os.path.join(state_dir, 'ipmi', 'bmcs'))) == [
        '%s.json' % name for name in sorted(names)]
