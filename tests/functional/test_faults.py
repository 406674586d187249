"""The reduced fault-injection matrix (tests/functional/fault_suite.py;
the full one: tools/fault_matrix.py): for each operation, a failure
injected into a task and a kill at a task boundary, each case checked
by the audit; the cases kept are those that found a bug. Then a
takeover among three conductors for a deploy, a grow and a teardown."""

import contextlib
import datetime
import fnmatch
import os
import signal
import subprocess
import time

import libvirt
import pytest

from conductor import faults
from tenks import exceptions
from tests.functional import cluster_fixtures as cf
from tests.functional import fault_suite as fs
from tests.functional import libvirt_fixtures as lf
from tests.functional.test_resume import image  # noqa: F401

pytestmark = pytest.mark.functional

# IPMI ports of this module: 9700-9739.
PORT_BASE = 9700

# (operation, fault kind, task pattern or boundary)
CASES = [
    # A pool, a bridge or an uplink answered with an error was
    # forgotten, not rolled back: a leftover.
    ('deploy', fs.FAIL, 'pool:*'),
    ('deploy', fs.KILL, 4),
    # A failed first task left the cluster 'failed'.
    ('grow', fs.FAIL, 'cluster:deploying'),
    ('grow', fs.KILL, 1),
    # A node whose removal was answered with an error stayed 'deployed'.
    ('shrink', fs.FAIL, 'remove:*'),
    ('shrink', fs.KILL, 2),
    ('teardown', fs.FAIL, 'cluster:deleting'),
    ('teardown', fs.KILL, 3),
]


@pytest.fixture(scope='module')
def bystanders(tmp_path_factory):
    with fs.Bystanders(tmp_path_factory.mktemp('bystanders'),
                       PORT_BASE + 30) as found:
        yield found


@pytest.fixture(scope='module')
def references(tmp_path_factory):
    """The reference run of each operation, made when first asked."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = fs.Reference(fs.OPERATIONS[name],
                                      tmp_path_factory.mktemp(name),
                                      PORT_BASE)
        return made[name]
    return get


@pytest.mark.parametrize('operation,kind,argument', CASES,
                         ids=['%s-%s:%s' % case for case in CASES])
def test_fault(operation, kind, argument, references, bystanders,
               tmp_path):
    reference = references(operation)
    if kind == fs.FAIL:
        assert any(fnmatch.fnmatchcase(task, argument)
                   for task in reference.tasks), reference.tasks
    else:
        assert argument <= len(reference.tasks), reference.tasks
    outcome = fs.run_case(fs.OPERATIONS[operation], reference, kind,
                          argument, tmp_path, PORT_BASE, bystanders)
    print('%s %s:%s: %s' % (operation, kind, argument, outcome))


@pytest.fixture
def private_env(tmp_path):
    """An embedded cluster on a libvirtd of its own (which a test may
    stop), its pools in the test's directory."""
    env = cf.ClusterEnv(tmp_path, PORT_BASE)
    root = tmp_path / 'libvirt'
    with lf.private_libvirtd(root, env.ours) as uri:
        env.uris = [uri]
        env.libvirt_root = root
        env.conf.set_override('libvirt_uri', uri, group='hostagent')
        env.conf.set_override('pool_dir', str(tmp_path / 'pools'),
                              group='hostagent')
        os.makedirs(env.conf.hostagent.pool_dir)
        with cf.checked(env):
            yield env


@contextlib.contextmanager
def libvirtd_stopped_at(env, boundary):
    """Stop ``env``'s libvirtd once ``boundary`` tasks of the next flow
    have ended; start it again when the block ends."""
    faults.install(faults.Fault(at=boundary, action=lambda: (
        lf.stop_libvirtd(env.libvirt_root))))
    try:
        yield
    finally:
        faults.install(None)
        lf.start_libvirtd(env.libvirt_root)


def audit_drift(env):
    return [(e['kind'], e['name'], e['status'])
            for e in env.audit(env.cluster)['drift']]


def test_libvirtd_stopped_during_a_deploy(private_env):
    """libvirtd stops once the pool and the bridge are made: the nodes
    fail, and the rollback cannot remove the pool (nor what the node
    requests may have made): it stays recorded, the error says so, the
    audit finds the record true once libvirtd is back, and a re-run
    deploys."""
    env = private_env
    spec = env.spec(count=2)
    # The cluster marked, its pool and bridge made: the nodes are next.
    with libvirtd_stopped_at(env, 3):
        with pytest.raises(exceptions.OperationFailed) as raised:
            env.deploy(spec)
        message = str(raised.value)
        print(message)
        assert 'Cannot reach libvirt at %s' % env.uris[0] in message
        assert 'pool tenks-%s' % env.cluster in message
        assert 'could not be removed' in message
    assert audit_drift(env) == []
    env.deploy(spec)
    assert [n['state'] for n in env.nodes()] == ['deployed'] * 2
    assert audit_drift(env) == []
    env.teardown()


def test_libvirtd_stopped_during_a_shrink(private_env):
    """libvirtd stops before the node to remove goes: its removal fails
    part way (its BMC goes, its domain cannot), it is recorded failed,
    the error says so, and a re-run finishes the shrink."""
    env = private_env
    env.deploy(env.spec(count=2))
    with libvirtd_stopped_at(env, 1):
        with pytest.raises(exceptions.OperationFailed) as raised:
            env.deploy(env.spec(count=1))
        message = str(raised.value)
        print(message)
        assert 'Cannot reach libvirt at %s' % env.uris[0] in message
        assert '%s (failed)' % env.node_name(1) in message
    assert [(n['name'], n['state']) for n in env.nodes()] == [
        (env.node_name(0), 'deployed'), (env.node_name(1), 'failed')]
    # What the failed removal did remove is all its record lacks.
    assert {(kind, name, status) for kind, name, status in audit_drift(
        env)} <= {('bmc', env.node_name(1), 'missing')}
    env.deploy(env.spec(count=1))
    assert [n['name'] for n in env.nodes()] == [env.node_name(0)]
    assert audit_drift(env) == []
    env.teardown()


def fill(path, leave):
    """Write a file in ``path`` that leaves ``leave`` bytes free there."""
    stat = os.statvfs(path)
    fd = os.open(os.path.join(path, 'filler'), os.O_CREAT | os.O_WRONLY,
                 0o600)
    try:
        os.posix_fallocate(fd, 0, stat.f_bavail * stat.f_frsize - leave)
    finally:
        os.close(fd)


def test_a_pool_filling_up_during_an_image_copy(tmp_path, small_pools,
                                                image):  # noqa: F811
    """Two nodes' volumes are copied from a 32 MiB image into a pool
    whose file system has 40 MiB left (the rest taken by a file that is
    not Tenks'): a copy fails, the error says the disk is full, the
    rollback removes every volume, half made or not, and leaves the
    file; with room again, a re-run deploys."""
    env = cf.ClusterEnv(tmp_path, PORT_BASE)
    env.conf.set_override('pool_dir', str(small_pools), group='hostagent')
    spec = env.spec(count=2, physical_networks=[], node_types={'small': {
        'memory_mb': 128, 'vcpus': 1,
        'volumes': [{'capacity': '64MiB', 'image': image}]}})
    with cf.checked(env):
        # The cluster marked, its pool made: the node requests are next.
        faults.install(faults.Fault(at=2, action=lambda: fill(
            small_pools, 40 * 1024 ** 2)))
        try:
            with pytest.raises(exceptions.OperationFailed) as raised:
                env.deploy(spec)
        finally:
            faults.install(None)
        message = str(raised.value)
        print(message)
        assert 'No space left on device' in message
        assert 'Everything this deploy created was rolled back' in message
        assert sorted(os.listdir(small_pools)) == ['filler', 'lost+found']
        assert env.audit()['drift'] == []

        os.remove(small_pools / 'filler')
        env.deploy(spec)
        for node in env.nodes():
            volume = small_pools / env.cluster / ('%svol0' % node['name'])
            read = subprocess.run(['qemu-io', '-f', 'qcow2', '-r', '-c',
                                   'read -P 0x5a 0 32M', str(volume)],
                                  capture_output=True, text=True)
            assert 'read 33554432/33554432 bytes' in read.stdout, read.stdout
        env.teardown()


# On the real bus: host maintenance, and the broker and a hostagent
# restarted during a deploy.

@pytest.fixture(scope='module')
def two_hosts(tmp_path_factory):
    with fs.TwoHosts(tmp_path_factory.mktemp('two-hosts')) as hosts:
        yield hosts


@pytest.fixture(scope='module')
def maintenance_reference(two_hosts, tmp_path_factory):
    return fs.MaintenanceReference(
        two_hosts, tmp_path_factory.mktemp('maintenance'), PORT_BASE)


@pytest.mark.parametrize('kind,argument', [
    (fs.FAIL, '*:place'), (fs.KILL, 5)])
def test_maintenance_fault(two_hosts, maintenance_reference, kind, argument,
                           tmp_path):
    if kind == fs.FAIL:
        assert any(fnmatch.fnmatchcase(task, argument)
                   for task in maintenance_reference.tasks)
    outcome = fs.run_maintenance_case(two_hosts, maintenance_reference,
                                      kind, argument, tmp_path, PORT_BASE)
    print('maintenance %s:%s: %s' % (kind, argument, outcome))


def defined(uris, names):
    """How many of the domains ``names`` the libvirts of ``uris`` have."""
    found = 0
    for uri in uris:
        conn = libvirt.open(uri)
        try:
            found += len({d.name() for d in conn.listAllDomains()}
                         & set(names))
        finally:
            conn.close()
    return found


@contextlib.contextmanager
def nodes_half_made(hosts, env, operation_id, count):
    """Hold the hostagents' BMC changes until ``count`` nodes of ``env``
    are defined (each node's request makes its domain, then waits to
    make its BMC); yield, with the requests blocked there."""
    with contextlib.ExitStack() as stack:
        for state_dir in hosts.d.state_dirs.values():
            stack.enter_context(cf.bmc_changes_held(state_dir))
        operation_id = operation_id()
        deadline = time.monotonic() + 60
        names = [env.node_name(i) for i in range(count)]
        while defined(env.uris, names) < count:
            assert time.monotonic() < deadline, 'the nodes were never made'
            state = hosts.api.get_operation(fs.df.ADMIN, operation_id)
            assert state['state'] == 'running', state['error']
            time.sleep(0.05)
        yield operation_id


def deployed_after(hosts, env, operation_id, spec):
    """Once the operation ends: the cluster deployed and audited clean,
    rolled back and deployed again if it failed; then torn down."""
    operation = hosts.d.wait(operation_id)
    print('%s: %s' % (operation['state'], operation['error']))
    if operation['state'] != 'succeeded':
        assert hosts.drift(env) == []
        assert fs.snapshot(env, hosts.state_dir) is None
        hosts.deploy(spec)
    nodes = hosts.api.list_nodes(fs.df.ADMIN, env.cluster)
    assert [n['state'] for n in nodes] == ['deployed', 'deployed']
    for node in nodes:
        assert cf.ipmitool(node['bmc_port'], 'power', 'status').returncode == 0
    assert hosts.drift(env) == []
    hosts.teardown(env)


def test_broker_restarted_during_a_deploy(two_hosts, tmp_path):
    """RabbitMQ restarts (every connection, queue and message lost)
    while the node requests run: the deploy ends deployed, or rolled
    back and deployed again."""
    hosts = two_hosts
    env = hosts.env(tmp_path, PORT_BASE)
    spec = env.spec(count=2)
    with cf.checked(env):
        with nodes_half_made(hosts, env, lambda: hosts.api.deploy_cluster(
                fs.df.ADMIN, spec), 2) as operation_id:
            hosts.restart_broker()
        deployed_after(hosts, env, operation_id, spec)


def test_hostagent_restarted_during_a_deploy(two_hosts, tmp_path):
    """The hostagent of both nodes is killed while their requests run,
    and started again: the conductor asks again, the new agent finishes
    the half made nodes, nothing is made twice."""
    hosts = two_hosts
    env = hosts.env(tmp_path, PORT_BASE)
    spec = env.spec(count=2)
    agent = hosts.d.agent(hosts.hva)
    hosts.api.update_hypervisor(fs.df.ADMIN, hosts.hvb, False, 'not now')
    try:
        with cf.checked(env):
            with nodes_half_made(hosts, env, lambda: hosts.api.deploy_cluster(
                    fs.df.ADMIN, spec), 2) as operation_id:
                agent.stop(signal.SIGKILL)
            since = datetime.datetime.now(datetime.timezone.utc)
            agent.start()
            hosts.d.wait_for_agents([hosts.hva], since=since)
            deployed_after(hosts, env, operation_id, spec)
    finally:
        hosts.api.update_hypervisor(fs.df.ADMIN, hosts.hvb, True)


# Conductor takeover: three conductors on a Redis jobboard and PostgreSQL

# (operation, boundary): the conductor that runs the operation is killed
# once that many of its tasks have ended: a deploy among its node tasks,
# a grow in its host set-up, a teardown among its host removals.
TAKEOVERS = [('deploy', 8), ('grow', 3), ('teardown', 7)]


@pytest.fixture(scope='module')
def conductors(tmp_path_factory):
    with fs.Conductors(tmp_path_factory.mktemp('conductors')) as found:
        yield found


@pytest.fixture(scope='module')
def takeover_references(conductors, tmp_path_factory):
    """The reference run of each operation on the conductors, made when
    first asked."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = fs.TakeoverReference(
                conductors, fs.OPERATIONS[name],
                tmp_path_factory.mktemp('takeover-' + name), PORT_BASE)
        return made[name]
    return get


@pytest.mark.parametrize('operation,boundary', TAKEOVERS,
                         ids=['%s-takeover:%d' % case for case in TAKEOVERS])
def test_takeover(operation, boundary, conductors, takeover_references,
                  bystanders, tmp_path):
    """The conductor that runs the operation is killed (SIGKILL) at a
    task boundary; another takes its job over and finishes it: the new
    cluster, an audit without drift, nothing made twice, nothing of
    another deployment or unmarked touched."""
    reference = takeover_references(operation)
    assert boundary <= len(reference.tasks), reference.tasks
    outcome = fs.run_takeover_case(conductors, fs.OPERATIONS[operation],
                                   reference, boundary, tmp_path, PORT_BASE,
                                   bystanders)
    print('%s takeover:%d: %s' % (operation, boundary, outcome))
